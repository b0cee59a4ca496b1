// Attention-23/24 in older standard ops (lower-attention.rules), as the ONNX function body of the
// op computes it (onnx/defs/nn/old.cc, AttentionAppendFunctionCausalMask in onnx/defs/nn/utils.cc,
// with the errata of ONNX 1.23: bottom-right causal alignment, zero rows where every key is
// masked):
//
//   Q, K, V as [B, heads, S, head size] (3-D inputs reshaped by q_num_heads / kv_num_heads);
//   present = Concat(past, new) on the sequence axis; T = its length;
//   bias = mask (bool: 0 where True, -inf elsewhere; float: added; at 24 a mask shorter than T
//          padded with -inf) + causal (-inf where key j > query i + offset; offset = the past's
//          length, or nonpad_kv_seqlen - S per batch) + padding (-inf from nonpad_kv_seqlen on);
//   scores = (Q·√scale)(K·√scale)ᵀ with K, V heads repeated to Q's (query head h reads KV head
//            h / (Hq / Hkv)), scale = 1/√head size by default; softcap·tanh(scores/softcap);
//   probs = Softmax(scores + bias) in softmax_precision, zero in rows whose bias is all -inf;
//   Y = probs·V (3-D: back to [B, S, Hq·Dv]); qk_matmul_output per qk_matmul_output_mode.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

constexpr double kNegativeInfinity = -std::numeric_limits<double>::infinity();

struct Form {
  bool three_d = false;
  int64_t q_heads = -1, kv_heads = -1;  // -1: known only at run time
  int64_t head_size = -1;
  int32_t dtype = 0, softmax_type = 0;
  bool causal = false, past = false, nonpad = false, mask = false, mask_bool = false, pad_mask = false;
  float softcap = 0.f;
  std::optional<float> scale;
  int64_t qk_mode = 0;
};

int64_t known_heads(const BuildContext& match, const Form& f, const char* input, const char* attribute) {
  if (f.three_d) return match.attribute_int(attribute, -1);
  return match.facts(input).dim(1);
}

// Whether attn_mask's last dimension is T (past and new keys) by the static shapes. Attention-24
// pads a shorter mask with -inf (a last dimension of 1 too, which Attention-23 broadcast).
bool mask_covers_keys(const BuildContext& match, const Form& f) {
  const auto& mask = match.facts("attn_mask");
  const int64_t mask_keys = mask.rank() ? mask.dim(*mask.rank() - 1) : -1;
  int64_t keys = match.facts("k").dim(f.three_d ? 1 : 2);
  if (f.past) keys = keys < 0 || match.facts("past_key").dim(2) < 0 ? -1 : keys + match.facts("past_key").dim(2);
  return mask_keys >= 0 && mask_keys == keys;
}

std::string read_form(const BuildContext& match, Form& f) {
  const int64_t q_heads = match.attribute_int("q_num_heads", 0), kv_heads = match.attribute_int("kv_num_heads", 0);
  const auto rank = match.facts("q").rank();
  f.three_d = rank ? *rank == 3 : q_heads > 0 && kv_heads > 0;
  if (rank && *rank != 3 && *rank != 4) return fmt::format("Q has rank {}; Attention takes 3-D or 4-D inputs", *rank);
  if (f.three_d && (q_heads <= 0 || kv_heads <= 0)) return "3-D inputs without q_num_heads and kv_num_heads";
  f.q_heads = known_heads(match, f, "q", "q_num_heads");
  f.kv_heads = known_heads(match, f, "k", "kv_num_heads");
  if (f.q_heads > 0 && f.kv_heads > 0 && f.q_heads % f.kv_heads != 0) {
    return fmt::format("q_num_heads {} is not a multiple of kv_num_heads {}", f.q_heads, f.kv_heads);
  }
  f.dtype = match.element_type({"q", "k"});
  if (auto why = check_element_type(f.dtype, {TensorProto::FLOAT, TensorProto::FLOAT16, TensorProto::DOUBLE, TensorProto::BFLOAT16},
                                    "Attention")) {
    return *why;
  }
  if (const int32_t v_type = match.element_type({"v"}); v_type != 0 && v_type != f.dtype) {
    return "V's element type differs from Q's: the product of the probabilities and V has no common type";
  }
  f.softmax_type = static_cast<int32_t>(match.attribute_int("softmax_precision", f.dtype));
  if (auto why = check_element_type(f.softmax_type, {TensorProto::FLOAT, TensorProto::FLOAT16, TensorProto::DOUBLE, TensorProto::BFLOAT16},
                                    "softmax_precision")) {
    return *why;
  }
  if (f.three_d) {
    const int64_t hidden = match.facts("q").dim(2);
    if (hidden > 0 && f.q_heads > 0) f.head_size = hidden / f.q_heads;
  } else {
    f.head_size = match.facts("q").dim(3);
  }
  f.causal = match.attribute_int("is_causal", 0) != 0;
  f.past = match.has("past_key");
  if (f.past != match.has("past_value")) return "past_key and past_value must be given together";
  f.nonpad = match.has("nonpad_kv_seqlen");
  if (f.nonpad && f.past) return "nonpad_kv_seqlen together with past_key (an external and an internal cache)";
  f.mask = match.has("attn_mask");
  f.mask_bool = f.mask && match.facts("attn_mask").elem_type == TensorProto::BOOL;
  if (f.mask && match.facts("attn_mask").elem_type == 0) return "the element type of attn_mask is unknown (bool or additive?)";
  f.pad_mask = f.mask && match.model_opset() >= 24 && !mask_covers_keys(match, f);
  f.softcap = match.attribute_float("softcap", 0.f);
  if (const auto* scale = match.attribute("scale")) f.scale = scale->f();
  f.qk_mode = match.attribute_int("qk_matmul_output_mode", 0);
  if (f.qk_mode < 0 || f.qk_mode > 3) return fmt::format("qk_matmul_output_mode {} is not one of 0..3", f.qk_mode);
  return {};
}

Value int64_scalar(GraphBuilder& b, int64_t value) { return b.scalar(static_cast<double>(value), TensorProto::INT64); }

// Dimension `axis` of x's shape as an int64 scalar.
Value dim(GraphBuilder& b, Value shape, int64_t axis) { return b.Gather(shape, int64_scalar(b, axis)); }

Value range(GraphBuilder& b, Value end) {
  const Value zero = int64_scalar(b, 0);
  const Value one = int64_scalar(b, 1);
  return range_values(b, zero, end, one, TensorProto::INT64);
}

// [B, S, heads·size] -> [B, heads, S, size].
Value split_heads(GraphBuilder& b, Value x, int64_t heads) {
  return b.Transpose(b.Reshape(x, b.ints({0, 0, heads, -1})), {0, 2, 1, 3});
}

// 0 where `kept`, -inf elsewhere, in the element type of the scores.
Value bias_keeping(GraphBuilder& b, const Form& f, Value kept) {
  const Value zero = b.scalar(0, f.dtype);
  const Value minus_infinity = b.scalar(kNegativeInfinity, f.dtype);
  return b.Where(kept, zero, minus_infinity);
}

// The user's mask as an additive bias in the scores' type, padded to T keys (Attention-24).
Value mask_bias(const BuildContext& match, GraphBuilder& b, const Form& f, Value total) {
  const Value mask = match.value("attn_mask");
  Value bias;
  if (f.mask_bool) {
    bias = bias_keeping(b, f, mask);
  } else {
    bias = match.facts("attn_mask").elem_type == f.dtype ? mask : b.Cast(mask, f.dtype);
  }
  if (!f.pad_mask) return bias;
  // The missing keys: ConstantOfShape(-inf) of the mask's shape with T - Tm last.
  const Value shape = b.Shape(bias);
  const Value leading = b.Slice(shape, {0}, {-1}, {0});
  const Value mask_keys = b.Slice(shape, {-1}, {std::numeric_limits<int64_t>::max()}, {0});
  const Value missing = b.Sub(b.Unsqueeze(total, {0}), mask_keys);
  const Value filler = b.op("ConstantOfShape", {b.Concat({leading, missing}, 0)},
                            {attr("value", make_tensor(f.dtype, {1}, {kNegativeInfinity}))});
  return b.Concat({bias, filler}, -1);
}

// K or V heads repeated to Q's: [B, Hkv, T, D] -> [B, Hq, T, D], query head h reading KV head h / G.
Value repeat_heads(GraphBuilder& b, const Form& f, Value x, Value q_shape) {
  if (f.q_heads > 0 && f.q_heads == f.kv_heads) return x;
  const Value shape = b.Shape(x);
  Value groups;
  Value q_heads;
  if (f.q_heads > 0 && f.kv_heads > 0) {
    groups = b.ints({f.q_heads / f.kv_heads});
    q_heads = b.ints({f.q_heads});
  } else {
    q_heads = b.Slice(q_shape, {1}, {2}, {0});
    groups = b.Div(q_heads, b.Slice(shape, {1}, {2}, {0}));
  }
  const Value expanded = b.op("Expand", {b.Unsqueeze(x, {2}), b.Concat({b.ints({1, 1}), groups, b.ints({1, 1})}, 0)});
  const Value target = b.Concat({b.Slice(shape, {0}, {1}, {0}), q_heads, b.Slice(shape, {2}, {4}, {0})}, 0);
  return b.Reshape(expanded, target);
}

// √scale in the scores' type: of the attribute, or of 1/√(head size) (computed in float, as the
// function body does, at run time when the head size is unknown).
Value root_scale(GraphBuilder& b, const Form& f, Value q_shape) {
  if (f.scale || f.head_size > 0) {
    const float scale = f.scale ? *f.scale : 1.f / std::sqrt(static_cast<float>(f.head_size));
    return b.scalar(std::sqrt(scale), f.dtype);
  }
  const Value head_size = b.Cast(dim(b, q_shape, 3), TensorProto::FLOAT);
  const Value root = b.Sqrt(b.Reciprocal(b.Sqrt(head_size)));
  return f.dtype == TensorProto::FLOAT ? root : b.Cast(root, f.dtype);
}

BuildResult lower_attention(const BuildContext& match, GraphBuilder& b) {
  Form f;
  if (auto why = read_form(match, f); !why.empty()) return decline(why);
  Value q{match.value("q")}, k{match.value("k")}, v{match.value("v")};
  if (f.three_d) {
    q = split_heads(b, q, f.q_heads);
    k = split_heads(b, k, f.kv_heads);
    v = split_heads(b, v, f.kv_heads);
  }
  const Value q_shape = b.Shape(q);
  const Value queries = dim(b, q_shape, 2);
  Value present_key = k, present_value = v, past_length;
  if (f.past) {
    present_key = b.Concat({match.value("past_key"), k}, 2);
    present_value = b.Concat({match.value("past_value"), v}, 2);
    past_length = dim(b, b.Shape(match.value("past_key")), 2);
  }
  const Value total = dim(b, b.Shape(present_key), 2);

  // The additive bias: what the mask, causality and padding exclude.
  std::vector<Value> biases;
  if (f.mask) biases.push_back(mask_bias(match, b, f, total));
  if (f.causal) {
    Value rows = b.Unsqueeze(range(b, queries), {1});  // [S, 1]
    const Value columns = b.Unsqueeze(range(b, total), {0});  // [1, T]
    if (f.past) {
      rows = b.Add(rows, past_length);
    } else if (f.nonpad) {  // per batch: [B, 1, S, 1]
      const Value offset = b.Sub(match.value("nonpad_kv_seqlen"), queries);
      const Value rows_4d = b.Unsqueeze(rows, {0, 1});
      rows = b.Add(rows_4d, b.Unsqueeze(offset, {1, 2, 3}));
    }
    biases.push_back(bias_keeping(b, f, b.op("Not", {b.op("Less", {rows, columns})})));
  }
  if (f.nonpad) {
    const Value keys = range(b, dim(b, b.Shape(k), 2));
    const Value kept = b.op("Less", {keys, b.Unsqueeze(match.value("nonpad_kv_seqlen"), {1})});  // [B, kv]
    biases.push_back(b.Unsqueeze(bias_keeping(b, f, kept), {1, 2}));
  }
  Value bias;
  for (const Value& part : biases) bias = bias.absent() ? part : b.Add(bias, part);

  const Value keys = repeat_heads(b, f, present_key, q_shape);
  const Value values = repeat_heads(b, f, present_value, q_shape);
  const Value root = root_scale(b, f, q_shape);
  const Value q_scaled = b.Mul(q, root);
  const Value product = b.MatMul(q_scaled, b.Mul(b.Transpose(keys, {0, 1, 3, 2}), root));
  Value capped = product;
  if (f.softcap != 0.f) {
    const Value cap = b.scalar(f.softcap, f.dtype);
    capped = b.Mul(b.Tanh(b.Div(product, cap)), cap);
  }
  const Value scores = bias.absent() ? capped : b.Add(capped, bias);
  const bool widen = f.softmax_type != f.dtype;
  Value probs = b.op("Softmax", {widen ? b.Cast(scores, f.softmax_type) : scores}, {attr("axis", int64_t{-1})});
  if (widen) probs = b.Cast(probs, f.dtype);
  if (!bias.absent()) {  // rows where every key is masked: zeros, not the NaN of Softmax(-inf, ...)
    const Value bias_float = f.dtype == TensorProto::FLOAT ? bias : b.Cast(bias, TensorProto::FLOAT);
    const Value row_max = b.Reduce("ReduceMax", bias_float, {-1});
    // max = -inf; below 10, where IsInf is missing, as less than the lowest float.
    const Value all_masked =
        b.opset() >= 10 ? b.op("IsInf", {row_max}, {attr("detect_positive", int64_t{0})})
                        : b.op("Less", {row_max, b.scalar(-std::numeric_limits<float>::max(), TensorProto::FLOAT)});
    probs = b.Where(all_masked, b.scalar(0, f.dtype), probs);
  }
  Value y = b.MatMul(probs, values);
  if (f.three_d) {
    const Value y_bshd = b.Transpose(y, {0, 2, 1, 3});
    y = b.Reshape(y_bshd, b.ints({0, 0, -1}));
  }
  b.output(match.value("y"), y);
  if (match.has("present_key")) b.output(match.value("present_key"), present_key);
  if (match.has("present_value")) b.output(match.value("present_value"), present_value);
  if (match.has("qk_matmul_output")) {
    const Value by_mode[] = {product, capped, scores, probs};
    b.output(match.value("qk_matmul_output"), by_mode[f.qk_mode]);
  }
  return built();
}

// RotaryEmbedding-23 (onnx/defs/nn/defs.cc): x 4-D [B, N, S, H] or 3-D [B, S, N·H] (num_heads);
// cos/sin = cache[position_ids] ([B, S, ·]) or the caches as given (already [B, S, ·]), their
// first R/2 values (R = rotary_embedding_dim, or H); the first R values of each head rotated in
// halves or interleaved pairs (rotary_embedding in toolkit.h), in x's own type.
BuildResult lower_rotary_embedding(const BuildContext& match, GraphBuilder& b) {
  const auto& x_facts = match.facts("x");
  if (!x_facts.rank() || (*x_facts.rank() != 3 && *x_facts.rank() != 4)) return decline("x must be 3-D or 4-D of known rank");
  const bool three_d = *x_facts.rank() == 3;
  const int64_t heads = match.attribute_int("num_heads", 0);
  if (three_d && heads <= 0) return decline("3-D input without num_heads");
  const int64_t head_size = three_d ? (x_facts.dim(2) > 0 ? x_facts.dim(2) / heads : -1) : x_facts.dim(3);
  const int64_t rotary_dim = match.attribute_int("rotary_embedding_dim", 0) > 0 ? match.attribute_int("rotary_embedding_dim", 0) : head_size;
  if (rotary_dim <= 0) return decline("the head size is unknown (rotary_embedding_dim is 0: the whole head rotates)");
  if (rotary_dim % 2 != 0) return decline(fmt::format("rotary_embedding_dim {} is odd", rotary_dim));
  if (head_size > 0 && rotary_dim > head_size) return decline(fmt::format("rotary_embedding_dim {} exceeds the head size {}", rotary_dim, head_size));
  Value cos{match.value("cos_cache")}, sin{match.value("sin_cache")};
  if (match.has("position_ids")) {
    cos = b.Gather(cos, match.value("position_ids"));
    sin = b.Gather(sin, match.value("position_ids"));
  }
  if (match.facts("cos_cache").dim(match.facts("cos_cache").rank().value_or(1) - 1) != rotary_dim / 2) {
    cos = b.Slice(cos, {0}, {rotary_dim / 2}, {-1});
    sin = b.Slice(sin, {0}, {rotary_dim / 2}, {-1});
  }
  // [B, S, R/2] against [B, S, N, ·] (3-D, viewed so) or [B, N, S, ·]
  cos = b.Unsqueeze(cos, {three_d ? 2 : 1});
  sin = b.Unsqueeze(sin, {three_d ? 2 : 1});
  Value x{match.value("x")};
  if (three_d) x = b.Reshape(x, b.ints({0, 0, heads, -1}));
  Value y = rotary_embedding(b, x, cos, sin, head_size, rotary_dim, match.attribute_int("interleaved", 0) != 0);
  if (three_d) y = b.Reshape(y, b.ints({0, 0, -1}));
  b.output(match.value("y"), y);
  return built();
}

// TensorScatter-24 (onnx/defs/tensor/defs.cc): the update written into the cache along `axis`
// from write_indices[b] (0 without them) on, modulo the cache's length in mode "circular": one
// ScatterElements whose indices, [B, S] positions, are spread to the update's shape.
BuildResult lower_tensor_scatter(const BuildContext& match, GraphBuilder& b) {
  const auto rank = match.facts("past_cache").rank();
  if (!rank) return decline("the rank of past_cache is unknown");
  const auto r = static_cast<int64_t>(*rank);
  int64_t axis = match.attribute_int("axis", -2);
  if (axis < 0) axis += r;
  if (axis <= 0 || axis >= r) return decline(fmt::format("axis {} is the batch axis or outside rank {}", match.attribute_int("axis", -2), r));
  const std::string mode = match.attribute_string("mode", "linear");
  if (mode != "linear" && mode != "circular") return decline(fmt::format("mode '{}' is not linear or circular", mode));
  const Value update{match.value("update")};
  const Value update_shape = b.Shape(update);
  const Value length = dim(b, update_shape, axis);
  const Value steps = b.Unsqueeze(range(b, length), {0});  // [1, S]
  Value positions = steps;
  if (match.has("write_indices")) {
    const Value starts = b.Cast(match.value("write_indices"), TensorProto::INT64);
    positions = b.Add(b.Unsqueeze(starts, {1}), steps);  // [B, S]
  }
  if (mode == "circular") {
    const Value cache_shape = b.Shape(match.value("past_cache"));
    const Value cache_length = dim(b, cache_shape, axis);
    positions = b.op("Mod", {positions, cache_length});
  }
  std::vector<int64_t> spread;  // every axis but the batch and the sequence
  for (int64_t i = 1; i < r; ++i) {
    if (i != axis) spread.push_back(i);
  }
  if (!spread.empty()) positions = b.Unsqueeze(positions, spread);
  const Value indices = b.op("Expand", {positions, update_shape});
  b.output(match.value("present_cache"),
           b.op("ScatterElements", {match.value("past_cache"), indices, update}, {attr("axis", axis)}));
  return built();
}

}  // namespace

void register_lower_attention_builders(BuilderRegistry& registry) {
  registry.add("lower_tensor_scatter",
               {.values = {"past_cache", "update", "present_cache"}, .optional_values = {"write_indices"}, .attributes = {},
                .optional_attributes = {"axis", "mode"}},
               lower_tensor_scatter);
  registry.add("lower_rotary_embedding",
               {.values = {"x", "cos_cache", "sin_cache", "y"},
                .optional_values = {"position_ids"},
                .attributes = {},
                .optional_attributes = {"interleaved", "rotary_embedding_dim", "num_heads"}},
               lower_rotary_embedding);
  registry.add("lower_attention",
               {.values = {"q", "k", "v", "y"},
                .optional_values = {"attn_mask", "past_key", "past_value", "nonpad_kv_seqlen", "present_key", "present_value",
                                    "qk_matmul_output"},
                .attributes = {},
                .optional_attributes = {"is_causal", "scale", "q_num_heads", "kv_num_heads", "softmax_precision", "softcap",
                                        "qk_matmul_output_mode"}},
               lower_attention);
}

}  // namespace onnx_rewrite
