#include "onnx_rewrite/verify.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/scope.h"
#include "onnx_rewrite/walk.h"

namespace onnx_rewrite {
namespace {

using Names = std::unordered_set<std::string_view>;
using NodeList = google::protobuf::RepeatedPtrField<onnx::NodeProto>;

// `ordered`: each value must be defined before the node reading it (what the engine writes);
// otherwise the nodes may come in any order (what ONNX Runtime accepts) but must form no cycle.
class Verifier {
 public:
  explicit Verifier(bool ordered) : ordered_(ordered) {}
  std::optional<std::string> problem;

  // `outer`: the names of the enclosing graphs.
  void graph(const onnx::GraphProto& graph, std::vector<const Names*>& outer, const std::string& where) {
    Names local;
    for (const auto& input : graph.input()) local.insert(input.name());
    for (const auto& tensor : graph.initializer()) local.insert(tensor.name());
    for (const auto& sparse : graph.sparse_initializer()) local.insert(sparse.values().name());
    nodes(graph.node(), local, outer, where);
    for (const auto& output : graph.output()) {
      if (!problem && !visible(output.name(), local, outer)) {
        problem = fmt::format("{}: output '{}' is computed by nothing", where, output.name());
      }
    }
  }

  void function(const onnx::FunctionProto& function) {
    const std::string where = "function " + function.domain() + "." + function.name();
    Names local(function.input().begin(), function.input().end());
    std::vector<const Names*> outer;
    nodes(function.node(), local, outer, where);
    for (const auto& output : function.output()) {
      if (!problem && !local.count(output)) problem = fmt::format("{}: output '{}' is computed by nothing", where, output);
    }
  }

 private:
  bool ordered_;

  static bool visible(std::string_view name, const Names& local, const std::vector<const Names*>& outer) {
    if (local.count(name)) return true;
    for (const Names* names : outer) {
      if (names->count(name)) return true;
    }
    return false;
  }

  void define_outputs(const onnx::NodeProto& node, Names& local, const std::string& where) {
    for (const auto& output : node.output()) {
      if (!problem && !output.empty() && !local.insert(output).second) {
        problem = fmt::format("{}: '{}' is computed twice (node '{}')", where, output, describe_node(node));
      }
    }
  }

  void read_inputs(const onnx::NodeProto& node, Names& local, std::vector<const Names*>& outer, const std::string& where) {
    for (const auto& input : node.input()) {
      if (!problem && !input.empty() && !visible(input, local, outer)) {
        problem = ordered_ ? fmt::format("{}: node '{}' reads '{}' before anything computes it", where, describe_node(node), input)
                           : fmt::format("{}: node '{}' reads '{}', which nothing computes", where, describe_node(node), input);
      }
    }
    outer.push_back(&local);
    for (const auto& attribute : node.attribute()) {
      if (problem) break;
      const std::string inner = fmt::format("subgraph '{}' of node '{}' ({})", attribute.name(), describe_node(node), where);
      if (attribute.has_g()) graph(attribute.g(), outer, inner);
      for (const auto& subgraph : attribute.graphs()) graph(subgraph, outer, inner);
    }
    outer.pop_back();
  }

  void nodes(const NodeList& list, Names& local, std::vector<const Names*>& outer, const std::string& where) {
    if (ordered_) {
      for (const auto& node : list) {
        read_inputs(node, local, outer, where);
        define_outputs(node, local, where);
        if (problem) return;
      }
      return;
    }
    for (const auto& node : list) define_outputs(node, local, where);
    for (const auto& node : list) read_inputs(node, local, outer, where);
    if (!problem) find_cycle(list, where);
  }

  // Kahn's algorithm over the values the nodes of one graph pass each other (subgraph reads included).
  void find_cycle(const NodeList& list, const std::string& where) {
    std::unordered_map<std::string_view, int> producer;
    for (int i = 0; i < list.size(); ++i) {
      for (const auto& output : list.Get(i).output()) {
        if (!output.empty()) producer[output] = i;
      }
    }
    std::vector<std::vector<int>> consumers(static_cast<size_t>(list.size()));
    std::vector<int> waiting(static_cast<size_t>(list.size()), 0);
    for (int i = 0; i < list.size(); ++i) {
      std::vector<std::string_view> reads(list.Get(i).input().begin(), list.Get(i).input().end());
      for (const auto name : implicit_inputs(list.Get(i))) reads.push_back(name);
      for (const auto name : reads) {
        auto it = producer.find(name);
        if (it == producer.end()) continue;
        consumers[static_cast<size_t>(it->second)].push_back(i);
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
        problem = fmt::format("{}: the nodes form a cycle (node '{}' depends on its own output)", where, describe_node(list.Get(i)));
        return;
      }
    }
  }
};

void collect_calls(const NodeList& nodes, std::vector<std::string>& calls) {
  for (const auto& node : nodes) {
    calls.push_back(node.domain() + "." + node.op_type());
    for (const auto& attribute : node.attribute()) {
      if (attribute.has_g()) collect_calls(attribute.g().node(), calls);
      for (const auto& subgraph : attribute.graphs()) collect_calls(subgraph.node(), calls);
    }
  }
}

// A model-local function that calls itself, directly or through others: no runtime can expand it.
std::optional<std::string> recursive_function(const onnx::ModelProto& model) {
  std::unordered_map<std::string, std::vector<std::string>> calls;  // function -> what its body calls
  for (const auto& function : model.functions()) {
    collect_calls(function.node(), calls[function.domain() + "." + function.name()]);
  }
  enum class State { kVisiting, kDone };
  std::unordered_map<std::string, State> state;
  std::vector<std::string> path;
  std::optional<std::string> found;
  std::function<void(const std::string&)> visit = [&](const std::string& name) {
    state[name] = State::kVisiting;
    path.push_back(name);
    for (const auto& callee : calls[name]) {
      if (found || !calls.count(callee)) continue;
      auto it = state.find(callee);
      if (it == state.end()) {
        visit(callee);
      } else if (it->second == State::kVisiting) {
        auto start = std::find(path.begin(), path.end(), callee);
        found = fmt::format("model-local function {} calls itself ({} -> {})", callee,
                            fmt::join(start, path.end(), " -> "), callee);
      }
    }
    path.pop_back();
    state[name] = State::kDone;
  };
  for (const auto& function : model.functions()) {
    const std::string name = function.domain() + "." + function.name();
    if (!found && !state.count(name)) visit(name);
  }
  return found;
}

std::optional<std::string> verify(const onnx::ModelProto& model, bool ordered) {
  Verifier verifier(ordered);
  std::vector<const Names*> outer;
  verifier.graph(model.graph(), outer, "main graph");
  for (const auto& function : model.functions()) {
    if (verifier.problem) break;
    verifier.function(function);
  }
  return verifier.problem;
}

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

std::optional<std::string> input_problem(const onnx::ModelProto& model) {
  if (auto problem = verify(model, false)) return problem;
  return recursive_function(model);
}

}  // namespace onnx_rewrite
