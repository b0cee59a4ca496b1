#include "graph/walk.h"

#include <unordered_set>

#include "graph/node_attributes.h"

namespace onnx_rewrite {

bool holds_a_graph(const onnx::NodeProto& node) {
  return std::any_of(node.attribute().begin(), node.attribute().end(),
                     [](const onnx::AttributeProto& attribute) { return attribute.has_g() || attribute.graphs_size() > 0; });
}
namespace {

// Places deeper than this are named by their innermost levels and their root.
constexpr int kLevelsShown = 4;

std::vector<const onnx::GraphProto*> graphs_of(const onnx::NodeProto& node) {
  std::vector<const onnx::GraphProto*> graphs;
  for (const auto& [attribute, graph] : subgraphs_of(node)) graphs.push_back(graph);
  return graphs;
}

// Names used in order of first use, once each.
struct OrderedNames {
  std::vector<std::string_view> names;
  std::unordered_set<std::string_view> seen;
  void add(std::string_view name) {
    if (seen.insert(name).second) names.push_back(name);
  }
};

}  // namespace

Place Place::of_function(const onnx::FunctionProto& function) {
  Place place(Kind::kFunction);
  place.function_ = &function;
  return place;
}

Place Place::training(Kind kind, int index) {
  Place place(kind);
  place.training_index_ = index;
  return place;
}

Place Place::subgraph(const Place& parent, const onnx::NodeProto& holder, const onnx::AttributeProto& attribute) {
  Place place(Kind::kSubgraph);
  place.parent_ = &parent;
  place.holder_ = &holder;
  place.attribute_ = attribute.name();
  place.depth_ = parent.depth_ + 1;
  place.root_ = &parent.root();
  return place;
}

const Place& Place::root() const { return root_ ? *root_ : *this; }

std::string Place::text() const {
  switch (kind_) {
    case Kind::kMainGraph: return "main graph";
    case Kind::kFunction: return "function " + function_->domain() + "." + function_->name();
    case Kind::kTrainingInitialization: return "training initialization";
    case Kind::kTrainingAlgorithm: return "training algorithm";
    case Kind::kSubgraph: break;
  }
  std::string text;
  const Place* place = this;
  for (int level = 0; place->kind_ == Kind::kSubgraph; place = place->parent_, ++level) {
    if (level == kLevelsShown && depth_ > kLevelsShown + 1) {
      text += std::to_string(depth_ - kLevelsShown) + " more nested subgraphs in " + root().text();
      return text + std::string(static_cast<size_t>(level), ')');
    }
    text += "subgraph '" + std::string(place->attribute_) + "' of node '" + describe_node(*place->holder_) + "' (";
  }
  return text + place->text() + std::string(static_cast<size_t>(depth_), ')');
}

void for_each_nested_node(const NodeList& nodes, const std::function<void(const onnx::NodeProto&)>& visit) {
  std::vector<const NodeList*> pending{&nodes};
  for (size_t i = 0; i < pending.size(); ++i) {
    count_work(static_cast<uint64_t>(pending[i]->size()) + 1);
    for (const auto& node : *pending[i]) {
      visit(node);
      for (const auto* graph : graphs_of(node)) pending.push_back(&graph->node());
    }
  }
}

namespace {

template <typename Model, typename Tensor>
void visit_tensors(Model& model, const std::function<void(Tensor&, const Place&)>& visit) {
  for_each_graph(model, [&](const auto& view) {
    if (view.graph) {
      auto& graph = *view.graph;
      if constexpr (std::is_const_v<Model>) {
        for (const auto& tensor : graph.initializer()) visit(tensor, *view.place);
        for (const auto& sparse : graph.sparse_initializer()) {
          visit(sparse.values(), *view.place);
          visit(sparse.indices(), *view.place);
        }
      } else {
        for (auto& tensor : *graph.mutable_initializer()) visit(tensor, *view.place);
        for (auto& sparse : *graph.mutable_sparse_initializer()) {
          visit(*sparse.mutable_values(), *view.place);
          visit(*sparse.mutable_indices(), *view.place);
        }
      }
    }
    for (auto& node : *view.nodes) {
      for (auto& attribute : walk_detail::attributes(node)) {
        if constexpr (std::is_const_v<Model>) {
          if (attribute.has_t()) visit(attribute.t(), *view.place);
          for (const auto& tensor : attribute.tensors()) visit(tensor, *view.place);
          if (attribute.has_sparse_tensor()) {
            visit(attribute.sparse_tensor().values(), *view.place);
            visit(attribute.sparse_tensor().indices(), *view.place);
          }
        } else {
          if (attribute.has_t()) visit(*attribute.mutable_t(), *view.place);
          for (auto& tensor : *attribute.mutable_tensors()) visit(tensor, *view.place);
          if (attribute.has_sparse_tensor()) {
            visit(*attribute.mutable_sparse_tensor()->mutable_values(), *view.place);
            visit(*attribute.mutable_sparse_tensor()->mutable_indices(), *view.place);
          }
        }
      }
    }
  });
}

}  // namespace

void for_each_tensor(onnx::ModelProto& model, const std::function<void(onnx::TensorProto&, const Place&)>& visit) {
  visit_tensors(model, visit);
}

void for_each_tensor(const onnx::ModelProto& model, const std::function<void(const onnx::TensorProto&, const Place&)>& visit) {
  visit_tensors(model, visit);
}

std::vector<std::string_view> implicit_inputs(const onnx::NodeProto& node, FreeNameCache* cache) {
  return free_names(graphs_of(node), cache);
}

std::vector<std::string_view> free_names(const std::vector<const onnx::GraphProto*>& graphs, FreeNameCache* cache) {
  // A graph's free names: what its nodes (and the graphs nested in them) read without the graph
  // defining it before. Worked out with an explicit stack of graphs being read.
  struct Frame {
    const onnx::GraphProto* graph;
    std::unordered_set<std::string_view> defined;
    OrderedNames free;
    int next_node = 0;
    bool reading_subgraphs = false;                  // graph->node(next_node)'s inputs were read
    std::vector<const onnx::GraphProto*> subgraphs;  // of that node
    size_t next_subgraph = 0;
    OrderedNames nested;  // what its subgraphs read from outside them
  };
  auto open = [](const onnx::GraphProto* graph) {
    Frame frame{graph, {}, {}, 0, false, {}, 0, {}};
    for (const auto& input : graph->input()) frame.defined.insert(input.name());
    for (const auto& initializer : graph->initializer()) frame.defined.insert(initializer.name());
    for (const auto& sparse : graph->sparse_initializer()) frame.defined.insert(sparse.values().name());
    return frame;
  };
  auto use = [](Frame& frame, std::string_view name) {
    if (!name.empty() && !frame.defined.count(name)) frame.free.add(name);
  };

  OrderedNames result;
  std::vector<Frame> stack;
  for (const auto* top : graphs) {
    stack.push_back(open(top));
    while (!stack.empty()) {
      Frame& frame = stack.back();
      if (frame.next_node < frame.graph->node_size()) {
        const onnx::NodeProto& inner = frame.graph->node(frame.next_node);
        if (!frame.reading_subgraphs) {
          for (const auto& input : inner.input()) use(frame, input);
          frame.reading_subgraphs = true;
          frame.subgraphs = graphs_of(inner);
          frame.next_subgraph = 0;
          frame.nested = {};
        }
        if (frame.next_subgraph < frame.subgraphs.size()) {
          const onnx::GraphProto* subgraph = frame.subgraphs[frame.next_subgraph++];
          if (auto known = cache ? cache->find(subgraph) : FreeNameCache::iterator{}; cache && known != cache->end()) {
            for (const auto name : known->second) frame.nested.add(name);
            continue;
          }
          stack.push_back(open(subgraph));  // `frame` is not used after this
          continue;
        }
        for (const auto name : frame.nested.names) use(frame, name);
        for (const auto& output : inner.output()) frame.defined.insert(output);
        frame.reading_subgraphs = false;
        ++frame.next_node;
        continue;
      }
      for (const auto& output : frame.graph->output()) use(frame, output.name());
      if (cache) (*cache)[frame.graph] = frame.free.names;
      std::vector<std::string_view> free = std::move(frame.free.names);
      stack.pop_back();
      OrderedNames& into = stack.empty() ? result : stack.back().nested;
      for (const auto name : free) into.add(name);
    }
  }
  return result.names;
}

}  // namespace onnx_rewrite
