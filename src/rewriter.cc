#include "onnx_rewrite/rewriter.h"

#include <queue>
#include <stdexcept>

#include "onnx_rewrite/opset.h"
#include "onnx_rewrite/walk.h"

namespace onnx_rewrite {
namespace {

// Takes every element out of a repeated field (keeping the objects alive) so that the field can
// be refilled in a new order without copying.
template <typename T>
std::vector<T*> take_all(google::protobuf::RepeatedPtrField<T>& field) {
  std::vector<T*> elements(static_cast<size_t>(field.size()));
  if (!elements.empty()) field.ExtractSubrange(0, field.size(), elements.data());
  return elements;
}

void collect_graph_names(onnx::GraphProto& graph, std::unordered_set<std::string>& names) {
  names.insert(graph.name());
  for (const auto& info : graph.input()) names.insert(info.name());
  for (const auto& info : graph.output()) names.insert(info.name());
  for (const auto& info : graph.value_info()) names.insert(info.name());
  for (const auto& tensor : graph.initializer()) names.insert(tensor.name());
  for (const auto& sparse : graph.sparse_initializer()) names.insert(sparse.values().name());
}

// All inputs a node reads, explicit and through its subgraphs.
std::vector<std::string> read_values(const onnx::NodeProto& node) {
  std::vector<std::string> values(node.input().begin(), node.input().end());
  for (auto& name : implicit_inputs(node)) values.push_back(std::move(name));
  return values;
}

// Stable topological order: a node moves only as far as its inputs force it to.
void repair_order(NodeList& nodes, const std::string& where) {
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < nodes.size(); ++i) {
    for (const auto& output : nodes.Get(i).output()) {
      if (!output.empty()) producer[output] = i;
    }
  }
  bool ordered = true;
  std::vector<std::vector<int>> consumers(static_cast<size_t>(nodes.size()));
  std::vector<int> waiting(static_cast<size_t>(nodes.size()), 0);
  for (int i = 0; i < nodes.size(); ++i) {
    for (const auto& input : read_values(nodes.Get(i))) {
      auto it = producer.find(input);
      if (it == producer.end()) continue;
      if (it->second >= i) ordered = false;
      consumers[static_cast<size_t>(it->second)].push_back(i);
      ++waiting[static_cast<size_t>(i)];
    }
  }
  if (ordered) return;
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (int i = 0; i < nodes.size(); ++i) {
    if (waiting[static_cast<size_t>(i)] == 0) ready.push(i);
  }
  std::vector<onnx::NodeProto*> elements = take_all(nodes);
  std::vector<onnx::NodeProto*> sorted;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    sorted.push_back(elements[static_cast<size_t>(i)]);
    for (int consumer : consumers[static_cast<size_t>(i)]) {
      if (--waiting[static_cast<size_t>(consumer)] == 0) ready.push(consumer);
    }
  }
  if (sorted.size() != elements.size()) {
    for (auto* node : elements) nodes.AddAllocated(node);
    throw std::logic_error("a rewrite created a cycle in the " + where);
  }
  for (auto* node : sorted) nodes.AddAllocated(node);
}

}  // namespace

void NameRegistry::collect() {
  onnx::ModelProto& model = model_;
  collected_ = true;
  collect_graph_names(*model.mutable_graph(), taken_);
  for_each_node(model, [&](onnx::NodeProto& node, const std::string&) {
    taken_.insert(node.name());
    for (const auto& name : node.input()) taken_.insert(name);
    for (const auto& name : node.output()) taken_.insert(name);
    for (auto& attribute : *node.mutable_attribute()) {
      if (attribute.has_g()) collect_graph_names(*attribute.mutable_g(), taken_);
      for (auto& graph : *attribute.mutable_graphs()) collect_graph_names(graph, taken_);
    }
  });
  for (const auto& function : model.functions()) {
    for (const auto& name : function.input()) taken_.insert(name);
    for (const auto& name : function.output()) taken_.insert(name);
  }
}

std::string NameRegistry::fresh(const std::string& hint) {
  if (!collected_) collect();
  if (taken_.insert(hint).second) return hint;
  int& suffix = next_suffix_[hint];
  for (;;) {
    std::string candidate = hint + "_" + std::to_string(++suffix);
    if (taken_.insert(candidate).second) return candidate;
  }
}

void Rewriter::replace(const Match& match, const GraphBuilder& builder) {
  const Scope& scope = *match.scope;
  Pending& pending = pending_[&scope];
  const onnx::NodeProto* last = match.nodes.front();
  for (const auto* node : match.nodes) {
    pending.removed.insert(node);
    if (scope.position(node) > scope.position(last)) last = node;
  }
  std::vector<onnx::NodeProto> nodes = builder.nodes();
  std::vector<onnx::NodeProto> constant_nodes;
  std::map<std::string, std::string> renamed;  // a constant equal to one made earlier is reused
  for (const auto& [name, tensor] : builder.constants()) {
    if (scope.kind() == Scope::Kind::kMainGraph) {
      onnx::TensorProto unnamed = tensor;
      unnamed.clear_name();
      auto [it, fresh] = pending.constant_names.emplace(unnamed.SerializeAsString(), name);
      if (fresh) pending.initializers.push_back(tensor);
      else renamed[name] = it->second;
    } else {
      onnx::NodeProto& constant = constant_nodes.emplace_back();
      constant.set_op_type("Constant");
      constant.set_name(name);
      constant.add_output(name);
      onnx::TensorProto value = tensor;
      value.clear_name();
      *constant.add_attribute() = onnx::MakeAttribute("value", value);
    }
  }
  for (auto& node : nodes) {
    for (auto& input : *node.mutable_input()) {
      if (auto it = renamed.find(input); it != renamed.end()) input = it->second;
    }
  }
  auto& inserted = pending.insert_before[last];
  inserted.insert(inserted.end(), constant_nodes.begin(), constant_nodes.end());
  inserted.insert(inserted.end(), nodes.begin(), nodes.end());
}

void Rewriter::commit(const std::vector<std::unique_ptr<Scope>>& scopes) {
  for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
    auto found = pending_.find(it->get());
    if (found != pending_.end()) commit_scope(**it, found->second);
  }
  pending_.clear();
}

void Rewriter::commit_scope(const Scope& scope, Pending& pending) {
  NodeList& nodes = scope.nodes();

  // Values the removed nodes read: their producers may now be dead.
  std::vector<std::string> maybe_dead;
  std::unordered_set<std::string> removed_outputs;
  for (const auto* node : pending.removed) {
    for (auto& name : read_values(*node)) maybe_dead.push_back(std::move(name));
    for (const auto& name : node->output()) removed_outputs.insert(name);
  }

  auto rebuild = [&](const std::unordered_set<const onnx::NodeProto*>& dead, bool insert) {
    for (auto* node : take_all(nodes)) {
      if (insert) {
        if (auto it = pending.insert_before.find(node); it != pending.insert_before.end()) {
          for (auto& built : it->second) {
            auto* added = new onnx::NodeProto(std::move(built));
            nodes.AddAllocated(added);
            created_.insert(added);
          }
        }
      }
      if (dead.count(node)) {
        created_.erase(node);
        delete node;
        ++nodes_removed_;
      } else {
        nodes.AddAllocated(node);
      }
    }
  };
  rebuild(pending.removed, true);
  if (scope.graph()) {
    for (auto& tensor : pending.initializers) *scope.graph()->add_initializer() = std::move(tensor);
  }

  // Dead-code removal, limited to what the removals above left without a use.
  std::unordered_map<std::string, int> uses;
  std::unordered_map<std::string, onnx::NodeProto*> producer;
  for (auto& node : nodes) {
    for (const auto& name : read_values(node)) ++uses[name];
    for (const auto& name : node.output()) producer[name] = &node;
  }
  std::unordered_set<std::string> outputs;
  if (scope.graph()) {
    for (const auto& output : scope.graph()->output()) outputs.insert(output.name());
  } else {
    outputs.insert(scope.function()->output().begin(), scope.function()->output().end());
  }
  std::unordered_set<const onnx::NodeProto*> dead;
  std::unordered_set<std::string> dead_initializers;
  std::unordered_set<std::string> graph_inputs;
  if (scope.graph()) {
    for (const auto& input : scope.graph()->input()) graph_inputs.insert(input.name());
  }
  std::unordered_set<std::string> initializers;
  if (scope.graph()) {
    for (const auto& tensor : scope.graph()->initializer()) initializers.insert(tensor.name());
  }
  while (!maybe_dead.empty()) {
    const std::string name = std::move(maybe_dead.back());
    maybe_dead.pop_back();
    if (name.empty() || uses[name] > 0 || outputs.count(name)) continue;
    if (auto it = producer.find(name); it != producer.end()) {
      onnx::NodeProto* node = it->second;
      if (dead.count(node)) continue;
      bool unused = true;
      for (const auto& output : node->output()) unused = unused && (output.empty() || (uses[output] == 0 && !outputs.count(output)));
      if (!unused) continue;
      dead.insert(node);
      for (const auto& output : node->output()) removed_outputs.insert(output);
      for (auto& input : read_values(*node)) {
        --uses[input];
        maybe_dead.push_back(std::move(input));
      }
    } else if (initializers.count(name) && !graph_inputs.count(name)) {
      dead_initializers.insert(name);
    }
  }
  if (!dead.empty()) rebuild(dead, false);
  if (!dead_initializers.empty()) {
    auto& field = *scope.graph()->mutable_initializer();
    for (auto* tensor : take_all(field)) {
      if (dead_initializers.count(tensor->name())) {
        model_.forget(*tensor);
        delete tensor;
      } else {
        field.AddAllocated(tensor);
      }
    }
  }

  // value_info of values that no longer exist.
  if (scope.graph()) {
    std::unordered_set<std::string> produced;
    for (const auto& node : nodes) produced.insert(node.output().begin(), node.output().end());
    auto& infos = *scope.graph()->mutable_value_info();
    for (auto* info : take_all(infos)) {
      if (removed_outputs.count(info->name()) && !produced.count(info->name())) {
        delete info;
      } else {
        infos.AddAllocated(info);
      }
    }
  }
  repair_order(nodes, scope.where());
}

}  // namespace onnx_rewrite
