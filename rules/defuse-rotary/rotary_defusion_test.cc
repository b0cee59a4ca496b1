// The RotaryEmbedding de-fusion rules (defuse-rotary.rules, rotary_defusion.cc): com.microsoft
// RotaryEmbedding becomes RotaryEmbedding-23 (ai.onnx >= 23) or standard primitives under
// --target onnx. Every layout, attribute and position form is proven against ONNX Runtime's own
// contrib kernel (the com.microsoft model run in ORT is the reference); declines by their
// --explain text; `inspect` names the op and its rules, `check` the op that stays.
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
  std::string graph;                   // a model in ONNX text using the contrib op
  std::vector<std::string> ops;        // standard ops the rewrite must produce
  std::vector<std::string> options;    // compare.js options (sizes, ranges, tolerance)
};

class RotaryEmbedding : public ::testing::TestWithParam<OpCase> {};

// The rewrite (CLI) passes `check --target onnx`, leaves no com.microsoft op, uses the expected
// standard ops, and ORT computes with it what its RotaryEmbedding kernel computes.
TEST_P(RotaryEmbedding, IsStandardAndComputesAsOrtsKernel) {
  const auto& c = GetParam();
  TempDir dir;
  const auto original = write_model_text(model(c.opset, c.graph), dir / "original.onnx");
  const auto rewritten = rewrite_and_check(original, dir / "defused.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(contrib_ops(rewritten->ops), "(none)");
  EXPECT_EQ(opset_import(rewritten->model, ""), c.opset);  // never raised
  for (const auto& op : c.ops) EXPECT_GE(op_count(rewritten->ops, {"", op}), 1) << op;
  std::vector<std::string> options{"--trials", "3", "--float-range", "-2,2"};
  options.insert(options.end(), c.options.begin(), c.options.end());
  const auto comparison = ort_compare(original, rewritten->output, options);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  record("", comparison.max_abs);
}

// Bit for bit: ORT's kernel computes in float (FMA on x86) and rounds once; the rewrite's
// separate Mul and Sub differ by float rounding only.
const std::vector<std::string> kFloat{"--rtol", "0", "--atol", "1e-6"};
const std::vector<std::string> kExact{"--rtol", "0", "--atol", "0"};

std::vector<std::string> with(std::vector<std::string> options, const std::vector<std::string>& more) {
  options.insert(options.end(), more.begin(), more.end());
  return options;
}

INSTANTIATE_TEST_SUITE_P(
    Primitives, RotaryEmbedding,
    ::testing::Values(
        OpCase{"bsd_half_full_symbolic", 17, R"(g (float[batch, seq, 32] x, int64[batch, seq] pos, float[16, 8] cos, float[16, 8] sin) => (float[batch, seq, 32] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 2> (x, pos, cos, sin) })", {"Gather", "Sub", "Concat"},
               with(kFloat, {"--dim", "batch=2", "--dim", "seq=5", "--range", "pos=0,15"})},
        // What onnxruntime-genai writes for q and k (rope_attrs: interleaved, partial rotary_embedding_dim).
        OpCase{"bsd_half_partial_genai", 17, R"(g (float[2, 4, 128] x, int64[2, 4] pos, float[32, 8] cos, float[32, 8] sin) => (float[2, 4, 128] y) {
          y = com.microsoft.RotaryEmbedding <interleaved = 0, num_heads = 4, rotary_embedding_dim = 16> (x, pos, cos, sin) })",
               {"Slice", "Concat"}, with(kFloat, {"--range", "pos=0,31"})},
        OpCase{"bsd_interleaved_partial", 14, R"(g (float[2, 3, 64] x, int64[2, 3] pos, float[8, 8] cos, float[8, 8] sin) => (float[2, 3, 64] y) {
          y = com.microsoft.RotaryEmbedding <interleaved = 1, num_heads = 2, rotary_embedding_dim = 16> (x, pos, cos, sin) })",
               {"Slice", "Reshape"}, with(kFloat, {"--range", "pos=0,7"})},
        OpCase{"bnsh_half_partial_opset13", 13, R"(g (float[2, 3, 4, 32] x, int64[2, 4] pos, float[8, 8] cos, float[8, 8] sin) => (float[2, 3, 4, 32] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 3, rotary_embedding_dim = 16> (x, pos, cos, sin) })", {"Unsqueeze"},
               with(kFloat, {"--range", "pos=0,7"})},
        OpCase{"bnsh_interleaved_full_offset", 17, R"(g (float[batch, 2, seq, 16] x, int64[1] pos, float[20, 8] cos, float[20, 8] sin) => (float[batch, 2, seq, 16] y) {
          y = com.microsoft.RotaryEmbedding <interleaved = 1> (x, pos, cos, sin) })", {"Range"},
               with(kFloat, {"--dim", "batch=2", "--dim", "seq=6", "--range", "pos=0,14"})},
        OpCase{"bsd_scalar_offset", 18, R"(g (float[2, 5, 32] x, int64 pos, float[16, 8] cos, float[16, 8] sin) => (float[2, 5, 32] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 2, scale = 1.0, is_packed_batching = 0> (x, pos, cos, sin) })", {"Range"},
               with(kFloat, {"--range", "pos=0,11"})},
        // Phi-3-like head size 96 without num_heads: heads = hidden / (2·cos_cache.shape[1]).
        OpCase{"bsd_head96_no_num_heads", 20, R"(g (float[1, 3, 192] x, int64[1, 3] pos, float[16, 48] cos, float[16, 48] sin) => (float[1, 3, 192] y) {
          y = com.microsoft.RotaryEmbedding (x, pos, cos, sin) })", {"Gather"}, with(kFloat, {"--range", "pos=0,15"})},
        // The hidden size known only at run time (an input from MatMulNBits, say): num_heads and
        // rotary_embedding_dim are enough.
        OpCase{"bsd_hidden_size_unknown", 17, R"(g (float[2, 3, h] x, int64[2, 3] pos, float[8, 8] cos, float[8, 8] sin) => (float[2, 3, h] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 2, rotary_embedding_dim = 16> (x, pos, cos, sin) })", {"Reshape"},
               with(kFloat, {"--dim", "h=64", "--range", "pos=0,7"})},
        OpCase{"float16_bsd_interleaved_partial", 17, R"(g (float16[2, 3, 64] x, int64[2, 3] pos, float16[8, 8] cos, float16[8, 8] sin) => (float16[2, 3, 64] y) {
          y = com.microsoft.RotaryEmbedding <interleaved = 1, num_heads = 2, rotary_embedding_dim = 16> (x, pos, cos, sin) })",
               {"Cast"}, with(kExact, {"--range", "pos=0,7"})},
        OpCase{"float16_bnsh_half_offset", 16, R"(g (float16[2, 2, 5, 32] x, int64[1] pos, float16[16, 16] cos, float16[16, 16] sin) => (float16[2, 2, 5, 32] y) {
          y = com.microsoft.RotaryEmbedding (x, pos, cos, sin) })", {"Cast"}, with(kExact, {"--range", "pos=0,10"})}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Onnx23, RotaryEmbedding,
    ::testing::Values(
        OpCase{"bsd_half_partial", 23, R"(g (float[batch, seq, 128] x, int64[batch, seq] pos, float[32, 16] cos, float[32, 16] sin) => (float[batch, seq, 128] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 4, rotary_embedding_dim = 32> (x, pos, cos, sin) })", {"RotaryEmbedding"},
               with(kExact, {"--dim", "batch=2", "--dim", "seq=4", "--range", "pos=0,31"})},
        OpCase{"bsd_interleaved_no_num_heads", 23, R"(g (float[2, 3, 64] x, int64[2, 3] pos, float[8, 16] cos, float[8, 16] sin) => (float[2, 3, 64] y) {
          y = com.microsoft.RotaryEmbedding <interleaved = 1> (x, pos, cos, sin) })", {"RotaryEmbedding"},
               with(kExact, {"--range", "pos=0,7"})},
        OpCase{"bnsh_offset", 24, R"(g (float[batch, 2, seq, 16] x, int64[1] pos, float[20, 4] cos, float[20, 4] sin) => (float[batch, 2, seq, 16] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 2, rotary_embedding_dim = 8, interleaved = 1> (x, pos, cos, sin) })",
               {"RotaryEmbedding", "Expand"}, with(kExact, {"--dim", "batch=2", "--dim", "seq=6", "--range", "pos=0,14"})},
        OpCase{"bsd_hidden_size_unknown", 23, R"(g (float[2, 3, h] x, int64[2, 3] pos, float[8, 8] cos, float[8, 8] sin) => (float[2, 3, h] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 2, rotary_embedding_dim = 16> (x, pos, cos, sin) })", {"RotaryEmbedding"},
               with(kExact, {"--dim", "h=64", "--range", "pos=0,7"})},
        OpCase{"float16_bsd_half_partial", 23, R"(g (float16[2, 4, 128] x, int64[2, 4] pos, float16[32, 16] cos, float16[32, 16] sin) => (float16[2, 4, 128] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 4, rotary_embedding_dim = 32> (x, pos, cos, sin) })", {"RotaryEmbedding"},
               with(kExact, {"--range", "pos=0,31"})}),
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
  options.explain = "RotaryEmbedding";
  const auto rewritten = rewrite_text(model(17, c.graph), builtin_rules(), options);
  EXPECT_EQ(contrib_ops(count_ops(rewritten.model)), "com.microsoft.RotaryEmbedding x1");
  EXPECT_NE(rewritten.explain.find(c.reason), std::string::npos) << rewritten.explain;
}

INSTANTIATE_TEST_SUITE_P(
    Rotary, Declines,
    ::testing::Values(
        DeclineCase{"bfloat16", R"(g (bfloat16[2, 3, 32] x, int64[2, 3] pos, bfloat16[8, 8] cos, bfloat16[8, 8] sin) => (bfloat16[2, 3, 32] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 2> (x, pos, cos, sin) })",
                    "bfloat16: ONNX Runtime's CPU provider has no bfloat16 RotaryEmbedding"},
        DeclineCase{"cos_cache_wider_than_rotary_dim", R"(g (float[2, 3, 64] x, int64[2, 3] pos, float[8, 16] cos, float[8, 16] sin) => (float[2, 3, 64] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 2, rotary_embedding_dim = 16> (x, pos, cos, sin) })",
                    "cos_cache holds 16 values per position, not R/2 = 8"},
        DeclineCase{"rotary_dim_without_num_heads", R"(g (float[2, 3, 64] x, int64[2, 3] pos, float[8, 8] cos, float[8, 8] sin) => (float[2, 3, 64] y) {
          y = com.microsoft.RotaryEmbedding <rotary_embedding_dim = 16> (x, pos, cos, sin) })",
                    "rotary_embedding_dim without num_heads"},
        DeclineCase{"rotary_dim_above_head", R"(g (float[2, 3, 64] x, int64[2, 3] pos, float[8, 32] cos, float[8, 32] sin) => (float[2, 3, 64] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 4, rotary_embedding_dim = 64> (x, pos, cos, sin) })",
                    "rotary_embedding_dim 64 exceeds the head size 16"},
        DeclineCase{"bnsh_heads_disagree", R"(g (float[2, 4, 3, 16] x, int64[2, 3] pos, float[8, 8] cos, float[8, 8] sin) => (float[2, 4, 3, 16] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 2, rotary_embedding_dim = 16> (x, pos, cos, sin) })",
                    "the 4-D input [B, 4, S, 16] does not have 2 heads of 32 values"},
        DeclineCase{"position_ids_3d", R"(g (float[2, 3, 32] x, int64[2, 3, 1] pos, float[8, 8] cos, float[8, 8] sin) => (float[2, 3, 32] y) {
          y = com.microsoft.RotaryEmbedding <num_heads = 2> (x, pos, cos, sin) })", "position_ids is [2, 3, 1]"}),
    [](const auto& info) { return info.param.name; });

// `inspect` names the op and the rules that cover it; `check` lists the op until it is rewritten.
TEST(Cli, InspectNamesTheRulesCheckTheOp) {
  TempDir dir;
  const auto file = write_model_text(model(17, R"(g (float[2, 3, 32] x, int64[2, 3] pos, float[8, 8] cos, float[8, 8] sin) => (float[2, 3, 32] y) {
    y = com.microsoft.RotaryEmbedding <num_heads = 2> (x, pos, cos, sin) })"), dir / "rope.onnx");
  const auto inspect = run_cli({"inspect", file.string()});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("com.microsoft.RotaryEmbedding x1: defuse-rotary-embedding-23 [onnx], defuse-rotary-embedding [onnx]"),
            std::string::npos)
      << inspect.out;
  const auto check = run_cli({"check", file.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 1);
  EXPECT_NE((check.out + check.err).find("com.microsoft.RotaryEmbedding x1"), std::string::npos) << check.out << check.err;
}

}  // namespace
}  // namespace onnx_rewrite
