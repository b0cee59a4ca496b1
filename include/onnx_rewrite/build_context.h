// What a C++ builder reads of a match: exactly what it declared (BuilderSignature, builder.h).
// Pattern values, with their shape facts and constant contents, and captured attributes are read
// by the names the rule file gives them; the matched nodes' own attributes by names the builder
// declares; the graph around the match only through a read-only view. Reading a name the builder
// did not declare is a bug in the builder: an error naming the rule, never a silent decline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include "onnx_rewrite/builder.h"
#include "onnx_rewrite/shapes.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {

class Match;

// A node of the model, read-only: its op, the values it reads and computes, its attributes.
// For a node of the match, attributes are read by the names the builder declared
// (`node_attributes`); for one around it (BuildContext::producer), by any name.
class NodeView {
 public:
  const std::string& op_type() const { return node_->op_type(); }
  // Normalized: "" for ai.onnx.
  std::string domain() const;
  // What it reads and computes, in order; an absent optional input or output is an absent Value.
  std::vector<Value> inputs() const;
  std::vector<Value> outputs() const;
  Value input(size_t i) const;  // absent beyond the last
  Value output(size_t i) const;
  const onnx::AttributeProto* attribute(std::string_view name) const;
  bool has_attribute(std::string_view name) const { return attribute(name) != nullptr; }
  int64_t attribute_int(std::string_view name, int64_t otherwise) const;
  float attribute_float(std::string_view name, float otherwise) const;
  std::string attribute_string(std::string_view name, std::string otherwise = {}) const;
  std::vector<int64_t> attribute_ints(std::string_view name, std::vector<int64_t> otherwise = {}) const;
  // Every attribute but those whose name starts with one of `left_out`: to carry them over to a
  // node of the same op (a lower opset's spelling, the op a fused node wraps).
  Attributes attributes_except(std::initializer_list<std::string_view> left_out = {}) const;
  // Its name if it has one, else its op and first output (for messages).
  std::string description() const;
  // The same node of the model.
  friend bool operator==(const NodeView& a, const NodeView& b) { return a.node_ == b.node_; }

 private:
  friend class BuildContext;
  NodeView(const onnx::NodeProto& node, const BuildContext* checked) : node_(&node), checked_(checked) {}
  const onnx::NodeProto* node_;
  const BuildContext* checked_;  // null: any name may be read
};

class BuildContext {
 public:
  // The engine makes one per build of a match.
  BuildContext(const Match& match, const BuilderSignature& signature);
  ~BuildContext();
  BuildContext(const BuildContext&) = delete;
  BuildContext& operator=(const BuildContext&) = delete;

  const std::string& rule_id() const;

  // ---- Pattern values (declared in `values` or `optional_values`) ----
  // Whether the pattern bound `name` (false for an absent optional input, or an optional value
  // this pattern doesn't have).
  bool has(std::string_view name) const;
  // Whether this pattern names the value at all (bound, or an absent optional input): which of a
  // rule's alternative patterns matched.
  bool in_pattern(std::string_view name) const;
  // The graph value; an absent Value when not bound.
  const Value& value(std::string_view name) const;
  // Element type and dims, as far as the graph tells (shapes.h).
  const ShapeFacts& facts(std::string_view name) const;
  // The element type of the first of these values whose type is known (0 if none): the ops a
  // pattern matches take equal types, so any operand tells.
  int32_t element_type(std::initializer_list<std::string_view> names) const;
  // Whether the value is a constant (an initializer or a Constant node), without reading it.
  bool is_constant(std::string_view name) const;
  // A constant's values, decoded, if it has at most `max_elements` (nullopt otherwise, and for
  // external data).
  std::optional<TensorValues> constant(std::string_view name, size_t max_elements = kMaxDecodedElements) const;
  static constexpr size_t kMaxDecodedElements = 4096;
  // The one number of a one-element constant.
  std::optional<double> scalar(std::string_view name) const;
  // A constant as a tensor with its payload (the raw bytes of packed weights), or nullopt.
  std::optional<onnx::TensorProto> constant_tensor(std::string_view name) const;
  // Whether a constant's payload lies in an external-data file.
  bool stored_externally(std::string_view name) const;
  // The constants `names` side by side along `axis`, as Concat puts them, as a new constant of
  // `b`; nullopt, with the reason in `why`, unless they share their type (whole bytes per
  // element) and every dim but `axis`, and lie in the model (not external data). Their bytes are
  // not decoded: those in the source file are copied from there when the model is written, so
  // packing a model's weights costs no memory.
  std::optional<Value> concatenated_constants(GraphBuilder& b, const std::vector<std::string_view>& names, int64_t axis,
                                              std::string& why) const;
  // Whether something outside the match reads the value, or it is an output of the graph.
  bool used_outside(std::string_view name) const;
  // The value reshaped to `shape` (a -1 takes what the others leave). A Reshape of a constant is
  // the same bytes under new dims; left as a node, the runtime (or a round of
  // canonicalize-fold-layout) would have to fold it. So when the value is a constant of at most
  // 1 MiB whose bytes the model holds (not external data) and fit its type and shape, this is a
  // new constant with those dims, provided the original can go (nothing outside the match reads
  // it, and it is not a graph input) or is at most 64 bytes (copying it costs nothing). Else a
  // Reshape node.
  Value reshaped(GraphBuilder& b, std::string_view name, const std::vector<int64_t>& shape) const;

  // ---- Captured attributes, defaults and lets (declared in `attributes`, `optional_attributes`) ----
  const onnx::AttributeProto* attribute(std::string_view name) const;
  int64_t attribute_int(std::string_view name, int64_t otherwise) const;
  float attribute_float(std::string_view name, float otherwise) const;
  std::vector<int64_t> attribute_ints(std::string_view name, std::vector<int64_t> otherwise = {}) const;
  std::string attribute_string(std::string_view name, std::string otherwise = {}) const;

  // ---- Matched nodes (their attributes by the names declared in `node_attributes`) ----
  // The node computing the pattern's first output.
  NodeView anchor() const;
  // The first node of the match with this op type, if any.
  std::optional<NodeView> node(std::string_view op_type) const;
  std::vector<NodeView> nodes() const;

  // ---- Around the match (read-only) ----
  // The node computing a graph value in the match's graph, if a node does (not a graph input,
  // an initializer or a value of an enclosing graph).
  std::optional<NodeView> producer(const Value& value) const;
  // What is known of any value of the match's graph.
  const ShapeFacts& facts_of(const Value& value) const;
  std::optional<TensorValues> constant_of(const Value& value, size_t max_elements = kMaxDecodedElements) const;
  // The nodes reading a value of the match's graph, in graph order, with the input they read it
  // at (-1: a subgraph of the node reads it).
  struct Read {
    NodeView node;
    int input;
  };
  std::vector<Read> readers(const Value& value) const;
  bool is_constant(const Value& value) const;
  bool is_graph_output(const Value& value) const;
  // Every node of the match's graph, in order (an analysis of a whole region: rules/defuse-nchwc).
  std::vector<NodeView> graph_nodes() const;
  // The model's import of a domain where the match is (the builder's GraphBuilder::opset is
  // what it builds for).
  int model_opset(std::string_view domain = "") const;
  int64_t ir_version() const;

 private:
  friend class NodeView;
  void require_value(std::string_view name) const;
  void require_attribute(std::string_view name) const;
  void require_node_attribute(std::string_view name) const;
  const std::string& graph_name(std::string_view name) const;

  const Match& match_;
  const BuilderSignature& signature_;
  std::map<std::string, Value, std::less<>> values_;
};

}  // namespace onnx_rewrite
