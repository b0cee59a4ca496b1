// The C++ halves of rules/fuse-contrib/fuse-*.rules: spelled-out GELU, LayerNorm and RMSNorm become the fused
// kernels ONNX Runtime has. The patterns find the arithmetic; the builders check what a
// pattern can't say — which axes are reduced, that γ/β/bias have exactly the shapes the fused
// kernel takes, which operand of a residual Add has the full shape, element types the kernels
// implement — and build the op that exists at the model's opset (the standard one where there is
// one, see rules/fuse-contrib/README.md). Every check that fails declines with the reason.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <variant>

#include <fmt/format.h>

#include "onnx_rewrite/opset.h"
#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using Facts = ShapeFacts;

constexpr const char* kMicrosoft = "com.microsoft";
using Types = std::set<int32_t>;
// Element types each fused op is made for. float16: the fused op computes in float and rounds
// once, within one float16 step of the float math like the spelled-out float16 arithmetic (ORT's
// CPU has float16 kernels for the normalizations and runs the GELUs in float between Casts; its
// CUDA kernels take float16). bfloat16: the normalizations ORT's CPU has bfloat16 kernels for
// (not RMSNormalization-23); no GELU, as ORT's CPU can't run bfloat16 GELU arithmetic to prove a
// fusion against. double: the normalizations' kernels only (Skip* schemas refuse it). Conv, Gemm
// and MatMul fuse in float, ORT's FusedConv/FusedGemm/FusedMatMul CPU type.
const Types kGeluTypes = {onnx::TensorProto::FLOAT, onnx::TensorProto::FLOAT16};
const Types kNormalizationTypes = {onnx::TensorProto::FLOAT, onnx::TensorProto::DOUBLE, onnx::TensorProto::FLOAT16,
                                   onnx::TensorProto::BFLOAT16};
const Types kSkipNormalizationTypes = {onnx::TensorProto::FLOAT, onnx::TensorProto::FLOAT16, onnx::TensorProto::BFLOAT16};
const Types kLinearTypes = {onnx::TensorProto::FLOAT};

// Static shapes of the match's scope (the engine works each out once per round).
struct StaticShapes {
  const Scope& scope;
  const Facts& operator()(const std::string& value) const { return scope.facts(value); }
};

StaticShapes static_shapes(const Match& match) { return {*match.scope}; }

// One-element constants of the pattern must not broadcast `x` to a higher rank.
std::string check_constant_ranks(const Match& match, StaticShapes& shapes, const std::string& x,
                                 std::initializer_list<const char*> constants) {
  const auto rank = shapes(match.value(x)).rank();
  for (const char* name : constants) {
    if (!match.has_value(name)) continue;
    const auto constant_rank = shapes(match.value(name)).rank().value_or(0);
    if (constant_rank == 0) continue;
    if (!rank) {
      return fmt::format("'{}' has rank {} and the rank of '{}' is unknown", match.value(name), constant_rank, match.value(x));
    }
    if (constant_rank > *rank) {
      return fmt::format("'{}' has rank {}, more than '{}' (rank {}): it changes the output's shape", match.value(name),
                         constant_rank, match.value(x), *rank);
    }
  }
  return {};
}

// ---- GELU family -------------------------------------------------------------------------------

// GELU, erf or tanh form (the rule's `approximate`): ai.onnx Gelu from opset 20, else
// com.microsoft Gelu / FastGelu.
std::string build_gelu(const Match& match, GraphBuilder& b) {
  StaticShapes shapes = static_shapes(match);
  const std::string approximate = match.attribute_string("approximate", "none");
  const bool tanh = approximate == "tanh";
  const bool standard = b.opset() >= 20;
  const std::string kernel = standard ? "Gelu" : tanh ? "FastGelu" : "Gelu";
  if (auto why = check_element_type(element_type(match, {"x", "k_half", "k_one"}), kGeluTypes, kernel); !why.empty()) return why;
  if (auto why = check_constant_ranks(match, shapes, "x", {"k_sqrt2", "k_inv_sqrt2", "k_one", "k_one2", "k_half", "k_two",
                                                           "k_three", "k_cubic", "k_sqrt_2_over_pi"});
      !why.empty()) {
    return why;
  }
  const Value x{match.value("x")};
  const Value y = standard ? b.op("Gelu", {x}, tanh ? Attributes{attr("approximate", "tanh")} : Attributes{})
                           : b.op(kernel, {x}, {}, kMicrosoft);
  b.output(match.value("y"), y);
  return {};
}

// x·sigmoid(α·x) -> com.microsoft QuickGelu. (Not ai.onnx Swish at opset 24: ORT 1.30 runs its
// Swish kernel about 25% slower than QuickGelu, rules/fuse-contrib/README.md.)
std::string build_quick_gelu(const Match& match, GraphBuilder& b) {
  StaticShapes shapes = static_shapes(match);
  if (auto why = check_element_type(element_type(match, {"x", "k_alpha"}), kGeluTypes, "QuickGelu"); !why.empty()) return why;
  if (auto why = check_constant_ranks(match, shapes, "x", {"k_alpha"}); !why.empty()) return why;
  const double alpha = match.has_value("k_alpha") ? scalar_constant(match, "k_alpha").value_or(NAN) : 1.0;
  if (std::isnan(alpha)) return "alpha is not a constant number";
  const Value y = b.op("QuickGelu", {Value{match.value("x")}}, {attr("alpha", alpha)}, kMicrosoft);
  b.output(match.value("y"), y);
  return {};
}

// Add(x, bias) then GELU: com.microsoft BiasGelu (erf) or FastGelu with its bias input (tanh).
// ORT's kernels take a 1-D bias as long as the input's last axis.
std::string build_bias_gelu(const Match& match, GraphBuilder& b) {
  StaticShapes shapes = static_shapes(match);
  const onnx::NodeProto& gelu = *match.anchor;
  const bool tanh = gelu.op_type() == "FastGelu" || match.attribute_string("approximate", "none") == "tanh";
  const std::string kernel = tanh ? "FastGelu" : "BiasGelu";
  if (auto why = check_element_type(element_type(match, {"x", "bias"}), kGeluTypes, kernel); !why.empty()) return why;
  const Facts& x = shapes(match.value("x"));
  const Facts& bias = shapes(match.value("bias"));
  if (!x.shape || x.shape->empty()) {
    return fmt::format("'{}' has shape {}; {} needs rank >= 1", match.value("x"), dims_text(x.shape), kernel);
  }
  if (!bias.shape || bias.shape->size() != 1 || !(*bias.shape)[0].known() || *(*bias.shape)[0].number < 2) {
    return fmt::format("the bias '{}' has shape {}; {} takes a 1-D bias of the last axis' length", match.value("bias"),
                       dims_text(bias.shape), kernel);
  }
  const Dim& last = x.shape->back();
  if (last.known() && !(last == (*bias.shape)[0])) {
    return fmt::format("the bias has shape {}, the last axis of '{}' has {}", dims_text(bias.shape), match.value("x"), last.text());
  }
  const Value y = b.op(kernel, {Value{match.value("x")}, Value{match.value("bias")}}, {}, kMicrosoft);
  b.output(match.value("y"), y);
  return {};
}

// ---- Conv, Gemm and MatMul -----------------------------------------------------------------------

// Conv then an MLAS activation -> com.microsoft FusedConv. The activation's parameters are written
// out in full (the captures carry ONNX's defaults), as activation_params.
std::string build_conv_activation(const Match& match, GraphBuilder& b) {
  if (auto why = check_element_type(element_type(match, {"x", "w", "b"}), kLinearTypes, "FusedConv"); !why.empty()) {
    return why;
  }
  const std::string& kind = match.anchor->op_type();
  std::vector<float> params;
  if (kind == "LeakyRelu") {
    params = {match.attribute_float("alpha", 0.01f)};
  } else if (kind == "HardSigmoid") {
    params = {match.attribute_float("alpha", 0.2f), match.attribute_float("beta", 0.5f)};
  } else if (kind == "Clip") {
    // Clip-6's attributes or Clip-11's constant inputs; an absent bound is no bound.
    params = {match.attribute_float("min", std::numeric_limits<float>::lowest()),
              match.attribute_float("max", std::numeric_limits<float>::max())};
    const char* bounds[] = {"lo", "hi"};
    for (size_t i = 0; i < 2; ++i) {
      if (!bound(match, bounds[i])) continue;
      const auto number = scalar_constant(match, bounds[i]);
      if (!number) return fmt::format("the Clip bound '{}' is not a one-element constant", match.value(bounds[i]));
      params[i] = static_cast<float>(*number);
    }
  }
  const onnx::NodeProto& conv = *matched_node(match, "Conv");
  Attributes attributes(conv.attribute().begin(), conv.attribute().end());
  attributes.push_back(attr("activation", kind));
  if (!params.empty()) attributes.push_back(attr("activation_params", params));
  const Value y = b.op("FusedConv", {value_of(match, "x"), value_of(match, "w"), value_of(match, "b")}, attributes, kMicrosoft);
  b.output(match.value("y"), y);
  return {};
}

// Gemm then an elementwise activation -> com.microsoft FusedGemm, the activation's attributes
// (with ONNX's defaults) as activation_alpha/beta/gamma.
std::string build_gemm_activation(const Match& match, GraphBuilder& b) {
  if (auto why = check_element_type(element_type(match, {"a", "w", "c"}), kLinearTypes, "FusedGemm"); !why.empty()) {
    return why;
  }
  const onnx::NodeProto& gemm = *matched_node(match, "Gemm");
  Attributes attributes(gemm.attribute().begin(), gemm.attribute().end());
  attributes.push_back(attr("activation", match.anchor->op_type()));
  for (const char* name : {"alpha", "beta", "gamma"}) {
    if (const auto* parameter = match.attribute(name)) attributes.push_back(attr(std::string("activation_") + name, parameter->f()));
  }
  const Value y = b.op("FusedGemm", {value_of(match, "a"), value_of(match, "w"), value_of(match, "c")}, attributes, kMicrosoft);
  b.output(match.value("y"), y);
  return {};
}

// Conv then an inference BatchNormalization -> the Conv with w' = w·s, b' = (b − mean)·s + β per
// output channel, s = γ/√(var + ε) (ORT's ConvBNFusion).
std::string build_conv_batch_norm(const Match& match, GraphBuilder& b) {
  constexpr size_t kMaxWeights = size_t{1} << 22;  // folding decodes the weights: 16 MiB of float
  const int32_t type = element_type(match, {"x", "w", "gamma"});
  // ORT's CPU Conv kernel is float-only (so are the FusedConvs this makes way for).
  if (auto why = check_element_type(type, kLinearTypes, "Conv"); !why.empty()) return why;
  if (match.attribute_int("training_mode", 0) != 0) return "the BatchNormalization is in training mode";
  const onnx::NodeProto& norm = *match.anchor;
  for (int i = 1; i < norm.output_size(); ++i) {
    if (!norm.output(i).empty() && (match.scope->is_output(norm.output(i)) || !match.scope->uses(norm.output(i)).empty())) {
      return "the BatchNormalization's running statistics are used";
    }
  }
  const char* folded[] = {"w", "b"};
  for (const char* name : folded) {
    if (bound(match, name) && match.scope->uses(match.value(name)).size() != 1) {
      return fmt::format("'{}' is also read by another node: folding would copy it", match.value(name));
    }
  }
  auto w = match.scope->constant_values(match.value("w"), kMaxWeights);
  if (!w || w->dims.empty() || w->numbers.empty()) {
    return fmt::format("the weights '{}' are not a constant of at most {} elements", match.value("w"), kMaxWeights);
  }
  const auto channels = static_cast<size_t>(w->dims[0]);
  auto per_channel = [&](const char* name) -> std::optional<std::vector<double>> {
    if (!bound(match, name)) return std::vector<double>(channels, 0.0);
    auto values = match.scope->constant_values(match.value(name), kMaxWeights);
    if (!values || values->dims.size() != 1 || values->numbers.size() != channels) return std::nullopt;
    return values->numbers;
  };
  std::vector<double> params[5];
  const char* names[] = {"b", "gamma", "beta", "mean", "var"};
  for (size_t i = 0; i < 5; ++i) {
    auto values = per_channel(names[i]);
    if (!values) return fmt::format("'{}' is not a constant with one value per output channel ({})", match.value(names[i]), channels);
    params[i] = std::move(*values);
  }
  const auto& [bias, gamma, beta, mean, var] = params;
  const double epsilon = match.attribute_float("epsilon", 1e-5f);
  std::vector<double> weights = std::move(w->numbers);
  std::vector<double> new_bias(channels);
  const size_t per_output = weights.size() / channels;
  for (size_t c = 0; c < channels; ++c) {
    const double s = gamma[c] / std::sqrt(var[c] + epsilon);
    for (size_t i = c * per_output; i < (c + 1) * per_output; ++i) weights[i] *= s;
    new_bias[c] = (bias[c] - mean[c]) * s + beta[c];
  }
  const onnx::NodeProto& conv = *matched_node(match, "Conv");
  const Value y = b.op("Conv",
                       {value_of(match, "x"), b.constant(make_tensor(type, w->dims, weights)),
                        b.constant(make_tensor(type, {static_cast<int64_t>(channels)}, new_bias))},
                       Attributes(conv.attribute().begin(), conv.attribute().end()));
  b.output(match.value("y"), y);
  return {};
}

// A MatMul (or a FusedMatMul of an earlier round) with one more fold: a scalar scale on an input
// or the output (k) -> alpha, or a Transpose of an input's last two axes (perm_a/perm_b) ->
// transA/transB toggled.
std::string build_fused_matmul(const Match& match, GraphBuilder& b) {
  StaticShapes shapes = static_shapes(match);
  if (auto why = check_element_type(element_type(match, {"a", "b", "k"}), kLinearTypes, "FusedMatMul"); !why.empty()) {
    return why;
  }
  const onnx::NodeProto* fused = matched_node(match, "FusedMatMul");
  float alpha = fused ? float_attribute(*fused, "alpha", 1.f) : 1.f;
  int64_t trans[2] = {fused ? int_attribute(*fused, "transA", 0) : 0, fused ? int_attribute(*fused, "transB", 0) : 0};
  const char* operands[2] = {"a", "b"};
  if (match.has_value("k")) {
    const auto k = scalar_constant(match, "k");
    if (!k) return "the scale is not a one-element constant";
    const auto k_rank = shapes(match.value("k")).rank().value_or(0);
    for (const char* operand : operands) {
      const auto rank = shapes(match.value(operand)).rank();
      if (k_rank > 0 && (!rank || k_rank > *rank)) {
        return fmt::format("the scale '{}' has rank {}, '{}' has rank {}: it could change the shape", match.value("k"), k_rank,
                           match.value(operand), rank ? std::to_string(*rank) : "unknown");
      }
    }
    // ORT's MatMulScaleFusion: the divisor as its float reciprocal.
    alpha *= matched_node(match, "Div") ? 1.f / static_cast<float>(*k) : static_cast<float>(*k);
  }
  for (int i = 0; i < 2; ++i) {
    const std::string capture = std::string("perm_") + operands[i];
    if (!match.attribute(capture)) continue;
    if (fused && int_attribute(*fused, i == 0 ? "transBatchA" : "transBatchB", 0) != 0) {
      return fmt::format("the FusedMatMul moves input {} with transBatch{}", operands[i], i == 0 ? 'A' : 'B');
    }
    const auto perm = match.attribute_ints(capture);
    std::vector<int64_t> swap_last_two(perm.size());
    for (size_t axis = 0; axis < perm.size(); ++axis) swap_last_two[axis] = static_cast<int64_t>(axis);
    if (perm.size() >= 2) std::swap(swap_last_two[perm.size() - 2], swap_last_two[perm.size() - 1]);
    if (perm.size() < 2 || perm != swap_last_two) {
      return fmt::format("the Transpose's perm [{}] does not swap exactly the last two axes", fmt::join(perm, ", "));
    }
    trans[i] ^= 1;
  }
  Attributes attributes = fused ? attributes_without(*fused, "alpha") : Attributes{};
  attributes.erase(std::remove_if(attributes.begin(), attributes.end(),
                                  [](const auto& a) { return a.name() == "transA" || a.name() == "transB"; }),
                   attributes.end());
  if (alpha != 1.f) attributes.push_back(attr("alpha", alpha));
  if (trans[0]) attributes.push_back(attr("transA", trans[0]));
  if (trans[1]) attributes.push_back(attr("transB", trans[1]));
  const Value y = b.op("FusedMatMul", {value_of(match, "a"), value_of(match, "b")}, attributes, kMicrosoft);
  b.output(match.value("y"), y);
  return {};
}

// ---- Normalizations ----------------------------------------------------------------------------

// The axes a ReduceMean of the pattern reduces: its `axes` attribute (before opset 18), its
// constant axes input (from 18), or every axis.
struct Reduction {
  std::vector<int64_t> axes;  // empty: all axes
};

std::variant<Reduction, std::string> reduction(const Match& match, const std::string& attribute, const std::string& input,
                                               const std::string& noop) {
  if (const auto* axes = match.attribute(attribute)) return Reduction{{axes->ints().begin(), axes->ints().end()}};
  if (match.has_value(input)) {
    auto values = match.constant(input);
    if (!values) return fmt::format("the axes '{}' of a ReduceMean are not a constant", match.value(input));
    if (!values->ints().empty()) return Reduction{values->ints()};
  }
  // No axes, or an empty axes input: every axis, unless the ReduceMean is told to do nothing.
  if (match.attribute_int(noop, 0) != 0) return "a ReduceMean without axes and with noop_with_empty_axes=1 reduces nothing";
  return Reduction{};
}

// The number k of trailing axes a reduction covers (its axes must be exactly the last k),
// or why not. Positive axes and "all axes" need the rank of the reduced value.
std::variant<int64_t, std::string> trailing_axes(const Reduction& reduction, std::optional<size_t> rank) {
  std::set<int64_t> negative;
  if (reduction.axes.empty()) {
    if (!rank) return "a ReduceMean reduces all axes of a value of unknown rank";
    for (int64_t axis = 1; axis <= static_cast<int64_t>(*rank); ++axis) negative.insert(-axis);
  }
  for (int64_t axis : reduction.axes) {
    if (axis >= 0 && !rank) return fmt::format("a ReduceMean reduces axis {} of a value of unknown rank", axis);
    negative.insert(axis >= 0 ? axis - static_cast<int64_t>(*rank) : axis);
  }
  const auto k = static_cast<int64_t>(negative.size());
  if (*negative.begin() != -k || *negative.rbegin() != -1 || (rank && k > static_cast<int64_t>(*rank))) {
    return fmt::format("a ReduceMean reduces axes [{}], not trailing axes", fmt::join(reduction.axes, ", "));
  }
  return k;
}

// γ or β of a normalization over the last k axes of x: ORT's kernels take one value per
// normalized element, so its dims must be x's normalized dims (leading 1s allowed), and the
// original Mul/Add must not broadcast x to another shape. A size of x that is only known at run
// time is taken to be the parameter's (the other valid case, a normalized axis of size 1, makes
// no sense as a LayerNorm and makes ORT refuse to run the node).
std::string check_affine(const std::string& role, const std::string& name, const Facts& param, const Facts& x, int64_t k,
                         bool one_dimensional) {
  if (!param.shape) return fmt::format("{} '{}' has an unknown shape", role, name);
  const Dims& dims = *param.shape;
  const auto mismatch = [&] {
    return fmt::format("{} '{}' has shape {}, the normalized axes of x have {}", role, name, dims_text(param.shape),
                       x.shape && static_cast<int64_t>(x.shape->size()) >= k ? dims_text(Dims(x.shape->end() - k, x.shape->end()))
                                                                             : "unknown sizes");
  };
  if (one_dimensional && dims.size() != 1) return mismatch();
  if (static_cast<int64_t>(dims.size()) > (x.shape ? static_cast<int64_t>(x.shape->size()) : k)) return mismatch();
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    const Dim& dim = dims[dims.size() - 1 - static_cast<size_t>(i)];
    if (i >= k) {
      if (dim.number != 1) return mismatch();
      continue;
    }
    std::optional<Dim> size;
    if (x.shape) size = (*x.shape)[x.shape->size() - 1 - static_cast<size_t>(i)];
    if (size && dim == *size) continue;
    const bool size_unknown = !size || !size->known();
    if (!(size_unknown && dim.known() && *dim.number > 1)) return mismatch();
  }
  if (static_cast<int64_t>(dims.size()) < k) return mismatch();  // it would broadcast along a normalized axis
  return {};
}

// What the spelled-out LayerNorm/RMSNorm patterns agree on: x, the trailing axes, ε, γ.
struct SpelledNorm {
  std::string x;
  int64_t axes = 0;
  double epsilon = 0;
};

std::variant<SpelledNorm, std::string> spelled_norm(const Match& match, StaticShapes& shapes, const std::string& x_name) {
  SpelledNorm norm;
  norm.x = match.value(x_name);
  const Facts& x = shapes(norm.x);
  if (auto why = check_element_type(element_type(match, {x_name.c_str(), "gamma", "eps"}), kNormalizationTypes,
                            "LayerNormalization");
      !why.empty()) {
    return why;
  }
  std::optional<int64_t> k;
  const std::pair<const char*, const char*> reductions[] = {{"mean_axes", "mean"}, {"var_axes", "var"}};
  for (const auto& [attribute, which] : reductions) {
    const std::string input = std::string(which) == "mean" ? "axes1" : "axes2";
    if (!match.values.count(input)) continue;  // the RMSNorm patterns have no mean
    auto reduced = reduction(match, attribute, input, std::string(which) + "_noop");
    if (auto* why = std::get_if<std::string>(&reduced)) return *why;
    auto count = trailing_axes(std::get<Reduction>(reduced), x.rank());
    if (auto* why = std::get_if<std::string>(&count)) return *why;
    if (k && *k != std::get<int64_t>(count)) return "the two ReduceMeans reduce different axes";
    k = std::get<int64_t>(count);
  }
  norm.axes = *k;
  const auto epsilon = scalar_constant(match, "eps");
  if (!epsilon || *epsilon < 0) return "ε is not a constant >= 0";
  norm.epsilon = *epsilon;
  if (auto why = check_affine("γ", match.value("gamma"), shapes(match.value("gamma")), x, norm.axes, false); !why.empty()) return why;
  if (auto why = check_constant_ranks(match, shapes, x_name, {"eps", "k_two", "k_one"}); !why.empty()) return why;
  return norm;
}

// Spelled-out LayerNorm -> ai.onnx LayerNormalization(x, γ) over the trailing axes; a bias Add
// after it is folded by build_layer_norm_bias.
std::string build_layer_norm(const Match& match, GraphBuilder& b) {
  StaticShapes shapes = static_shapes(match);
  auto norm = spelled_norm(match, shapes, "x");
  if (auto* why = std::get_if<std::string>(&norm)) return *why;
  const auto& [x, axes, epsilon] = std::get<SpelledNorm>(norm);
  const Value y = b.op("LayerNormalization", {Value{x}, Value{match.value("gamma")}},
                       {attr("axis", -axes), attr("epsilon", epsilon)});
  b.output(match.value("y"), y);
  return {};
}

// TensorFlow's folded LayerNorm -> LayerNormalization(x, γ, β): β must have the normalized dims too.
std::string build_layer_norm_folded(const Match& match, GraphBuilder& b) {
  StaticShapes shapes = static_shapes(match);
  auto norm = spelled_norm(match, shapes, "x");
  if (auto* why = std::get_if<std::string>(&norm)) return *why;
  const auto& [x, axes, epsilon] = std::get<SpelledNorm>(norm);
  const std::string& beta = match.value("beta");
  if (auto why = check_affine("β", beta, shapes(beta), shapes(x), axes, false); !why.empty()) return why;
  const Value y = b.op("LayerNormalization", {Value{x}, Value{match.value("gamma")}, Value{beta}},
                       {attr("axis", -axes), attr("epsilon", epsilon)});
  b.output(match.value("y"), y);
  return {};
}

// ONNX's function body of LayerNormalization-17/18 -> the op (fuse-layernorm-function.rules).
std::string build_layer_norm_function_body(const Match& match, GraphBuilder& b) {
  const std::string& x = match.value("x");
  StaticShapes shapes = static_shapes(match);
  // Shape (x), or the constant it was folded into (canonicalize-fold-known-shape) when x's dims are static.
  const auto* shape = match.scope->producer(match.value("x_shape"));
  const bool shape_of_x = shape && shape->node->op_type() == "Shape" && normalize_domain(shape->node->domain()).empty() &&
                          shape->node->input(0) == x && !find_attribute(*shape->node, "start") && !find_attribute(*shape->node, "end");
  const auto constant_shape = match.constant("x_shape");
  const auto x_dims = match.facts("x").static_dims();
  const bool static_shape_of_x = constant_shape && x_dims && constant_shape->ints() == *x_dims &&
                                 std::none_of(x_dims->begin(), x_dims->end(), [](int64_t d) { return d < 0; });
  if (!shape_of_x && !static_shape_of_x) return "the result is reshaped to something other than Shape (x)";
  const Facts& x_facts = shapes(x);
  const int32_t type = element_type(match, {"x"});
  if (auto why = check_element_type(type, kNormalizationTypes, "LayerNormalization"); !why.empty()) return why;
  if (match.attribute_int("out_type", 0) != type) return "the result is cast to another type than x's";
  const int64_t axis = match.attribute_int("axis", 1);
  const auto rank = x_facts.rank();
  if (axis >= 0 && !rank) return "x's rank is unknown (the axis counts from the front)";
  const int64_t normalized = axis < 0 ? -axis : static_cast<int64_t>(*rank) - axis;
  if (normalized <= 0 || (rank && normalized > static_cast<int64_t>(*rank))) return fmt::format("axis {} is out of range", axis);
  const auto epsilon = scalar_constant(match, "eps");
  if (!epsilon || *epsilon < 0) return "ε is not a constant >= 0";
  std::vector<Value> inputs{Value{x}};
  for (const auto& [role, name] : {std::pair{"γ", "scale"}, std::pair{"β", "bias"}}) {
    if (!bound(match, name)) continue;
    const std::string& param = match.value(name);
    if (auto why = check_affine(role, param, shapes(param), x_facts, normalized, false); !why.empty()) return why;
    inputs.push_back(Value{param});
  }
  Attributes attributes{attr("axis", axis), attr("epsilon", *epsilon)};
  const int64_t stash_type = match.attribute_int("stash_type", onnx::TensorProto::FLOAT);
  if (stash_type != onnx::TensorProto::FLOAT) attributes.push_back(attr("stash_type", stash_type));
  // The body's 2-D Mean and InvStdDev ([d0·…·d(axis-1), 1]), where something else reads them:
  // the op's own outputs ([d0, …, d(axis-1), 1, …, 1]) reshaped.
  auto read = [&](const char* name) { return bound(match, name) && used_outside(match, match.value(name)); };
  const bool mean = read("mean2d"), inv_std_dev = read("inv2d");
  if (!mean && !inv_std_dev) {
    b.output(match.value("y"), b.op("LayerNormalization", inputs, attributes));
    return {};
  }
  const auto outputs = b.op_outputs("LayerNormalization", inputs, 3, attributes);
  b.output(match.value("y"), outputs[0]);
  const Value rows = b.ints({-1, 1});
  if (mean) b.output(match.value("mean2d"), b.Reshape(outputs[1], rows));
  if (inv_std_dev) b.output(match.value("inv2d"), b.Reshape(outputs[2], rows));
  return {};
}

// x - ReduceMean(x): what an RMSNorm pattern finds inside a LayerNorm that fuse-layernorm
// could not take (its mean used elsewhere, say). That is left alone rather than half-fused.
bool is_centered(const Scope& scope, const std::string& value) {
  const auto* sub = scope.producer(value);
  if (!sub || sub->node->op_type() != "Sub" || !normalize_domain(sub->node->domain()).empty() || sub->node->input_size() != 2) {
    return false;
  }
  const auto* mean = scope.producer(sub->node->input(1));
  return mean && mean->node->op_type() == "ReduceMean" && mean->node->input(0) == sub->node->input(0);
}

// Spelled-out RMSNorm -> ai.onnx RMSNormalization(x, γ) (opset 23), below 23 ORT's
// SimplifiedLayerNormalization (which only --target ort loads). LLaMA's form, between a Cast to
// float and one back to the input's type, is the same op on the input with stash_type = 1.
std::string build_rms_norm(const Match& match, GraphBuilder& b) {
  if (is_centered(*match.scope, match.value("x"))) return "x is x' - mean(x'): a LayerNorm's, not an RMSNorm";
  StaticShapes shapes = static_shapes(match);
  auto norm = spelled_norm(match, shapes, "x");
  if (auto* why = std::get_if<std::string>(&norm)) return *why;
  const auto& [x, axes, epsilon] = std::get<SpelledNorm>(norm);
  const bool standard = b.opset() >= 23;
  Value input{x};
  int32_t statistics = shapes(x).elem_type;
  const std::string& outer = match.has_value("x_in") ? match.value("x_in") : x;
  if (standard && shapes(outer).elem_type == onnx::TensorProto::BFLOAT16) {
    return "the element type is bfloat16; ORT has no bfloat16 RMSNormalization kernel to prove it against";
  }
  if (match.has_value("x_in")) {
    const int32_t outer = shapes(match.value("x_in")).elem_type;
    if (match.attribute_int("up", 0) != onnx::TensorProto::FLOAT) return "the first Cast is not to float";
    if (!Types{onnx::TensorProto::FLOAT16, onnx::TensorProto::BFLOAT16, onnx::TensorProto::FLOAT}.count(outer)) {
      return "the input before the Casts is not float16, bfloat16 or float";
    }
    if (match.attribute_int("down", 0) != outer) return "the second Cast is not back to the input's element type";
    input = Value{match.value("x_in")};
  }
  Attributes attributes{attr("axis", -axes), attr("epsilon", epsilon)};
  if (statistics == onnx::TensorProto::DOUBLE) {
    if (!standard) return "a double RMSNorm below opset 23: ORT's SimplifiedLayerNormalization is fused for float only";
    attributes.push_back(attr("stash_type", int64_t{onnx::TensorProto::DOUBLE}));
  } else if (match.has_value("x_in")) {
    attributes.push_back(attr("stash_type", int64_t{onnx::TensorProto::FLOAT}));
  }
  const Value y = b.op(standard ? "RMSNormalization" : "SimplifiedLayerNormalization", {input, Value{match.value("gamma")}},
                       std::move(attributes));
  b.output(match.value("y"), y);
  return {};
}

// How many trailing axes a LayerNormalization/RMSNormalization node normalizes.
std::variant<int64_t, std::string> normalized_axes(int64_t axis, const Facts& x) {
  if (axis < 0) return -axis;
  if (!x.rank()) return fmt::format("axis {} of a value of unknown rank", axis);
  return static_cast<int64_t>(*x.rank()) - axis;
}

// Why LayerNormalization(x, γ) then Add(·, β) can't become LayerNormalization(x, γ, β), or "".
std::string bias_fold_blocker(const onnx::NodeProto& layer_norm, const std::string& beta, StaticShapes& shapes) {
  const Facts& x = shapes(layer_norm.input(0));
  int64_t axis = -1;
  for (const auto& attribute : layer_norm.attribute()) {
    if (attribute.name() == "axis") axis = attribute.i();
  }
  auto k = normalized_axes(axis, x);
  if (auto* why = std::get_if<std::string>(&k)) return *why;
  return check_affine("β", beta, shapes(beta), x, std::get<int64_t>(k), false);
}

std::string build_layer_norm_bias(const Match& match, GraphBuilder& b) {
  StaticShapes shapes = static_shapes(match);
  const onnx::NodeProto& layer_norm = *matched_node(match, "LayerNormalization");
  if (auto why = bias_fold_blocker(layer_norm, match.value("beta"), shapes); !why.empty()) return why;
  const Attributes attributes(layer_norm.attribute().begin(), layer_norm.attribute().end());
  const Value y = b.op("LayerNormalization", {Value{match.value("x")}, Value{match.value("gamma")}, Value{match.value("beta")}},
                       attributes);
  b.output(match.value("y"), y);
  return {};
}

// The residual Add(a, b) before a normalization over the last axis, as the (input, skip) of
// ORT's Skip*LayerNormalization: rank 2 or 3, the skip's last two dims equal to the input's and
// its batch equal or 1, so that the input has the shape of the sum.
std::variant<std::pair<std::string, std::string>, std::string> residual_operands(const Match& match, StaticShapes& shapes) {
  const std::string a = match.value("a"), b = match.value("b");
  auto fits = [&](const std::string& input, const std::string& skip) -> std::string {
    const Facts& in = shapes(input);
    const Facts& sk = shapes(skip);
    for (const auto& [name, facts] : {std::pair<const std::string&, const Facts&>{input, in}, {skip, sk}}) {
      if (!facts.rank() || *facts.rank() < 2 || *facts.rank() > 3) {
        return fmt::format("'{}' has shape {}; Skip*LayerNormalization takes rank 2 or 3", name, dims_text(facts.shape));
      }
    }
    const Dims& i = *in.shape;
    const Dims& s = *sk.shape;
    const bool same_rows = s.size() <= i.size() && s[s.size() - 1] == i[i.size() - 1] && s[s.size() - 2] == i[i.size() - 2] &&
                           (s.size() == 2 || s[0] == i[0] || s[0].number == 1);
    if (!same_rows) {
      return fmt::format("the residual Add's operands have shapes {} and {}, not provably the same or a broadcast ORT takes",
                         dims_text(in.shape), dims_text(sk.shape));
    }
    return {};
  };
  auto first = fits(a, b);
  if (first.empty()) return std::pair{a, b};
  if (fits(b, a).empty()) return std::pair{b, a};
  return first;
}

// Skip*LayerNormalization normalizes float tensors over the last axis only, in float.
std::string check_skip_norm(int32_t type, int64_t axes, int64_t stash_type, const std::string& kernel) {
  if (auto why = check_element_type(type, kSkipNormalizationTypes, kernel); !why.empty()) return why;
  if (axes != 1) return fmt::format("it normalizes more than the last axis; {} normalizes the last", kernel);
  if (stash_type != 1) return fmt::format("stash_type is not 1 ({} computes in float)", kernel);
  return {};
}

// Output 3 of Skip*LayerNormalization is the residual sum, for when the sum is used further on
// (pre-norm transformers add it to the next residual).
Value skip_norm(const Match& match, GraphBuilder& b, const std::string& op_type, const std::vector<Value>& inputs,
                double epsilon) {
  onnx::NodeProto prototype;
  prototype.set_op_type(op_type);
  prototype.set_domain(kMicrosoft);
  *prototype.add_attribute() = attr("epsilon", epsilon);
  const bool keep_sum = used_outside(match, match.value("h"));
  for (const char* output : {"output", "", "", keep_sum ? "input_skip_bias_sum" : ""}) prototype.add_output(output);
  while (prototype.output(prototype.output_size() - 1).empty()) prototype.mutable_output()->RemoveLast();
  const auto outputs = b.op_named(prototype, inputs);
  if (keep_sum) b.output(match.value("h"), outputs[3]);
  return outputs[0];
}

// Add(a, b) then LayerNormalization over the last axis -> com.microsoft SkipLayerNormalization.
std::string build_skip_layer_norm(const Match& match, GraphBuilder& b) {
  StaticShapes shapes = static_shapes(match);
  const onnx::NodeProto& layer_norm = *match.anchor;
  const std::string& y = match.value("y");
  if (!match.has_value("beta")) {
    // Fold a following bias Add first (fuse-layernorm-bias), then fuse with β.
    const auto& uses = match.scope->uses(y);
    if (uses.size() == 1 && uses[0].node->op_type() == "Add" && normalize_domain(uses[0].node->domain()).empty() &&
        !match.scope->is_output(y)) {
      const onnx::NodeProto& add = *uses[0].node;
      const std::string& beta = add.input(add.input(0) == y ? 1 : 0);
      if (bias_fold_blocker(layer_norm, beta, shapes).empty()) {
        return "the bias Add after it is folded into the LayerNormalization first";
      }
    }
  }
  const Facts& sum = shapes(match.value("h"));
  auto k = normalized_axes(match.attribute_int("axis", -1), sum);
  if (auto* why = std::get_if<std::string>(&k)) return *why;
  if (auto why = check_skip_norm(element_type(match, {"h", "gamma"}), std::get<int64_t>(k),
                                 match.attribute_int("stash_type", 1), "SkipLayerNormalization");
      !why.empty()) {
    return why;
  }
  auto operands = residual_operands(match, shapes);
  if (auto* why = std::get_if<std::string>(&operands)) return *why;
  const auto& [input, skip] = std::get<std::pair<std::string, std::string>>(operands);
  const Facts& in = shapes(input);
  for (const char* role : {"gamma", "beta"}) {
    if (!match.has_value(role)) continue;
    if (auto why = check_affine(role, match.value(role), shapes(match.value(role)), in, 1, true); !why.empty()) return why;
  }
  const double epsilon = match.attribute_float("epsilon", 1e-5f);
  if (epsilon < 0) return "epsilon is negative";
  const Value out = skip_norm(match, b, "SkipLayerNormalization",
                              {Value{input}, Value{skip}, Value{match.value("gamma")},
                               match.has_value("beta") ? Value{match.value("beta")} : Value{}},
                              epsilon);
  b.output(y, out);
  return {};
}

// Add(a, b) then an RMSNorm over the last axis (spelled out, or RMSNormalization) ->
// com.microsoft SkipSimplifiedLayerNormalization.
std::string build_skip_rms_norm(const Match& match, GraphBuilder& b) {
  StaticShapes shapes = static_shapes(match);
  const std::string kernel = "SkipSimplifiedLayerNormalization";
  const int32_t type = element_type(match, {"h", "gamma"});
  double epsilon = 0;
  if (matched_node(match, "RMSNormalization")) {
    auto k = normalized_axes(match.attribute_int("axis", -1), shapes(match.value("h")));
    if (auto* why = std::get_if<std::string>(&k)) return *why;
    if (auto why = check_skip_norm(type, std::get<int64_t>(k), match.attribute_int("stash_type", 1), kernel); !why.empty()) return why;
    epsilon = match.attribute_float("epsilon", 1e-5f);
  } else {
    auto norm = spelled_norm(match, shapes, "h");
    if (auto* why = std::get_if<std::string>(&norm)) return *why;
    if (auto why = check_skip_norm(type, std::get<SpelledNorm>(norm).axes, 1, kernel); !why.empty()) return why;
    epsilon = std::get<SpelledNorm>(norm).epsilon;
  }
  if (epsilon < 0) return "epsilon is negative";
  auto operands = residual_operands(match, shapes);
  if (auto* why = std::get_if<std::string>(&operands)) return *why;
  const auto& [input, skip] = std::get<std::pair<std::string, std::string>>(operands);
  if (auto why = check_affine("gamma", match.value("gamma"), shapes(match.value("gamma")), shapes(input), 1, true); !why.empty()) {
    return why;
  }
  // Its input 3 would be a bias (the CPU kernel reads a β there and ignores it): left out.
  const Value out = skip_norm(match, b, kernel, {Value{input}, Value{skip}, Value{match.value("gamma")}}, epsilon);
  b.output(match.value("y"), out);
  return {};
}

}  // namespace

void register_fuse_contrib_builders(BuilderRegistry& registry) {
  registry.add("fuse_gelu",
               {.values = {"x", "y"},
                .optional_values = {"k_half", "k_one", "k_sqrt2", "k_inv_sqrt2", "k_one2", "k_two", "k_three", "k_cubic",
                                    "k_sqrt_2_over_pi"},
                .optional_attributes = {"approximate"}},
               build_gelu);
  registry.add("fuse_quick_gelu", {.values = {"x", "y"}, .optional_values = {"k_alpha"}}, build_quick_gelu);
  registry.add("fuse_bias_gelu", {.values = {"x", "bias", "y"}, .optional_attributes = {"approximate"}}, build_bias_gelu);
  registry.add("fuse_conv_activation",
               {.values = {"x", "w", "y"}, .optional_values = {"b", "lo", "hi"}, .optional_attributes = {"alpha", "beta", "min", "max"}},
               build_conv_activation);
  registry.add("fuse_gemm_activation", {.values = {"a", "w", "y"}, .optional_values = {"c"}, .optional_attributes = {"alpha", "beta", "gamma"}},
               build_gemm_activation);
  registry.add("fuse_conv_batch_norm",
               {.values = {"x", "w", "gamma", "beta", "mean", "var", "y"}, .optional_values = {"b"},
                .optional_attributes = {"epsilon", "training_mode"}},
               build_conv_batch_norm);
  registry.add("fuse_matmul", {.values = {"a", "b", "y"}, .optional_values = {"k"}, .optional_attributes = {"perm_a", "perm_b"}},
               build_fused_matmul);
  // The spelled-out normalizations (spelled_norm): the ReduceMeans' axes as attributes or inputs.
  const std::vector<std::string> reductions{"mean_axes", "var_axes", "mean_noop", "var_noop"};
  const std::vector<std::string> spelled{"axes1", "axes2", "k_two", "k_one"};
  registry.add("fuse_layer_norm", {.values = {"x", "gamma", "eps", "y"}, .optional_values = spelled, .optional_attributes = reductions},
               build_layer_norm);
  std::vector<std::string> rms_values = spelled, rms_attributes = reductions;
  rms_values.push_back("x_in");
  rms_attributes.insert(rms_attributes.end(), {"up", "down"});
  registry.add("fuse_rms_norm", {.values = {"x", "gamma", "eps", "y"}, .optional_values = rms_values, .optional_attributes = rms_attributes},
               build_rms_norm);
  registry.add("fuse_layer_norm_folded", {.values = {"x", "gamma", "beta", "eps", "y"}, .optional_values = spelled, .optional_attributes = reductions},
               build_layer_norm_folded);
  registry.add("fuse_layer_norm_function_body",
               {.values = {"x", "x_shape", "eps", "scale", "y"}, .optional_values = {"bias", "axis_one", "mean2d", "inv2d"},
                .attributes = {"axis", "stash_type", "out_type"}},
               build_layer_norm_function_body);
  registry.add("fuse_layer_norm_bias", {.values = {"x", "gamma", "beta", "y"}}, build_layer_norm_bias);
  registry.add("fuse_skip_layer_norm",
               {.values = {"a", "b", "h", "gamma", "y"}, .optional_values = {"beta"},
                .optional_attributes = {"axis", "stash_type", "epsilon"}},
               build_skip_layer_norm);
  std::vector<std::string> skip_rms_values = spelled;
  skip_rms_values.push_back("eps");
  std::vector<std::string> skip_rms_attributes = reductions;
  skip_rms_attributes.insert(skip_rms_attributes.end(), {"axis", "stash_type", "epsilon"});
  registry.add("fuse_skip_rms_norm",
               {.values = {"a", "b", "h", "gamma", "y"}, .optional_values = skip_rms_values,
                .optional_attributes = skip_rms_attributes},
               build_skip_rms_norm);
}

}  // namespace onnx_rewrite
