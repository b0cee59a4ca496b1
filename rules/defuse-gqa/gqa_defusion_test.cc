// The GroupQueryAttention de-fusion rules (defuse-gqa.rules, gqa_defusion.cc): com.microsoft
// GroupQueryAttention becomes RotaryEmbedding-23 + Attention-23 (ai.onnx >= 23) or primitives under
// --target onnx. The forms onnxruntime-genai's LLM exports use (packed QKV, in-op RoPE, KV cache as
// separate and as max-length buffers, prompt, right-padded prompt, token generation with per-batch
// lengths, continuation prompt) and the attributes ORT's CPU kernel takes (windows, softcap, sinks,
// attention_bias, position_ids, causal = 0, float16) are proven against ORT's own kernel (the
// com.microsoft model run in ORT is the reference), with seqlens_k and total_sequence_length drawn
// as a runtime feeds them; declines by their --explain text.
#include <gtest/gtest.h>

#include <iostream>
#include <random>

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

class GroupQueryAttention : public ::testing::TestWithParam<OpCase> {};

// The rewrite (CLI) passes `check --target onnx`, leaves no com.microsoft op, keeps the opset, uses
// the expected standard ops, and ORT computes with it what its GroupQueryAttention kernel computes
// (output, present_key, present_value with its zero tail).
TEST_P(GroupQueryAttention, IsStandardAndComputesAsOrtsKernel) {
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

// Lengths as a runtime feeds them. A prompt: S == total_sequence_length, sequences right-padded
// (seqlens_k + 1 <= S). Token generation: S = 1, seqlens_k[b] + 1 = past_b + 1 <= T.
std::vector<std::string> prompt(int s) {
  return {"--range", fmt::format("tot={},{}", s, s), "--range", fmt::format("sl=0,{}", s - 1)};
}
std::vector<std::string> generation(int total) {
  return {"--range", fmt::format("tot={},{}", total, total), "--range", fmt::format("sl=0,{}", total - 1)};
}
const std::vector<std::string> kExact{"--rtol", "0", "--atol", "0"};

// The LLaMA-like node onnxruntime-genai writes for CPU: packed QKV, RoPE in the op, past/present;
// here N = 4 query heads on Nkv = 2 KV heads of H = 16, a 16-position cos/sin cache.
const char* kGenaiGraph = R"(g (float[2, seq, 128] qkv, float[2, 2, past, 16] pk, float[2, 2, past, 16] pv, int32[2] sl, int32 tot,
                                float[16, 8] cos, float[16, 8] sin)
    => (float[2, seq, 64] y, float[2, 2, present, 16] present_k, float[2, 2, present, 16] present_v) {
  y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 4, kv_num_heads = 2, scale = 0.25, local_window_size = -1,
      softcap = 0.0, do_rotary = 1, rotary_interleaved = 0> (qkv, , , pk, pv, sl, tot, cos, sin) })";

std::vector<OpCase> cases(int opset, const std::vector<std::string>& ops) {
  return {
      // Prompt with a max-length (shared-buffer style) past of 8 rows: present is 8 rows, the past
      // is not read; then a prompt with an empty past; token generation with a past one row short
      // of T (the non-shared cache) and with a longer buffer; sequences of different lengths.
      OpCase{"genai_packed_rotary_prompt_and_generation", opset, kGenaiGraph, ops,
             {with(prompt(5), {"--dim", "seq=5", "--dim", "past=8"}), with(prompt(4), {"--dim", "seq=4", "--dim", "past=0"}),
              with(generation(6), {"--dim", "seq=1", "--dim", "past=5"}), with(generation(6), {"--dim", "seq=1", "--dim", "past=8"})}},
      OpCase{"unpacked_no_past_prompt", opset, R"(g (float[2, 5, 32] q, float[2, 5, 16] k, float[2, 5, 16] v, int32[2] sl, int32[1] tot)
          => (float[2, 5, 32] y, float[2, 1, 5, 16] present_k, float[2, 1, 5, 16] present_v) {
        y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1> (q, k, v, , , sl, tot) })", ops,
             {prompt(5)}},
      // ORT's CPU kernel takes cos_cache widths that are multiples of 8: R = 16 of H = 32.
      OpCase{"interleaved_partial_rotary_generation", opset, R"(g (float[3, 1, 64] q, float[3, 1, 64] k, float[3, 1, 64] v, float[3, 2, 6, 32] pk, float[3, 2, 6, 32] pv,
              int32[3] sl, int32 tot, float[12, 8] cos, float[12, 8] sin)
          => (float[3, 1, 64] y, float[3, 2, 7, 32] present_k, float[3, 2, 7, 32] present_v) {
        y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 2, do_rotary = 1, rotary_interleaved = 1>
            (q, k, v, pk, pv, sl, tot, cos, sin) })", ops, {generation(7)}},
      // Chunked prefill: B = 1, S = 3 new tokens after 4 cached ones.
      OpCase{"continuation_prompt", opset, R"(g (float[1, 3, 64] qkv, float[1, 1, 4, 16] pk, float[1, 1, 4, 16] pv, int32[1] sl, int32 tot,
              float[16, 8] cos, float[16, 8] sin)
          => (float[1, 3, 32] y, float[1, 1, 7, 16] present_k, float[1, 1, 7, 16] present_v) {
        y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, do_rotary = 1> (qkv, , , pk, pv, sl, tot, cos, sin) })",
             ops, {{"--range", "tot=7,7", "--range", "sl=6,6"}}},
      // Phi-3-like: as many KV heads as query heads, head size 96.
      OpCase{"head96_equal_heads", opset, R"(g (float[2, 4, 576] qkv, float[2, 2, 4, 96] pk, float[2, 2, 4, 96] pv, int32[2] sl, int32 tot,
              float[16, 48] cos, float[16, 48] sin)
          => (float[2, 4, 192] y, float[2, 2, 4, 96] present_k, float[2, 2, 4, 96] present_v) {
        y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 2, do_rotary = 1> (qkv, , , pk, pv, sl, tot, cos, sin) })",
             ops, {prompt(4)}},
      OpCase{"scale_attention_bias_prompt", opset, R"(g (float[2, 5, 64] q, float[2, 5, 32] k, float[2, 5, 32] v, int32[2] sl, int32 tot, float[2, 1, 5, 5] ab)
          => (float[2, 5, 64] y) {
        y = com.microsoft.GroupQueryAttention <num_heads = 4, kv_num_heads = 2, scale = 0.3> (q, k, v, , , sl, tot, , , , ab) })", ops,
             {prompt(5)}},
      OpCase{"attention_bias_heads_generation", opset, R"(g (float[2, 1, 64] q, float[2, 1, 32] k, float[2, 1, 32] v, float[2, 2, 5, 16] pk, float[2, 2, 5, 16] pv,
              int32[2] sl, int32 tot, float[1, 4, 1, 6] ab)
          => (float[2, 1, 64] y) {
        y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 4, kv_num_heads = 2> (q, k, v, pk, pv, sl, tot, , , , ab) })", ops,
             {generation(6)}},
      // position_ids: on a prompt the kernel reads only position_ids[0, 0] + s; in generation all of them.
      OpCase{"position_ids", opset, R"(g (float[2, seq, 64] qkv, float[2, 1, past, 16] pk, float[2, 1, past, 16] pv, int32[2] sl, int32 tot,
              float[16, 8] cos, float[16, 8] sin, int64[2, seq] pos)
          => (float[2, seq, 32] y, float[2, 1, present, 16] present_k) {
        y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, do_rotary = 1> (qkv, , , pk, pv, sl, tot, cos, sin, pos) })",
             ops, {with(prompt(4), {"--dim", "seq=4", "--dim", "past=4", "--range", "pos=0,12"}),
                   with(generation(5), {"--dim", "seq=1", "--dim", "past=4", "--range", "pos=0,15"})}},
      OpCase{"float16_prompt_and_generation", opset, R"(g (float16[2, seq, 128] qkv, float16[2, 2, past, 16] pk, float16[2, 2, past, 16] pv, int32[2] sl, int32 tot,
              float16[16, 8] cos, float16[16, 8] sin)
          => (float16[2, seq, 64] y, float16[2, 2, present, 16] present_k, float16[2, 2, present, 16] present_v) {
        y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 4, kv_num_heads = 2, do_rotary = 1, rotary_interleaved = 1> (qkv, , , pk, pv, sl, tot, cos, sin) })",
             ops, {with(kExact, with(prompt(5), {"--dim", "seq=5", "--dim", "past=8"})),
                   with(kExact, with(generation(6), {"--dim", "seq=1", "--dim", "past=5"}))}},
      OpCase{"not_causal", opset, R"(g (float[2, seq, 32] q, float[2, seq, 32] k, float[2, seq, 32] v, float[2, 2, past, 16] pk, float[2, 2, past, 16] pv, int32[2] sl, int32 tot)
          => (float[2, seq, 32] y) {
        y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 2, causal = 0> (q, k, v, pk, pv, sl, tot) })", ops,
             {with(prompt(5), {"--dim", "seq=5", "--dim", "past=5"}), with(generation(6), {"--dim", "seq=1", "--dim", "past=5"})}},
      OpCase{"local_window", opset, R"(g (float[2, seq, 64] qkv, float[2, 1, past, 16] pk, float[2, 1, past, 16] pv, int32[2] sl, int32 tot)
          => (float[2, seq, 32] y, float[2, 1, present, 16] present_k, float[2, 1, present, 16] present_v) {
        y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, local_window_size = 3> (qkv, , , pk, pv, sl, tot) })",
             ops, {with(prompt(6), {"--dim", "seq=6", "--dim", "past=6"}), with(generation(8), {"--dim", "seq=1", "--dim", "past=7"})}},
  };
}

INSTANTIATE_TEST_SUITE_P(Primitives, GroupQueryAttention, ::testing::ValuesIn(cases(17, {"GatherND", "Softmax"})),
                         [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(Onnx23, GroupQueryAttention, ::testing::ValuesIn(cases(23, {"Attention"})),
                         [](const auto& info) { return info.param.name; });

// Softcap and sinks: only the decomposition takes them (at opset 23 too).
INSTANTIATE_TEST_SUITE_P(
    SoftcapAndSinks, GroupQueryAttention,
    ::testing::Values(
        OpCase{"softcap", 17, R"(g (float[2, 5, 64] qkv, int32[2] sl, int32 tot) => (float[2, 5, 32] y) {
          y = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, softcap = 2.0> (qkv, , , , , sl, tot) })", {"Tanh"},
               {prompt(5)}},
        OpCase{"softcap_window_generation_opset23", 23, R"(g (float[2, 1, 64] qkv, float[2, 1, 6, 16] pk, float[2, 1, 6, 16] pv, int32[2] sl, int32 tot)
            => (float[2, 1, 32] y) {
          y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, softcap = 1.5, local_window_size = 2> (qkv, , , pk, pv, sl, tot) })",
               {"Tanh"}, {generation(7)}, {"Attention"}},
        OpCase{"smooth_softmax", 17, R"(g (float[2, 5, 64] qkv, int32[2] sl, int32 tot) => (float[2, 5, 32] y) {
          y = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, smooth_softmax = 1> (qkv, , , , , sl, tot) })", {"Concat"},
               {prompt(5)}},
        OpCase{"head_sink_generation", 23, R"(g (float[2, 1, 64] qkv, float[2, 1, 4, 16] pk, float[2, 1, 4, 16] pv, int32[2] sl, int32 tot, float[2] sink)
            => (float[2, 1, 32] y) {
          y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1> (qkv, , , pk, pv, sl, tot, , , , , sink) })", {"Concat"},
               {generation(5)}, {"Attention"}},
        OpCase{"float16_head_sink_softcap", 17, R"(g (float16[2, 5, 64] qkv, int32[2] sl, int32 tot, float16[2] sink) => (float16[2, 5, 32] y) {
          y = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, softcap = 3.0> (qkv, , , , , sl, tot, , , , , sink) })",
               // MLAS's tanh differs from the float Tanh by float rounding, which can move the last float16 bit.
               {"Tanh"}, {with(prompt(5), {"--rtol", "1e-3", "--atol", "0"})}}),
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
  options.explain = "GroupQueryAttention";
  const auto rewritten = rewrite_text(model(17, c.graph), builtin_rules(), options);
  EXPECT_EQ(contrib_ops(count_ops(rewritten.model)), "com.microsoft.GroupQueryAttention x1");
  EXPECT_NE(rewritten.explain.find(c.reason), std::string::npos) << rewritten.explain;
}

const char* kQkv = "float[2, 5, 64] qkv, int32[2] sl, int32 tot";

INSTANTIATE_TEST_SUITE_P(
    Gqa, Declines,
    ::testing::Values(
        DeclineCase{"qk_output", fmt::format(R"(g ({}) => (float[2, 5, 32] y, float[2, 2, 5, 5] qk) {{
          y, , , qk = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, qk_output = 1> (qkv, , , , , sl, tot) }})", kQkv),
                    "qk_output: ONNX Runtime leaves the scores past seqlens_k unspecified"},
        DeclineCase{"quantized_cache", fmt::format(R"(g ({}) => (float[2, 5, 32] y) {{
          y = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, k_quant_type = "PER_TENSOR"> (qkv, , , , , sl, tot) }})", kQkv),
                    "k_quant_type = PER_TENSOR (quantized KV cache) is not rewritten"},
        DeclineCase{"sliding_window_cache", fmt::format(R"(g ({}) => (float[2, 5, 32] y) {{
          y = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, local_window_size = 4, sliding_window_cache = 1> (qkv, , , , , sl, tot) }})", kQkv),
                    "sliding_window_cache = 1"},
        DeclineCase{"past_without_present", R"(g (float[2, 1, 64] qkv, float[2, 1, 4, 16] pk, float[2, 1, 4, 16] pv, int32[2] sl, int32 tot) => (float[2, 1, 32] y) {
          y = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1> (qkv, , , pk, pv, sl, tot) })",
                    "past state without both present outputs: ONNX Runtime 1.30's CPU kernel then reads keys and values past the new ones"},
        DeclineCase{"window_zero", fmt::format(R"(g ({}) => (float[2, 5, 32] y) {{
          y = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, local_window_size = 0> (qkv, , , , , sl, tot) }})", kQkv),
                    "local_window_size = 0 leaves no key"},
        DeclineCase{"heads_not_a_multiple", fmt::format(R"(g ({}) => (float[2, 5, 32] y) {{
          y = com.microsoft.GroupQueryAttention <num_heads = 3, kv_num_heads = 2> (qkv, , , , , sl, tot) }})", kQkv),
                    "num_heads 3 must be a positive multiple of kv_num_heads 2"},
        DeclineCase{"bfloat16", R"(g (bfloat16[2, 5, 64] qkv, int32[2] sl, int32 tot) => (bfloat16[2, 5, 32] y) {
          y = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1> (qkv, , , , , sl, tot) })",
                    "bfloat16: ONNX Runtime's CPU provider has no bfloat16 GroupQueryAttention"},
        DeclineCase{"rotary_without_cache", fmt::format(R"(g ({}) => (float[2, 5, 32] y) {{
          y = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, do_rotary = 1> (qkv, , , , , sl, tot) }})", kQkv),
                    "do_rotary without cos_cache and sin_cache"},
        DeclineCase{"hidden_size_unknown", R"(g (float[2, 5, d] qkv, int32[2] sl, int32 tot) => (float[2, 5, 32] y) {
          y = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1> (qkv, , , , , sl, tot) })",
                    "the head size is unknown (query's dim 2, past_key's and present_key's dim 3)"}),
    [](const auto& info) { return info.param.name; });

// ---- End to end: a decoder layer as onnxruntime-genai writes it ---------------------------------

// Random literals for the quantized weights (uint8 bytes) and float tensors.
std::string literal(std::mt19937& rng, int64_t count, double lo, double hi, bool bytes = false) {
  std::vector<std::string> parts;
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t i = 0; i < count; ++i) parts.push_back(bytes ? std::to_string(byte(rng)) : fmt::format("{:.5f}", real(rng)));
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

// One LLaMA-style layer: SimplifiedLayerNormalization, MatMulNBits (int4, block 32) for QKV,
// GroupQueryAttention (4 query heads on 2 KV heads of 16, RoPE in the op, KV cache), MatMulNBits
// out-projection, SkipSimplifiedLayerNormalization with the residual, SiLU MLP of MatMulNBits,
// residual Add; seqlens_k and total_sequence_length from the attention mask as the builder
// computes them. `separate_rope`: RotaryEmbedding nodes on q and k before the attention instead
// (the builder's form where RoPE is not fused; here with position_ids from the mask), whose
// inputs have value_info as the builder writes it (the shapes don't go through MatMulNBits).
std::string genai_layer(int opset, bool separate_rope) {
  std::mt19937 rng(2024);
  std::vector<std::string> weights{
      fmt::format("float[64] ln1 = {}", literal(rng, 64, 0.5, 1.5)),
      fmt::format("float[64] ln2 = {}", literal(rng, 64, 0.5, 1.5)),
      fmt::format("uint8[128, 2, 16] w_qkv = {}", literal(rng, 128 * 32, 0, 0, true)),
      fmt::format("float[128, 2] s_qkv = {}", literal(rng, 256, 0.02, 0.08)),
      fmt::format("uint8[64, 2, 16] w_o = {}", literal(rng, 64 * 32, 0, 0, true)),
      fmt::format("float[64, 2] s_o = {}", literal(rng, 128, 0.02, 0.08)),
      fmt::format("uint8[256, 2, 16] w_gu = {}", literal(rng, 256 * 32, 0, 0, true)),
      fmt::format("float[256, 2] s_gu = {}", literal(rng, 512, 0.02, 0.08)),
      fmt::format("uint8[64, 4, 16] w_d = {}", literal(rng, 64 * 64, 0, 0, true)),
      fmt::format("float[64, 4] s_d = {}", literal(rng, 256, 0.02, 0.08)),
      fmt::format("uint8[64, 2] zp_d = {}", literal(rng, 128, 0, 0, true)),
      fmt::format("float[32, 8] cos = {}", literal(rng, 256, -1, 1)),
      fmt::format("float[32, 8] sin = {}", literal(rng, 256, -1, 1)),
  };
  const std::string rope = separate_rope ? R"(
        counted = CumSum (attention_mask, one)
        positions = Sub (counted, attention_mask)
        mask_shape = Shape (attention_mask)
        total_64 = Gather (mask_shape, one)
        x_shape = Shape (x)
        seq_64 = Gather (x_shape, one)
        first_new = Sub (total_64, seq_64)
        starts = Unsqueeze (first_new, zero_1d)
        ends = Unsqueeze (total_64, zero_1d)
        position_ids = Slice (positions, starts, ends, one_1d)
        q, k, v = Split <axis = 2> (qkv, split_sizes)
        q_rot = com.microsoft.RotaryEmbedding <num_heads = 4, interleaved = 0> (q, position_ids, cos, sin)
        k_rot = com.microsoft.RotaryEmbedding <num_heads = 2, interleaved = 0> (k, position_ids, cos, sin)
        attn, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 4, kv_num_heads = 2, scale = 0.25>
            (q_rot, k_rot, v, past_k, past_v, seqlens_k, total))"
                                         : R"(
        attn, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 4, kv_num_heads = 2, scale = 0.25, do_rotary = 1>
            (qkv, , , past_k, past_v, seqlens_k, total, cos, sin))";
  return model(opset, fmt::format(R"(layer (float[batch, seq, 64] x, int64[batch, total] attention_mask, float[batch, 2, past, 16] past_k,
                 float[batch, 2, past, 16] past_v)
      => (float[batch, seq, 64] y, float[batch, 2, total, 16] present_k, float[batch, 2, total, 16] present_v)
      <{}, float[batch, seq, 64] q, float[batch, seq, 32] k, int64 one = {{1}}, int64[1] one_1d = {{1}}, int64[1] zero_1d = {{0}}, int64[1] axis1 = {{1}}, int64[3] split_sizes = {{64, 32, 32}},
       int64[2] gate_up_sizes = {{128, 128}}> {{
        lengths = ReduceSum <keepdims = 0> (attention_mask, axis1)
        last = Sub (lengths, one)
        seqlens_k = Cast <to = 6> (last)
        shape_of_mask = Shape (attention_mask)
        width = Gather (shape_of_mask, one)
        total = Cast <to = 6> (width)
        h = SimplifiedLayerNormalization <epsilon = 1e-5, axis = -1, stash_type = 1> (x, ln1)
        qkv = com.microsoft.MatMulNBits <K = 64, N = 128, bits = 4, block_size = 32, accuracy_level = 0> (h, w_qkv, s_qkv){}
        o = com.microsoft.MatMulNBits <K = 64, N = 64, bits = 4, block_size = 32> (attn, w_o, s_o)
        h2, , , residual = com.microsoft.SkipSimplifiedLayerNormalization <epsilon = 1e-5> (o, x, ln2)
        gate_up = com.microsoft.MatMulNBits <K = 64, N = 256, bits = 4, block_size = 32> (h2, w_gu, s_gu)
        gate, up = Split <axis = 2> (gate_up, gate_up_sizes)
        sig = Sigmoid (gate)
        silu = Mul (gate, sig)
        act = Mul (silu, up)
        down = com.microsoft.MatMulNBits <K = 128, N = 64, bits = 4, block_size = 32> (act, w_d, s_d, zp_d)
        y = Add (down, residual)
      }})",
                                  fmt::join(weights, ",\n       "), rope));
}

class GenaiLayer : public ::testing::TestWithParam<std::tuple<int, bool>> {};

// Prompt (empty cache) and token generation (cache of 5) through the whole layer: every
// com.microsoft op goes, `check --target onnx` passes, ORT computes what it computes with its own
// kernels (MatMulNBits as DequantizeLinear at opset 21, unpacked below).
TEST_P(GenaiLayer, DefusedComputesTheOriginal) {
  const auto [opset, separate_rope] = GetParam();
  TempDir dir;
  const auto original = write_model_text(genai_layer(opset, separate_rope), dir / "layer.onnx");
  const auto rewritten = rewrite_and_check(original, dir / "defused.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(contrib_ops(rewritten->ops), "(none)");
  EXPECT_EQ(op_count(rewritten->ops, {"", "DequantizeLinear"}), opset >= 21 ? 4 : 0);
  EXPECT_EQ(op_count(rewritten->ops, {"", "SimplifiedLayerNormalization"}), 0);
  EXPECT_EQ(op_count(rewritten->ops, {"", "Attention"}), opset >= 23 ? 1 : 0);
  EXPECT_EQ(op_count(rewritten->ops, {"", "RotaryEmbedding"}), opset >= 23 ? 2 : 0);
  EXPECT_EQ(op_count(rewritten->ops, {"", "RMSNormalization"}), opset >= 23 ? 2 : 0);
  for (const auto& sizes : std::vector<std::vector<std::string>>{
           {"--dim", "batch=2", "--dim", "seq=5", "--dim", "past=0", "--dim", "total=5"},
           {"--dim", "batch=2", "--dim", "seq=1", "--dim", "past=5", "--dim", "total=6"}}) {
    std::vector<std::string> options{"--trials", "2", "--float-range", "-2,2", "--range", "attention_mask=1,1", "--rtol", "1e-4",
                                     "--atol", "1e-4"};
    options.insert(options.end(), sizes.begin(), sizes.end());
    const auto comparison = ort_compare(original, rewritten->output, options);
    EXPECT_TRUE(comparison.ok) << comparison.output;
    record(sizes[3], comparison.max_abs);
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, GenaiLayer,
                         ::testing::Values(std::tuple{17, false}, std::tuple{21, false}, std::tuple{21, true}, std::tuple{23, true}),
                         [](const auto& info) {
                           return fmt::format("opset{}_{}", std::get<0>(info.param),
                                              std::get<1>(info.param) ? "rotary_embedding_nodes" : "rope_in_attention");
                         });

TEST(Notes, LocalWindowSemanticsIsNamed) {
  RewriteOptions options;
  options.target = "onnx";
  const auto rewritten = rewrite_text(model(17, R"(g (float[2, 5, 64] qkv, int32[2] sl, int32 tot) => (float[2, 5, 32] y) {
    y = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1, local_window_size = 3> (qkv, , , , , sl, tot) })"),
                                      builtin_rules(), options);
  EXPECT_EQ(contrib_ops(count_ops(rewritten.model)), "(none)");
  const std::string notes = fmt::format("{}", fmt::join(rewritten.result.notes, "\n"));
  EXPECT_NE(notes.find("ONNX Runtime >= 1.24's window"), std::string::npos) << notes;
}

TEST(Cli, InspectNamesTheRules) {
  TempDir dir;
  const auto file = write_model_text(model(17, kGenaiGraph), dir / "gqa.onnx");
  const auto inspect = run_cli({"inspect", file.string()});
  EXPECT_NE(inspect.out.find("com.microsoft.GroupQueryAttention x1: defuse-gqa-attention-23 [onnx], defuse-gqa [onnx]"),
            std::string::npos)
      << inspect.out;
  const auto check = run_cli({"check", file.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 1);
  EXPECT_NE((check.out + check.err).find("com.microsoft.GroupQueryAttention x1"), std::string::npos) << check.out << check.err;
}

}  // namespace
}  // namespace onnx_rewrite
