// com.microsoft contrib ops (and ORT's own ai.onnx LayerNormalization-1 / SimplifiedLayerNormalization)
// back to standard ONNX, with the numbers of ONNX Runtime's CPU kernels (rules/defuse-contrib/defuse-*.rules).
#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "onnx_rewrite/opset.h"
#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

std::optional<int64_t> rank(const Scope& scope, const std::string& value) {
  const auto known = scope.facts(value).rank();
  return known ? std::optional<int64_t>(static_cast<int64_t>(*known)) : std::nullopt;
}

// Float and double compute in their own type; float16 and bfloat16 widen to float when the op
// stashes its statistics in float (stash_type 1), as ONNX Runtime's kernels do.
bool computes_in_float(int32_t dtype, int64_t stash_type) {
  return stash_type == 1 && (dtype == TensorProto::FLOAT16 || dtype == TensorProto::BFLOAT16);
}

// An optional input the pattern bound, or an optional output it bound that the graph uses.
bool in_use(const Match& match, const std::string& name) {
  if (!match.has_value(name)) return false;
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
  if (in_use(match, "bias")) x = b.Add(x, Value{match.value("bias")});
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
  const float alpha = float_attribute(*match.anchor, "alpha", 1.702f);
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
  const bool trans[2] = {int_attribute(*match.anchor, "transA", 0) != 0, int_attribute(*match.anchor, "transB", 0) != 0};
  const bool trans_batch[2] = {int_attribute(*match.anchor, "transBatchA", 0) != 0,
                               int_attribute(*match.anchor, "transBatchB", 0) != 0};
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
  const float alpha = float_attribute(*match.anchor, "alpha", 1.f);
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
  // RMSNormalization-23 (ai.onnx) lowered for older opsets (rules/opset-down) is the same op.
  const bool simplified = match.anchor->op_type() == "SimplifiedLayerNormalization" || match.anchor->op_type() == "RMSNormalization";
  const int64_t axis = int_attribute(*match.anchor, "axis", -1);
  const float epsilon = float_attribute(*match.anchor, "epsilon", 1e-5f);
  const int64_t stash_type = int_attribute(*match.anchor, "stash_type", 1);
  Value x{match.value("x")}, scale{match.value("scale")}, bias{in_use(match, "bias") ? match.value("bias") : ""};
  if (simplified && b.opset() >= 23 && !in_use(match, "inv_std")) {
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
  if (in_use(match, "mean")) b.output(match.value("mean"), out.mean);
  if (in_use(match, "inv_std")) b.output(match.value("inv_std"), out.inv_std);
  return {};
}

// SkipLayerNormalization / SkipSimplifiedLayerNormalization: s = input + skip (+ bias), then
// LayerNorm (RMSNorm) of s over the last axis with gamma (and beta); optional outputs mean,
// inv_std_var and s itself (input_skip_bias_sum). For the simplified op ORT's CPU kernel writes
// zeros as the mean.
std::string defuse_skip_layer_norm(const Match& match, GraphBuilder& b) {
  const bool simplified = match.anchor->op_type() == "SkipSimplifiedLayerNormalization";
  const float epsilon = float_attribute(*match.anchor, "epsilon", 1e-12f);
  // float16/bfloat16: ORT's kernel (skip_layer_norm.cc) widens every input, sums in float and
  // normalizes that unrounded sum; the outputs are rounded once. So the sum is taken in float here
  // too, and the normalization runs on it in float.
  const int32_t dtype = element_type(match, {"input", "skip", "gamma", "beta", "bias"});
  const bool widen = computes_in_float(dtype, 1);
  auto compute = [&](Value x) { return widen ? b.Cast(x, TensorProto::FLOAT) : x; };
  auto io = [&](Value x) { return widen ? b.Cast(x, dtype) : x; };
  const Value input = compute(Value{match.value("input")});
  const Value skip = compute(Value{match.value("skip")});
  Value sum = b.Add(input, skip);
  if (in_use(match, "bias")) sum = b.Add(sum, compute(Value{match.value("bias")}));
  const Value gamma = compute(Value{match.value("gamma")});
  const Value beta = in_use(match, "beta") ? compute(Value{match.value("beta")}) : Value{};
  Normalized out;
  const bool statistics = in_use(match, "mean") || in_use(match, "inv_std");
  if (!simplified && b.opset() >= 17) {
    auto outputs = b.op_outputs("LayerNormalization", {sum, gamma, beta}, statistics ? 3 : 1,
                                {attr("axis", -1), attr("epsilon", epsilon)});
    out.y = outputs[0];
    if (statistics) out.mean = outputs[1], out.inv_std = outputs[2];
  } else if (simplified && b.opset() >= 23 && !statistics) {
    out.y = b.op("RMSNormalization", {sum, gamma}, {attr("axis", -1), attr("epsilon", epsilon)});
  } else {
    if (!dtype) return unknown_type(match.anchor->op_type());
    auto axes = trailing_axes(-1, rank(*match.scope, match.value("input")), b.opset());
    if (!axes) return "the rank of the input is unknown (needed below ai.onnx 11)";
    out = spelled_norm(b, sum, gamma, beta, *axes, epsilon, simplified, widen ? TensorProto::FLOAT : dtype, false);
  }
  b.output(match.value("output"), io(out.y));
  if (in_use(match, "mean")) {
    if (simplified) {
      if (b.opset() < 9) return "a zero mean needs ConstantOfShape (ai.onnx >= 9)";
      out.mean = b.op("ConstantOfShape", {b.Shape(out.inv_std)});
    }
    b.output(match.value("mean"), out.mean);
  }
  if (in_use(match, "inv_std")) b.output(match.value("inv_std"), out.inv_std);
  if (in_use(match, "sum")) b.output(match.value("sum"), io(sum));
  return {};
}

// ---- BiasSoftmax ----------------------------------------------------------------------------

// Softmax(data + bias) with numpy broadcasting of bias, normalized jointly over the dims from
// `axis` on (Softmax-1/11 semantics; the bias_softmax_fusion only builds shapes for which the
// kernel's is_inner_broadcast indexing is numpy broadcasting).
std::string defuse_bias_softmax(const Match& match, GraphBuilder& b) {
  int64_t axis = int_attribute(*match.anchor, "axis", 1);
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

void register_defuse_contrib_builders(BuilderRegistry& registry) {
  auto add = [&](const std::string& name, BuilderSignature signature, BuildFunction build) {
    registry.add(name, std::move(signature), with_attribute_types_checked(ort_attribute_types(), std::move(build)));
  };
  add("defuse_gelu", {.values = {"x", "y"}, .optional_values = {"bias"}}, defuse_gelu);
  add("defuse_quick_gelu", {.values = {"x", "y"}}, defuse_quick_gelu);
  add("defuse_fused_matmul", {.values = {"a", "b", "y"}}, defuse_fused_matmul);
  add("defuse_fused_gemm", {.values = {"a", "b", "c", "y"}}, defuse_fused_gemm);
  add("defuse_fused_conv", {.values = {"x", "w", "b", "z", "y"}}, defuse_fused_conv);
  add("defuse_layer_norm", {.values = {"x", "scale", "y"}, .optional_values = {"bias", "mean", "inv_std"}}, defuse_layer_norm);
  add("defuse_skip_layer_norm",
      {.values = {"input", "skip", "gamma", "output"}, .optional_values = {"bias", "beta", "mean", "inv_std", "sum"}},
      defuse_skip_layer_norm);
  add("defuse_bias_softmax", {.values = {"data", "bias", "y"}}, defuse_bias_softmax);
}

}  // namespace onnx_rewrite
