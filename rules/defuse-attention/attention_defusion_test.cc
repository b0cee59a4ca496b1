// The attention de-fusion rules (rules/defuse-attention/defuse-attention.rules, rules/defuse-attention/attention_defusion.cc):
// com.microsoft Attention and EmbedLayerNormalization become standard ONNX under --target onnx.
// Every attribute and input form is proven against ONNX Runtime's own contrib kernel (the
// com.microsoft model run in ORT is the reference), the declines by their --explain text, and the
// whole path end to end on BERT models ORT fused and saved itself (gen-bert --legacy-export,
// tests/ort/optimize.js): no com.microsoft op left, `check --target onnx` passes, the outputs are
// the original model's.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/model_io.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

std::string model(int opset, const std::string& graph) { return contrib_model_text(opset, graph); }

// "com.microsoft.Attention x1, ..." for the ops of the com.microsoft domains; "(none)" when none.
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

// ---- Single ops against ONNX Runtime's contrib kernels ------------------------------------------

struct OpCase {
  std::string name;
  int opset;
  std::string graph;                           // a model in ONNX text using the contrib op
  std::vector<std::string> ops;                // standard ops the rewrite must produce
  std::vector<std::vector<std::string>> runs;  // compare.js options, one comparison each
  std::string reference = {};                  // the expected model, when not the original itself
};

class ContribOp : public ::testing::TestWithParam<OpCase> {};

// The rewrite (CLI) passes `check --target onnx`, leaves no com.microsoft op, uses the expected
// standard ops, and ORT computes with it what it computes with the original (its own kernel).
TEST_P(ContribOp, IsStandardAndComputesAsOrtsKernel) {
  const auto& c = GetParam();
  TempDir dir;
  const auto original = write_model_text(model(c.opset, c.graph), dir / "original.onnx");
  const auto rewritten = rewrite_and_check(original, dir / "defused.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(contrib_ops(rewritten->ops), "(none)");
  for (const auto& op : c.ops) EXPECT_GE(op_count(rewritten->ops, {"", op}), 1) << op;
  const auto expected = c.reference.empty() ? original : write_model_text(model(c.opset, c.reference), dir / "reference.onnx");
  for (size_t i = 0; i < c.runs.size(); ++i) {
    std::vector<std::string> extra{"--trials", "3", "--float-range", "-2,2"};
    extra.insert(extra.end(), c.runs[i].begin(), c.runs[i].end());
    const auto comparison = ort_compare(expected, rewritten->output, extra);
    EXPECT_TRUE(comparison.ok) << comparison.output;
    record(c.runs.size() > 1 ? fmt::format("run {}", i + 1) : "", comparison.max_abs);
  }
}

std::string case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }

const std::vector<std::string> kDims{"--dim", "batch=2", "--dim", "seq=5"};

std::vector<std::string> with(std::vector<std::string> options, const std::vector<std::string>& more) {
  options.insert(options.end(), more.begin(), more.end());
  return options;
}

INSTANTIATE_TEST_SUITE_P(
    Attention, ContribOp,
    ::testing::Values(
        OpCase{"no_mask_static", 12, R"(g (float[2, 5, 8] x, float[8, 24] w, float[24] b) => (float[2, 5, 8] y) {
          y = com.microsoft.Attention <num_heads = 2> (x, w, b) })", {"Softmax", "Split"}, {{}}},
        OpCase{"key_padding_mask_symbolic", 12, R"(g (float[batch, seq, 8] x, float[8, 24] w, float[24] b, int32[batch, seq] mask) => (float[batch, seq, 8] y) {
          y = com.microsoft.Attention <num_heads = 2> (x, w, b, mask) })", {"Where"}, {with(kDims, {"--range", "mask=0,1"})}},
        OpCase{"key_padding_mask_scale_filter_opset17", 17, R"(g (float[batch, seq, 8] x, float[8, 24] w, float[24] b, int32[batch, seq] mask) => (float[batch, seq, 8] y) {
          y = com.microsoft.Attention <num_heads = 4, scale = 0.3, mask_filter_value = -2.5> (x, w, b, mask) })", {"Where"},
               {with(kDims, {"--range", "mask=0,1"})}},
        OpCase{"end_positions_1d", 12, R"(g (float[batch, seq, 8] x, float[8, 24] w, float[24] b, int32[batch] mask) => (float[batch, seq, 8] y) {
          y = com.microsoft.Attention <num_heads = 2> (x, w, b, mask) })", {"Less", "Range"}, {with(kDims, {"--range", "mask=0,5"})}},
        OpCase{"end_and_start_positions_2b", 13, R"(g (float[2, 5, 8] x, float[8, 24] w, float[24] b, int32[4] mask) => (float[2, 5, 8] y) {
          y = com.microsoft.Attention <num_heads = 2, mask_filter_value = -4.0> (x, w, b, mask) })", {"Less", "Not", "And"},
               {{"--range", "mask=0,5"}}},
        OpCase{"query_key_mask_3d", 14, R"(g (float[batch, seq, 8] x, float[8, 24] w, float[24] b, int32[batch, seq, seq] mask) => (float[batch, seq, 8] y) {
          y = com.microsoft.Attention <num_heads = 2, mask_filter_value = -3.0> (x, w, b, mask) })", {"Where"},
               {with(kDims, {"--range", "mask=0,1"})}},
        OpCase{"one_wide_mask_is_no_mask", 12, R"(g (float[2, 5, 8] x, float[8, 24] w, float[24] b, int32[2, 1] mask) => (float[2, 5, 8] y) {
          y = com.microsoft.Attention <num_heads = 2> (x, w, b, mask) })", {"Softmax"}, {{"--range", "mask=0,1"}}},
        OpCase{"mask_width_known_at_run_time_opset9", 9, R"(g (float[batch, seq, 8] x, float[8, 24] w, float[24] b, int32[batch, keys] mask) => (float[batch, seq, 8] y) {
          y = com.microsoft.Attention <num_heads = 2> (x, w, b, mask) })", {"Or", "Equal"},
               {with(kDims, {"--dim", "keys=5", "--range", "mask=0,1"}), with(kDims, {"--dim", "keys=1", "--range", "mask=0,1"})}},
        OpCase{"unidirectional_with_mask", 12, R"(g (float[batch, seq, 8] x, float[8, 24] w, float[24] b, int32[batch, seq] mask) => (float[batch, seq, 8] y) {
          y = com.microsoft.Attention <num_heads = 2, unidirectional = 1, mask_filter_value = -1.5> (x, w, b, mask) })",
               {"Greater", "Where"}, {with(kDims, {"--range", "mask=0,1"})}},
        // ORT's fusion of a mask scaled by torch.finfo(float).min: the lowest float as mask_filter_value.
        OpCase{"lowest_filter_value_unidirectional", 12, R"(g (float[batch, seq, 8] x, float[8, 24] w, float[24] b, int32[batch, seq] mask) => (float[batch, seq, 8] y) {
          y = com.microsoft.Attention <num_heads = 2, unidirectional = 1, mask_filter_value = -3.4028234663852886e38> (x, w, b, mask) })",
               {"Where"}, {with(kDims, {"--range", "mask=0,1"})}},
        OpCase{"unidirectional_no_mask_static", 17, R"(g (float[2, 6, 8] x, float[8, 24] w, float[24] b) => (float[2, 6, 8] y) {
          y = com.microsoft.Attention <num_heads = 2, unidirectional = 1> (x, w, b) })", {"Greater", "Where"}, {{}}},
        OpCase{"unidirectional_end_positions_opset10", 10, R"(g (float[batch, seq, 8] x, float[8, 24] w, float[24] b, int32[batch] mask) => (float[batch, seq, 8] y) {
          y = com.microsoft.Attention <num_heads = 2, unidirectional = 1> (x, w, b, mask) })", {"NonZero", "Less"},
               {with(kDims, {"--range", "mask=1,5"})}},
        OpCase{"qkv_hidden_sizes_wider_v", 12, R"(g (float[batch, seq, 8] x, float[8, 28] w, float[28] b, int32[batch, seq] mask) => (float[batch, seq, 12] y) {
          y = com.microsoft.Attention <num_heads = 2, qkv_hidden_sizes = [8, 8, 12]> (x, w, b, mask) })", {"Split"},
               {with(kDims, {"--range", "mask=0,1"})}},
        OpCase{"attention_bias_full", 12, R"(g (float[2, 5, 8] x, float[8, 24] w, float[24] b, float[2, 2, 5, 5] bias) => (float[2, 5, 8] y) {
          y = com.microsoft.Attention <num_heads = 2> (x, w, b, , , bias) })", {"Add"}, {{}}},
        OpCase{"attention_bias_broadcast_heads_mask_causal", 12, R"(g (float[2, 5, 8] x, float[8, 24] w, float[24] b, int32[2, 5] mask, float[2, 1, 5, 5] bias) => (float[2, 5, 8] y) {
          y = com.microsoft.Attention <num_heads = 2, unidirectional = 1> (x, w, b, mask, , bias) })", {"Where"},
               {{"--range", "mask=0,1"}}},
        OpCase{"attention_bias_broadcast_batch", 17, R"(g (float[2, 5, 8] x, float[8, 24] w, float[24] b, float[1, 2, 5, 5] bias) => (float[2, 5, 8] y) {
          y = com.microsoft.Attention <num_heads = 2> (x, w, b, , , bias) })", {"Add"}, {{}}},
        OpCase{"past_present_causal_mask", 12, R"(g (float[batch, seq, 8] x, float[8, 24] w, float[24] b, int32[batch, total] mask, float[2, batch, 2, past, 4] state)
            => (float[batch, seq, 8] y, float[2, batch, 2, total, 4] present) {
          y, present = com.microsoft.Attention <num_heads = 2, unidirectional = 1> (x, w, b, mask, state) })", {"Concat"},
               {with(kDims, {"--dim", "past=3", "--dim", "total=8", "--range", "mask=0,1"})}},
        OpCase{"past_static_no_mask", 14, R"(g (float[2, 1, 8] x, float[8, 24] w, float[24] b, float[2, 2, 2, 4, 4] state) => (float[2, 1, 8] y, float[2, 2, 2, 5, 4] present) {
          y, present = com.microsoft.Attention <num_heads = 2, unidirectional = 1> (x, w, b, , state) })", {"Concat"}, {{}}},
        OpCase{"present_without_past", 12, R"(g (float[2, 5, 8] x, float[8, 24] w, float[24] b) => (float[2, 5, 8] y, float[2, 2, 2, 5, 4] present) {
          y, present = com.microsoft.Attention <num_heads = 2> (x, w, b) })", {"Concat"}, {{}}},
        // ORT's CPU kernel crashes without bias; the reference is the same node with a zero bias.
        OpCase{"no_bias", 12, R"(g (float[2, 5, 8] x, float[8, 24] w, int32[2, 5] mask) => (float[2, 5, 8] y) {
          y = com.microsoft.Attention <num_heads = 2> (x, w, , mask) })", {"Softmax"}, {{"--range", "mask=0,1"}},
               R"(g (float[2, 5, 8] x, float[8, 24] w, int32[2, 5] mask) => (float[2, 5, 8] y)
                  <float[24] b = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}> {
          y = com.microsoft.Attention <num_heads = 2> (x, w, b, mask) })"}),
    case_name);

const char* kEmbedInputs =
    "int32[batch, seq] ids, int32[batch, seq] seg, float[20, 8] word, float[16, 8] pos, float[2, 8] type, float[8] gamma, "
    "float[8] beta";
// compare.js options: the sizes and the index ranges of the inputs a case has (ids, seg,
// positions; the mask holds 0, 1 and 2, of which the kernel counts the 1s).
std::vector<std::string> embed_ranges(const std::vector<std::string>& inputs) {
  static const std::map<std::string, std::string> ranges{
      {"ids", "ids=0,19"}, {"seg", "seg=0,1"}, {"positions", "positions=0,15"}, {"mask", "mask=0,2"}};
  std::vector<std::string> options{"--dim", "batch=2", "--dim", "seq=6"};
  for (const auto& input : inputs) options.insert(options.end(), {"--range", ranges.at(input)});
  return options;
}

INSTANTIATE_TEST_SUITE_P(
    EmbedLayerNorm, ContribOp,
    ::testing::Values(
        OpCase{"all_inputs_all_outputs_opset17", 17, fmt::format(R"(g ({}, int32[batch, seq] mask, int32[batch, seq] positions)
            => (float[batch, seq, 8] y, int32[batch] count, float[batch, seq, 8] sum) {{
          y, count, sum = com.microsoft.EmbedLayerNormalization <epsilon = 1e-5> (ids, seg, word, pos, type, gamma, beta, mask, positions) }})",
                                                                 kEmbedInputs),
               {"LayerNormalization", "ReduceSum"}, {embed_ranges({"ids", "seg", "mask", "positions"})}},
        OpCase{"default_positions_spelled_opset12", 12, fmt::format(R"(g ({}, int32[batch, seq] mask) => (float[batch, seq, 8] y, int32[batch] count) {{
          y, count = com.microsoft.EmbedLayerNormalization <epsilon = 1e-5> (ids, seg, word, pos, type, gamma, beta, mask) }})",
                                                                    kEmbedInputs),
               {"ReduceMean", "Range"}, {embed_ranges({"ids", "seg", "mask"})}},
        OpCase{"position_ids_one_row_default_epsilon", 14, fmt::format(R"(g ({}, int32[1, seq] positions) => (float[batch, seq, 8] y, float[batch, seq, 8] sum) {{
          y, , sum = com.microsoft.EmbedLayerNormalization (ids, seg, word, pos, type, gamma, beta, , positions) }})", kEmbedInputs),
               {"ReduceMean"}, {embed_ranges({"ids", "seg", "positions"})}},
        OpCase{"distilbert_no_segment_no_mask", 17, R"(g (int32[batch, seq] ids, float[20, 8] word, float[16, 8] pos, float[8] gamma, float[8] beta)
            => (float[batch, seq, 8] y, int32[batch] count) {
          y, count = com.microsoft.EmbedLayerNormalization <epsilon = 1e-12> (ids, , word, pos, , gamma, beta) })",
               {"ConstantOfShape"}, {embed_ranges({"ids"})}},
        // Without the mask_index output ORT wants mask_index_type = 0 (its type inference).
        OpCase{"default_positions_opset10", 10, fmt::format(R"(g ({}) => (float[batch, seq, 8] y) {{
          y = com.microsoft.EmbedLayerNormalization <epsilon = 1e-12, mask_index_type = 0> (ids, seg, word, pos, type, gamma, beta) }})", kEmbedInputs),
               {"NonZero"}, {embed_ranges({"ids", "seg"})}}),
    case_name);

// ---- Declines: the node stays and --explain says why ---------------------------------------------

std::string explain(const std::string& text, const std::string& op) {
  RewriteOptions options;
  options.target = "onnx";
  options.explain = op;
  const auto rewritten = rewrite_text(text, builtin_rules(), options);
  EXPECT_EQ(contrib_ops(count_ops(rewritten.model)), fmt::format("com.microsoft.{} x1", op));
  return rewritten.explain;
}

struct DeclineCase {
  std::string name;
  std::string graph;
  std::string op;
  std::string reason;  // in the --explain text
};

class Declines : public ::testing::TestWithParam<DeclineCase> {};

TEST_P(Declines, NodeStaysWithTheReason) {
  const auto& c = GetParam();
  const auto text = explain(model(12, c.graph), c.op);
  EXPECT_NE(text.find(c.reason), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(
    Attention, Declines,
    ::testing::Values(
        DeclineCase{"megatron_4d_mask", R"(g (float[2, 5, 8] x, float[8, 24] w, float[24] b, int32[2, 1, 8, 8] mask) => (float[2, 5, 8] y) {
          y = com.microsoft.Attention <num_heads = 2> (x, w, b, mask) })", "Attention",
                    "mask_index is 4-D ([B, 1, max_S, max_S], Megatron): ONNX Runtime's CPU kernel does not implement it"},
        DeclineCase{"rotary", R"(g (float[2, 5, 8] x, float[8, 24] w, float[24] b) => (float[2, 5, 8] y) {
          y = com.microsoft.Attention <num_heads = 2, do_rotary = 1> (x, w, b) })", "Attention",
                    "do_rotary = 1: ONNX Runtime's CPU kernel does not implement rotary embedding in Attention"},
        DeclineCase{"shared_past_present_buffer", R"(g (float[2, 1, 8] x, float[8, 24] w, float[24] b, float[2, 2, 2, 8, 4] state, int32[1] length)
            => (float[2, 1, 8] y, float[2, 2, 2, 8, 4] present) {
          y, present = com.microsoft.Attention <num_heads = 2, past_present_share_buffer = 1> (x, w, b, , state, , length) })",
                    "Attention", "past_present_share_buffer = 1"},
        DeclineCase{"mask_length_neither_b_nor_2b", R"(g (float[batch, 5, 8] x, float[8, 24] w, float[24] b, int32[n] mask) => (float[batch, 5, 8] y) {
          y = com.microsoft.Attention <num_heads = 2> (x, w, b, mask) })", "Attention",
                    "mask_index has shape [n] and the batch size is batch: whether it holds end positions ([B]) or end and start "
                    "positions ([2B]) is unknown"},
        DeclineCase{"hidden_sizes_unknown", R"(g (float[2, 5, 8] x, float[8, 24] v) => (float[2, 5, 8] y) {
          w = com.example.Frob (v)
          y = com.microsoft.Attention <num_heads = 2> (x, w) })", "Attention",
                    "the hidden sizes are unknown: no qkv_hidden_sizes, and the shapes of bias and weights are unknown"},
        DeclineCase{"segment_ids_without_embedding",
                    R"(g (int32[2, 3] ids, int32[2, 3] seg, float[20, 8] word, float[16, 8] pos, float[8] gamma, float[8] beta) => (float[2, 3, 8] y) {
          y = com.microsoft.EmbedLayerNormalization (ids, seg, word, pos, , gamma, beta) })", "EmbedLayerNormalization",
                    "segment_ids and segment_embedding must be given together"}),
    [](const auto& info) { return info.param.name; });

// What stays is listed by `check`, and `rewrite` says the target is not met.
TEST(Declines, CheckListsTheAttentionThatStays) {
  TempDir dir;
  const auto file = write_model_text(model(12, R"(g (float[2, 5, 8] x, float[8, 24] w, float[24] b, int32[2, 1, 8, 8] mask) => (float[2, 5, 8] y) {
    y = com.microsoft.Attention <num_heads = 2> (x, w, b, mask) })"), dir / "megatron.onnx");
  const auto out = dir / "out.onnx";
  const auto rewrite = run_cli({"rewrite", file.string(), "-o", out.string(), "--target", "onnx"});
  EXPECT_EQ(rewrite.exit_code, 1) << rewrite.out << rewrite.err;
  const auto check = run_cli({"check", out.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 1);
  EXPECT_NE((check.out + check.err).find("com.microsoft.Attention x1"), std::string::npos) << check.out << check.err;
}

// ---- Shapes of the outputs (src/shape_inference.h) ----------------------------------------------

// A transposing FusedMatMul needs its input's rank; here the inputs are the outputs of Attention
// and EmbedLayerNormalization, with no value_info: only shape inference through those ops tells
// it (ranks 3, 5 and 3), so every FusedMatMul goes.
TEST(ShapeInference, RanksOfAttentionAndEmbedLayerNormOutputs) {
  const auto rewritten = rewrite_text(model(12, R"(g (float[batch, seq, 8] x, float[8, 24] w, float[24] b, float[2, batch, 2, past, 4] state,
      int32[batch, seq] ids, float[20, 8] word, float[16, 8] pos, float[8] gamma, float[8] beta)
      => (float[batch, 8, 8] y1, float[2, batch, 2, 4, 4] y2, float[batch, 8, 8] y3) {
    a, present = com.microsoft.Attention <num_heads = 2> (x, w, b, , state)
    e, count = com.microsoft.EmbedLayerNormalization (ids, , word, pos, , gamma, beta)
    y1 = com.microsoft.FusedMatMul <transA = 1> (a, a)
    y2 = com.microsoft.FusedMatMul <transA = 1> (present, present)
    y3 = com.microsoft.FusedMatMul <transA = 1> (e, e)
  })"), builtin_rules(), [] {
    RewriteOptions options;
    options.target = "onnx";
    return options;
  }());
  EXPECT_EQ(contrib_ops(count_ops(rewritten.model)), "(none)");
}

// ---- End to end: BERT models ONNX Runtime fused and saved itself ---------------------------------

class OptimizedLegacyBert : public ::testing::TestWithParam<int> {};

// gen-bert --legacy-export is the transformers 2.x / torch 1.x layout ORT's AttentionFusion and
// EmbedLayerNormFusion recognise (at ai.onnx 11 and 12). ORT must write both ops at levels
// extended and all; the rewrite of what it saved computes what the original computes, with
// random 0/1 attention masks.
TEST_P(OptimizedLegacyBert, DefusedComputesTheOriginal) {
  const int opset = GetParam();
  TempDir dir;
  const auto generated = dir / "generated.onnx";
  const auto generate = run_command({(build_dir() / "gen-bert").string(), "--out", generated.string(), "--layers", "2",
                                     "--hidden", "32", "--heads", "4", "--intermediate", "64", "--vocab", "100", "--max-pos",
                                     "64", "--opset", std::to_string(opset), "--legacy-export"});
  ASSERT_EQ(generate.exit_code, 0) << generate.err;
  auto proto = read_model(generated);
  scale_weights(proto, "MatMul", 20.f);
  scale_weights(proto, "embeddings", 20.f);
  const auto original = dir / fmt::format("legacy_bert_opset{}.onnx", opset);
  write_file(original, serialize(proto));
  const std::vector<std::string> compare{"--dim", "batch=3", "--dim", "sequence=9", "--range", "input_ids=0,99",
                                         "--range", "attention_mask=0,1", "--range", "token_type_ids=0,1", "--trials", "3"};
  for (const std::string level : {"extended", "all"}) {
    const auto optimized = dir / fmt::format("{}.onnx", level);
    const auto optimize = run_command({"node", (source_dir() / "tests" / "ort" / "optimize.js").string(), original.string(),
                                       optimized.string(), "--level", level});
    ASSERT_EQ(optimize.exit_code, 0) << optimize.err;
    const auto written = count_ops(read_model(optimized));
    std::cout << fmt::format("[ ORT      ] opset {} level {} wrote: {}\n", opset, level, contrib_ops(written));
    EXPECT_EQ(op_count(written, {"com.microsoft", "Attention"}), 2) << contrib_ops(written);
    EXPECT_EQ(op_count(written, {"com.microsoft", "EmbedLayerNormalization"}), 1) << contrib_ops(written);
    const auto rewritten = rewrite_and_check(optimized, dir / fmt::format("{}.defused.onnx", level), "onnx");
    ASSERT_TRUE(rewritten);
    EXPECT_EQ(contrib_ops(rewritten->ops), "(none)");
    const auto comparison = ort_compare(original, rewritten->output, compare);
    EXPECT_TRUE(comparison.ok) << comparison.output;
    record(level, comparison.max_abs);
  }
}

INSTANTIATE_TEST_SUITE_P(Opsets, OptimizedLegacyBert, ::testing::Values(11, 12),
                         [](const auto& info) { return fmt::format("opset{}", info.param); });

}  // namespace
}  // namespace onnx_rewrite
