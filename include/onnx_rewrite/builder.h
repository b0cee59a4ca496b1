// The graph builder replacements use (`b.Add(x, y)` style): it creates nodes with fresh,
// readable names, constants, and the opset-dependent spellings of ops whose signature changed
// (axes as attribute or input, ...), so builders never write protobuf by hand.
#pragma once

#include <functional>
#include <optional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <onnx/defs/attr_proto_util.h>
#include <onnx/onnx_pb.h>

#include "onnx_rewrite/model.h"

namespace onnx_rewrite {

class BuildContext;

// A tensor of the graph being built; an empty name is an absent optional input.
struct Value {
  std::string name;
  bool absent() const { return name.empty(); }
};

using Attributes = std::vector<onnx::AttributeProto>;

template <typename T>
onnx::AttributeProto attr(const std::string& name, const T& value) {
  return onnx::MakeAttribute(name, value);
}
inline onnx::AttributeProto attr(const std::string& name, int value) { return onnx::MakeAttribute(name, int64_t{value}); }
inline onnx::AttributeProto attr(const std::string& name, double value) { return onnx::MakeAttribute(name, static_cast<float>(value)); }
inline onnx::AttributeProto attr(const std::string& name, const char* value) { return onnx::MakeAttribute(name, std::string(value)); }

// Hands out names no other value or node of the model has.
using FreshName = std::function<std::string(const std::string& hint)>;

class GraphBuilder {
 public:
  // `base` prefixes new names (the anchor node's name); `opsets` are the versions to build for.
  GraphBuilder(std::string base, std::string rule_id, std::map<std::string, int> opsets, FreshName fresh);

  int opset(std::string_view domain = "") const;

  Value op(std::string_view op_type, std::vector<Value> inputs, Attributes attributes = {}, std::string_view domain = "");
  std::vector<Value> op_outputs(std::string_view op_type, std::vector<Value> inputs, size_t outputs, Attributes attributes = {},
                                std::string_view domain = "");
  // A node whose output names are hints (text replacements keep the names their rule uses).
  std::vector<Value> op_named(const onnx::NodeProto& node, const std::vector<Value>& inputs);

  // A new constant: an initializer in the main graph, a Constant node inside subgraphs and functions.
  Value constant(onnx::TensorProto tensor);
  Value scalar(double number, int32_t data_type = onnx::TensorProto::FLOAT);
  Value ints(const std::vector<int64_t>& numbers);  // int64 vector
  Value floats(const std::vector<double>& numbers, int32_t data_type = onnx::TensorProto::FLOAT);

  // The replacement computes graph value `graph_name` (a pattern's output) as `value`.
  void output(const std::string& graph_name, Value value);
  void output(const Value& graph_value, Value value) { output(graph_value.name, std::move(value)); }

  // Something the user should know about this rewrite; shown once in the summary and report.
  void note(std::string text) { notes_.push_back(std::move(text)); }
  const std::vector<std::string>& notes() const { return notes_; }

  // Elementwise and common ops.
  Value Add(Value a, Value b) { return op("Add", {a, b}); }
  Value Sub(Value a, Value b) { return op("Sub", {a, b}); }
  Value Mul(Value a, Value b) { return op("Mul", {a, b}); }
  Value Div(Value a, Value b) { return op("Div", {a, b}); }
  Value Pow(Value a, Value b) { return op("Pow", {a, b}); }
  Value Sqrt(Value x) { return op("Sqrt", {x}); }
  Value Erf(Value x) { return op("Erf", {x}); }
  Value Tanh(Value x) { return op("Tanh", {x}); }
  Value Sigmoid(Value x) { return op("Sigmoid", {x}); }
  Value Relu(Value x) { return op("Relu", {x}); }
  Value Reciprocal(Value x) { return op("Reciprocal", {x}); }
  Value Floor(Value x) { return op("Floor", {x}); }
  Value Shape(Value x) { return op("Shape", {x}); }
  Value Identity(Value x) { return op("Identity", {x}); }
  Value Cast(Value x, int32_t to) { return op("Cast", {x}, {attr("to", int64_t{to})}); }
  Value MatMul(Value a, Value b) { return op("MatMul", {a, b}); }
  Value Transpose(Value x, const std::vector<int64_t>& perm) { return op("Transpose", {x}, {attr("perm", perm)}); }
  Value Reshape(Value x, Value shape) { return op("Reshape", {x, shape}); }
  Value Concat(std::vector<Value> inputs, int64_t axis) { return op("Concat", std::move(inputs), {attr("axis", axis)}); }
  Value Gather(Value data, Value indices, int64_t axis = 0) { return op("Gather", {data, indices}, {attr("axis", axis)}); }
  Value Where(Value condition, Value a, Value b) { return op("Where", {condition, a, b}); }

  // Ops whose signature depends on the opset being built for.
  Value Unsqueeze(Value x, const std::vector<int64_t>& axes);
  Value Squeeze(Value x, const std::vector<int64_t>& axes);
  Value Reduce(std::string_view op_type, Value x, const std::vector<int64_t>& axes, bool keepdims = true);
  Value Slice(Value x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
              const std::vector<int64_t>& steps = {});
  Value Clip(Value x, std::optional<double> low, std::optional<double> high, int32_t data_type = onnx::TensorProto::FLOAT);
  std::vector<Value> Split(Value x, int64_t axis, const std::vector<int64_t>& sizes);

  // Drops nodes whose outputs nothing reads: what computed an optional output that is absent.
  void prune();

  const std::vector<onnx::NodeProto>& nodes() const { return nodes_; }
  std::vector<onnx::NodeProto>& nodes() { return nodes_; }
  const std::vector<std::pair<std::string, onnx::TensorProto>>& constants() const { return constants_; }
  std::vector<std::pair<std::string, onnx::TensorProto>>& constants() { return constants_; }
  // The source ranges whose bytes are a constant's raw_data, for one BuildContext assembled.
  const std::vector<FileRange>* assembled_raw_data(const std::string& constant) const;
  // Domains (and versions) the built nodes use.
  const std::map<std::string, int>& opsets() const { return opsets_; }

 private:
  onnx::NodeProto& add_node(std::string_view op_type, std::string_view domain, const std::vector<Value>& inputs, Attributes attributes);
  std::string fresh_value(const std::string& hint) { return fresh_(base_ + "/" + hint); }
  // A constant (type and dims in `header`) whose raw_data is the model source's bytes in
  // `raw_data`: BuildContext::concatenated_constants, which alone knows they are right.
  friend class BuildContext;
  Value assembled_constant(onnx::TensorProto header, std::vector<FileRange> raw_data);

  std::string base_;
  std::string rule_id_;
  std::map<std::string, int> opsets_;
  FreshName fresh_;
  std::vector<onnx::NodeProto> nodes_;
  std::vector<std::pair<std::string, onnx::TensorProto>> constants_;
  std::map<std::string, std::vector<FileRange>> assembled_;  // constant -> raw_data ranges
  std::map<std::string, std::string> outputs_;               // graph name -> value
  std::map<std::string, std::string> renamed_;               // a value that took a graph name -> that name
  std::vector<std::string> notes_;
};

// C++ replacements named in rule files (`replace with NAME`), one registry for all families.
//
// A builder declares what it reads from a match (build_context.h), so that a rule naming it is
// checked when its file loads (file:line:col) rather than silently declining at match time;
// reading a name it did not declare is a bug in the builder, reported as such (never a silent
// decline).
struct BuilderSignature {
  // Initialized, so that a builder declares only what it reads ({.values = {...}}) without a
  // warning for each member it leaves out.
  std::vector<std::string> values = {};               // pattern values every pattern of the rule binds
  std::vector<std::string> optional_values = {};      // pattern values some patterns bind (read after has)
  std::vector<std::string> attributes = {};           // captures, defaults or lets the rule defines
  std::vector<std::string> optional_attributes = {};  // captures, defaults or lets a rule may define
  std::vector<std::string> node_attributes = {};      // attributes read from the matched nodes themselves
  bool declares_value(std::string_view name) const;
  bool declares_attribute(std::string_view name) const;
  bool declares_node_attribute(std::string_view name) const;
};

// What a builder returns: the replacement is built, or why the rule declines at this match
// ("the kernel size of 'weight' is unknown", shown by --explain).
class [[nodiscard]] BuildResult {
 public:
  static BuildResult built() { return BuildResult(); }
  // `reason` must say something: an empty one is a bug in the builder (std::logic_error).
  static BuildResult declined(std::string reason);
  bool ok() const { return !reason_; }
  explicit operator bool() const { return ok(); }
  const std::string& reason() const;  // empty when built

 private:
  BuildResult() = default;
  std::optional<std::string> reason_;
};
inline BuildResult built() { return BuildResult::built(); }
inline BuildResult decline(std::string reason) { return BuildResult::declined(std::move(reason)); }

using BuildFunction = std::function<BuildResult(const BuildContext& match, GraphBuilder& builder)>;

struct Builder {
  std::string name;
  BuilderSignature signature;
  BuildFunction build;
};

class BuilderRegistry {
 public:
  // Throws std::logic_error for a name registered twice (two families disagreeing).
  void add(std::string name, BuilderSignature signature, BuildFunction build);
  const Builder* find(const std::string& name) const;
  std::vector<std::string> names() const;

  // Every family's builders (rules/*/; the list is generated at build time).
  static const BuilderRegistry& builtin();

 private:
  std::map<std::string, Builder> builders_;
};

}  // namespace onnx_rewrite

// A Value in messages: its graph name.
template <>
struct fmt::formatter<onnx_rewrite::Value> : fmt::formatter<std::string_view> {
  auto format(const onnx_rewrite::Value& value, fmt::format_context& context) const {
    return fmt::formatter<std::string_view>::format(value.name, context);
  }
};
