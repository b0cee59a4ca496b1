// com.microsoft Attention and EmbedLayerNormalization, the ops ONNX Runtime's BERT fusions write
// (core/optimizer/attention_fusion.cc, embed_layer_norm_fusion.cc), back to standard ONNX with
// the numbers of ORT's CPU kernels (contrib_ops/cpu/bert/attention.cc, attention_cpu_base.h,
// attention_helper.h, embed_layer_norm.cc); rules/defuse-attention/defuse-attention.rules.
//
// Attention: input·weights + bias, split into Q, K, V and into heads; scores = scale·Q·Kᵀ plus
// attention_bias plus the kernel's additive mask (mask_filter_value where mask_index hides a key,
// the lowest float where the causal mask does), softmax over the keys, probs·V back to
// [B, S, Dv]. The past K and V go in front of this step's, and both are returned as present.
// EmbedLayerNormalization: LayerNorm(word[ids] + position[positions] + segment[segments]), and
// per batch row the count of mask values equal to 1.
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "onnx_rewrite/toolkit.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

// Dim `axis` of a pattern value's shape, when the graph tells it.
std::optional<Dim> dim_of(const Match& match, const std::string& name, size_t axis) {
  const auto& shape = match.facts(name).shape;
  if (!shape || axis >= shape->size()) return std::nullopt;
  return (*shape)[axis];
}

std::optional<int64_t> size_of(const Match& match, const std::string& name, size_t axis) {
  const auto dim = dim_of(match, name, axis);
  return dim && dim->known() ? dim->number : std::nullopt;
}

// A size: a number known at rewrite time, or an int64 scalar computed at run time.
struct Extent {
  std::optional<int64_t> number;
  Value scalar;
};

Extent extent(const Match& match, GraphBuilder& b, const std::string& name, int64_t axis) {
  if (auto number = size_of(match, name, static_cast<size_t>(axis))) return {number, {}};
  const Value shape = b.Shape(Value{match.value(name)});
  return {std::nullopt, b.Gather(shape, b.scalar(static_cast<double>(axis), TensorProto::INT64))};
}

Value scalar_of(GraphBuilder& b, const Extent& size) {
  return size.number ? b.scalar(static_cast<double>(*size.number), TensorProto::INT64) : size.scalar;
}

Extent plus(GraphBuilder& b, const Extent& x, const Extent& y) {
  if (x.number && y.number) return {*x.number + *y.number, {}};
  if (x.number == 0) return y;
  if (y.number == 0) return x;
  const Value first = scalar_of(b, x);
  return {std::nullopt, b.Add(first, scalar_of(b, y))};
}

// The integers [start, end) as an int64 vector: a constant when both ends are known, else Range
// (ai.onnx >= 11) or, below, the indices NonZero finds in a vector of ones, shifted by start.
Value integers(GraphBuilder& b, const Extent& start, const Extent& end) {
  if (start.number && end.number) {
    std::vector<int64_t> numbers(static_cast<size_t>(std::max<int64_t>(*end.number - *start.number, 0)));
    std::iota(numbers.begin(), numbers.end(), *start.number);
    return b.ints(numbers);
  }
  if (b.opset() >= 11) {
    return b.op("Range", {scalar_of(b, start), scalar_of(b, end), b.scalar(1, TensorProto::INT64)});
  }
  Value count = scalar_of(b, end);
  if (start.number != 0) count = b.Sub(count, scalar_of(b, start));
  const Value ones = b.op("ConstantOfShape", {b.Unsqueeze(count, {0})},
                          {attr("value", make_tensor(TensorProto::INT64, {1}, {1}))});
  const Value indices = b.Squeeze(b.op("NonZero", {ones}), {0});
  return start.number == 0 ? indices : b.Add(indices, scalar_of(b, start));
}

double lowest(int32_t dtype) {
  switch (dtype) {
    case TensorProto::FLOAT16: return -65504.0;
    case TensorProto::BFLOAT16: return -3.3895313892515355e38;
    case TensorProto::DOUBLE: return std::numeric_limits<double>::lowest();
    default: return std::numeric_limits<float>::lowest();
  }
}

// ---- Attention --------------------------------------------------------------------------------

// How ORT reads mask_index (attention_base.cc CheckMask, attention_helper.h PrepareMask).
enum class MaskForm {
  kNone,               // absent, or [B or 1, 1]: the same value for every key changes nothing
  kEnds,               // [B]: keys at and after end[b] are hidden
  kEndsStarts,         // [2B]: ends, then starts; keys before start[b] are hidden too
  kKeys,               // [B, T]: 0/1 per key
  kKeysUnlessOneWide,  // [B, T] or [B, 1], which one is known only at run time
  kQueriesKeys,        // [B, S, T]: 0/1 per query and key
};

// `total`: the total sequence length T (past + this step's) when the graph tells it.
std::string mask_form(const Match& match, const std::optional<Dim>& total, MaskForm& form) {
  form = MaskForm::kNone;
  if (!bound(match, "mask_index")) return {};
  const auto& mask = match.facts("mask_index").shape;
  if (!mask) return "the rank of mask_index is unknown (ONNX Runtime reads it by rank)";
  switch (mask->size()) {
    case 1: {
      const Dim& length = (*mask)[0];
      const auto batch = dim_of(match, "input", 0);
      if (batch && length == *batch) {
        form = MaskForm::kEnds;
      } else if (batch && batch->known() && length.known() && *length.number == 2 * *batch->number) {
        form = MaskForm::kEndsStarts;
      } else {
        return fmt::format("mask_index has shape [{}] and the batch size is {}: whether it holds end positions ([B]) or "
                           "end and start positions ([2B]) is unknown",
                           length.text(), batch ? batch->text() : "unknown");
      }
      return {};
    }
    case 2: {
      const Dim& keys = (*mask)[1];
      if (keys.number == 1) form = MaskForm::kNone;
      else if (keys.known() || (total && keys == *total)) form = MaskForm::kKeys;
      else form = MaskForm::kKeysUnlessOneWide;
      return {};
    }
    case 3: form = MaskForm::kQueriesKeys; return {};
    case 4: return "mask_index is 4-D ([B, 1, max_S, max_S], Megatron): ONNX Runtime's CPU kernel does not implement it";
    default: return fmt::format("mask_index has rank {}; ONNX Runtime accepts ranks 1 to 4", mask->size());
  }
}

// mask_index as the kernel's additive mask: 0 for a key a query sees, mask_filter_value for one
// it doesn't; shaped to broadcast against the scores [B, N, S, T]. `keys`: [0, T).
Value padding_mask(GraphBuilder& b, Value mask, MaskForm form, Value keys, float filter, int32_t dtype) {
  const Value zero32 = b.constant(make_tensor(TensorProto::INT32, {}, {0}));
  Value seen;  // bool: [B, T] or [B, S, T]
  switch (form) {
    case MaskForm::kEnds:
      seen = b.op("Less", {keys, b.Unsqueeze(b.Cast(mask, TensorProto::INT64), {1})});
      break;
    case MaskForm::kEndsStarts: {
      const Value mask_ints = b.Cast(mask, TensorProto::INT64);
      const Value pairs = b.Reshape(mask_ints, b.ints({2, -1, 1}));
      const Value ends = b.Gather(pairs, b.scalar(0, TensorProto::INT64));
      const Value starts = b.Gather(pairs, b.scalar(1, TensorProto::INT64));
      seen = b.op("And", {b.op("Less", {keys, ends}), b.op("Not", {b.op("Less", {keys, starts})})});
      break;
    }
    case MaskForm::kKeysUnlessOneWide: {
      // [B, 1] means no mask: every key then counts as seen.
      const Value width = b.Slice(b.Shape(mask), {1}, {2}, {0});
      seen = b.op("Or", {b.op("Greater", {mask, zero32}), b.op("Equal", {width, b.ints({1})})});
      break;
    }
    default: seen = b.op("Greater", {mask, zero32}); break;
  }
  const Value zero = b.scalar(0, dtype);
  const Value additive = b.Where(seen, zero, b.scalar(filter, dtype));
  return b.Unsqueeze(additive, form == MaskForm::kQueriesKeys ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 2});
}

struct HiddenSizes {
  int64_t qk = 0, v = 0;
};

std::string hidden_sizes(const Match& match, HiddenSizes& sizes) {
  const auto listed = match.attribute_ints("qkv_hidden_sizes");
  if (!listed.empty()) {
    if (listed.size() != 3 || listed[0] != listed[1]) return "qkv_hidden_sizes must be [D, D, Dv] (ONNX Runtime's check)";
    sizes = {listed[0], listed[2]};
    return {};
  }
  auto total = bound(match, "bias") ? size_of(match, "bias", 0) : std::nullopt;
  if (!total) total = size_of(match, "weights", 1);
  if (!total) return "the hidden sizes are unknown: no qkv_hidden_sizes, and the shapes of bias and weights are unknown";
  if (*total % 3 != 0) return fmt::format("the merged Q/K/V size {} is not divisible by 3", *total);
  sizes = {*total / 3, *total / 3};
  return {};
}

std::string defuse_attention(const Match& match, GraphBuilder& b) {
  if (match.attribute_int("do_rotary", 0) != 0) {
    return "do_rotary = 1: ONNX Runtime's CPU kernel does not implement rotary embedding in Attention";
  }
  if (match.attribute_int("past_present_share_buffer", 0) != 0) {
    return "past_present_share_buffer = 1 (the in-place KV cache of ORT's GPU kernels) is not rewritten";
  }
  const int64_t heads = match.attribute_int("num_heads", 0);
  if (heads <= 0) return "num_heads must be positive";
  const int32_t dtype = element_type(match, {"input", "weights", "bias", "past", "attention_bias"});
  if (!dtype) return "the element type of Attention's input is unknown";
  HiddenSizes hidden;
  if (auto why = hidden_sizes(match, hidden); !why.empty()) return why;
  if (hidden.qk % heads != 0 || hidden.v % heads != 0) {
    return fmt::format("hidden sizes {} and {} are not divisible by num_heads {}", hidden.qk, hidden.v, heads);
  }
  const int64_t head_size = hidden.qk / heads, v_head_size = hidden.v / heads;
  const bool past = bound(match, "past"), present = bound(match, "present");
  std::optional<Dim> total_dim = dim_of(match, "input", 1);  // T = P + S
  if (past) {
    const auto p = size_of(match, "past", 3), s = size_of(match, "input", 1);
    total_dim = p && s ? std::optional<Dim>(Dim::of(*p + *s)) : std::nullopt;
  }
  MaskForm form;
  if (auto why = mask_form(match, total_dim, form); !why.empty()) return why;

  const Value x{match.value("input")};
  Value qkv = b.MatMul(x, Value{match.value("weights")});
  if (bound(match, "bias")) qkv = b.Add(qkv, value_of(match, "bias"));
  const auto parts = b.Split(qkv, 2, {hidden.qk, hidden.qk, hidden.v});
  auto heads_of = [&](Value part, int64_t size, const std::vector<int64_t>& perm) {
    return b.Transpose(b.Reshape(part, b.ints({0, 0, heads, size})), perm);
  };
  const Value q = heads_of(parts[0], head_size, {0, 2, 1, 3});
  Value v = heads_of(parts[2], v_head_size, {0, 2, 1, 3});
  Value k_transposed;
  if (!past && !present) {
    k_transposed = heads_of(parts[1], head_size, {0, 2, 3, 1});
  } else {
    Value k = heads_of(parts[1], head_size, {0, 2, 1, 3});
    if (past) {  // past: [2, B, N, P, H], keys then values
      const Value state = value_of(match, "past");
      k = b.Concat({b.Gather(state, b.scalar(0, TensorProto::INT64)), k}, 2);
      v = b.Concat({b.Gather(state, b.scalar(1, TensorProto::INT64)), v}, 2);
    }
    if (present) b.output(match.value("present"), b.Concat({b.Unsqueeze(k, {0}), b.Unsqueeze(v, {0})}, 0));
    k_transposed = b.Transpose(k, {0, 1, 3, 2});
  }
  float scale = match.attribute_float("scale", 0.f);
  if (scale == 0.f) scale = 1.f / std::sqrt(static_cast<float>(head_size));
  const Value products = b.MatMul(q, k_transposed);
  Value scores = b.Mul(products, b.scalar(scale, dtype));

  // The additive terms, as the kernel sums them: attention_bias + (padding and causal mask).
  const Extent queries = extent(match, b, "input", 1);
  const Extent past_length = past ? extent(match, b, "past", 3) : Extent{0, {}};
  const Extent total = plus(b, past_length, queries);
  const bool causal = match.attribute_int("unidirectional", 0) != 0 && queries.number != 1;
  Value keys;
  if (form != MaskForm::kNone || causal) keys = integers(b, Extent{0, {}}, total);
  Value mask;
  if (form != MaskForm::kNone) {
    mask = padding_mask(b, value_of(match, "mask_index"), form, keys, match.attribute_float("mask_filter_value", -10000.f),
                        dtype);
  }
  if (causal) {  // a query at s sees the keys up to P + s; ORT gives the later ones the lowest float
    const Value positions = past_length.number == 0 ? keys : integers(b, past_length, total);
    const Value future = b.op("Greater", {keys, b.Unsqueeze(positions, {1})});
    const Value masked_out = b.scalar(lowest(dtype), dtype);
    const Value kept = mask.absent() ? b.scalar(0, dtype) : mask;
    mask = b.Where(future, masked_out, kept);
  }
  Value additive = value_of(match, "attention_bias");
  if (!mask.absent()) additive = additive.absent() ? mask : b.Add(additive, mask);
  if (!additive.absent()) scores = b.Add(scores, additive);

  const Value probs = b.op("Softmax", {scores}, {attr("axis", 3)});
  const Value context = b.Transpose(b.MatMul(probs, v), {0, 2, 1, 3});
  b.output(match.value("output"), b.Reshape(context, b.ints({0, 0, hidden.v})));
  return {};
}

// ---- EmbedLayerNormalization ------------------------------------------------------------------

// LayerNormalization over the last of three axes: the ai.onnx op from opset 17, else spelled out
// as ORT's kernel computes it (x - mean, divided by √(mean of squares + ε), times γ, plus β), in
// float for float16 and bfloat16.
Value layer_norm(GraphBuilder& b, Value x, Value gamma, Value beta, float epsilon, int32_t dtype) {
  if (b.opset() >= 17) {
    return b.op("LayerNormalization", {x, gamma, beta}, {attr("axis", -1), attr("epsilon", epsilon)});
  }
  const bool widen = dtype == TensorProto::FLOAT16 || dtype == TensorProto::BFLOAT16;
  const int32_t compute = widen ? static_cast<int32_t>(TensorProto::FLOAT) : dtype;
  if (widen) {
    x = b.Cast(x, compute);
    gamma = b.Cast(gamma, compute);
    beta = b.Cast(beta, compute);
  }
  const Value centered = b.Sub(x, b.Reduce("ReduceMean", x, {2}));
  const Value variance = b.Reduce("ReduceMean", b.Mul(centered, centered), {2});
  const Value deviation = b.Sqrt(b.Add(variance, b.scalar(epsilon, compute)));
  const Value y = b.Add(b.Mul(b.Div(centered, deviation), gamma), beta);
  return widen ? b.Cast(y, dtype) : y;
}

std::string defuse_embed_layer_norm(const Match& match, GraphBuilder& b) {
  const bool segments = bound(match, "segment_ids");
  if (segments != bound(match, "segment_embedding")) {
    return "segment_ids and segment_embedding must be given together (ONNX Runtime's check)";
  }
  const int32_t dtype = element_type(match, {"word_embedding", "position_embedding", "segment_embedding", "gamma", "beta"});
  if (!dtype) return "the element type of the embeddings is unknown";
  const Value ids{match.value("input_ids")};
  Value positions = value_of(match, "position_ids");  // [B, S] or [1, S]; else 0, 1, ..., S - 1
  if (positions.absent()) positions = integers(b, Extent{0, {}}, extent(match, b, "input_ids", 1));
  const Value words = b.Gather(Value{match.value("word_embedding")}, ids);
  Value sum = b.Add(words, b.Gather(Value{match.value("position_embedding")}, positions));
  if (segments) sum = b.Add(sum, b.Gather(value_of(match, "segment_embedding"), value_of(match, "segment_ids")));
  b.output(match.value("output"), layer_norm(b, sum, Value{match.value("gamma")}, Value{match.value("beta")},
                                             match.attribute_float("epsilon", 1e-12f), dtype));
  if (bound(match, "embedding_sum")) b.output(match.value("embedding_sum"), sum);
  if (bound(match, "mask_index")) {
    Value count;
    if (bound(match, "mask")) {
      const Value ones = b.op("Equal", {value_of(match, "mask"), b.constant(make_tensor(TensorProto::INT32, {}, {1}))});
      count = b.Reduce("ReduceSum", b.Cast(ones, TensorProto::INT32), {1}, false);
    } else {  // the kernel writes zeros
      const Value batch = b.Slice(b.Shape(ids), {0}, {1}, {0});
      count = b.op("ConstantOfShape", {batch}, {attr("value", make_tensor(TensorProto::INT32, {1}, {0}))});
    }
    b.output(match.value("mask_index"), count);
  }
  return {};
}

}  // namespace

void register_defuse_attention_builders(BuilderRegistry& registry) {
  registry.add("defuse_attention",
               {.values = {"input", "weights", "output"},
                .optional_values = {"bias", "mask_index", "past", "attention_bias", "present"},
                .attributes = {"num_heads"},
                .optional_attributes = {"unidirectional", "qkv_hidden_sizes", "scale", "mask_filter_value", "do_rotary",
                                        "past_present_share_buffer"}},
               defuse_attention);
  registry.add("defuse_embed_layer_norm",
               {.values = {"input_ids", "word_embedding", "position_embedding", "gamma", "beta", "output"},
                .optional_values = {"segment_ids", "segment_embedding", "mask", "position_ids", "mask_index", "embedding_sum"},
                .optional_attributes = {"epsilon"}},
               defuse_embed_layer_norm);
}

}  // namespace onnx_rewrite
