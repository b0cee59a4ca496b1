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
                    "the hidden size of query (dim 2) is unknown"}),
    [](const auto& info) { return info.param.name; });

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
