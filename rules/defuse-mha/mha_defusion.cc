// com.microsoft MultiHeadAttention back to standard ONNX (defuse-mha.rules), with the numbers of
// ONNX Runtime's CPU kernel (contrib_ops/cpu/bert/multihead_attention.cc,
// multihead_attention_helper.h, attention_cpu_base.h, attention_helper.h):
//
//   Q, K, V = query, key, value (+ their slices of bias), split into N heads of H (V: Hv)
//             (key/value given as [B, N, L, H] are taken as they are, without bias);
//   K, V    = past ++ K, V along the sequence (= present_key, present_value);
//   scores  = scale·Q·Kᵀ + (attention_bias + mask), scale 1/√H by default   (= output qk);
//   output  = softmax(scores)·V, heads joined back.
//   mask: mask_filter_value (-10000) added where key_padding_mask hides a key (a finite shift, never
//   -inf: a row hidden entirely is the plain softmax); unidirectional (only when S > 1): the keys
//   after P + s set to the lowest float (replacing, not adding to, the padding value).
// float16 is computed in float and rounded once at the end (what ORT's CPU provider does).
//
// Two forms: ai.onnx Attention-23 on 4-D Q, K, V with an explicit float mask (no is_causal, equal
// head counts: the parts of Attention-23 whose meaning is the same in every ONNX release) where the
// opset has it and `qk` is unused; the decomposition above otherwise (ai.onnx >= 13).
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

// How ORT reads key_padding_mask (multihead_attention_helper.h GetMaskType), by rank.
enum class MaskForm {
  kNone,
  kLengths,       // [B] (or [3B + 2], of which the CPU kernel reads the first B): keys t >= length[b] hidden
  kKeys,          // [B, T]: a value > 0 keeps the key
  kQueriesKeys,   // [B, S, T]
};

struct Form {
  int64_t heads = 0, head_size = 0, hidden = 0;  // N, H, D = N·H
  int64_t value_head_size = -1;                   // Hv, -1 when only known at run time
  bool bnsh_kv = false;                           // key/value [B, N, L, H] (cross attention, projected)
  bool past = false;
  MaskForm mask = MaskForm::kNone;
  int32_t dtype = 0;
};

std::string read_form(const BuildContext& match, Form& form) {
  if (match.has("past_sequence_length") || match.has("cache_indirection")) {
    return "past_sequence_length / cache_indirection (the shared-buffer beam-search path of "
           "DecoderMaskedMultiHeadAttention) is not rewritten";
  }
  form.heads = match.attribute_int("num_heads", 0);
  if (form.heads <= 0) return "num_heads must be positive";
  form.dtype = match.element_type({"query", "key", "value", "bias", "attention_bias", "past_key"});
  if (form.dtype == TensorProto::BFLOAT16) {
    return "bfloat16: ONNX Runtime's CPU provider has no bfloat16 MultiHeadAttention to prove the rewrite against";
  }
  if (auto why = check_element_type(form.dtype, {TensorProto::FLOAT, TensorProto::FLOAT16}, "MultiHeadAttention")) return *why;
  const auto& query = match.facts("query");
  if (!query.rank()) return "the rank of query is unknown";
  if (*query.rank() == 5) return "packed QKV (query [B, S, N, 3, H]): ONNX Runtime's CPU kernel does not implement it";
  if (*query.rank() != 3) return fmt::format("query has rank {}; the CPU kernel takes [B, S, D]", *query.rank());
  if (!match.has("key")) return "query without key and value (packed QKV): ONNX Runtime's CPU kernel does not implement it";
  if (match.facts("key").rank() == 5) return "packed KV (key [B, L, N, 2, H]): ONNX Runtime's CPU kernel does not implement it";
  if (!match.has("value")) return "key without value: ONNX Runtime's CPU kernel takes both or packed forms it does not implement";
  form.hidden = query.dim(2);
  if (form.hidden <= 0) {
    // query often comes from an op the shapes don't go through (MatMulNBits): D from the key, the
    // cache (a graph input, declared) or present_key.
    const auto& key_facts = match.facts("key");
    const auto outputs = match.anchor().outputs();
    std::vector<int64_t> candidates;
    if (key_facts.rank() == 3) candidates.push_back(key_facts.dim(2));
    if (key_facts.rank() == 4 && key_facts.dim(3) > 0) candidates.push_back(key_facts.dim(3) * form.heads);
    if (match.has("past_key") && match.facts("past_key").dim(3) > 0) candidates.push_back(match.facts("past_key").dim(3) * form.heads);
    if (outputs.size() > 1 && !outputs[1].absent() && match.facts_of(outputs[1]).dim(3) > 0) {
      candidates.push_back(match.facts_of(outputs[1]).dim(3) * form.heads);
    }
    for (int64_t candidate : candidates) {
      if (candidate > 0) {
        form.hidden = candidate;
        break;
      }
    }
    if (form.hidden <= 0) return "the hidden size is unknown (query's and key's dim 2, the head size of key, past_key, present_key)";
  }
  if (form.hidden % form.heads != 0) return fmt::format("the hidden size {} is not divisible by num_heads {}", form.hidden, form.heads);
  form.head_size = form.hidden / form.heads;
  const auto& key = match.facts("key");
  const auto& value = match.facts("value");
  if (!key.rank() || !value.rank()) return "the rank of key or value is unknown";
  if (*key.rank() != *value.rank() || (*key.rank() != 3 && *key.rank() != 4)) {
    return fmt::format("key and value have ranks {} and {}; the CPU kernel takes both 3 or both 4", *key.rank(), *value.rank());
  }
  form.bnsh_kv = *key.rank() == 4;
  if (form.bnsh_kv) {
    if ((key.dim(1) >= 0 && key.dim(1) != form.heads) || (key.dim(3) >= 0 && key.dim(3) != form.head_size)) {
      return fmt::format("key is {}, not [B, {}, L, {}] (ONNX Runtime refuses the node)", dims_text(key.shape), form.heads,
                         form.head_size);
    }
  } else if (key.dim(2) >= 0 && key.dim(2) != form.hidden) {
    return fmt::format("key's hidden size {} differs from query's {} (ONNX Runtime refuses the node)", key.dim(2), form.hidden);
  } else if (value.dim(2) > 0) {
    if (value.dim(2) % form.heads != 0) return fmt::format("value's hidden size {} is not divisible by num_heads {}", value.dim(2), form.heads);
    form.value_head_size = value.dim(2) / form.heads;
  }
  if (match.has("past_key") != match.has("past_value")) return "past_key and past_value must be given together";
  form.past = match.has("past_key");
  if (form.past && form.bnsh_kv) return "past state with key/value [B, N, L, H]: ONNX Runtime's CPU kernel does not take it";
  // The node's own outputs, used or not: ORT's kernel reads the past only when it writes present
  // (attention_cpu_base.h ApplyAttention).
  const auto outputs = match.anchor().outputs();
  const bool present_key = outputs.size() > 1 && !outputs[1].absent(), present_value = outputs.size() > 2 && !outputs[2].absent();
  if (form.past && !(present_key && present_value)) {
    return present_key || present_value
               ? "past state with only one of present_key, present_value: ONNX Runtime's CPU kernel then reads past the "
                 "end of its buffers"
               : "past state without present_key and present_value: ONNX Runtime's CPU kernel then ignores the past "
                 "(a kernel quirk; other providers use it), so what the node means is in doubt";
  }
  if (match.has("key_padding_mask")) {
    const auto& mask = match.facts("key_padding_mask");
    if (!mask.rank()) return "the rank of key_padding_mask is unknown (ONNX Runtime reads it by rank)";
    switch (*mask.rank()) {
      case 1: form.mask = MaskForm::kLengths; break;
      case 2: form.mask = MaskForm::kKeys; break;
      case 3: form.mask = MaskForm::kQueriesKeys; break;
      default: return fmt::format("key_padding_mask has rank {}: ONNX Runtime takes [B], [3B + 2], [B, T] and [B, S, T]", *mask.rank());
    }
  }
  return {};
}

double lowest_float() { return std::numeric_limits<float>::lowest(); }

// A dim of a value as an int64 scalar.
Value dim_scalar(GraphBuilder& b, Value x, int64_t axis) {
  const Value shape = b.Shape(x);
  return b.Gather(shape, b.scalar(static_cast<double>(axis), TensorProto::INT64));
}

Value range(GraphBuilder& b, Value start, Value end) {
  const Value step = b.scalar(1, TensorProto::INT64);
  return range_values(b, start, end, step, TensorProto::INT64);
}

struct Projected {
  Value q, k, v;       // [B, N, S|L, H] in the compute type; k, v without the past
  Value past_k, past_v;
};

Projected project(const BuildContext& match, GraphBuilder& b, const Form& form) {
  const bool widen = form.dtype == TensorProto::FLOAT16;
  auto compute = [&](Value x) { return widen ? b.Cast(x, TensorProto::FLOAT) : x; };
  const Value bias = match.has("bias") ? compute(match.value("bias")) : Value{};
  auto heads = [&](Value x, int64_t from, int64_t to, int64_t size) {
    if (!bias.absent()) {
      const Value part = to < 0 ? b.Slice(bias, {from}, {std::numeric_limits<int64_t>::max()}, {0}) : b.Slice(bias, {from}, {to}, {0});
      x = b.Add(x, part);
    }
    const Value split = b.Reshape(x, b.ints({0, 0, form.heads, size}));
    return b.Transpose(split, {0, 2, 1, 3});
  };
  Projected p;
  p.q = heads(compute(match.value("query")), 0, form.hidden, form.head_size);
  if (form.bnsh_kv) {  // ORT adds no bias to key/value given per head
    p.k = compute(match.value("key"));
    p.v = compute(match.value("value"));
  } else {
    p.k = heads(compute(match.value("key")), form.hidden, 2 * form.hidden, form.head_size);
    p.v = heads(compute(match.value("value")), 2 * form.hidden, -1, form.value_head_size);
  }
  if (form.past) {
    p.past_k = compute(match.value("past_key"));
    p.past_v = compute(match.value("past_value"));
  }
  return p;
}

// attention_bias + the kernel's mask, [B|1, N|1, S|1, T], in float; absent when there is none.
// `total`: T = P + L, an int64 scalar.
Value additive_mask(const BuildContext& match, GraphBuilder& b, const Form& form, Value total) {
  const bool widen = form.dtype == TensorProto::FLOAT16;
  const float filter = match.attribute_float("mask_filter_value", -10000.f);
  const Value query{match.value("query")};
  Value keys, mask;
  auto key_positions = [&]() {
    if (keys.absent()) keys = range(b, b.scalar(0, TensorProto::INT64), total);
    return keys;
  };
  if (form.mask != MaskForm::kNone) {
    Value given = match.value("key_padding_mask");
    Value seen;
    if (form.mask == MaskForm::kLengths) {  // [B] or [3B + 2]: the first B entries are the lengths
      const auto& mask_facts = match.facts("key_padding_mask");
      const auto& query_facts = match.facts("query");
      if (!(mask_facts.shape && query_facts.shape && (*mask_facts.shape)[0] == (*query_facts.shape)[0])) {
        const Value batch = b.Slice(b.Shape(query), {0}, {1}, {0});
        given = b.op("Slice", {given, b.ints({0}), batch, b.ints({0})});
      }
      const Value lengths = b.Unsqueeze(b.Cast(given, TensorProto::INT64), {1});  // [B, 1]
      seen = b.op("Less", {key_positions(), lengths});                            // [B, T]
    } else {
      seen = b.op("Greater", {given, b.constant(make_tensor(TensorProto::INT32, {}, {0}))});
    }
    const Value zero = b.scalar(0);
    const Value hidden = b.scalar(filter);
    mask = b.Where(seen, zero, hidden);
    mask = b.Unsqueeze(mask, form.mask == MaskForm::kQueriesKeys ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 2});
  }
  const bool unidirectional = match.attribute_int("unidirectional", 0) != 0;
  const int64_t queries = match.facts("query").dim(1);
  if (unidirectional && queries != 1) {  // only when S > 1; a query at s sees the keys up to P + s
    const Value length = dim_scalar(b, query, 1);
    const Value past_length = form.past ? dim_scalar(b, match.value("past_key"), 2) : b.scalar(0, TensorProto::INT64);
    const Value last_seen = b.Add(range(b, b.scalar(0, TensorProto::INT64), length), past_length);  // P + s, [S]
    Value future = b.op("Greater", {key_positions(), b.Unsqueeze(last_seen, {1})});             // [S, T]
    if (queries < 0) future = b.op("And", {future, b.op("Greater", {length, b.scalar(1, TensorProto::INT64)})});
    const Value lowest = b.scalar(lowest_float());
    mask = b.Where(future, lowest, mask.absent() ? b.scalar(0) : mask);
  }
  Value additive = match.value("attention_bias");
  if (!additive.absent() && widen) additive = b.Cast(additive, TensorProto::FLOAT);
  if (!mask.absent()) additive = additive.absent() ? mask : b.Add(additive, mask);
  return additive;
}

float scale_of(const BuildContext& match, const Form& form) {
  const float scale = match.attribute_float("scale", 0.f);
  return scale == 0.f ? 1.f / std::sqrt(static_cast<float>(form.head_size)) : scale;
}

void finish(const BuildContext& match, GraphBuilder& b, const Form& form, Value context, Value k_all, Value v_all) {
  const bool widen = form.dtype == TensorProto::FLOAT16;
  auto io = [&](Value x) { return widen ? b.Cast(x, form.dtype) : x; };
  const Value joined = b.Transpose(context, {0, 2, 1, 3});
  b.output(match.value("output"), io(b.Reshape(joined, b.ints({0, 0, -1}))));
  if (match.has("present_key")) b.output(match.value("present_key"), io(k_all));
  if (match.has("present_value")) b.output(match.value("present_value"), io(v_all));
}

BuildResult defuse_multihead_attention(const BuildContext& match, GraphBuilder& b) {
  Form form;
  if (auto why = read_form(match, form); !why.empty()) return decline(why);
  const Projected p = project(match, b, form);
  const Value k_all = form.past ? b.Concat({p.past_k, p.k}, 2) : p.k;
  const Value v_all = form.past ? b.Concat({p.past_v, p.v}, 2) : p.v;
  const Value product = b.MatMul(p.q, b.Transpose(k_all, {0, 1, 3, 2}));
  Value scores = b.Mul(product, b.scalar(scale_of(match, form)));
  const Value additive = additive_mask(match, b, form, dim_scalar(b, k_all, 2));
  if (!additive.absent()) scores = b.Add(scores, additive);
  const Value probs = b.op("Softmax", {scores}, {attr("axis", int64_t{-1})});
  finish(match, b, form, b.MatMul(probs, v_all), k_all, v_all);
  // Last: a value that takes an output's name must have all its readers built.
  if (match.has("qk")) b.output(match.value("qk"), form.dtype == TensorProto::FLOAT16 ? b.Cast(scores, form.dtype) : scores);
  return built();
}

BuildResult multihead_attention_as_onnx23(const BuildContext& match, GraphBuilder& b) {
  if (match.has("qk")) return decline("output qk: Attention-23's qk_matmul_output_mode numbering changed between ONNX releases");
  Form form;
  if (auto why = read_form(match, form); !why.empty()) return decline(why);
  const Projected p = project(match, b, form);
  // Attention-23 concatenates past and new keys itself; the mask counts T = P + L from the shapes.
  Value additive;
  if (form.mask != MaskForm::kNone || match.attribute_int("unidirectional", 0) != 0 || match.has("attention_bias")) {
    Value total = dim_scalar(b, p.k, 2);
    if (form.past) total = b.Add(dim_scalar(b, p.past_k, 2), total);
    additive = additive_mask(match, b, form, total);
  }
  if (!additive.absent()) {  // ORT's Attention-23 kernel wants the mask's query axis spelled out
    const Value queries = b.Slice(b.Shape(match.value("query")), {1}, {2}, {0});
    const Value ones = b.ints({1, 1});
    const Value one = b.ints({1});
    additive = b.op("Expand", {additive, b.Concat({ones, queries, one}, 0)});
  }
  const auto outputs = b.op_outputs("Attention", {p.q, p.k, p.v, additive, p.past_k, p.past_v}, form.past ? 3 : 1,
                                    {attr("scale", scale_of(match, form))});
  Value k_all = p.k, v_all = p.v;
  if (form.past) k_all = outputs[1], v_all = outputs[2];
  finish(match, b, form, outputs[0], k_all, v_all);
  return built();
}

}  // namespace

void register_defuse_mha_builders(BuilderRegistry& registry) {
  const BuilderSignature signature{
      .values = {"query", "output"},
      .optional_values = {"key", "value", "bias", "key_padding_mask", "attention_bias", "past_key", "past_value",
                          "past_sequence_length", "cache_indirection", "present_key", "present_value", "qk"},
      .attributes = {"num_heads", "scale", "mask_filter_value", "unidirectional"}};
  registry.add("multihead_attention_as_onnx23", signature, multihead_attention_as_onnx23);
  registry.add("defuse_multihead_attention", signature, defuse_multihead_attention);
}

}  // namespace onnx_rewrite
