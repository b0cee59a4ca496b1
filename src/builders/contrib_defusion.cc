// com.microsoft contrib ops (and ORT's own ai.onnx LayerNormalization-1 / SimplifiedLayerNormalization)
// back to standard ONNX, with the numbers of ONNX Runtime's CPU kernels (rules/defuse-*.rules).
#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "builders.h"
#include "defusion_support.h"
#include "onnx_rewrite/opset.h"
#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/walk.h"

namespace onnx_rewrite {
namespace defusion {
namespace {

using onnx::TensorProto;

const onnx::AttributeProto* find_attribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) return &attribute;
  }
  return nullptr;
}

// The matched node's own attributes; `otherwise` (the op's default) when absent.
int64_t int_attribute(const Match& match, const std::string& name, int64_t otherwise) {
  const auto* attribute = find_attribute(*match.anchor, name);
  return attribute ? attribute->i() : otherwise;
}

float float_attribute(const Match& match, const std::string& name, float otherwise) {
  const auto* attribute = find_attribute(*match.anchor, name);
  return attribute ? attribute->f() : otherwise;
}

// The element type of the first of these pattern values whose type is known (0 if none).
int32_t element_type(const Match& match, const std::vector<std::string>& pattern_values) {
  for (const auto& name : pattern_values) {
    if (!match.has_value(name) || match.value(name).empty()) continue;
    if (int32_t type = match.type_of(name).elem_type) return type;
  }
  return 0;
}

std::optional<int64_t> rank(const Scope& scope, const std::string& value) {
  const auto known = scope.type_of(value).rank();
  return known ? std::optional<int64_t>(static_cast<int64_t>(*known)) : std::nullopt;
}

// Float and double compute in their own type; float16 and bfloat16 widen to float when the op
// stashes its statistics in float (stash_type 1), as ONNX Runtime's kernels do.
bool computes_in_float(int32_t dtype, int64_t stash_type) {
  return stash_type == 1 && (dtype == TensorProto::FLOAT16 || dtype == TensorProto::BFLOAT16);
}

}  // namespace

std::optional<Activation> mlas_activation(const onnx::NodeProto& node, std::string& why) {
  Activation activation;
  const auto* kind = find_attribute(node, "activation");
  if (!kind) return activation;
  activation.name = kind->s();
  // MLAS activation kinds (onnxruntime/contrib_ops/cpu/fused_activation.cc) and how many
  // activation_params each takes.
  static const std::map<std::string, size_t> kinds = {{"Relu", 0}, {"Silu", 0}, {"Tanh", 0}, {"Sigmoid", 0},
                                                       {"LeakyRelu", 1}, {"Clip", 2}, {"HardSigmoid", 2}};
  auto it = kinds.find(activation.name);
  if (it == kinds.end()) {
    why = fmt::format("activation '{}' is not one ONNX Runtime's MLAS kernels implement", activation.name);
    return std::nullopt;
  }
  const auto* params = find_attribute(node, "activation_params");
  const size_t count = params ? static_cast<size_t>(params->floats_size()) : 0;
  if (count != it->second) {
    why = fmt::format("activation {} takes {} activation_params, the node has {}", activation.name, it->second, count);
    return std::nullopt;
  }
  if (count > 0) activation.alpha = params->floats(0);
  if (count > 1) activation.beta = params->floats(1);
  return activation;
}

std::string apply_activation(GraphBuilder& b, Value x, const Activation& activation, int32_t dtype, Value& y) {
  const std::string& name = activation.name;
  const int opset = b.opset();
  auto with = [](Attributes attributes, const char* attribute, const std::optional<float>& value) {
    if (value) attributes.push_back(attr(attribute, *value));
    return attributes;
  };
  auto need_type = [&]() -> std::string {
    return dtype ? "" : fmt::format("the element type of the input of activation {} is unknown", name);
  };
  if (name.empty()) {
    y = x;
  } else if (name == "Relu" || name == "Sigmoid" || name == "Tanh" || name == "Softplus" || name == "Softsign") {
    y = b.op(name, {x});
  } else if (name == "LeakyRelu" || name == "Elu") {
    y = b.op(name, {x}, with({}, "alpha", activation.alpha));
  } else if (name == "HardSigmoid") {
    y = b.op(name, {x}, with(with({}, "alpha", activation.alpha), "beta", activation.beta));
  } else if (name == "Selu") {
    y = b.op(name, {x}, with(with({}, "alpha", activation.alpha), "gamma", activation.gamma));
  } else if (name == "Clip") {
    if (auto missing = need_type(); !missing.empty()) return missing;
    y = b.Clip(x, activation.alpha, activation.beta, dtype);
  } else if (name == "Silu") {
    y = b.Mul(x, b.Sigmoid(x));
  } else if (name == "Celu") {
    if (opset >= 12) {
      y = b.op("Celu", {x}, with({}, "alpha", activation.alpha));
    } else {  // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
      if (auto missing = need_type(); !missing.empty()) return missing;
      // Builder calls are sequenced one per statement: the order of the nodes must not depend
      // on the compiler's order of evaluating arguments.
      Value alpha = b.scalar(activation.alpha.value_or(1.f), dtype);
      Value zero = b.scalar(0, dtype);
      Value exp = b.op("Exp", {b.Div(x, alpha)});
      Value expm1 = b.Sub(exp, b.scalar(1, dtype));
      Value positive = b.op("Max", {x, zero});
      Value negative = b.op("Min", {b.Mul(alpha, expm1), zero});
      y = b.Add(positive, negative);
    }
  } else if (name == "ThresholdedRelu") {
    if (opset >= 10) {
      y = b.op(name, {x}, with({}, "alpha", activation.alpha));
    } else {
      if (auto missing = need_type(); !missing.empty()) return missing;
      if (opset < 9) return "ThresholdedRelu needs ai.onnx >= 9 (Where) to be spelled out";
      Value alpha = b.scalar(activation.alpha.value_or(1.f), dtype);
      Value above = b.op("Greater", {x, alpha});
      y = b.Where(above, x, b.scalar(0, dtype));
    }
  } else if (name == "ScaledTanh" || name == "ParametricSoftplus") {
    if (!activation.alpha || !activation.beta) return name + " needs both alpha and beta";
    if (auto missing = need_type(); !missing.empty()) return missing;
    Value scaled = b.Mul(x, b.scalar(*activation.beta, dtype));
    Value activated = b.op(name == "ScaledTanh" ? "Tanh" : "Softplus", {scaled});
    y = b.Mul(activated, b.scalar(*activation.alpha, dtype));
  } else {
    return fmt::format("unknown activation '{}'", name);
  }
  return {};
}

BuilderFunction with_attribute_types_checked(BuilderFunction builder) {
  using A = onnx::AttributeProto;
  // The attributes the ops de-fused here take, by name (ONNX Runtime's contrib op schemas).
  static const std::unordered_map<std::string, A::AttributeType> kTypes = {
      {"alpha", A::FLOAT}, {"beta", A::FLOAT}, {"gamma", A::FLOAT}, {"epsilon", A::FLOAT},
      {"activation", A::STRING}, {"activation_alpha", A::FLOAT}, {"activation_beta", A::FLOAT},
      {"activation_gamma", A::FLOAT}, {"activation_params", A::FLOATS}, {"transA", A::INT}, {"transB", A::INT},
      {"transBatchA", A::INT}, {"transBatchB", A::INT}, {"axis", A::INT}, {"stash_type", A::INT},
      {"is_inner_broadcast", A::INT}, {"channels", A::INT}, {"channels_last", A::INT}, {"group", A::INT},
      {"auto_pad", A::STRING}, {"kernel_shape", A::INTS}, {"strides", A::INTS}, {"pads", A::INTS},
      {"dilations", A::INTS}, {"ceil_mode", A::INT}, {"storage_order", A::INT}, {"count_include_pad", A::INT},
      {"mode", A::STRING}, {"coordinate_transformation_mode", A::STRING}, {"allowzero", A::INT}};
  return [builder = std::move(builder)](const Match& match, GraphBuilder& b) -> std::string {
    for (const onnx::NodeProto* node : match.nodes) {
      for (const auto& attribute : node->attribute()) {
        auto expected = kTypes.find(attribute.name());
        if (expected == kTypes.end() || attribute.type() == expected->second) continue;
        return fmt::format("node '{}': attribute '{}' is {}, the op takes {} (an invalid node)", describe_node(*node),
                           attribute.name(), A::AttributeType_Name(attribute.type()), A::AttributeType_Name(expected->second));
      }
    }
    return builder(match, b);
  };
}

Attributes attributes_without(const onnx::NodeProto& node, const std::string& prefix) {
  Attributes kept;
  for (const auto& attribute : node.attribute()) {
    if (attribute.name().rfind(prefix, 0) != 0) kept.push_back(attribute);
  }
  return kept;
}

namespace {

// An optional input the pattern bound, or an optional output it bound that the graph uses.
bool bound(const Match& match, const std::string& name) {
  if (!match.has_value(name) || match.value(name).empty()) return false;
  const std::string& value = match.value(name);
  const auto* produced = match.scope->producer(value);
  if (!produced || produced->node != match.anchor) return true;  // an input
  return match.scope->is_output(value) || !match.scope->uses(value).empty();
}

std::string unknown_type(const std::string& op) { return fmt::format("the element type of {}'s input is unknown", op); }

// ---- GELU family ------------------------------------------------------------------------------

// 0.5·x·(1 + erf(x/√2)), or with `tanh` ORT's approximation 0.5·x·(1 + tanh(x·(0.0356774·x² + 0.7978846))).
Value spelled_gelu(GraphBuilder& b, Value x, bool tanh, int32_t dtype) {
  Value inner;
  if (tanh) {
    constexpr double kB = 0.7978845608028654;    // √(2/π)
    constexpr double kC = 0.035677408136300125;  // 0.044715·√(2/π)
    Value square = b.Mul(x, x);
    Value cubic = b.Mul(square, b.scalar(kC, dtype));
    Value polynomial = b.Add(cubic, b.scalar(kB, dtype));
    inner = b.Tanh(b.Mul(x, polynomial));
  } else {
    inner = b.Erf(b.Mul(x, b.scalar(1 / std::numbers::sqrt2, dtype)));
  }
  Value half = b.Mul(x, b.scalar(0.5, dtype));
  Value one_plus = b.Add(inner, b.scalar(1, dtype));
  return b.Mul(half, one_plus);
}

// Gelu, BiasGelu (x + bias) and FastGelu (optional bias, tanh approximation): Gelu-20 where the
// opset has it, else the formula ORT's kernels compute.
std::string defuse_gelu(const Match& match, GraphBuilder& b) {
  const std::string& op = match.anchor->op_type();
  const bool tanh = op == "FastGelu";
  Value x{match.value("x")};
  if (bound(match, "bias")) x = b.Add(x, Value{match.value("bias")});
  if (b.opset() >= 20) {
    b.output(match.value("y"), b.op("Gelu", {x}, {attr("approximate", tanh ? "tanh" : "none")}));
    return {};
  }
  const int32_t dtype = element_type(match, {"x", "bias"});
  if (!dtype) return unknown_type(op);
  b.output(match.value("y"), spelled_gelu(b, x, tanh, dtype));
  return {};
}

// QuickGelu: x·sigmoid(alpha·x).
std::string defuse_quick_gelu(const Match& match, GraphBuilder& b) {
  Value x{match.value("x")};
  const float alpha = float_attribute(match, "alpha", 1.702f);
  Value scaled = x;
  if (alpha != 1.f) {
    const int32_t dtype = element_type(match, {"x"});
    if (!dtype) return unknown_type("QuickGelu");
    scaled = b.Mul(x, b.scalar(alpha, dtype));
  }
  b.output(match.value("y"), b.Mul(x, b.Sigmoid(scaled)));
  return {};
}

// ---- MatMul / Gemm / Conv with fused extras ----------------------------------------------------

// The permutation FusedMatMul applies to an input of rank `r` before multiplying: transBatch
// moves dim 0 behind the batch dims ([d0, b..., dn] read as [b..., d0, dn]), trans swaps the
// last two (onnxruntime/core/providers/cpu/math/matmul_helper.h).
std::vector<int64_t> matmul_perm(int64_t r, bool trans, bool trans_batch) {
  std::vector<int64_t> perm;
  if (trans_batch) {
    for (int64_t i = 1; i < r - 1; ++i) perm.push_back(i);
    perm.push_back(0);
    perm.push_back(r - 1);
  } else {
    for (int64_t i = 0; i < r; ++i) perm.push_back(i);
  }
  if (trans) std::swap(perm[r - 2], perm[r - 1]);
  return perm;
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// FusedMatMul / TransposeMatMul: alpha · (A with transA/transBatchA) × (B with transB/transBatchB).
std::string defuse_fused_matmul(const Match& match, GraphBuilder& b) {
  const bool trans[2] = {int_attribute(match, "transA", 0) != 0, int_attribute(match, "transB", 0) != 0};
  const bool trans_batch[2] = {int_attribute(match, "transBatchA", 0) != 0,
                               int_attribute(match, "transBatchB", 0) != 0};
  const char* names[2] = {"a", "b"};
  std::optional<int64_t> ranks[2];
  Value operands[2];
  for (int i = 0; i < 2; ++i) {
    operands[i] = Value{match.value(names[i])};
    if (!trans[i] && !trans_batch[i]) continue;
    ranks[i] = rank(*match.scope, match.value(names[i]));
    if (!ranks[i]) return fmt::format("the rank of input {} is unknown, the transposes need it", names[i]);
  }
  if (trans_batch[0] || trans_batch[1]) {
    // ORT enforces this (MatMulComputeHelper); anything else fails at run time.
    const auto other = rank(*match.scope, match.value(trans_batch[0] ? "b" : "a"));
    const auto mine = trans_batch[0] ? ranks[0] : ranks[1];
    if (!other || *other != *mine || *mine < 3) return "transBatchA/transBatchB need inputs of the same rank >= 3";
  }
  for (int i = 0; i < 2; ++i) {
    if (!ranks[i] || *ranks[i] < 2) continue;  // a vector is never transposed
    auto perm = matmul_perm(*ranks[i], trans[i], trans_batch[i]);
    if (!is_identity(perm)) operands[i] = b.Transpose(operands[i], perm);
  }
  Value y = b.MatMul(operands[0], operands[1]);
  const float alpha = float_attribute(match, "alpha", 1.f);
  if (alpha != 1.f) {
    const int32_t dtype = element_type(match, {"a", "b"});
    if (!dtype) return unknown_type(match.anchor->op_type());
    y = b.Mul(y, b.scalar(alpha, dtype));
  }
  b.output(match.value("y"), y);
  return {};
}

// FusedGemm: Gemm with its own attributes, then the activation named by `activation` whose
// parameters are the activation_alpha/beta/gamma attributes (ElementWiseRangedTransform).
std::string defuse_fused_gemm(const Match& match, GraphBuilder& b) {
  const onnx::NodeProto& node = *match.anchor;
  Activation activation;
  if (const auto* kind = find_attribute(node, "activation")) activation.name = kind->s();
  if (activation.name.empty()) return "FusedGemm has no activation (ONNX Runtime refuses the node)";
  if (const auto* a = find_attribute(node, "activation_alpha")) activation.alpha = a->f();
  if (const auto* a = find_attribute(node, "activation_beta")) activation.beta = a->f();
  if (const auto* a = find_attribute(node, "activation_gamma")) activation.gamma = a->f();
  const int32_t dtype = element_type(match, {"a", "b", "c"});
  Value c{match.value("c")};
  if (c.absent() && b.opset() < 11) {  // C is optional from Gemm-11 on
    if (!dtype) return unknown_type("FusedGemm");
    c = b.scalar(0, dtype);
  }
  Value gemm = b.op("Gemm", {Value{match.value("a")}, Value{match.value("b")}, c},
                    attributes_without(node, "activation"));
  Value y;
  if (auto why = apply_activation(b, gemm, activation, dtype, y); !why.empty()) return why;
  b.output(match.value("y"), y);
  return {};
}

// FusedConv: activation(Conv(X, W, B) + Z) (onnxruntime/core/providers/cpu/nn/conv.cc: the sum
// input is accumulated before the MLAS activation runs).
std::string defuse_fused_conv(const Match& match, GraphBuilder& b) {
  const onnx::NodeProto& node = *match.anchor;
  std::string why;
  auto activation = mlas_activation(node, why);
  if (!activation) return why;
  Value y = b.op("Conv", {Value{match.value("x")}, Value{match.value("w")}, Value{match.value("b")}},
                 attributes_without(node, "activation"));
  if (!match.value("z").empty()) y = b.Add(y, Value{match.value("z")});
  Value activated;
  auto failed = apply_activation(b, y, *activation, element_type(match, {"x", "w", "b", "z"}), activated);
  if (!failed.empty()) return failed;
  b.output(match.value("y"), activated);
  return {};
}

// ---- Normalizations ----------------------------------------------------------------------------

struct Normalized {
  Value y, mean, inv_std;
};

// (x - mean)·inv_std·scale + bias over `axes` (kept), inv_std = 1/√(var + ε); `simplified`
// (RMSNorm): x·inv_std·scale with inv_std = 1/√(mean(x²) + ε). Statistics in float for
// float16/bfloat16 when `widen`.
Normalized spelled_norm(GraphBuilder& b, Value x, Value scale, Value bias, const std::vector<int64_t>& axes,
                        float epsilon, bool simplified, int32_t dtype, bool widen) {
  const int32_t compute = widen ? TensorProto::FLOAT : dtype;
  if (widen) {
    x = b.Cast(x, compute);
    scale = b.Cast(scale, compute);
    if (!bias.absent()) bias = b.Cast(bias, compute);
  }
  Normalized out;
  Value centered = x;
  if (!simplified) {
    out.mean = b.Reduce("ReduceMean", x, axes);
    centered = b.Sub(x, out.mean);
  }
  Value variance = b.Reduce("ReduceMean", b.Mul(centered, centered), axes);
  out.inv_std = b.Reciprocal(b.Sqrt(b.Add(variance, b.scalar(epsilon, compute))));
  Value y = b.Mul(b.Mul(centered, out.inv_std), scale);
  if (!bias.absent()) y = b.Add(y, bias);
  out.y = widen ? b.Cast(y, dtype) : y;
  return out;
}

// The axes [axis, rank) as the opset can spell them: negative from ai.onnx 11 on.
std::optional<std::vector<int64_t>> trailing_axes(int64_t axis, std::optional<int64_t> known_rank, int opset) {
  std::vector<int64_t> axes;
  if (axis < 0 && opset >= 11) {
    for (int64_t a = axis; a < 0; ++a) axes.push_back(a);
    return axes;
  }
  if (!known_rank) return std::nullopt;
  if (axis < 0) axis += *known_rank;
  if (axis < 0 || axis >= *known_rank) return std::nullopt;
  for (int64_t a = axis; a < *known_rank; ++a) axes.push_back(a);
  return axes;
}

// ORT's LayerNormalization-1 / SimplifiedLayerNormalization (ai.onnx domain; X, scale[, B];
// axis, epsilon, stash_type; outputs Y, Mean (not simplified), InvStdDev). LayerNormalization
// of ai.onnx 17 and RMSNormalization of ai.onnx 23 where the opset has them.
std::string defuse_layer_norm(const Match& match, GraphBuilder& b) {
  const bool simplified = match.anchor->op_type() == "SimplifiedLayerNormalization";
  const int64_t axis = int_attribute(match, "axis", -1);
  const float epsilon = float_attribute(match, "epsilon", 1e-5f);
  const int64_t stash_type = int_attribute(match, "stash_type", 1);
  Value x{match.value("x")}, scale{match.value("scale")}, bias{bound(match, "bias") ? match.value("bias") : ""};
  if (simplified && b.opset() >= 23 && !bound(match, "inv_std")) {
    b.output(match.value("y"), b.op("RMSNormalization", {x, scale},
                                    {attr("axis", axis), attr("epsilon", epsilon), attr("stash_type", stash_type)}));
    return {};
  }
  const int32_t dtype = element_type(match, {"x", "scale", "bias"});
  if (!dtype) return unknown_type(match.anchor->op_type());
  auto axes = trailing_axes(axis, rank(*match.scope, match.value("x")), b.opset());
  if (!axes) return fmt::format("the rank of X is unknown, normalizing from axis {} needs it", axis);
  auto out = spelled_norm(b, x, scale, bias, *axes, epsilon, simplified, dtype, computes_in_float(dtype, stash_type));
  b.output(match.value("y"), out.y);
  if (bound(match, "mean")) b.output(match.value("mean"), out.mean);
  if (bound(match, "inv_std")) b.output(match.value("inv_std"), out.inv_std);
  return {};
}

// SkipLayerNormalization / SkipSimplifiedLayerNormalization: s = input + skip (+ bias), then
// LayerNorm (RMSNorm) of s over the last axis with gamma (and beta); optional outputs mean,
// inv_std_var and s itself (input_skip_bias_sum). For the simplified op ORT's CPU kernel writes
// zeros as the mean.
std::string defuse_skip_layer_norm(const Match& match, GraphBuilder& b) {
  const bool simplified = match.anchor->op_type() == "SkipSimplifiedLayerNormalization";
  const float epsilon = float_attribute(match, "epsilon", 1e-12f);
  Value sum = b.Add(Value{match.value("input")}, Value{match.value("skip")});
  if (bound(match, "bias")) sum = b.Add(sum, Value{match.value("bias")});
  Value gamma{match.value("gamma")}, beta{bound(match, "beta") ? match.value("beta") : ""};
  Normalized out;
  const bool statistics = bound(match, "mean") || bound(match, "inv_std");
  if (!simplified && b.opset() >= 17) {
    auto outputs = b.op_outputs("LayerNormalization", {sum, gamma, beta}, statistics ? 3 : 1,
                                {attr("axis", -1), attr("epsilon", epsilon)});
    out.y = outputs[0];
    if (statistics) out.mean = outputs[1], out.inv_std = outputs[2];
  } else if (simplified && b.opset() >= 23 && !statistics) {
    out.y = b.op("RMSNormalization", {sum, gamma}, {attr("axis", -1), attr("epsilon", epsilon)});
  } else {
    const int32_t dtype = element_type(match, {"input", "skip", "gamma", "beta", "bias"});
    if (!dtype) return unknown_type(match.anchor->op_type());
    auto axes = trailing_axes(-1, rank(*match.scope, match.value("input")), b.opset());
    if (!axes) return "the rank of the input is unknown (needed below ai.onnx 11)";
    out = spelled_norm(b, sum, gamma, beta, *axes, epsilon, simplified, dtype, computes_in_float(dtype, 1));
  }
  b.output(match.value("output"), out.y);
  if (bound(match, "mean")) {
    if (simplified) {
      if (b.opset() < 9) return "a zero mean needs ConstantOfShape (ai.onnx >= 9)";
      out.mean = b.op("ConstantOfShape", {b.Shape(out.inv_std)});
    }
    b.output(match.value("mean"), out.mean);
  }
  if (bound(match, "inv_std")) b.output(match.value("inv_std"), out.inv_std);
  if (bound(match, "sum")) b.output(match.value("sum"), sum);
  return {};
}

// ---- BiasSoftmax ----------------------------------------------------------------------------

// Softmax(data + bias) with numpy broadcasting of bias, normalized jointly over the dims from
// `axis` on (Softmax-1/11 semantics; the bias_softmax_fusion only builds shapes for which the
// kernel's is_inner_broadcast indexing is numpy broadcasting).
std::string defuse_bias_softmax(const Match& match, GraphBuilder& b) {
  int64_t axis = int_attribute(match, "axis", 1);
  Value sum = b.Add(Value{match.value("data")}, Value{match.value("bias")});
  const int opset = b.opset();
  const auto known_rank = rank(*match.scope, match.value("data"));
  if (axis < 0 && opset < 11) {
    if (!known_rank) return "a negative axis needs the rank of data below ai.onnx 11";
    axis += *known_rank;
  }
  Value y;
  const bool last_axis = axis == -1 || (known_rank && axis == *known_rank - 1);
  if (opset < 13) {
    y = b.op("Softmax", {sum}, {attr("axis", axis)});  // coerces to 2-D at axis, as BiasSoftmax does
  } else if (last_axis) {
    y = b.op("Softmax", {sum}, {attr("axis", int64_t{-1})});
  } else {
    Value flat = b.op("Flatten", {sum}, {attr("axis", axis)});
    Value normalized = b.op("Softmax", {flat}, {attr("axis", int64_t{-1})});
    y = b.Reshape(normalized, b.Shape(sum));
  }
  b.output(match.value("y"), y);
  return {};
}

}  // namespace
}  // namespace defusion

void add_contrib_defusion_builders(BuilderTable& table) {
  using defusion::with_attribute_types_checked;
  table["defuse_gelu"] = with_attribute_types_checked(defusion::defuse_gelu);
  table["defuse_quick_gelu"] = with_attribute_types_checked(defusion::defuse_quick_gelu);
  table["defuse_fused_matmul"] = with_attribute_types_checked(defusion::defuse_fused_matmul);
  table["defuse_fused_gemm"] = with_attribute_types_checked(defusion::defuse_fused_gemm);
  table["defuse_fused_conv"] = with_attribute_types_checked(defusion::defuse_fused_conv);
  table["defuse_layer_norm"] = with_attribute_types_checked(defusion::defuse_layer_norm);
  table["defuse_skip_layer_norm"] = with_attribute_types_checked(defusion::defuse_skip_layer_norm);
  table["defuse_bias_softmax"] = with_attribute_types_checked(defusion::defuse_bias_softmax);
}

}  // namespace onnx_rewrite
