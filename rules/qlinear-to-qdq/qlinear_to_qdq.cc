// ONNX Runtime's quantized contrib ops (the QOperator format of onnxruntime.quantization, and
// what ORT's own QDQ fusions write) as DequantizeLinear -> float op -> QuantizeLinear
// (rules/qlinear-to-qdq/*.rules). The semantics are those of ORT's CPU kernels
// (onnxruntime/contrib_ops/cpu/quantization/, core/mlas/lib/qladd.cpp, qlmul.cpp,
// qlgavgpool.cpp; README.md cites them and lists where the rewrite differs).
//
// Every quantized input x with scale s and zero point z becomes DequantizeLinear(x, s, z)
// (z absent: 0); the op runs in float; the result becomes QuantizeLinear(y, ys, yz), with yz a
// zero of the quantized type when the node has none (QuantizeLinear without a zero point writes
// uint8). Scales and zero points are per tensor, except QGemm's b_scale / b_zero_point, which
// may be per column of B (DequantizeLinear-13's axis; spelled out as (Cast(B) - z)·s below 13).
#include <algorithm>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

constexpr int kMaxDepth = 64;  // how far element types and ranks are followed through producers

// For a com.microsoft quantized op: which input is its output's zero point (which gives the
// output's element type), or -1 when its output has the type of input 0.
int output_zero_point_input(const std::string& op) {
  if (op == "QLinearAdd" || op == "QLinearMul" || op == "QLinearConv") return 7;
  if (op == "QLinearSigmoid" || op == "QLinearLeakyRelu" || op == "QLinearSoftmax" ||
      op == "QLinearGlobalAveragePool" || op == "QLinearAveragePool" || op == "QLinearReduceMean") {
    return 4;
  }
  if (op == "QLinearConcat") return 1;
  if (op == "QGemm") return 8;
  if (op == "NhwcMaxPool" || op == "QLinearWhere") return -1;
  return -2;  // not a quantized op we know
}

// The element type of a quantized tensor: declared or inferred by the engine, else worked out
// through ORT's quantized producers (which the engine's shape inference does not know), else 0.
int32_t quantized_type(const Scope& scope, const std::string& value, int depth = 0) {
  if (value.empty() || depth > kMaxDepth) return 0;
  if (int32_t type = scope.facts(value).elem_type) return type;
  const auto* produced = scope.producer(value);
  if (!produced || produced->node->domain() != "com.microsoft") return 0;
  const onnx::NodeProto& node = *produced->node;
  const int zp = output_zero_point_input(node.op_type());
  if (zp == -2) return 0;
  if (zp >= 0 && zp < node.input_size() && !node.input(zp).empty()) {
    if (int32_t type = quantized_type(scope, node.input(zp), depth + 1)) return type;
  }
  if (node.op_type() == "QGemm") return zp < node.input_size() && !node.input(zp).empty() ? 0 : TensorProto::FLOAT;
  const int data = node.op_type() == "QLinearConcat" ? 2 : 0;
  return data < node.input_size() ? quantized_type(scope, node.input(data), depth + 1) : 0;
}

// The rank of a tensor: declared or inferred, else through ORT's quantized producers.
std::optional<int64_t> quantized_rank(const Scope& scope, const std::string& value, int depth = 0) {
  if (value.empty() || depth > kMaxDepth) return std::nullopt;
  if (auto rank = scope.facts(value).rank()) return static_cast<int64_t>(*rank);
  const auto* produced = scope.producer(value);
  if (!produced) return std::nullopt;
  const onnx::NodeProto& node = *produced->node;
  const std::string& op = node.op_type();
  if (node.domain() == "com.microsoft") {
    if (op == "QGemm") return 2;
    if (op == "QLinearAdd" || op == "QLinearMul") {
      auto a = quantized_rank(scope, node.input(0), depth + 1);
      auto b = node.input_size() > 3 ? quantized_rank(scope, node.input(3), depth + 1) : std::nullopt;
      if (a && b) return std::max(*a, *b);
      return std::nullopt;
    }
    if (op == "QLinearConcat") return node.input_size() > 2 ? quantized_rank(scope, node.input(2), depth + 1) : std::nullopt;
    if (op == "QLinearSigmoid" || op == "QLinearLeakyRelu" || op == "QLinearSoftmax" || op == "QLinearGlobalAveragePool" ||
        op == "QLinearAveragePool" || op == "QLinearConv" || op == "NhwcMaxPool") {
      return quantized_rank(scope, node.input(0), depth + 1);
    }
    return std::nullopt;
  }
  if (node.domain().empty() && (op == "QuantizeLinear" || op == "DequantizeLinear")) {
    return quantized_rank(scope, node.input(0), depth + 1);
  }
  return std::nullopt;
}

int32_t quantized_type(const Match& match, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!bound(match, name)) continue;
    if (int32_t type = quantized_type(*match.scope, match.value(name))) return type;
  }
  return 0;
}

std::optional<int64_t> quantized_rank(const Match& match, const char* name) {
  return bound(match, name) ? quantized_rank(*match.scope, match.value(name)) : std::nullopt;
}

// How many elements a value has when that is known now (a constant's header or static dims).
std::optional<int64_t> element_count(const Scope& scope, const std::string& value) {
  if (value.empty()) return std::nullopt;
  if (const auto* tensor = scope.constant_tensor(value)) {
    int64_t count = 1;
    for (int64_t d : tensor->dims()) count *= d;
    return count;
  }
  auto dims = scope.facts(value).static_dims();
  if (!dims) return std::nullopt;
  int64_t count = 1;
  for (int64_t d : *dims) {
    if (d < 0) return std::nullopt;
    count *= d;
  }
  return count;
}

std::optional<int64_t> element_count(const Match& match, const std::string& name) {
  return bound(match, name) ? element_count(*match.scope, match.value(name)) : std::nullopt;
}

std::string check_per_tensor(const Match& match, const std::string& op, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto count = element_count(match, name);
    if (count && *count != 1) {
      return fmt::format("{} has {} elements; ORT's {} kernel takes one (per-tensor quantization)", name, *count, op);
    }
  }
  return {};
}

// "" if the scales are float (what ORT's kernels read) or of unknown type.
std::string check_float_scales(const Match& match, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!bound(match, name) || match.value(name).empty()) continue;
    const int32_t type = match.facts(name).elem_type;
    if (type && type != TensorProto::FLOAT) {
      return fmt::format("{} is {}; ORT's kernel reads float scales", name, data_type_name(type));
    }
  }
  return {};
}

std::string check_8bit(int32_t type, const std::string& what) {
  if (type == TensorProto::UINT8 || type == TensorProto::INT8) return {};
  if (type == 0) return fmt::format("the element type of {} is unknown", what);
  return fmt::format("{} is {}; ORT's kernel takes uint8 or int8", what, data_type_name(type));
}

Value dequantize(GraphBuilder& b, Value x, Value scale, Value zero_point) {
  return zero_point.absent() ? b.op("DequantizeLinear", {x, scale}) : b.op("DequantizeLinear", {x, scale, zero_point});
}

// QuantizeLinear to `type`: a zero point of that type when the node has none (QuantizeLinear
// without one writes uint8).
Value quantize(GraphBuilder& b, Value y, Value scale, Value zero_point, int32_t type) {
  if (zero_point.absent()) zero_point = b.scalar(0, type);
  return b.op("QuantizeLinear", {y, scale, zero_point});
}

// DequantizeLinear along `axis` of a tensor of rank `rank` (scale and zero point 1-D): the
// op's axis from ai.onnx 13, below as (Cast(x, float) - Cast(z, float)) · s with s and z
// broadcast along `axis`, which computes the same numbers.
Value dequantize_per_axis(GraphBuilder& b, Value x, Value scale, Value zero_point, int64_t axis, int64_t rank) {
  if (b.opset() >= 13) {
    std::vector<Value> inputs{x, scale};
    if (!zero_point.absent()) inputs.push_back(zero_point);
    return b.op("DequantizeLinear", inputs, {attr("axis", axis)});
  }
  std::vector<int64_t> trailing;
  for (int64_t a = 1; a < rank - axis; ++a) trailing.push_back(a);
  auto along_axis = [&](Value v) { return trailing.empty() ? v : b.Unsqueeze(v, trailing); };
  Value widened = b.Cast(x, TensorProto::FLOAT);
  if (!zero_point.absent()) widened = b.Sub(widened, along_axis(b.Cast(zero_point, TensorProto::FLOAT)));
  return b.Mul(widened, along_axis(scale));
}

const AttributeTypes& attribute_types() {
  static const AttributeTypes types = [] {
    AttributeTypes all = ort_attribute_types();
    all.emplace_back("opset", onnx::AttributeProto::INT);
    return all;
  }();
  return types;
}

// ---- QLinearAdd, QLinearMul ---------------------------------------------------------------------

// (a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point) => c, per tensor,
// numpy broadcasting: Q(DQ(a) op DQ(b)).
std::string qlinear_binary(const Match& match, GraphBuilder& b) {
  const std::string& op = match.anchor->op_type();
  if (auto why = check_per_tensor(match, op, {"a_scale", "a_zero_point", "b_scale", "b_zero_point", "c_scale", "c_zero_point"});
      !why.empty()) {
    return why;
  }
  if (auto why = check_float_scales(match, {"a_scale", "b_scale", "c_scale"}); !why.empty()) return why;
  const int32_t type = quantized_type(match, {"c_zero_point", "a_zero_point", "b_zero_point", "a", "b"});
  if (auto why = check_8bit(type, "A"); !why.empty()) return why;
  const int32_t other = quantized_type(match, {"b_zero_point", "b"});
  if (other && other != type) return fmt::format("A is {} and B is {}; the op takes one type", data_type_name(type), data_type_name(other));
  Value x = dequantize(b, value_of(match, "a"), value_of(match, "a_scale"), value_of(match, "a_zero_point"));
  Value y = dequantize(b, value_of(match, "b"), value_of(match, "b_scale"), value_of(match, "b_zero_point"));
  Value sum = b.op(op == "QLinearAdd" ? "Add" : "Mul", {x, y});
  b.output(match.value("c"), quantize(b, sum, value_of(match, "c_scale"), value_of(match, "c_zero_point"), type));
  return {};
}

// ---- QLinearSigmoid, QLinearLeakyRelu -----------------------------------------------------------

// (x, x_scale, x_zero_point, y_scale, y_zero_point) => y: Q(f(DQ(x))), f = Sigmoid or
// LeakyRelu <alpha> (default 0.01, as the kernel's).
std::string qlinear_activation(const Match& match, GraphBuilder& b) {
  const std::string& op = match.anchor->op_type();
  if (auto why = check_per_tensor(match, op, {"x_scale", "x_zero_point", "y_scale", "y_zero_point"}); !why.empty()) return why;
  if (auto why = check_float_scales(match, {"x_scale", "y_scale"}); !why.empty()) return why;
  const int32_t type = quantized_type(match, {"y_zero_point", "x_zero_point", "x"});
  if (auto why = check_8bit(type, "X"); !why.empty()) return why;
  Value x = dequantize(b, value_of(match, "x"), value_of(match, "x_scale"), value_of(match, "x_zero_point"));
  Value y = op == "QLinearSigmoid"
                ? b.Sigmoid(x)
                : b.op("LeakyRelu", {x}, {attr("alpha", float_attribute(*match.anchor, "alpha", 0.01f))});
  b.output(match.value("y"), quantize(b, y, value_of(match, "y_scale"), value_of(match, "y_zero_point"), type));
  return {};
}

// ---- QLinearGlobalAveragePool -------------------------------------------------------------------

// (x, x_scale, x_zero_point, y_scale, y_zero_point) => y, channels_last 0: N C D1..Dk (rank >= 3)
// -> GlobalAveragePool; channels_last 1: N D1..Dk C -> ReduceMean over D1..Dk, kept.
std::string qlinear_global_average_pool(const Match& match, GraphBuilder& b) {
  const std::string op = "QLinearGlobalAveragePool";
  if (auto why = check_per_tensor(match, op, {"x_scale", "x_zero_point", "y_scale", "y_zero_point"}); !why.empty()) return why;
  if (auto why = check_float_scales(match, {"x_scale", "y_scale"}); !why.empty()) return why;
  const int32_t type = quantized_type(match, {"y_zero_point", "x_zero_point", "x"});
  if (auto why = check_8bit(type, "X"); !why.empty()) return why;
  const bool channels_last = int_attribute(*match.anchor, "channels_last", 0) != 0;
  const auto rank = quantized_rank(match, "x");
  if (rank && *rank < 3) return fmt::format("X has rank {}; ORT's kernel needs at least 3", *rank);
  Value x = dequantize(b, value_of(match, "x"), value_of(match, "x_scale"), value_of(match, "x_zero_point"));
  Value pooled;
  if (!channels_last) {
    pooled = b.op("GlobalAveragePool", {x});
  } else {
    if (!rank) return "the rank of X is unknown; channels_last averages over axes 1..rank-2";
    std::vector<int64_t> axes;
    for (int64_t a = 1; a < *rank - 1; ++a) axes.push_back(a);
    pooled = b.Reduce("ReduceMean", x, axes);
  }
  b.output(match.value("y"), quantize(b, pooled, value_of(match, "y_scale"), value_of(match, "y_zero_point"), type));
  return {};
}

// ---- QLinearSoftmax -----------------------------------------------------------------------------

// (x, x_scale, x_zero_point, y_scale, y_zero_point) => y with `opset` (of the Softmax it stands
// for; required: ORT refuses the node without it) and `axis` (absent: the schema's -1, which ORT
// 1.30 fills in before the kernel's own opset-dependent default could apply; measured with
// opset = 1). opset < 13: softmax over the dims from axis on, flattened
// (Softmax-1/11); opset >= 13: over the one axis (Softmax-13). Built with the Softmax of the
// model's opset: directly when the semantics agree, else Flatten/Softmax/Reshape (coerced
// semantics at >= 13) or Transpose/Softmax/Transpose (one axis below 13).
std::string qlinear_softmax(const Match& match, GraphBuilder& b) {
  const std::string op = "QLinearSoftmax";
  const onnx::NodeProto& node = *match.anchor;
  if (!find_attribute(node, "opset")) return "QLinearSoftmax has no opset attribute (ONNX Runtime refuses the node)";
  if (auto why = check_per_tensor(match, op, {"x_scale", "x_zero_point", "y_scale", "y_zero_point"}); !why.empty()) return why;
  if (auto why = check_float_scales(match, {"x_scale", "y_scale"}); !why.empty()) return why;
  const int32_t type = quantized_type(match, {"y_zero_point", "x_zero_point", "x"});
  if (auto why = check_8bit(type, "X"); !why.empty()) return why;
  const bool coerced = int_attribute(node, "opset", 13) < 13;
  int64_t axis = int_attribute(node, "axis", -1);
  const auto rank = quantized_rank(match, "x");
  if (rank && (axis < -*rank || axis >= *rank)) return fmt::format("axis {} is out of range for rank {}", axis, *rank);
  const bool last = axis == -1 || (rank && axis == *rank - 1);
  const int opset = b.opset();
  if (axis < 0 && opset < 11) {  // Softmax-1 and Flatten-1/9 take no negative axis
    if (!rank) return fmt::format("axis {} is negative and the rank of X is unknown (needed below ai.onnx 11)", axis);
    axis += *rank;
  }
  Value x = dequantize(b, value_of(match, "x"), value_of(match, "x_scale"), value_of(match, "x_zero_point"));
  Value y;
  if (last || coerced == (opset < 13)) {
    y = b.op("Softmax", {x}, {attr("axis", last && opset >= 11 ? int64_t{-1} : axis)});
  } else if (coerced) {  // the dims from axis on as one, with Softmax-13
    Value flat = b.op("Flatten", {x}, {attr("axis", axis)});
    Value normalized = b.op("Softmax", {flat}, {attr("axis", int64_t{-1})});
    Value shape = b.Shape(x);
    y = b.Reshape(normalized, shape);
  } else {  // one axis, with Softmax-1/11: move it last
    if (!rank) return fmt::format("the rank of X is unknown; softmax over axis {} needs it below ai.onnx 13", axis);
    const int64_t a = axis < 0 ? axis + *rank : axis;
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < *rank; ++i) perm.push_back(i);
    std::swap(perm[static_cast<size_t>(a)], perm.back());
    Value moved = b.Transpose(x, perm);
    Value normalized = b.op("Softmax", {moved}, {attr("axis", *rank - 1)});
    y = b.Transpose(normalized, perm);
  }
  b.output(match.value("y"), quantize(b, y, value_of(match, "y_scale"), value_of(match, "y_zero_point"), type));
  return {};
}

// ---- QLinearConcat ------------------------------------------------------------------------------

// (y_scale, y_zero_point, x0, s0, z0, x1, s1, z1, ...) => y <axis>: Q(Concat(DQ(x0), DQ(x1), ...)).
// The pattern binds the output's scale and zero point; the input triples are the node's own.
std::string qlinear_concat(const Match& match, GraphBuilder& b) {
  const std::string op = "QLinearConcat";
  const onnx::NodeProto& node = *match.anchor;
  const Scope& scope = *match.scope;
  const auto* axis_attribute = find_attribute(node, "axis");
  if (!axis_attribute) return "QLinearConcat has no axis attribute (ONNX Runtime refuses the node)";
  int64_t axis = axis_attribute->i();
  if (node.input_size() < 5 || (node.input_size() - 2) % 3 != 0) {
    return fmt::format("QLinearConcat has {} inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) triples",
                       node.input_size());
  }
  if (auto why = check_per_tensor(match, op, {"y_scale", "y_zero_point"}); !why.empty()) return why;
  const int32_t type = quantized_type(match, {"y_zero_point"});
  if (auto why = check_8bit(type, "Y_zero_point"); !why.empty()) return why;
  std::vector<Value> parts;
  for (int i = 2; i < node.input_size(); i += 3) {
    const int k = (i - 2) / 3;
    const std::string &x = node.input(i), &scale = node.input(i + 1), &zero_point = node.input(i + 2);
    if (x.empty() || scale.empty()) return fmt::format("input {} of QLinearConcat has no tensor or no scale", k);
    for (const std::string* value : {&scale, &zero_point}) {
      auto count = element_count(scope, *value);
      if (count && *count != 1) return fmt::format("'{}' has {} elements; ORT's {} kernel takes one", *value, *count, op);
    }
    if (const int32_t scale_type = scope.facts(scale).elem_type; scale_type && scale_type != TensorProto::FLOAT) {
      return fmt::format("'{}' is {}; ORT's kernel reads float scales", scale, data_type_name(scale_type));
    }
    int32_t input_type = quantized_type(scope, zero_point);
    if (!input_type) input_type = quantized_type(scope, x);
    if (input_type && input_type != type) {
      return fmt::format("input {} is {} and the output {}; ORT's kernel takes one type", k, data_type_name(input_type),
                         data_type_name(type));
    }
    parts.push_back(dequantize(b, Value{x}, Value{scale}, Value{zero_point}));
  }
  if (axis < 0 && b.opset() < 11) {
    const auto rank = quantized_rank(scope, node.input(2));
    if (!rank) return fmt::format("axis {} is negative and the rank of the inputs is unknown (needed below ai.onnx 11)", axis);
    axis += *rank;
  }
  Value joined = b.Concat(parts, axis);
  b.output(match.value("y"), quantize(b, joined, value_of(match, "y_scale"), value_of(match, "y_zero_point"), type));
  return {};
}

// ---- QGemm --------------------------------------------------------------------------------------

// (A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point) => Y
// <alpha, transA, transB>. The kernel: acc = Σ (A - za)(B - zb[n]) + C (int32, C broadcast to
// [M, N]), Y = acc · alpha·sa·sb[n] (float output without y_scale), else
// QuantizeLinear(that, y_scale, y_zero_point). As float ops:
//   Y = Gemm <alpha, beta = alpha, transA, transB> (DQ(A), DQ(B), DQ(C, sa·sb)) [-> Q]
std::string qgemm(const Match& match, GraphBuilder& b) {
  const std::string op = "QGemm";
  const onnx::NodeProto& node = *match.anchor;
  const bool trans_b = int_attribute(node, "transB", 0) != 0;
  const float alpha = float_attribute(node, "alpha", 1.f);
  const bool has_y_scale = bound(match, "y_scale") && !match.value("y_scale").empty();
  const bool has_y_zero_point = bound(match, "y_zero_point") && !match.value("y_zero_point").empty();
  if (has_y_scale != has_y_zero_point) {
    return has_y_scale ? "y_scale without y_zero_point (ORT's kernel then writes float output divided by y_scale)"
                       : "y_zero_point without y_scale (ORT's kernel then requantizes with scale 1)";
  }
  if (auto why = check_per_tensor(match, op, {"a_scale", "a_zero_point", "y_scale", "y_zero_point"}); !why.empty()) return why;
  if (auto why = check_float_scales(match, {"a_scale", "b_scale", "y_scale"}); !why.empty()) return why;
  const int32_t a_type = quantized_type(match, {"a_zero_point", "a"});
  if (auto why = check_8bit(a_type, "A"); !why.empty()) return why;
  const int32_t b_type = quantized_type(match, {"b_zero_point", "b"});
  if (auto why = check_8bit(b_type, "B"); !why.empty()) return why;
  if (a_type == TensorProto::INT8 && b_type == TensorProto::UINT8) return "A is int8 and B uint8; ORT's kernel has no such pair";
  for (const char* name : {"a", "b"}) {
    const auto rank = quantized_rank(match, name);
    if (rank && *rank != 2) return fmt::format("{} has rank {}; QGemm takes matrices", name == std::string("a") ? "A" : "B", *rank);
  }
  // Per tensor or per column of B: b_scale and b_zero_point have 1 or N elements.
  const auto scale_count = element_count(match, "b_scale");
  const auto zero_point_count = element_count(match, "b_zero_point");
  if (!scale_count || !zero_point_count) return "the number of elements of b_scale / b_zero_point is unknown (per tensor or per column?)";
  if (*scale_count != *zero_point_count) {
    return fmt::format("b_scale has {} elements and b_zero_point {}; ORT's kernel wants the same shape", *scale_count, *zero_point_count);
  }
  const bool per_column = *scale_count != 1;
  const auto b_dims = match.facts("b").static_dims();
  if (per_column) {
    const int64_t n = b_dims && b_dims->size() == 2 ? (*b_dims)[trans_b ? 0 : 1] : -1;
    if (n < 0) return "b_scale is per column and the number of columns of B is unknown";
    if (n != *scale_count) return fmt::format("b_scale has {} elements and B {} columns", *scale_count, n);
  }
  Value a = dequantize(b, value_of(match, "a"), value_of(match, "a_scale"), value_of(match, "a_zero_point"));
  Value w = per_column ? dequantize_per_axis(b, value_of(match, "b"), value_of(match, "b_scale"), value_of(match, "b_zero_point"),
                                              trans_b ? 0 : 1, 2)
                       : dequantize(b, value_of(match, "b"), value_of(match, "b_scale"), value_of(match, "b_zero_point"));
  Value c;
  if (bound(match, "c") && !match.value("c").empty()) {
    const int32_t c_type = match.facts("c").elem_type;
    if (c_type && c_type != TensorProto::INT32) return fmt::format("C is {}; QGemm takes int32", data_type_name(c_type));
    // C is quantized with scale sa·sb (per column when sb is) and zero point 0.
    Value bias_scale = b.Mul(value_of(match, "a_scale"), value_of(match, "b_scale"));
    const auto c_rank = quantized_rank(match, "c");
    const auto c_dims = match.facts("c").static_dims();
    if (!per_column) {
      c = b.op("DequantizeLinear", {value_of(match, "c"), bias_scale});
    } else if (b.opset() >= 13 && c_dims && !c_dims->empty() && c_dims->back() == *scale_count && c_dims->size() <= 2) {
      c = b.op("DequantizeLinear", {value_of(match, "c"), bias_scale}, {attr("axis", static_cast<int64_t>(c_dims->size() - 1))});
    } else {
      // C [M, 1], [1] or a scalar against per-column scales, or below ai.onnx 13: the same numbers
      // as DequantizeLinear, broadcast.
      (void)c_rank;
      c = b.Mul(b.Cast(value_of(match, "c"), TensorProto::FLOAT), bias_scale);
    }
  } else if (b.opset() < 11) {  // C is optional from Gemm-11 on
    c = b.scalar(0, TensorProto::FLOAT);
  }
  Attributes attributes;
  if (alpha != 1.f) {
    attributes.push_back(attr("alpha", alpha));
    if (!c.absent()) attributes.push_back(attr("beta", alpha));
  }
  if (int_attribute(node, "transA", 0) != 0) attributes.push_back(attr("transA", int64_t{1}));
  if (trans_b) attributes.push_back(attr("transB", int64_t{1}));
  std::vector<Value> inputs{a, w};
  if (!c.absent()) inputs.push_back(c);
  Value y = b.op("Gemm", inputs, attributes);
  if (has_y_scale) {
    const int32_t y_type = quantized_type(match, {"y_zero_point"});
    if (y_type && y_type != a_type) {
      return fmt::format("y_zero_point is {} and A {}; ORT's kernel wants the same type", data_type_name(y_type), data_type_name(a_type));
    }
    y = quantize(b, y, value_of(match, "y_scale"), value_of(match, "y_zero_point"), a_type);
  }
  b.output(match.value("y"), y);
  return {};
}

}  // namespace

void register_qlinear_to_qdq_builders(BuilderRegistry& registry) {
  auto add = [&](const std::string& name, BuilderSignature signature, BuildFunction build) {
    registry.add(name, std::move(signature), with_attribute_types_checked(attribute_types(), std::move(build)));
  };
  add("qlinear_binary_to_qdq",
      {.values = {"a", "a_scale", "b", "b_scale", "c_scale", "c"}, .optional_values = {"a_zero_point", "b_zero_point", "c_zero_point"}},
      qlinear_binary);
  add("qlinear_activation_to_qdq",
      {.values = {"x", "x_scale", "y_scale", "y"}, .optional_values = {"x_zero_point", "y_zero_point"}}, qlinear_activation);
  add("qlinear_global_average_pool_to_qdq", {.values = {"x", "x_scale", "x_zero_point", "y_scale", "y_zero_point", "y"}},
      qlinear_global_average_pool);
  add("qlinear_softmax_to_qdq",
      {.values = {"x", "x_scale", "y_scale", "y_zero_point", "y"}, .optional_values = {"x_zero_point"}}, qlinear_softmax);
  add("qlinear_concat_to_qdq", {.values = {"y_scale", "y_zero_point", "y"}}, qlinear_concat);
  add("qgemm_to_qdq",
      {.values = {"a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y"}, .optional_values = {"c", "y_scale", "y_zero_point"}},
      qgemm);
}

}  // namespace onnx_rewrite
