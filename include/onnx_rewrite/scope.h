// The index stage: every node list of a model (main graph, graph attributes at any depth,
// model-local functions) as a Scope, with who produces and who consumes each value, and what
// is known about a value's type and constant contents.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <onnx/onnx_pb.h>

#include "onnx_rewrite/flat_map.h"
#include "onnx_rewrite/model.h"
#include "onnx_rewrite/shapes.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {

using NodeList = google::protobuf::RepeatedPtrField<onnx::NodeProto>;

struct Use {
  onnx::NodeProto* node = nullptr;
  int input = 0;  // index into node->input(), or -1 when a subgraph of `node` refers to the value
};

// What is statically known about a value: element type and dims (-1 where unknown).
struct ValueType {
  int32_t elem_type = 0;          // 0 = unknown
  std::optional<std::vector<int64_t>> dims;  // nullopt = rank unknown
  std::optional<size_t> rank() const { return dims ? std::optional<size_t>(dims->size()) : std::nullopt; }
};

class ShapeInference;

class Scope {
 public:
  enum class Kind { kMainGraph, kSubgraph, kFunction };

  Scope(Kind kind, std::string where, const Model& model, const Scope* parent, onnx::GraphProto* graph,
        onnx::FunctionProto* function);
  ~Scope();

  Kind kind() const { return kind_; }
  const std::string& where() const { return where_; }
  onnx::GraphProto* graph() const { return graph_; }          // null for functions
  onnx::FunctionProto* function() const { return function_; }  // null for graphs
  NodeList& nodes() const;
  const Model& model() const { return model_; }
  const Scope* parent() const { return parent_; }

  // The opset import of a domain in effect here (functions have their own); 0 if not imported.
  int opset(std::string_view domain) const;

  // Producer of a value defined by a node of this scope.
  struct Producer {
    onnx::NodeProto* node = nullptr;
    int output = 0;
  };
  const Producer* producer(std::string_view value) const;
  std::span<const Use> uses(std::string_view value) const;
  // Graph or function outputs of this scope.
  bool is_output(std::string_view value) const { return outputs_.count(value) != 0; }
  // Defined here or in an enclosing graph by a graph input or an initializer.
  bool is_graph_input(std::string_view value) const;
  // An initializer / a graph input of this very graph.
  bool owns_initializer(std::string_view value) const { return initializers_.contains(value); }
  bool is_graph_input_here(std::string_view value) const { return graph_inputs_.count(value) != 0; }
  int position(const onnx::NodeProto* node) const { return *positions_.find(node); }

  // The tensor a value is bound to when it is constant: an initializer (header; payload may be
  // deferred) or a Constant node's tensor, here or in an enclosing graph.
  const onnx::TensorProto* constant_tensor(std::string_view value) const;
  // Whether the value is a constant (without reading it).
  bool is_constant(std::string_view value) const;
  // Its values, decoded (small tensors only: at most `max_elements`).
  std::optional<TensorValues> constant_values(std::string_view value, size_t max_elements = 4096) const;
  // What the graph declares (graph inputs/outputs, value_info, initializers, Constant nodes).
  ValueType declared_type(std::string_view value) const;
  // What is known: declared, completed by shape inference through the producers.
  ValueType type_of(std::string_view value) const;
  // Shapes with symbols for run-time sizes (shapes.h), worked out once per scope.
  const ShapeFacts& facts(const std::string& value) const;

 private:
  void index();
  void add_type(const onnx::ValueInfoProto& info);

  Kind kind_;
  std::string where_;
  const Model& model_;
  const Scope* parent_;
  onnx::GraphProto* graph_;
  onnx::FunctionProto* function_;

  // Keys view names owned by the model's protos, which don't change while a scope is in use.
  FlatMap<std::string_view, Producer> producers_;
  struct UseRange {
    uint32_t begin = 0;
    uint32_t count = 0;
  };
  FlatMap<std::string_view, UseRange> use_ranges_;  // into uses_, in node order
  std::vector<Use> uses_;
  std::unordered_set<std::string_view> outputs_;
  std::unordered_set<std::string_view> graph_inputs_;
  FlatMap<std::string_view, const onnx::TensorProto*> initializers_;
  FlatMap<std::string_view, ValueType> types_;
  FlatMap<const onnx::NodeProto*, int> positions_;
  std::map<std::string, int, std::less<>> opsets_;
  mutable std::unique_ptr<ShapeInference> inference_;  // on first use
};

// All scopes of a model, parents before children. Pointers into the model stay valid until the
// model's node lists change.
std::vector<std::unique_ptr<Scope>> collect_scopes(Model& model);

// Names a node's subgraphs read from enclosing scopes (views into the subgraphs' protos).
std::vector<std::string_view> implicit_inputs(const onnx::NodeProto& node);

// The constant a Constant node holds, as a tensor (value, value_float(s), value_int(s)).
std::optional<onnx::TensorProto> constant_node_tensor(const onnx::NodeProto& node);

}  // namespace onnx_rewrite
