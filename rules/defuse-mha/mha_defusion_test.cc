// The MultiHeadAttention de-fusion rules (defuse-mha.rules, mha_defusion.cc): com.microsoft
// MultiHeadAttention becomes Attention-23 (ai.onnx >= 23) or MatMul/Softmax primitives under
// --target onnx. Every form ORT's CPU kernel takes (bias, every mask form, attention_bias, past and
// present, unidirectional with and without past, 4-D cross-attention key/value, qk, float16) is
// proven against that kernel (the com.microsoft model run in ORT is the reference); the forms it
// refuses are declined, by their --explain text.
#include <gtest/gtest.h>

#include <iostream>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

std::string model(int opset, const std::string& graph) { return contrib_model_text(opset, graph); }

std::string contrib_ops(const OpCounts& ops) {
  std::vector<std::string> found;
  for (const auto& [key, count] : ops) {
    if (key.first.rfind("com.microsoft", 0) == 0) found.push_back(fmt::format("{}.{} x{}", key.first, key.second, count));
  }
  return found.empty() ? "(none)" : fmt::format("{}", fmt::join(found, ", "));
}

void record(const std::string& what, double max_abs) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::cout << fmt::format("[ ORT      ] {}.{}{}: max_abs {:.3g}\n", test->test_suite_name(), test->name(),
                           what.empty() ? "" : " " + what, max_abs);
}

struct OpCase {
  std::string name;
  int opset;
  std::string graph;                           // a model in ONNX text using the contrib op
  std::vector<std::string> ops;                // standard ops the rewrite must produce
  std::vector<std::vector<std::string>> runs;  // compare.js options, one comparison each
  std::vector<std::string> absent = {};        // standard ops it must not produce
};

class MultiHeadAttention : public ::testing::TestWithParam<OpCase> {};

// The rewrite (CLI) passes `check --target onnx`, leaves no com.microsoft op, keeps the opset, uses
// the expected standard ops, and ORT computes with it what its MultiHeadAttention kernel computes.
TEST_P(MultiHeadAttention, IsStandardAndComputesAsOrtsKernel) {
  const auto& c = GetParam();
  TempDir dir;
  const auto original = write_model_text(model(c.opset, c.graph), dir / "original.onnx");
  const auto rewritten = rewrite_and_check(original, dir / "defused.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(contrib_ops(rewritten->ops), "(none)");
  EXPECT_EQ(opset_import(rewritten->model, ""), c.opset);
  for (const auto& op : c.ops) EXPECT_GE(op_count(rewritten->ops, {"", op}), 1) << op;
  for (const auto& op : c.absent) EXPECT_EQ(op_count(rewritten->ops, {"", op}), 0) << op;
  for (size_t i = 0; i < c.runs.size(); ++i) {
    std::vector<std::string> options{"--trials", "3", "--float-range", "-2,2", "--rtol", "1e-5", "--atol", "1e-5"};
    options.insert(options.end(), c.runs[i].begin(), c.runs[i].end());
    const auto comparison = ort_compare(original, rewritten->output, options);
    EXPECT_TRUE(comparison.ok) << comparison.output;
    record(c.runs.size() > 1 ? fmt::format("run {}", i + 1) : "", comparison.max_abs);
  }
}

std::vector<std::string> with(std::vector<std::string> options, const std::vector<std::string>& more) {
  options.insert(options.end(), more.begin(), more.end());
  return options;
}

const std::vector<std::string> kSizes{"--dim", "batch=2", "--dim", "seq=5"};
const std::vector<std::string> kMask{"--range", "mask=0,1"};
// float16: computed in float and rounded once, as ORT does; equal bit for bit.
const std::vector<std::string> kExact{"--rtol", "0", "--atol", "0"};

// The cases, for an opset: the same graphs prove both rules.
std::vector<OpCase> cases(int opset, const std::vector<std::string>& ops) {
  return {
      OpCase{"no_mask_static", opset, R"(g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 16] v) => (float[2, 5, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v) })", ops, {{}}},
      OpCase{"bias_scale_different_kv_length", opset, R"(g (float[2, 5, 16] q, float[2, 7, 16] k, float[2, 7, 16] v, float[48] b) => (float[2, 5, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 4, scale = 0.3> (q, k, v, b) })", ops, {{}}},
      OpCase{"value_wider_than_key", opset, R"(g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 24] v, float[56] b) => (float[2, 5, 24] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, b) })", ops, {{}}},
      OpCase{"key_padding_mask_2d_symbolic", opset, R"(g (float[batch, seq, 16] q, float[batch, seq, 16] k, float[batch, seq, 16] v, int32[batch, seq] mask) => (float[batch, seq, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , mask) })", ops, {with(kSizes, kMask)}},
      OpCase{"key_padding_mask_2d_filter_value", opset, R"(g (float[2, 5, 16] q, float[2, 6, 16] k, float[2, 6, 16] v, int32[2, 6] mask) => (float[2, 5, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2, mask_filter_value = -2.5> (q, k, v, , mask) })", ops, {kMask}},
      // A row whose keys are all hidden is the plain softmax: the filter value is a finite shift.
      OpCase{"fully_padded_rows", opset, R"(g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 16] v, int32[2, 5] mask) => (float[2, 5, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , mask) })", ops, {{"--range", "mask=0,0"}}},
      OpCase{"key_lengths_1d_symbolic", opset, R"(g (float[batch, seq, 16] q, float[batch, seq, 16] k, float[batch, seq, 16] v, int32[batch] mask) => (float[batch, seq, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , mask) })", ops, {with(kSizes, {"--range", "mask=0,5"})}},
      // [3B + 2]: ORT's CPU kernel reads the first B entries as lengths, like [B].
      OpCase{"key_lengths_3b_plus_2", opset, R"(g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 16] v, int32[8] mask) => (float[2, 5, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , mask) })", ops, {{"--range", "mask=0,5"}}},
      OpCase{"query_key_mask_3d", opset, R"(g (float[2, 4, 16] q, float[2, 6, 16] k, float[2, 6, 16] v, int32[2, 4, 6] mask) => (float[2, 4, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2, mask_filter_value = -3.0> (q, k, v, , mask) })", ops, {kMask}},
      OpCase{"unidirectional_static", opset, R"(g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 16] v) => (float[2, 5, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2, unidirectional = 1> (q, k, v) })", ops, {{}}},
      // onnxruntime-genai's Whisper decoder self-attention: past/present, scale, unidirectional; the
      // causal mask applies only when S > 1 (run-time test on the symbolic S).
      OpCase{"whisper_self_attention_past", opset, R"(g (float[batch, seq, 16] q, float[batch, seq, 16] k, float[batch, seq, 16] v, float[16] b,
              float[batch, 2, past, 8] pk, float[batch, 2, past, 8] pv)
          => (float[batch, seq, 16] y, float[batch, 2, total, 8] present_k, float[batch, 2, total, 8] present_v) {
        y, present_k, present_v = com.microsoft.MultiHeadAttention <num_heads = 2, scale = 0.125, unidirectional = 1> (q, k, v, , , , pk, pv) })",
             ops, {{"--dim", "batch=2", "--dim", "seq=3", "--dim", "past=4"}, {"--dim", "batch=2", "--dim", "seq=1", "--dim", "past=6"}}},
      OpCase{"past_bias_mask_causal_filter", opset, R"(g (float[2, 3, 16] q, float[2, 3, 16] k, float[2, 3, 16] v, float[48] b, int32[2, 7] mask,
              float[2, 2, 4, 8] pk, float[2, 2, 4, 8] pv)
          => (float[2, 3, 16] y, float[2, 2, 7, 8] present_k, float[2, 2, 7, 8] present_v) {
        y, present_k, present_v = com.microsoft.MultiHeadAttention <num_heads = 2, unidirectional = 1, mask_filter_value = -1e9> (q, k, v, b, mask, , pk, pv) })",
             ops, {kMask}},
      // present_value is computed but not a graph output: the rewrite still reads the past.
      OpCase{"one_query_with_past", opset, R"(g (float[2, 1, 16] q, float[2, 1, 16] k, float[2, 1, 16] v, float[2, 2, 6, 8] pk, float[2, 2, 6, 8] pv)
          => (float[2, 1, 16] y, float[2, 2, 7, 8] present_k) {
        y, present_k, present_v = com.microsoft.MultiHeadAttention <num_heads = 2, unidirectional = 1> (q, k, v, , , , pk, pv) })", ops, {{}}},
      OpCase{"present_without_past", opset, R"(g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 16] v, float[48] b)
          => (float[2, 5, 16] y, float[2, 2, 5, 8] present_k, float[2, 2, 5, 8] present_v) {
        y, present_k, present_v = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, b) })", ops, {{}}},
      OpCase{"attention_bias_heads", opset, R"(g (float[2, 5, 16] q, float[2, 6, 16] k, float[2, 6, 16] v, float[1, 2, 5, 6] ab) => (float[2, 5, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , , ab) })", ops, {{}}},
      // Rows whose visible keys are all padded: softmax of (-10000 + logits), where float's step
      // at 10000 (1e-3) shows; ORT's GEMM accumulates the logits in another order.
      OpCase{"attention_bias_batch_mask_causal", opset, R"(g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 16] v, int32[2, 5] mask, float[2, 1, 5, 5] ab) => (float[2, 5, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2, unidirectional = 1> (q, k, v, , mask, ab) })", ops,
             {with(kMask, {"--atol", "2e-3"})}},
      // onnxruntime-genai's Whisper cross-attention: key/value projected per head; ORT adds no bias to them.
      OpCase{"cross_attention_bnsh_bias_ignored", opset, R"(g (float[2, 3, 16] q, float[2, 2, 9, 8] k, float[2, 2, 9, 8] v, float[48] b) => (float[2, 3, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2, scale = 0.125> (q, k, v, b) })", ops, {{}}},
      OpCase{"cross_attention_bnsh_mask", opset, R"(g (float[batch, seq, 16] q, float[batch, 2, keys, 8] k, float[batch, 2, keys, 8] v, int32[batch, keys] mask) => (float[batch, seq, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , mask) })", ops,
             {{"--dim", "batch=2", "--dim", "seq=3", "--dim", "keys=9", "--range", "mask=0,1"}}},
      // query's hidden size known only at run time (a MatMulNBits output, say): D from the cache.
      OpCase{"query_size_from_cache", opset, R"(g (float[2, 3, d] q, float[2, 3, d] k, float[2, 3, d] v, float[2, 2, 4, 8] pk, float[2, 2, 4, 8] pv)
          => (float[2, 3, d] y, float[2, 2, 7, 8] present_k, float[2, 2, 7, 8] present_v) {
        y, present_k, present_v = com.microsoft.MultiHeadAttention <num_heads = 2, unidirectional = 1> (q, k, v, , , , pk, pv) })",
             ops, {{"--dim", "d=16"}}},
      OpCase{"float16_bias_mask_causal_past", opset, R"(g (float16[2, 3, 16] q, float16[2, 3, 16] k, float16[2, 3, 16] v, float16[48] b, int32[2, 7] mask,
              float16[2, 2, 4, 8] pk, float16[2, 2, 4, 8] pv)
          => (float16[2, 3, 16] y, float16[2, 2, 7, 8] present_k, float16[2, 2, 7, 8] present_v) {
        y, present_k, present_v = com.microsoft.MultiHeadAttention <num_heads = 2, unidirectional = 1> (q, k, v, b, mask, , pk, pv) })",
             ops, {with(kExact, kMask)}},
      OpCase{"float16_cross_attention_bias", opset, R"(g (float16[2, 3, 16] q, float16[2, 2, 9, 8] k, float16[2, 2, 9, 8] v, float16[48] b, float16[2, 1, 3, 9] ab) => (float16[2, 3, 16] y) {
        y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, b, , ab) })", ops, {kExact}},
  };
}

INSTANTIATE_TEST_SUITE_P(Primitives, MultiHeadAttention, ::testing::ValuesIn(cases(17, {"MatMul", "Softmax"})),
                         [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(Onnx23, MultiHeadAttention, ::testing::ValuesIn(cases(23, {"Attention"})),
                         [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    More, MultiHeadAttention,
    ::testing::Values(
        // qk: the scores before softmax (scale·QKᵀ + attention_bias + mask), whatever the schema
        // text says; Attention-23's numbering of that output changed between ONNX releases, so a
        // node whose qk is used is decomposed at opset 23 too.
        OpCase{"qk_output_mask_bias_opset13", 13, R"(g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 16] v, int32[2, 5] mask, float[1, 2, 5, 5] ab)
            => (float[2, 5, 16] y, float[2, 2, 5, 5] qk) {
          y, , , qk = com.microsoft.MultiHeadAttention <num_heads = 2, unidirectional = 1> (q, k, v, , mask, ab) })",
               {"Softmax"}, {{"--range", "mask=1,1"}, with(kMask, {"--atol", "2e-3"})}},
        OpCase{"qk_output_at_opset23_decomposed", 23, R"(g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 16] v, int32[2, 5] mask)
            => (float[2, 5, 16] y, float[2, 2, 5, 5] qk) {
          y, , , qk = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , mask) })", {"Softmax"}, {kMask}, {"Attention"}},
        OpCase{"float16_qk", 17, R"(g (float16[2, 5, 16] q, float16[2, 5, 16] k, float16[2, 5, 16] v)
            => (float16[2, 5, 16] y, float16[2, 2, 5, 5] qk) {
          y, , , qk = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v) })", {"Cast"}, {kExact}}),
    [](const auto& info) { return info.param.name; });

// ---- Declines: the node stays and --explain says why ---------------------------------------------

struct DeclineCase {
  std::string name;
  std::string graph;
  std::string reason;  // in the --explain text
};

class Declines : public ::testing::TestWithParam<DeclineCase> {};

TEST_P(Declines, NodeStaysWithTheReason) {
  const auto& c = GetParam();
  RewriteOptions options;
  options.target = "onnx";
  options.explain = "MultiHeadAttention";
  const auto rewritten = rewrite_text(model(17, c.graph), builtin_rules(), options);
  EXPECT_EQ(contrib_ops(count_ops(rewritten.model)), "com.microsoft.MultiHeadAttention x1");
  EXPECT_NE(rewritten.explain.find(c.reason), std::string::npos) << rewritten.explain;
}

INSTANTIATE_TEST_SUITE_P(
    Mha, Declines,
    ::testing::Values(
        DeclineCase{"packed_qkv", R"(g (float[2, 5, 2, 3, 8] q) => (float[2, 5, 16] y) {
          y = com.microsoft.MultiHeadAttention <num_heads = 2> (q) })",
                    "packed QKV (query [B, S, N, 3, H]): ONNX Runtime's CPU kernel does not implement it"},
        DeclineCase{"packed_kv", R"(g (float[2, 5, 16] q, float[2, 5, 2, 2, 8] kv) => (float[2, 5, 16] y) {
          y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, kv) })",
                    "packed KV (key [B, L, N, 2, H]): ONNX Runtime's CPU kernel does not implement it"},
        DeclineCase{"query_only", R"(g (float[2, 5, 48] q) => (float[2, 5, 16] y) {
          y = com.microsoft.MultiHeadAttention <num_heads = 2> (q) })", "query without key and value (packed QKV)"},
        DeclineCase{"beam_search_buffers", R"(g (float[2, 1, 16] q, float[2, 1, 16] k, float[2, 1, 16] v, float[2, 2, 8, 8] pk, float[2, 2, 8, 8] pv, int32[1] len, int32[2, 1, 8] beams)
            => (float[2, 1, 16] y) {
          y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , , , pk, pv, len, beams) })",
                    "past_sequence_length / cache_indirection"},
        DeclineCase{"bnsh_kv_with_past", R"(g (float[2, 3, 16] q, float[2, 2, 9, 8] k, float[2, 2, 9, 8] v, float[2, 2, 4, 8] pk, float[2, 2, 4, 8] pv) => (float[2, 3, 16] y) {
          y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , , , pk, pv) })",
                    "past state with key/value [B, N, L, H]"},
        DeclineCase{"past_without_present", R"(g (float[2, 1, 16] q, float[2, 1, 16] k, float[2, 1, 16] v, float[2, 2, 6, 8] pk, float[2, 2, 6, 8] pv) => (float[2, 1, 16] y) {
          y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , , , pk, pv) })",
                    "past state without present_key and present_value: ONNX Runtime's CPU kernel then ignores the past"},
        DeclineCase{"past_with_one_present", R"(g (float[2, 1, 16] q, float[2, 1, 16] k, float[2, 1, 16] v, float[2, 2, 6, 8] pk, float[2, 2, 6, 8] pv)
            => (float[2, 1, 16] y, float[2, 2, 7, 8] present_k) {
          y, present_k = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , , , pk, pv) })",
                    "past state with only one of present_key, present_value"},
        DeclineCase{"mask_4d", R"(g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 16] v, int32[2, 1, 5, 5] mask) => (float[2, 5, 16] y) {
          y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v, , mask) })", "key_padding_mask has rank 4"},
        DeclineCase{"bfloat16", R"(g (bfloat16[2, 5, 16] q, bfloat16[2, 5, 16] k, bfloat16[2, 5, 16] v) => (bfloat16[2, 5, 16] y) {
          y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v) })", "bfloat16: ONNX Runtime's CPU provider has no bfloat16"},
        DeclineCase{"hidden_size_unknown", R"(g (float[2, 5, d] q, float[2, 5, d] k, float[2, 5, d] v) => (float[2, 5, d] y) {
          y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v) })", "the hidden size is unknown"},
        DeclineCase{"heads_do_not_divide", R"(g (float[2, 5, 15] q, float[2, 5, 15] k, float[2, 5, 15] v) => (float[2, 5, 15] y) {
          y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v) })", "the hidden size 15 is not divisible by num_heads 2"}),
    [](const auto& info) { return info.param.name; });

TEST(Cli, InspectNamesTheRules) {
  TempDir dir;
  const auto file = write_model_text(model(17, R"(g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 16] v) => (float[2, 5, 16] y) {
    y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v) })"), dir / "mha.onnx");
  const auto inspect = run_cli({"inspect", file.string()});
  EXPECT_NE(inspect.out.find("com.microsoft.MultiHeadAttention x1: defuse-mha-attention-23 [onnx], defuse-mha [onnx]"),
            std::string::npos)
      << inspect.out;
  const auto check = run_cli({"check", file.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 1);
  EXPECT_NE((check.out + check.err).find("com.microsoft.MultiHeadAttention x1"), std::string::npos) << check.out << check.err;
}

}  // namespace
}  // namespace onnx_rewrite
