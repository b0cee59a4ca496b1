// Group normalization as ops every runtime has (rules/group-norm/group-norm.rules).
//
// Statistics are taken per (sample, group) over the group's channels and all spatial positions,
// with the biased variance. InstanceNormalization computes exactly that on x viewed as
// [N, G, -1] (one "instance channel" per group), so the decomposition is
//
//   y = Reshape(InstanceNormalization(Reshape(x, [0, G, -1]), s, b, eps), Shape(x))
//
// with s, b the group's scale and bias (GroupNormalization-18: per group), or units and zeros
// followed by a per-channel Mul/Add with scale/bias reshaped to [C, 1, ..., 1]
// (torch.nn.functional.group_norm, mygroupnorm, GroupNormalization-21). It is valid from opset 7
// (numpy broadcasting in Mul/Add); a group count that is only known at run time (mygroupnorm
// with num_groups as a graph input) needs ConstantOfShape, opset 9.
//
// ONNX Runtime's CPU provider has no double InstanceNormalization, so statistics taken in double
// are spelled out with standard ops instead: mean and biased variance by ReduceMean over the
// view's last axis, then (x - mean) / sqrt(var + eps).
//
// Inside model-local functions element types are usually unknown. The per-group form needs none;
// units and zeros of x's type come from CastLike (opset 15). With an unknown type a double x
// can't be told apart, so it gets InstanceNormalization in its own type.
#include <cmath>
#include <optional>
#include <variant>

#include <fmt/format.h>

#include "onnx_rewrite/toolkit.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {
namespace {

enum class Affine { kPerChannel, kPerGroup };

constexpr int32_t kUnknownType = 0;  // onnx::TensorProto::UNDEFINED
constexpr int kCastLikeOpset = 15;
constexpr int64_t kLargestGroupCount = int64_t{1} << 20;

struct Groups {
  std::optional<int64_t> count;  // known when the rule is applied
  Value at_run_time;             // else: int64 [1], computed from the num_groups input
};

// The group count when it is known now: the captured attribute `num_groups` (ai.onnx
// GroupNormalization) or the constant one-element input `num_groups` (mygroupnorm, float or int);
// nullopt when the input is computed at run time; a string when it can't be a group count.
std::variant<std::optional<int64_t>, std::string> known_group_count(const Match& match) {
  std::optional<int64_t> count;
  if (match.attribute("num_groups")) {
    count = match.attribute_int("num_groups", 0);
  } else if (auto constant = match.constant("num_groups")) {
    if (constant->numbers.size() != 1) return fmt::format("num_groups has {} elements, not one", constant->numbers.size());
    const double number = constant->numbers.front();
    if (number != std::floor(number)) return fmt::format("num_groups is {}, not a whole number", number);
    if (!(std::fabs(number) <= kLargestGroupCount)) return fmt::format("num_groups is {}, above {}", number, kLargestGroupCount);
    count = static_cast<int64_t>(number);
  } else {
    return std::nullopt;
  }
  if (*count < 1) return fmt::format("num_groups is {}", *count);
  // The decomposition writes [G] constants: a count no normalization has would fill memory.
  if (*count > kLargestGroupCount) return fmt::format("num_groups is {}, above {}", *count, kLargestGroupCount);
  const int64_t channels = match.facts("x").dim(1);  // -1: unknown
  if (channels > 0 && channels % *count != 0) return fmt::format("{} channels don't split into {} groups", channels, *count);
  return count;
}

std::variant<Groups, std::string> group_count(const Match& match, GraphBuilder& b) {
  auto known = known_group_count(match);
  if (auto* reason = std::get_if<std::string>(&known)) return *reason;
  if (auto count = std::get<std::optional<int64_t>>(known)) return Groups{count, {}};
  if (b.opset() < 9) return "num_groups is computed at run time, which needs ConstantOfShape (ai.onnx >= 9)";
  const Value count = b.Cast(b.Reshape(Value{match.value("num_groups")}, b.ints({1})), onnx::TensorProto::INT64);
  return Groups{std::nullopt, count};
}

// x's element type, else scale's (the ops require them equal); kUnknownType when neither is known.
int32_t x_element_type(const Match& match) { return element_type(match, {"x", "scale"}); }

// `count` copies of `number` as a [G] tensor of `data_type`; of x's type via CastLike when that
// is unknown (the caller checked the opset).
Value filled(GraphBuilder& b, const Groups& groups, double number, int32_t data_type, Value x) {
  const int32_t made_type = data_type == kUnknownType ? onnx::TensorProto::FLOAT : data_type;
  const Value made = groups.count
                         ? b.floats(std::vector<double>(static_cast<size_t>(*groups.count), number), made_type)
                         : b.op("ConstantOfShape", {groups.at_run_time},
                                {attr("value", make_tensor(made_type, {1}, {number}))});
  return data_type == kUnknownType ? b.op("CastLike", {made, x}) : made;
}

// `value` converted to x's type: Cast when that is known, else CastLike (the caller checked the opset).
Value cast_to_x_type(GraphBuilder& b, Value value, int32_t data_type, Value x) {
  return data_type == kUnknownType ? b.op("CastLike", {value, x}) : b.Cast(value, data_type);
}

// (grouped - mean) / sqrt(variance + epsilon), mean and biased variance over the last axis of
// `grouped` ([N, G, -1]): InstanceNormalization's statistics in standard ops, for the types
// (double) ONNX Runtime has no InstanceNormalization kernel for.
Value standardized(GraphBuilder& b, Value grouped, float epsilon, int32_t data_type) {
  const Value centered = b.Sub(grouped, b.Reduce("ReduceMean", grouped, {2}));
  const Value variance = b.Reduce("ReduceMean", b.Mul(centered, centered), {2});
  return b.Div(centered, b.Sqrt(b.Add(variance, b.scalar(epsilon, data_type))));
}

// y * scale + bias, with scale and bias reshaped to `channel_shape` to broadcast per channel.
Value scale_and_shift(const Match& match, GraphBuilder& b, Value y, const std::vector<int64_t>& channel_shape) {
  const Value scaled = b.Mul(y, reshaped(match, b, "scale", channel_shape));
  return b.Add(scaled, reshaped(match, b, "bias", channel_shape));
}

bool is_half(int32_t data_type) {
  return data_type == onnx::TensorProto::FLOAT16 || data_type == onnx::TensorProto::BFLOAT16;
}

// The type the statistics are computed in (kUnknownType: x's own, unknown type).
// GroupNormalization-21 says it in stash_type (float unless told); torch (mygroupnorm) accumulates
// half types in float; GroupNormalization-18 stays in x's type.
int32_t statistics_type(const Match& match, Affine affine, int32_t data_type) {
  if (match.attribute("stash_type")) return static_cast<int32_t>(match.attribute_int("stash_type", onnx::TensorProto::FLOAT));
  if (affine == Affine::kPerChannel && is_half(data_type)) return onnx::TensorProto::FLOAT;
  return data_type;
}

std::string build_group_norm(const Match& match, GraphBuilder& b, Affine affine) {
  const Value x{match.value("x")};
  const Value scale{match.value("scale")};
  const Value bias{match.value("bias")};
  const auto x_rank = match.facts("x").rank();
  const int32_t data_type = x_element_type(match);
  const int32_t stash_type = statistics_type(match, affine, data_type);
  const bool per_group = affine == Affine::kPerGroup;
  const bool spelled_out = stash_type == onnx::TensorProto::DOUBLE;
  // What needs x's type when it is unknown: the cast back from the statistics type, or units and
  // zeros for InstanceNormalization.
  const bool needs_x_type = stash_type != data_type || (!per_group && !spelled_out);
  if (data_type == kUnknownType && needs_x_type && b.opset() < kCastLikeOpset) {
    return fmt::format("the element type of x (and of scale) is unknown: {} needs CastLike "
                       "(ai.onnx >= {}; this graph imports {})",
                       stash_type != data_type ? "casting the statistics back from stash_type to it"
                                               : "making InstanceNormalization's units and zeros of that type",
                       kCastLikeOpset, b.opset());
  }

  auto counted = group_count(match, b);
  if (auto* reason = std::get_if<std::string>(&counted)) return *reason;
  const Groups groups = std::get<Groups>(counted);

  const Value grouped_shape =
      groups.count ? b.ints({0, *groups.count, -1}) : b.Concat({b.ints({0}), groups.at_run_time, b.ints({-1})}, 0);
  Value grouped = b.Reshape(x, grouped_shape);
  if (stash_type != data_type) grouped = b.Cast(grouped, stash_type);
  const float epsilon = match.attribute_float("eps", 1e-5f);
  Value normalized;
  if (spelled_out) {
    // Per group (GroupNormalization-18: stash type = x's type): scale and bias [G] against the view.
    normalized = standardized(b, grouped, epsilon, stash_type);
    if (per_group) normalized = scale_and_shift(match, b, normalized, {-1, 1});
  } else {
    // Per group: scale and bias are InstanceNormalization's own; per channel they come after.
    const Value group_scale = per_group ? scale : filled(b, groups, 1.0, stash_type, x);
    const Value group_bias = per_group ? bias : filled(b, groups, 0.0, stash_type, x);
    normalized = b.op("InstanceNormalization", {grouped, group_scale, group_bias}, {attr("epsilon", epsilon)});
  }
  if (stash_type != data_type) normalized = cast_to_x_type(b, normalized, data_type, x);
  const Value x_shape = b.Shape(x);
  const Value restored = b.Reshape(normalized, x_shape);
  if (per_group) {
    b.output(match.value("y"), restored);
    return {};
  }

  // Per channel: scale and bias broadcast as [C, 1, ..., 1] against x's shape when its rank is
  // known, else as [C, 1] against x viewed as [N, C, -1] (Reshape's 0 copies N and C).
  if (auto rank = x_rank; rank && *rank >= 2) {
    std::vector<int64_t> per_channel(*rank - 1, 1);
    per_channel.front() = -1;
    b.output(match.value("y"), scale_and_shift(match, b, restored, per_channel));
    return {};
  }
  const Value channels_view = b.Reshape(restored, b.ints({0, 0, -1}));
  const Value affined = scale_and_shift(match, b, channels_view, {-1, 1});
  b.output(match.value("y"), b.Reshape(affined, x_shape));
  return {};
}

// mygroupnorm as GroupNormalization-21 (same semantics), when num_groups is a valid constant.
// torch takes the statistics of a double tensor in double: stash_type says so (its default is float).
std::string build_group_normalization_21(const Match& match, GraphBuilder& b) {
  auto known = known_group_count(match);
  if (auto* reason = std::get_if<std::string>(&known)) return *reason;
  const auto count = std::get<std::optional<int64_t>>(known);
  if (!count) return "num_groups is not a constant";
  Attributes attributes{attr("epsilon", match.attribute_float("eps", 1e-5f)), attr("num_groups", *count)};
  if (x_element_type(match) == onnx::TensorProto::DOUBLE) {
    attributes.push_back(attr("stash_type", int64_t{onnx::TensorProto::DOUBLE}));
  }
  const Value y = b.op("GroupNormalization", {Value{match.value("x")}, Value{match.value("scale")}, Value{match.value("bias")}},
                       std::move(attributes));
  b.output(match.value("y"), y);
  return {};
}

}  // namespace

void register_group_norm_builders(BuilderRegistry& registry) {
  registry.add("group_norm_as_group_normalization_21",
               {.values = {"x", "num_groups", "scale", "bias", "y"}, .attributes = {"eps"}, .optional_attributes = {"num_groups"}},
               build_group_normalization_21);
  // mygroupnorm (num_groups an input) and ai.onnx GroupNormalization (num_groups an attribute).
  const BuilderSignature decomposition{.values = {"x", "scale", "bias", "y"},
                                       .optional_values = {"num_groups"},
                                       .attributes = {"eps"},
                                       .optional_attributes = {"num_groups", "stash_type"}};
  registry.add("group_norm_per_channel", decomposition,
               [](const Match& match, GraphBuilder& b) { return build_group_norm(match, b, Affine::kPerChannel); });
  registry.add("group_norm_per_group", decomposition,
               [](const Match& match, GraphBuilder& b) { return build_group_norm(match, b, Affine::kPerGroup); });
}

}  // namespace onnx_rewrite
