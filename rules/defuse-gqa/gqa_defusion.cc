// com.microsoft GroupQueryAttention back to standard ONNX (defuse-gqa.rules), with the numbers of
// ONNX Runtime's CPU kernel (contrib_ops/cpu/bert/group_query_attention.cc,
// group_query_attention_helper.h, gqa_attention_base.h; ORT 1.30):
//
//   tot_b  = seqlens_k[b] + 1 (the valid length of sequence b: past + new, without right padding)
//   first  = S == total_sequence_length (a prompt: every sequence starts at 0)
//   past_b = first ? 0 : tot_b - S  (where sequence b's S new tokens go)
//   RoPE (do_rotary) on Q and K at positions past_b + s, or position_ids (on a prompt only
//     position_ids[0, 0] + s, for every batch: the kernel's reading); rounded to T.
//   present[b, :, t] = past[b, :, t] (t < past_b), K[b, :, t - past_b] (past_b <= t < past_b + S),
//     0 after; length max(total_sequence_length, past buffer length). (Non-shared buffers: a rewrite
//     can't alias past and present; feeding present back as past works for both.)
//   scores = scale·Q·Kᵀ over the first total_sequence_length keys, query head h using KV head
//     h / (N / N_kv); softcap; + attention_bias; keys t in [eff - W, eff) kept, eff = min(past_b + s
//     + 1, tot_b), W = local_window_size (ORT >= 1.24: W keys, the current one included), all
//     t < tot_b with causal = 0; softmax (smooth_softmax / head_sink: one more logit, 0 or the
//     head's sink, in the denominator); output = probs·V.
// float16: Q, K, V widened after the rotation's rounding; all arithmetic in float, rounded once.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

struct Form {
  int64_t heads = 0, kv_heads = 0, head_size = 0, rotary_dim = 0;
  bool packed = false, past = false, rotary = false, interleaved = false, causal = true, sink = false;
  int64_t window = -1;
  float scale = 0.f, softcap = 0.f;
  int32_t dtype = 0;
  int64_t groups() const { return heads / kv_heads; }
};

std::string read_form(const BuildContext& match, Form& f) {
  for (const char* input : {"k_scale", "v_scale"}) {
    if (match.has(input)) return fmt::format("{} (quantized KV cache) is not rewritten", input);
  }
  for (const char* input : {"q_norm_weight", "k_norm_weight"}) {
    if (match.has(input)) return fmt::format("{} (per-head RMSNorm inside the op): ONNX Runtime's CPU kernel refuses it", input);
  }
  for (const char* attribute : {"k_quant_type", "v_quant_type"}) {
    const std::string type = match.attribute_string(attribute, "NONE");
    if (type != "NONE") return fmt::format("{} = {} (quantized KV cache) is not rewritten", attribute, type);
  }
  if (match.attribute_int("sliding_window_cache", 0) != 0) {
    return "sliding_window_cache = 1 (window-sized ring caches) is not rewritten";
  }
  if (match.attribute_int("qk_output", 0) != 0 || match.has("output_qk")) {
    return "qk_output: ONNX Runtime leaves the scores past seqlens_k unspecified, so nothing proves a rewrite of them";
  }
  f.heads = match.attribute_int("num_heads", 0);
  f.kv_heads = match.attribute_int("kv_num_heads", 0);
  if (f.heads <= 0 || f.kv_heads <= 0 || f.heads % f.kv_heads != 0) {
    return fmt::format("num_heads {} must be a positive multiple of kv_num_heads {}", f.heads, f.kv_heads);
  }
  f.dtype = match.element_type({"query", "key", "value", "past_key", "cos_cache", "attention_bias"});
  if (f.dtype == TensorProto::BFLOAT16) {
    return "bfloat16: ONNX Runtime's CPU provider has no bfloat16 GroupQueryAttention to prove the rewrite against";
  }
  if (auto why = check_element_type(f.dtype, {TensorProto::FLOAT, TensorProto::FLOAT16}, "GroupQueryAttention")) return *why;
  const auto& query = match.facts("query");
  if (query.rank() && *query.rank() != 3) return fmt::format("query has rank {}; the kernel takes [B, S, D]", *query.rank());
  f.packed = !match.has("key");
  if (f.packed == match.has("value")) return "key and value must be given together (or neither: packed QKV)";
  const int64_t parts = f.packed ? f.heads + 2 * f.kv_heads : f.heads;
  if (const int64_t hidden = query.dim(2); hidden > 0) {
    if (hidden % parts != 0) return fmt::format("query's hidden size {} is not {} heads of equal size", hidden, parts);
    f.head_size = hidden / parts;
  } else {
    // query often comes from an op the shapes don't go through (MatMulNBits): the head size
    // from the cache (a graph input, declared) or the key.
    const auto outputs = match.anchor().outputs();
    std::vector<int64_t> candidates;
    if (match.has("past_key")) candidates.push_back(match.facts("past_key").dim(3));
    if (outputs.size() > 1 && !outputs[1].absent()) candidates.push_back(match.facts_of(outputs[1]).dim(3));
    if (match.has("key") && match.facts("key").dim(2) > 0) candidates.push_back(match.facts("key").dim(2) / f.kv_heads);
    for (int64_t candidate : candidates) {
      if (candidate > 0) {
        f.head_size = candidate;
        break;
      }
    }
    if (f.head_size <= 0) return "the head size is unknown (query's dim 2, past_key's and present_key's dim 3)";
  }
  if (match.has("past_key") != match.has("past_value")) return "past_key and past_value must be given together";
  f.past = match.has("past_key");
  // The node's own outputs, used or not: ORT 1.30's kernel reads the cache only through present.
  const auto outputs = match.anchor().outputs();
  const bool writes_present = outputs.size() > 2 && !outputs[1].absent() && !outputs[2].absent();
  if (f.past && !writes_present) {
    return "past state without both present outputs: ONNX Runtime 1.30's CPU kernel then reads keys and values past "
           "the new ones instead of the cache, so nothing proves a rewrite";
  }
  f.rotary = match.attribute_int("do_rotary", 0) != 0;
  f.interleaved = match.attribute_int("rotary_interleaved", 0) != 0;
  if (f.rotary) {
    if (!match.has("cos_cache") || !match.has("sin_cache")) return "do_rotary without cos_cache and sin_cache";
    const int64_t half = match.facts("cos_cache").dim(1);
    if (half <= 0) return "the width of cos_cache (dim 1) is unknown";
    f.rotary_dim = 2 * half;
    if (f.rotary_dim > f.head_size) return fmt::format("cos_cache rotates {} values, more than the head size {}", f.rotary_dim, f.head_size);
  }
  f.window = match.attribute_int("local_window_size", -1);
  if (f.window == 0) return "local_window_size = 0 leaves no key to attend to";
  f.causal = match.attribute_int("causal", 1) != 0;
  f.softcap = match.attribute_float("softcap", 0.f);
  f.scale = match.attribute_float("scale", 0.f);
  if (f.scale == 0.f) f.scale = 1.f / std::sqrt(static_cast<float>(f.head_size));
  f.sink = match.has("head_sink") || match.attribute_int("smooth_softmax", -1) == 1;
  return {};
}

Value int64_scalar(GraphBuilder& b, double value) { return b.scalar(value, TensorProto::INT64); }

Value range(GraphBuilder& b, Value end) {
  const Value start = int64_scalar(b, 0);
  const Value step = int64_scalar(b, 1);
  return range_values(b, start, end, step, TensorProto::INT64);
}

// The run-time quantities every part needs.
struct Lengths {
  Value length;      // S, int64 scalar
  Value total;       // total_sequence_length, int64 scalar
  Value total_1d;    // the same as [1]
  Value valid;       // tot_b = seqlens_k + 1, int64 [B]
  Value first;       // S == total_sequence_length, bool scalar
  Value start;       // past_b, int64 [B]
  Value steps;       // [0, S), int64 [S]
  Value positions;   // past_b + s, int64 [B, S]
};

Lengths lengths(const BuildContext& match, GraphBuilder& b) {
  Lengths l;
  const Value shape = b.Shape(match.value("query"));
  l.length = b.Gather(shape, int64_scalar(b, 1));
  l.total_1d = b.Cast(b.Reshape(match.value("total_sequence_length"), b.ints({1})), TensorProto::INT64);
  l.total = b.Squeeze(l.total_1d, {0});
  const Value seqlens = b.Cast(match.value("seqlens_k"), TensorProto::INT64);
  l.valid = b.Add(seqlens, int64_scalar(b, 1));
  l.first = b.op("Equal", {l.length, l.total});
  const Value zero = int64_scalar(b, 0);
  const Value continued = b.Sub(l.valid, l.length);
  l.start = b.Where(l.first, zero, continued);
  l.steps = range(b, l.length);
  const Value start_column = b.Unsqueeze(l.start, {1});
  const Value steps_row = b.Unsqueeze(l.steps, {0});
  l.positions = b.Add(start_column, steps_row);
  return l;
}

// The RoPE positions: past_b + s, or position_ids (a prompt reads only position_ids[0, 0] + s).
Value rotary_positions(const BuildContext& match, GraphBuilder& b, const Lengths& l) {
  if (!match.has("position_ids")) return l.positions;
  const Value ids = match.value("position_ids");
  const Value corner = b.Slice(ids, {0, 0}, {1, 1}, {0, 1});
  const Value steps_row = b.Unsqueeze(l.steps, {0});
  const Value prompt = b.Add(corner, steps_row);
  return b.Where(l.first, prompt, ids);
}

// x [B, S, heads, H] in T, rotated and rounded to T (as the kernel writes it).
Value rotate(const BuildContext& match, GraphBuilder& b, const Form& f, Value x, int64_t heads, Value positions) {
  const bool widen = f.dtype == TensorProto::FLOAT16;
  if (b.opset() >= 23) {  // RotaryEmbedding-23 on the [B, S, heads·H] view, in T
    Attributes attributes{attr("interleaved", int64_t{f.interleaved}), attr("num_heads", heads)};
    if (f.rotary_dim < f.head_size) attributes.push_back(attr("rotary_embedding_dim", f.rotary_dim));
    const Value flat = b.Reshape(x, b.ints({0, 0, heads * f.head_size}));
    const Value rotated = b.op("RotaryEmbedding", {flat, match.value("cos_cache"), match.value("sin_cache"), positions},
                               std::move(attributes));
    return b.Reshape(rotated, b.ints({0, 0, heads, f.head_size}));
  }
  Value cos = b.Unsqueeze(b.Gather(match.value("cos_cache"), positions), {2});  // [B, S, 1, R/2]
  Value sin = b.Unsqueeze(b.Gather(match.value("sin_cache"), positions), {2});
  if (widen) {
    x = b.Cast(x, TensorProto::FLOAT);
    cos = b.Cast(cos, TensorProto::FLOAT);
    sin = b.Cast(sin, TensorProto::FLOAT);
  }
  const Value y = rotary_embedding(b, x, cos, sin, f.head_size, f.rotary_dim, f.interleaved);
  return widen ? b.Cast(y, f.dtype) : y;
}

// Where the rows of present come from: [B, 1, P*, 1] masks of the new rows (t - past_b in [0, S))
// and the old ones (t < past_b), the new row each reads, and the zero padding of the past buffer.
struct Placement {
  Value is_new, is_old, index, pads;
};

Placement placement(const BuildContext& match, GraphBuilder& b, const Form& f, const Lengths& l) {
  Placement p;
  Value length = l.total;  // P* = max(T, P_buf)
  Value past_length;
  if (f.past) {
    const Value past_shape = b.Shape(match.value("past_key"));
    past_length = b.Gather(past_shape, int64_scalar(b, 2));
    length = b.op("Max", {l.total, past_length});
  }
  const Value rows = range(b, length);                   // [P*]
  const Value rows_row = b.Unsqueeze(rows, {0});          // [1, P*]
  const Value start_column = b.Unsqueeze(l.start, {1});   // [B, 1]
  const Value offset = b.Sub(rows_row, start_column);     // [B, P*]: t - past_b
  const Value zero = int64_scalar(b, 0);
  const Value last = b.Sub(l.length, int64_scalar(b, 1));
  const Value after_start = b.op("GreaterOrEqual", {offset, zero});
  const Value before_end = b.op("Less", {offset, l.length});
  p.is_new = b.Unsqueeze(b.op("And", {after_start, before_end}), {1, 3});
  p.index = b.Unsqueeze(b.op("Clip", {offset, zero, last}), {2});  // [B, P*, 1]
  if (f.past) {
    p.is_old = b.Unsqueeze(b.op("Less", {rows_row, start_column}), {1, 3});
    const Value extra = b.Sub(length, past_length);
    p.pads = b.Concat({b.ints({0, 0, 0, 0, 0, 0}), b.Unsqueeze(extra, {0}), b.ints({0})}, 0);
  }
  return p;
}

// present [B, N_kv, P*, H] in T: the past's first past_b rows, the new rows at past_b, zeros
// after. `fresh` [B, S, N_kv, H].
Value present(const BuildContext& match, GraphBuilder& b, const Form& f, const Placement& p, Value fresh, const char* past_name) {
  const Value gathered = b.op("GatherND", {fresh, p.index}, {attr("batch_dims", int64_t{1})});  // [B, P*, N_kv, H]
  const Value placed = b.Transpose(gathered, {0, 2, 1, 3});
  Value rest = b.scalar(0, f.dtype);
  if (f.past) {
    const Value padded = b.op("Pad", {match.value(past_name), p.pads});
    rest = b.Where(p.is_old, padded, rest);
  }
  return b.Where(p.is_new, placed, rest);
}

// The keys (values) the queries read: present's first total_sequence_length rows, in float.
Value attended(GraphBuilder& b, const Form& f, const Lengths& l, Value all) {
  const Value sliced = b.op("Slice", {all, b.ints({0}), l.total_1d, b.ints({2})});
  return f.dtype == TensorProto::FLOAT16 ? b.Cast(sliced, TensorProto::FLOAT) : sliced;
}

// Which keys each query keeps: [B, 1, S, T] (causal) or [B, 1, 1, T] (causal = 0), bool.
Value kept_keys(GraphBuilder& b, const Form& f, const Lengths& l) {
  const Value keys = range(b, l.total);  // [T]
  const Value valid_column = b.Unsqueeze(l.valid, {1});
  if (!f.causal) {
    const Value keys_row = b.Unsqueeze(keys, {0});
    return b.Unsqueeze(b.op("Less", {keys_row, valid_column}), {1, 2});
  }
  const Value next = b.Add(l.positions, int64_scalar(b, 1));
  const Value end = b.op("Min", {next, valid_column});     // [B, S]
  const Value end_3d = b.Unsqueeze(end, {2});
  Value kept = b.op("Less", {keys, end_3d});               // [B, S, T]
  if (f.window >= 0) {  // from the row's own position: past a sequence's end (padded prompt rows) it may be empty
    const Value window_start = b.Unsqueeze(b.Sub(next, int64_scalar(b, static_cast<double>(f.window))), {2});
    kept = b.op("And", {kept, b.op("GreaterOrEqual", {keys, window_start})});
  }
  return b.Unsqueeze(kept, {1});
}

// Rows whose window holds a key, [B, 1, S, 1] (ORT writes 0 for the others: padded prompt rows
// whose window lies past their sequence's end).
Value rows_with_keys(GraphBuilder& b, const Form& f, const Lengths& l) {
  const Value next = b.Add(l.positions, int64_scalar(b, 1));
  const Value valid_column = b.Unsqueeze(l.valid, {1});
  const Value end = b.op("Min", {next, valid_column});
  const Value start = b.Sub(next, int64_scalar(b, static_cast<double>(f.window)));
  return b.Unsqueeze(b.op("Less", {start, end}), {1, 3});
}

// [B, N_kv, T, H] -> [B, N, T, H]: query head h reads KV head h / G.
Value repeat_heads(GraphBuilder& b, const Form& f, Value x) {
  if (f.groups() == 1) return x;
  const Value expanded = b.op("Expand", {b.Unsqueeze(x, {2}), b.ints({1, 1, f.groups(), 1, 1})});
  return b.Reshape(expanded, b.ints({0, f.heads, -1, f.head_size}));
}

BuildResult build(const BuildContext& match, GraphBuilder& b, bool onnx23) {
  Form f;
  if (auto why = read_form(match, f); !why.empty()) return decline(why);
  if (onnx23 && (f.softcap > 0.f || f.sink)) {
    return decline("softcap, smooth_softmax and head_sink: where Attention-23 applies softcap changed between ONNX releases, "
           "and it has no sink (the decomposition takes them)");
  }
  const bool widen = f.dtype == TensorProto::FLOAT16;
  Value q{match.value("query")}, k, v;
  if (f.packed) {
    const auto parts = b.Split(q, 2, {f.heads * f.head_size, f.kv_heads * f.head_size, f.kv_heads * f.head_size});
    q = parts[0], k = parts[1], v = parts[2];
  } else {
    k = match.value("key");
    v = match.value("value");
  }
  q = b.Reshape(q, b.ints({0, 0, f.heads, f.head_size}));  // [B, S, N, H]
  k = b.Reshape(k, b.ints({0, 0, f.kv_heads, f.head_size}));
  v = b.Reshape(v, b.ints({0, 0, f.kv_heads, f.head_size}));
  const Lengths l = lengths(match, b);
  if (f.rotary) {
    const Value positions = rotary_positions(match, b, l);
    q = rotate(match, b, f, q, f.heads, positions);
    k = rotate(match, b, f, k, f.kv_heads, positions);
  }
  const Placement rows = placement(match, b, f, l);
  const Value present_key = present(match, b, f, rows, k, "past_key");
  const Value present_value = present(match, b, f, rows, v, "past_value");
  Value queries = b.Transpose(q, {0, 2, 1, 3});  // [B, N, S, H]
  if (widen) queries = b.Cast(queries, TensorProto::FLOAT);
  const Value keys = attended(b, f, l, present_key);  // [B, N_kv, T, H] float
  const Value values = attended(b, f, l, present_value);
  const Value kept = kept_keys(b, f, l);
  Value context;  // [B, N, S, H] float
  if (onnx23) {
    Value mask = kept;
    if (match.has("attention_bias")) {
      Value bias = match.value("attention_bias");
      if (widen) bias = b.Cast(bias, TensorProto::FLOAT);
      mask = b.Where(kept, bias, b.scalar(std::numeric_limits<float>::lowest()));
    }
    if (!f.causal) {  // ORT's Attention-23 kernel wants the mask's query axis spelled out
      const Value queries_1d = b.Unsqueeze(l.length, {0});
      mask = b.op("Expand", {mask, b.Concat({b.ints({1, 1}), queries_1d, b.ints({1})}, 0)});
    }
    const Value expanded_keys = repeat_heads(b, f, keys);
    const Value expanded_values = repeat_heads(b, f, values);
    context = b.op("Attention", {queries, expanded_keys, expanded_values, mask}, {attr("scale", f.scale)});
  } else {
    // Q grouped per KV head: [B, N_kv, G·S, H] (head h = kv·G + g), so K and V are not repeated.
    const Value grouped = b.Reshape(queries, b.ints({0, f.kv_heads, -1, f.head_size}));
    const Value product = b.MatMul(grouped, b.Transpose(keys, {0, 1, 3, 2}));
    const Value scores_grouped = b.Mul(product, b.scalar(f.scale));
    Value scores = b.Reshape(scores_grouped, b.ints({0, f.heads, -1, 0}));  // [B, N, S, T]
    if (f.softcap > 0.f) {
      const Value cap = b.scalar(f.softcap);
      scores = b.Mul(b.Tanh(b.Div(scores, cap)), cap);
    }
    if (match.has("attention_bias")) {
      Value bias = match.value("attention_bias");
      if (widen) bias = b.Cast(bias, TensorProto::FLOAT);
      scores = b.Add(scores, bias);
    }
    scores = b.Where(kept, scores, b.scalar(std::numeric_limits<float>::lowest()));
    Value probs;
    if (f.sink) {  // one more logit per row: the head's sink (0 for smooth_softmax), dropped after
      Value sink = match.has("head_sink") ? match.value("head_sink") : b.floats(std::vector<double>(f.heads, 0.0));
      if (widen && match.has("head_sink")) sink = b.Cast(sink, TensorProto::FLOAT);
      const Value sink_4d = b.Reshape(sink, b.ints({1, f.heads, 1, 1}));
      const Value row_shape = b.Slice(b.Shape(scores), {0}, {3}, {0});
      const Value column = b.op("Expand", {sink_4d, b.Concat({row_shape, b.ints({1})}, 0)});
      const Value normalized = b.op("Softmax", {b.Concat({scores, column}, -1)}, {attr("axis", int64_t{-1})});
      probs = b.op("Slice", {normalized, b.ints({0}), l.total_1d, b.ints({3})});
    } else {
      probs = b.op("Softmax", {scores}, {attr("axis", int64_t{-1})});
    }
    const Value probs_grouped = b.Reshape(probs, b.ints({0, f.kv_heads, -1, 0}));
    const Value context_grouped = b.MatMul(probs_grouped, values);
    context = b.Reshape(context_grouped, b.ints({0, f.heads, -1, f.head_size}));
  }
  if (f.causal && f.window >= 0) {
    // The zero first: the order g++ made them in when they were arguments of one call.
    const Value zero = b.scalar(0);
    const Value rows = rows_with_keys(b, f, l);
    context = b.Where(rows, context, zero);
  }
  const Value context_bsnh = b.Transpose(context, {0, 2, 1, 3});
  const Value joined = b.Reshape(context_bsnh, b.ints({0, 0, f.heads * f.head_size}));
  b.output(match.value("output"), widen ? b.Cast(joined, f.dtype) : joined);
  if (match.has("present_key")) b.output(match.value("present_key"), present_key);
  if (match.has("present_value")) b.output(match.value("present_value"), present_value);
  if (f.window >= 0) {
    b.note("GroupQueryAttention local_window_size = W is rewritten with ONNX Runtime >= 1.24's window: W keys, the current "
           "one included (ORT <= 1.23 attended W + 1 keys)");
  }
  return built();
}

}  // namespace

void register_defuse_gqa_builders(BuilderRegistry& registry) {
  const BuilderSignature signature{
      .values = {"query", "seqlens_k", "total_sequence_length", "output"},
      .optional_values = {"key", "value", "past_key", "past_value", "cos_cache", "sin_cache", "position_ids", "attention_bias",
                          "head_sink", "k_scale", "v_scale", "q_norm_weight", "k_norm_weight", "present_key", "present_value",
                          "output_qk"},
      .attributes = {"num_heads", "kv_num_heads"},
      .optional_attributes = {"scale", "softcap", "local_window_size", "do_rotary", "rotary_interleaved", "smooth_softmax",
                              "qk_output", "causal", "sliding_window_cache", "k_quant_type", "v_quant_type"}};
  registry.add("group_query_attention_as_onnx23", signature,
               [](const BuildContext& match, GraphBuilder& b) { return build(match, b, true); });
  registry.add("defuse_group_query_attention", signature,
               [](const BuildContext& match, GraphBuilder& b) { return build(match, b, false); });
}

}  // namespace onnx_rewrite
