#include "onnx_rewrite/verify.h"
#include "graph/node_attributes.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "graph/flat_map.h"
#include "graph/walk.h"
#include "verify/opset.h"

namespace onnx_rewrite {
namespace {

// Flat tables: a check reads every name of a graph of a million nodes, once per round.
using Names = FlatMap<std::string_view, bool>;

// `ordered`: each value must be defined before the node reading it (what the engine writes);
// otherwise the nodes may come in any order (what ONNX Runtime accepts) but must form no cycle.
// Graphs are read with an explicit stack: a model nested 100,000 deep can't exhaust the stack.
class Verifier {
 public:
  explicit Verifier(bool ordered) : ordered_(ordered) {}

  std::optional<std::string> check(const onnx::ModelProto& model) {
    run(Place::main_graph(), &model.graph().node(), &model.graph(), nullptr);
    for (const auto& function : model.functions()) {
      if (problem_) break;
      run(Place::of_function(function), &function.node(), nullptr, &function);
    }
    return problem_;
  }

 private:
  struct Frame {
    Place place;
    const NodeList* nodes;
    const onnx::GraphProto* graph;        // null for a function body
    const onnx::FunctionProto* function;  // its function, for a body
    Names local;                          // what this graph defines (so far, when ordered)
    int next = 0;                         // the node being read
    bool inputs_read = false;             // of that node
    std::vector<std::pair<const onnx::AttributeProto*, const onnx::GraphProto*>> subgraphs;  // of that node
    size_t next_subgraph = 0;
  };

  void fail(const Place& place, const std::string& what) {
    if (!problem_) problem_ = place.text() + ": " + what;
  }

  // What the outermost graph defines is its frame's own table; visible_ counts only what the
  // graphs nested in it define (most reads are the outermost graph's: one lookup each).
  bool visible(std::string_view name) const {
    if (root_->local.contains(name)) return true;
    const int* count = visible_.find(name);
    return count && *count > 0;
  }

  void define(Frame& frame, std::string_view name) {
    bool& defined = frame.local[name];
    if (!defined && &frame != root_) ++visible_[name];
    defined = true;
  }

  void open(std::deque<Frame>& stack, Place place, const NodeList* nodes, const onnx::GraphProto* graph,
            const onnx::FunctionProto* function) {
    Frame& frame = stack.emplace_back(Frame{std::move(place), nodes, graph, function, {}, 0, false, {}, 0});
    if (stack.size() == 1) root_ = &frame;
    // About one value per node: no rehashing on the way (a large part of the cost on big graphs).
    const size_t expected =
        static_cast<size_t>(nodes->size()) + (graph ? static_cast<size_t>(graph->input_size() + graph->initializer_size()) : 0);
    frame.local.reserve(expected);
    if (&frame != root_) visible_.reserve(visible_.size() + expected);
    if (graph) {
      for (const auto& input : graph->input()) define(frame, input.name());
      for (const auto& tensor : graph->initializer()) define(frame, tensor.name());
      for (const auto& sparse : graph->sparse_initializer()) define(frame, sparse.values().name());
    } else {
      for (const auto& input : function->input()) define(frame, input);
    }
    if (!ordered_) {
      for (const auto& node : *nodes) define_outputs(frame, node);
    }
  }

  void define_outputs(Frame& frame, const onnx::NodeProto& node) {
    for (const auto& output : node.output()) {
      if (output.empty()) continue;
      if (frame.local.contains(output)) fail(frame.place, fmt::format("'{}' is computed twice (node '{}')", output, describe_node(node)));
      else define(frame, output);
    }
  }

  void close(std::deque<Frame>& stack) {
    Frame& frame = stack.back();
    if (frame.graph) {
      for (const auto& output : frame.graph->output()) {
        if (!visible(output.name())) fail(frame.place, fmt::format("output '{}' is computed by nothing", output.name()));
      }
    } else {
      for (const auto& output : frame.function->output()) {
        if (!frame.local.contains(output)) fail(frame.place, fmt::format("output '{}' is computed by nothing", output));
      }
    }
    if (!ordered_ && !problem_) find_cycle(*frame.nodes, frame.place);
    if (stack.size() == 1) {
      visible_ = {};  // the next outermost graph starts with nothing nested in it
      root_ = nullptr;
    } else {
      frame.local.for_each([&](std::string_view name, bool) { --visible_[name]; });  // 0: not visible
    }
    stack.pop_back();
  }

  void run(Place root, const NodeList* nodes, const onnx::GraphProto* graph, const onnx::FunctionProto* function) {
    std::deque<Frame> stack;  // references to other frames stay valid while one is pushed
    open(stack, std::move(root), nodes, graph, function);
    while (!stack.empty() && !problem_) {
      Frame& frame = stack.back();
      if (frame.next == frame.nodes->size()) {
        close(stack);
        continue;
      }
      const onnx::NodeProto& node = frame.nodes->Get(frame.next);
      if (!frame.inputs_read) {
        for (const auto& input : node.input()) {
          if (input.empty() || visible(input)) continue;
          fail(frame.place, ordered_ ? fmt::format("node '{}' reads '{}' before anything computes it", describe_node(node), input)
                                     : fmt::format("node '{}' reads '{}', which nothing computes", describe_node(node), input));
        }
        frame.inputs_read = true;
        frame.subgraphs = subgraphs_of(node);
        frame.next_subgraph = 0;
      }
      if (frame.next_subgraph < frame.subgraphs.size()) {
        const auto [attribute, subgraph] = frame.subgraphs[frame.next_subgraph++];
        open(stack, Place::subgraph(frame.place, node, *attribute), &subgraph->node(), subgraph, nullptr);
        continue;
      }
      if (ordered_) define_outputs(frame, node);
      frame.inputs_read = false;
      ++frame.next;
    }
  }

  // Kahn's algorithm over the values the nodes of one graph pass each other (subgraph reads included).
  void find_cycle(const NodeList& list, const Place& place) {
    FlatMap<std::string_view, int> producer;  // 1 + the index of the node
    producer.reserve(static_cast<size_t>(list.size()));
    for (int i = 0; i < list.size(); ++i) {
      for (const auto& output : list.Get(i).output()) {
        if (!output.empty()) producer[output] = i + 1;
      }
    }
    std::vector<std::vector<int>> consumers(static_cast<size_t>(list.size()));
    std::vector<int> waiting(static_cast<size_t>(list.size()), 0);
    for (int i = 0; i < list.size(); ++i) {
      std::vector<std::string_view> reads(list.Get(i).input().begin(), list.Get(i).input().end());
      for (const auto name : implicit_inputs(list.Get(i), &free_names_)) reads.push_back(name);
      for (const auto name : reads) {
        const int* at = producer.find(name);
        if (!at) continue;
        consumers[static_cast<size_t>(*at - 1)].push_back(i);
        ++waiting[static_cast<size_t>(i)];
      }
    }
    std::vector<int> ready;
    for (int i = 0; i < list.size(); ++i) {
      if (waiting[static_cast<size_t>(i)] == 0) ready.push_back(i);
    }
    size_t done = 0;
    while (!ready.empty()) {
      const int i = ready.back();
      ready.pop_back();
      ++done;
      for (int consumer : consumers[static_cast<size_t>(i)]) {
        if (--waiting[static_cast<size_t>(consumer)] == 0) ready.push_back(consumer);
      }
    }
    if (done == static_cast<size_t>(list.size())) return;
    for (int i = 0; i < list.size(); ++i) {
      if (waiting[static_cast<size_t>(i)] != 0) {
        fail(place, fmt::format("the nodes form a cycle (node '{}' depends on its own output)", describe_node(list.Get(i))));
        return;
      }
    }
  }

  bool ordered_;
  FreeNameCache free_names_;
  const Frame* root_ = nullptr;             // the outermost graph's frame, while one is read
  FlatMap<std::string_view, int> visible_;  // names the graphs nested in it define: count > 0
  std::optional<std::string> problem_;
};

std::string function_text(const OpView& function) { return fmt::format("{}.{}", function.domain, function.op_type); }

// A model-local function that calls itself, directly or through others: no runtime can expand it.
// Functions are (domain, name) as written, viewed: no name is built per call.
std::optional<std::string> recursive_function(const onnx::ModelProto& model) {
  std::unordered_map<OpView, std::vector<OpView>, OpViewHash> calls;  // function -> what its body calls
  for (const auto& function : model.functions()) {
    auto& callees = calls[{function.domain(), function.name()}];
    for_each_nested_node(function.node(), [&](const onnx::NodeProto& node) { callees.push_back({node.domain(), node.op_type()}); });
  }
  enum class State { kVisiting, kDone };
  std::unordered_map<OpView, State, OpViewHash> state;
  // Depth-first with an explicit stack: the path of functions being visited, with the next callee.
  std::vector<std::pair<OpView, size_t>> path;
  for (const auto& function : model.functions()) {
    const OpView start{function.domain(), function.name()};
    if (state.count(start)) continue;
    state[start] = State::kVisiting;
    path.emplace_back(start, 0);
    while (!path.empty()) {
      auto& [name, next] = path.back();
      const auto& callees = calls[name];
      if (next == callees.size()) {
        state[name] = State::kDone;
        path.pop_back();
        continue;
      }
      const OpView callee = callees[next++];
      if (!calls.count(callee)) continue;
      auto it = state.find(callee);
      if (it == state.end()) {
        state[callee] = State::kVisiting;
        path.emplace_back(callee, 0);
      } else if (it->second == State::kVisiting) {
        std::vector<std::string> cycle;
        bool in_cycle = false;
        for (const auto& [on_path, unused] : path) {
          in_cycle = in_cycle || on_path == callee;
          if (in_cycle) cycle.push_back(function_text(on_path));
        }
        const std::string name = function_text(callee);
        return fmt::format("model-local function {} calls itself ({} -> {})", name, fmt::join(cycle, " -> "), name);
      }
    }
  }
  return std::nullopt;
}

// A call to a model-local function with more inputs or outputs than the function declares:
// ONNX Runtime refuses it, and inlining could only leave the extra outputs computed by nothing.
std::optional<std::string> call_arity_problem(const onnx::ModelProto& model) {
  std::unordered_map<OpView, const onnx::FunctionProto*, OpViewHash> functions;  // by (normalized domain, name)
  for (const auto& function : model.functions()) functions[OpView::of(function)] = &function;
  if (functions.empty()) return std::nullopt;
  std::optional<std::string> problem;
  for_each_node(model, [&](const onnx::NodeProto& node, const Place& place) {
    if (problem) return;
    auto found = functions.find(OpView::of(node));
    if (found == functions.end()) return;
    const onnx::FunctionProto& function = *found->second;
    if (node.output_size() > function.output_size() || node.input_size() > function.input_size()) {
      problem = fmt::format("{}: node '{}' calls model-local function {} with {} input(s) and {} output(s); it declares {} and {}",
                            place.text(), describe_node(node), function_text(found->first), node.input_size(), node.output_size(),
                            function.input_size(), function.output_size());
    }
  });
  return problem;
}

std::optional<std::string> verify(const onnx::ModelProto& model, bool ordered) { return Verifier(ordered).check(model); }

}  // namespace

std::optional<std::string> structural_problem(const onnx::ModelProto& model) { return verify(model, true); }

std::vector<std::string> impossible_opset_imports(const onnx::ModelProto& model) {
  std::vector<std::string> problems;
  auto check = [&](const auto& imports, const std::string& owner) {
    for (const auto& import : imports) {
      if (import.version() < 0 || import.version() > std::numeric_limits<int32_t>::max()) {
        const std::string domain = import.domain().empty() ? "ai.onnx" : import.domain();
        problems.push_back(fmt::format("{} imports {} opset {}, which is no opset version", owner, domain, import.version()));
      }
    }
  };
  check(model.opset_import(), "the model");
  for (const auto& function : model.functions()) {
    check(function.opset_import(), fmt::format("function {}.{}", function.domain(), function.name()));
  }
  return problems;
}

InputCheck check_input(const onnx::ModelProto& model) {
  InputCheck check;
  check.ordered = !verify(model, true);
  if (!check.ordered) check.problem = verify(model, false);  // the order-free check also searches for cycles
  if (!check.problem) check.problem = call_arity_problem(model);
  if (!check.problem) check.problem = recursive_function(model);
  return check;
}

std::optional<std::string> input_problem(const onnx::ModelProto& model) { return check_input(model).problem; }

std::optional<std::string> model_problem(const onnx::ModelProto& model) {
  if (auto problem = call_arity_problem(model)) return problem;
  if (auto problem = recursive_function(model)) return problem;
  if (auto problems = impossible_opset_imports(model); !problems.empty()) return problems.front();
  return std::nullopt;
}

std::optional<std::string> output_problem(const onnx::ModelProto& model, bool ordered) {
  if (auto problem = verify(model, ordered)) return problem;
  return model_problem(model);
}

}  // namespace onnx_rewrite
