// The index stage: every node list of a model (main graph, graph attributes at any depth,
// model-local functions) as a Scope, with who produces and who consumes each value, and what
// is known about a value's type and constant contents.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include "onnx_rewrite/model.h"
#include "onnx_rewrite/shapes.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {

using NodeList = google::protobuf::RepeatedPtrField<onnx::NodeProto>;

struct Use {
  onnx::NodeProto* node = nullptr;
  int input = 0;     // index into node->input(), or -1 when a subgraph of `node` refers to the value
  int position = 0;  // the node's, Scope::position (it fits in what alignment leaves over)
};

class ShapeInference;

class Scope {
 public:
  enum class Kind { kMainGraph, kSubgraph, kFunction };

  Scope(Kind kind, std::string where, const Model& model, const Scope* parent, onnx::GraphProto* graph, onnx::FunctionProto* function);
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  ~Scope();

  Kind kind() const { return kind_; }
  const std::string& where() const { return where_; }
  onnx::GraphProto* graph() const { return graph_; }           // null for functions
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
    int position = 0;  // the node's
  };
  const Producer* producer(std::string_view value) const;
  // In node order, and for one node its inputs in order, then its subgraphs' reads.
  std::span<const Use> uses(std::string_view value) const;
  // Graph or function outputs of this scope.
  bool is_output(std::string_view value) const;
  // Defined here or in an enclosing graph by a graph input or an initializer.
  bool is_graph_input(std::string_view value) const;
  // An initializer / a graph input of this very graph.
  bool owns_initializer(std::string_view value) const;
  bool is_graph_input_here(std::string_view value) const;
  int position(const onnx::NodeProto* node) const;
  // Whether the node is one of this scope's.
  bool holds(const onnx::NodeProto* node) const;

  // The same index by value ids, for walks over many nodes that would otherwise hash each name
  // again (a commit): what the node at a position reads (its present inputs in order, then what
  // its subgraphs read) and writes (its present outputs).
  struct ValueId {
    uint32_t index = 0;  // below value_count()
  };
  size_t value_count() const;
  std::optional<ValueId> value_id(std::string_view value) const;
  std::string_view name(ValueId value) const;
  std::span<const ValueId> reads_at(int position) const;
  std::span<const ValueId> writes_at(int position) const;
  const Producer* producer(ValueId value) const;
  std::span<const Use> uses(ValueId value) const;
  bool is_output(ValueId value) const;

  // Who asks for what is worked out on demand (decoded constants, shape facts): the round's own
  // walk, or the thread matching ahead of it (engine/match_ahead.h). Each reader keeps its own,
  // so that neither writes what the other reads.
  enum class Reader { kRound, kAhead };

  // The tensor a value is bound to when it is constant: an initializer (header; payload may be
  // deferred) or a Constant node's tensor, here or in an enclosing graph.
  const onnx::TensorProto* constant_tensor(std::string_view value) const;
  // Whether the value is a constant (without reading it).
  bool is_constant(std::string_view value) const;
  // Its values, decoded (small tensors only: at most `max_elements`).
  static constexpr size_t kMaxDecodedElements = 4096;
  std::optional<TensorValues> constant_values(std::string_view value, size_t max_elements = kMaxDecodedElements,
                                              Reader reader = Reader::kRound) const;
  // What is known of a value's type and shape: what the graph declares (graph inputs and
  // outputs, value_info, initializers, Constant nodes), completed by shape inference through
  // the producers; worked out once per scope (shapes.h). The one shape API of the engine.
  const ShapeFacts& facts(std::string_view value, Reader reader = Reader::kRound) const;
  // Frees what shape inference worked out and the constants decoded (worked out again if asked
  // for): a round's facts of a big graph are a tenth of its memory, and committing the round
  // needs its index, not them. Every reader's, or one's.
  void forget_facts() const;
  void forget_facts(Reader reader) const;

 private:
  friend class ShapeInference;
  // constant_tensor, also giving what computes the value here (a Constant node with value_float
  // & co. has no tensor to give), so that is_constant and constant_values look the name up once.
  const onnx::TensorProto* constant_tensor(std::string_view value, const Producer** computed_here) const;
  struct Declared {
    int32_t elem_type = 0;
    std::optional<std::vector<int64_t>> dims;  // -1 where unknown; nullopt: rank unknown
  };
  // What the graph itself says of a value, here or in an enclosing graph.
  Declared declared(std::string_view value) const;
  // What this graph's inputs, outputs, value_info and initializers say of it.
  Declared declared_here(std::string_view value) const;

  struct Index;  // producers, uses, positions, declared types: flat tables built once (scope.cc)
  Kind kind_;
  std::string where_;
  const Model& model_;
  const Scope* parent_;
  onnx::GraphProto* graph_;
  onnx::FunctionProto* function_;
  std::unique_ptr<Index> index_;
  mutable std::array<std::unique_ptr<ShapeInference>, 2> inference_;  // by Reader, on first use
};

// All scopes of a model, parents before children. Pointers into the model stay valid until the
// model's node lists change.
std::vector<std::unique_ptr<Scope>> collect_scopes(Model& model);

// A Constant node of the standard domain.
bool is_constant_node(const onnx::NodeProto& node);
// The constant a Constant node holds, as a tensor (value, value_float(s), value_int(s)).
std::optional<onnx::TensorProto> constant_node_tensor(const onnx::NodeProto& node);
// The tensor of a Constant node's `value` attribute, the form that holds weights; null for a
// node of another form (or not a Constant). Read in place: a copy would copy the weights.
const onnx::TensorProto* constant_node_value(const onnx::NodeProto& node);

}  // namespace onnx_rewrite
