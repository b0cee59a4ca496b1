// The one door into nested graphs: every node list of a model (main graph, model-local
// functions, training graphs, and graph attributes of nodes at any depth) with its Place. Walks
// are iterative, so a model nested 100,000 deep can't exhaust the stack. Every module that
// looks into subgraphs goes through here, so a new kind of nesting is added once.
#pragma once

#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <type_traits>
#include <utility>
#include <vector>

#include <onnx/onnx_pb.h>

#include "graph/work_count.h"

namespace onnx_rewrite {

using NodeList = google::protobuf::RepeatedPtrField<onnx::NodeProto>;

// Where a node list sits, for messages ("then_branch of If 'cond' in main graph") and for whose
// opset imports apply (the root: the model's, or a function's).
class Place {
 public:
  enum class Kind { kMainGraph, kFunction, kTrainingInitialization, kTrainingAlgorithm, kSubgraph };

  static Place main_graph() { return Place(Kind::kMainGraph); }
  static Place of_function(const onnx::FunctionProto& function);
  static Place training(Kind kind, int index);
  static Place subgraph(const Place& parent, const onnx::NodeProto& holder, const onnx::AttributeProto& attribute);

  Kind kind() const { return kind_; }
  const Place* parent() const { return parent_; }
  const onnx::NodeProto* holder() const { return holder_; }
  // The outermost place: main graph, function or training graph.
  const Place& root() const;
  // The function whose imports apply here (its body or a graph nested in it); null elsewhere.
  const onnx::FunctionProto* function() const { return root().function_; }
  int depth() const { return depth_; }
  std::string text() const;

 private:
  explicit Place(Kind kind) : kind_(kind) {}
  Kind kind_;
  const Place* parent_ = nullptr;
  const Place* root_ = nullptr;  // null for a root place: itself
  const onnx::NodeProto* holder_ = nullptr;
  std::string_view attribute_;
  const onnx::FunctionProto* function_ = nullptr;
  int training_index_ = 0;
  int depth_ = 0;
};

// One node list. `graph` is null for a function body (which has no initializers or value_info).
template <bool kConst>
struct GraphView {
  using Graph = std::conditional_t<kConst, const onnx::GraphProto, onnx::GraphProto>;
  using Function = std::conditional_t<kConst, const onnx::FunctionProto, onnx::FunctionProto>;
  using Nodes = std::conditional_t<kConst, const NodeList, NodeList>;
  Nodes* nodes;
  Graph* graph;
  Function* function;  // the function whose body this is; null for graphs
  const Place* place;
};

namespace walk_detail {
// The same accessors for const and mutable protos, so that one walk serves both.
inline const NodeList& nodes(const onnx::GraphProto& graph) { return graph.node(); }
inline NodeList& nodes(onnx::GraphProto& graph) { return *graph.mutable_node(); }
inline const NodeList& nodes(const onnx::FunctionProto& function) { return function.node(); }
inline NodeList& nodes(onnx::FunctionProto& function) { return *function.mutable_node(); }
inline const onnx::GraphProto& graph(const onnx::ModelProto& model) { return model.graph(); }
inline onnx::GraphProto& graph(onnx::ModelProto& model) { return *model.mutable_graph(); }
inline const auto& functions(const onnx::ModelProto& model) { return model.functions(); }
inline auto& functions(onnx::ModelProto& model) { return *model.mutable_functions(); }
inline const auto& training(const onnx::ModelProto& model) { return model.training_info(); }
inline auto& training(onnx::ModelProto& model) { return *model.mutable_training_info(); }
inline const onnx::GraphProto& initialization(const onnx::TrainingInfoProto& info) { return info.initialization(); }
inline onnx::GraphProto& initialization(onnx::TrainingInfoProto& info) { return *info.mutable_initialization(); }
inline const onnx::GraphProto& algorithm(const onnx::TrainingInfoProto& info) { return info.algorithm(); }
inline onnx::GraphProto& algorithm(onnx::TrainingInfoProto& info) { return *info.mutable_algorithm(); }
inline const auto& attributes(const onnx::NodeProto& node) { return node.attribute(); }
inline auto& attributes(onnx::NodeProto& node) { return *node.mutable_attribute(); }
inline const onnx::GraphProto& graph(const onnx::AttributeProto& attribute) { return attribute.g(); }
inline onnx::GraphProto& graph(onnx::AttributeProto& attribute) { return *attribute.mutable_g(); }
inline const auto& graphs(const onnx::AttributeProto& attribute) { return attribute.graphs(); }
inline auto& graphs(onnx::AttributeProto& attribute) { return *attribute.mutable_graphs(); }
}  // namespace walk_detail

// Visits node lists breadth first: the main graph, each function body, the training graphs
// (unless `with_training` is false), then the graph attributes of the nodes of each visited
// list, in order. Parents come before their subgraphs; Places stay valid for the whole walk.
// `visit(const GraphView<const?>&)`; a const model gives const views.
template <typename Model, typename Visit>
void for_each_graph(Model& model, Visit&& visit, bool with_training = true) {
  namespace d = walk_detail;
  using View = GraphView<std::is_const_v<Model>>;
  std::deque<Place> places;
  std::vector<View> pending;
  auto add_graph = [&](auto& graph, Place place) {
    places.push_back(place);
    pending.push_back(View{&d::nodes(graph), &graph, nullptr, &places.back()});
  };
  add_graph(d::graph(model), Place::main_graph());
  for (auto& function : d::functions(model)) {
    places.push_back(Place::of_function(function));
    pending.push_back(View{&d::nodes(function), nullptr, &function, &places.back()});
  }
  if (with_training) {
    int index = 0;
    for (auto& info : d::training(model)) {
      if (info.has_initialization()) add_graph(d::initialization(info), Place::training(Place::Kind::kTrainingInitialization, index));
      if (info.has_algorithm()) add_graph(d::algorithm(info), Place::training(Place::Kind::kTrainingAlgorithm, index));
      ++index;
    }
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    const View view = pending[i];
    count_work(static_cast<uint64_t>(view.nodes->size()) + 1);
    visit(view);
    for (auto& node : *view.nodes) {
      for (auto& attribute : d::attributes(node)) {
        if (attribute.has_g()) add_graph(d::graph(attribute), Place::subgraph(*view.place, node, attribute));
        for (auto& graph : d::graphs(attribute)) add_graph(graph, Place::subgraph(*view.place, node, attribute));
      }
    }
  }
}

// Every node, with its place.
template <typename Model, typename Visit>
void for_each_node(Model& model, Visit&& visit) {
  for_each_graph(model, [&](const auto& view) {
    for (auto& node : *view.nodes) visit(node, *view.place);
  });
}

// Whether a node holds a graph (If, Loop, Scan: its subgraphs' reads are reads of the node).
bool holds_a_graph(const onnx::NodeProto& node);

// The graphs a node holds (graph attributes, in order), with the attribute holding each.
template <typename Node>
auto subgraphs_of(Node& node) {
  namespace d = walk_detail;
  using Attribute = std::remove_reference_t<decltype(*d::attributes(node).begin())>;
  using Graph = std::remove_reference_t<decltype(d::graph(std::declval<Attribute&>()))>;
  std::vector<std::pair<Attribute*, Graph*>> graphs;
  for (auto& attribute : d::attributes(node)) {
    if (attribute.has_g()) graphs.emplace_back(&attribute, &d::graph(attribute));
    for (auto& graph : d::graphs(attribute)) graphs.emplace_back(&attribute, &graph);
  }
  return graphs;
}

// The node, then every node in the graphs it holds, at any depth. The graphs a node holds are
// taken before it is visited: what `visit` puts into its attributes is not visited.
template <typename Node, typename Visit>
void for_each_node_within(Node& node, Visit&& visit) {
  std::vector<Node*> pending{&node};
  while (!pending.empty()) {
    Node* current = pending.back();
    pending.pop_back();
    const size_t first_inner = pending.size();
    for (auto [attribute, graph] : subgraphs_of(*current)) {
      for (auto& inner : walk_detail::nodes(*graph)) pending.push_back(&inner);
    }
    std::reverse(pending.begin() + static_cast<std::ptrdiff_t>(first_inner), pending.end());  // visited in order
    visit(*current);
  }
}

// Every node of a node list and of the graphs nested in its nodes, at any depth.
void for_each_nested_node(const NodeList& nodes, const std::function<void(const onnx::NodeProto&)>& visit);

// Every TensorProto: initializers, sparse initializers, tensor attributes, at any depth, with
// the place of the graph or node holding it.
void for_each_tensor(onnx::ModelProto& model, const std::function<void(onnx::TensorProto&, const Place&)>& visit);
void for_each_tensor(const onnx::ModelProto& model, const std::function<void(const onnx::TensorProto&, const Place&)>& visit);

// The free names of each graph worked out so far. Asking for every nested graph's free names
// (as indexing every scope does) costs n² for graphs nested n deep without it; with it, each
// graph is read once. Valid while the graphs are unchanged.
using FreeNameCache = std::unordered_map<const onnx::GraphProto*, std::vector<std::string_view>>;

// Names a node's subgraphs (at any depth) read from enclosing scopes, in order of first use
// (views into the subgraphs' protos).
std::vector<std::string_view> implicit_inputs(const onnx::NodeProto& node, FreeNameCache* cache = nullptr);
// The same for a list of graphs read side by side (a node's, the training graphs).
std::vector<std::string_view> free_names(const std::vector<const onnx::GraphProto*>& graphs, FreeNameCache* cache = nullptr);

}  // namespace onnx_rewrite
