// Attention-23/24, RotaryEmbedding-23 and TensorScatter-24 lowered below their opsets, proven on
// ground truth: every ONNX backend case of the op
// (3-D and 4-D, GQA, masks bool and float, shorter masks, causal with past and with
// nonpad_kv_seqlen, softcap, softmax_precision, every qk_matmul_output_mode, float16) rewritten
// with --opset 13 and 11 reproduces its expected outputs in ONNX Runtime; shapes known only at
// run time against ORT's own Attention kernel on random inputs.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// node/test_attention_* (the backend suite of ONNX 1.23, with its errata: bottom-right causal
// alignment, zero rows where every key is masked). The last three ONNX Runtime 1.30's own kernel
// gets wrong (a padded 4-D mask, past with a causal mask); the lowered op gets them right.
const std::vector<std::string> kCases = {
    "23_boolmask_fullymasked_row_nan_robustness", "23_fullymasked_qk_matmul_output_mode3_zero",
    "24_fullymasked_qk_matmul_output_mode3_zero", "24_qk_matmul_output_mode3_softmax_precision", "3d", "3d_attn_mask", "3d_causal",
    "3d_diff_heads_sizes", "3d_diff_heads_sizes_attn_mask", "3d_diff_heads_sizes_causal", "3d_diff_heads_sizes_scaled",
    "3d_diff_heads_sizes_softcap", "3d_diff_heads_with_past_and_present", "3d_gqa", "3d_gqa_attn_mask", "3d_gqa_causal", "3d_gqa_scaled",
    "3d_gqa_softcap", "3d_gqa_with_past_and_present", "3d_scaled", "3d_softcap", "3d_transpose_verification", "3d_with_past_and_present",
    "3d_with_past_and_present_qk_matmul", "3d_with_past_and_present_qk_matmul_bias", "3d_with_past_and_present_qk_matmul_softcap",
    "3d_with_past_and_present_qk_matmul_softmax", "4d", "4d_attn_mask", "4d_attn_mask_3d", "4d_attn_mask_3d_causal", "4d_attn_mask_4d",
    "4d_attn_mask_4d_causal", "4d_attn_mask_bool", "4d_attn_mask_bool_4d", "4d_causal", "4d_causal_nonpad_attn_mask_composition",
    "4d_causal_nonpad_batch_prefill", "4d_causal_nonpad_continued_prefill", "4d_causal_nonpad_negative_offset_structural_empty",
    "4d_causal_with_past_and_present", "4d_diff_heads_sizes", "4d_diff_heads_sizes_attn_mask", "4d_diff_heads_sizes_causal",
    "4d_diff_heads_sizes_scaled", "4d_diff_heads_sizes_softcap", "4d_diff_heads_with_past_and_present",
    "4d_diff_heads_with_past_and_present_mask3d", "4d_diff_heads_with_past_and_present_mask4d", "4d_fp16", "4d_gqa", "4d_gqa_attn_mask",
    "4d_gqa_causal", "4d_gqa_causal_nonpad_decode", "4d_gqa_causal_nonpad_decode_fp16", "4d_gqa_scaled", "4d_gqa_softcap",
    "4d_gqa_with_past_and_present", "4d_gqa_with_past_and_present_fp16", "4d_scaled", "4d_softcap", "4d_softcap_neginf_mask",
    "4d_softcap_neginf_mask_poison", "4d_with_past_and_present", "4d_with_past_and_present_qk_matmul",
    "4d_with_past_and_present_qk_matmul_bias", "4d_with_past_and_present_qk_matmul_bias_3d_mask",
    "4d_with_past_and_present_qk_matmul_bias_4d_mask", "4d_with_qk_matmul", "4d_with_qk_matmul_bias", "4d_with_qk_matmul_softcap",
    "4d_with_qk_matmul_softmax", "causal_boolmask_nan_robustness", "4d_diff_heads_mask4d_padded_kv",
    "4d_with_past_and_present_qk_matmul_bias_3d_mask_causal", "4d_with_past_and_present_qk_matmul_bias_4d_mask_causal"};

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& name : kCases) names.push_back("test_attention_" + name);
  return names;
}

TEST(AttentionLowering, ConformanceCasesKeepTheirOutputsAtOpset13) {
  ASSERT_TEST_DATA(corpus, "conformance");
  expect_conformance_cases_lowered(corpus, case_names(), 13, {"Attention"});
}

TEST(AttentionLowering, ConformanceCasesKeepTheirOutputsAtOpset11) {
  ASSERT_TEST_DATA(corpus, "conformance");
  expect_conformance_cases_lowered(corpus, case_names(), 11, {"Attention"});
}

// node/test_rotary_embedding_*: 3-D and 4-D, interleaved or halves, partial rotation, with and
// without position_ids.
const std::vector<std::string> kRotaryCases = {
    "test_rotary_embedding", "test_rotary_embedding_3d_input", "test_rotary_embedding_interleaved",
    "test_rotary_embedding_no_position_ids", "test_rotary_embedding_no_position_ids_interleaved",
    "test_rotary_embedding_no_position_ids_rotary_dim", "test_rotary_embedding_with_interleaved_rotary_dim",
    "test_rotary_embedding_with_rotary_dim"};

TEST(RotaryEmbeddingLowering, ConformanceCasesKeepTheirOutputs) {
  ASSERT_TEST_DATA(corpus, "conformance");
  for (int opset : {17, 11}) {
    SCOPED_TRACE(opset);
    expect_conformance_cases_lowered(corpus, kRotaryCases, opset, {"RotaryEmbedding"});
  }
}

TEST(TensorScatterLowering, ConformanceCasesKeepTheirOutputs) {
  ASSERT_TEST_DATA(corpus, "conformance");
  for (int opset : {17, 11}) {
    SCOPED_TRACE(opset);
    expect_conformance_cases_lowered(corpus, {"test_tensorscatter", "test_tensorscatter_3d", "test_tensorscatter_circular"},
                                     opset, {"TensorScatter"});
  }
}

// A decode step: write positions per batch, circular past the end of the cache, on a 4-D cache.
TEST(TensorScatterLowering, CircularWritesWrapAroundTheCache) {
  TempDir dir;
  const fs::path original = write_model_text(R"(
    <ir_version: 10, opset_import: ["": 24]>
    g (float[2, 3, 5, 4] past, float[2, 3, 2, 4] update) => (float[2, 3, 5, 4] present) <int64[2] at = {4, 1}> {
      present = TensorScatter <mode = "circular"> (past, update, at)
    })",
                                             dir / "scatter.onnx");
  const auto rewritten = rewrite_and_check(original, dir / "lowered.onnx", "onnx", 13);
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(op_count(rewritten->ops, {"", "TensorScatter"}), 0);
  const auto comparison = ort_compare(original, dir / "lowered.onnx", {"--rtol", "0", "--atol", "0"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

// Head counts, head size and sequence lengths known only at run time (the scale 1/√D, the
// repetition of KV heads and the causal frontier computed in the graph), with past state and a
// float mask: the lowered model against ORT's Attention-23 kernel.
TEST(AttentionLowering, ShapesKnownOnlyAtRunTime) {
  TempDir dir;
  const fs::path original = write_model_text(R"(
    <ir_version: 10, opset_import: ["": 23]>
    g (float[B, H, S, D] q, float[B, G, T, D] k, float[B, G, T, E] v, float[B, G, P, D] past_k, float[B, G, P, E] past_v)
        => (float[B, H, S, E] y, float[B, G, L, D] present_k, float[B, G, L, E] present_v) {
      y, present_k, present_v = Attention <is_causal = 1> (q, k, v, , past_k, past_v)
    })",
                                             dir / "attention.onnx");
  const auto rewritten = rewrite_and_check(original, dir / "lowered.onnx", "onnx", 13);
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(op_count(rewritten->ops, {"", "Attention"}), 0);
  const auto comparison = ort_compare(original, dir / "lowered.onnx",
                                      {"--dim", "B=2", "--dim", "H=4", "--dim", "G=2", "--dim", "S=3", "--dim", "T=3", "--dim", "D=8",
                                       "--dim", "E=5", "--dim", "P=4"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers("Attention-23 lowered, run-time shapes", comparison);
}

// What has no meaning is named (a note of the rewrite), and the node keeps the model above the
// opset: exit 1, the output written at the model's own opset.
TEST(AttentionLowering, DeclinesWithAReason) {
  struct Declined {
    std::string graph, reason;
  };
  const std::vector<Declined> declined = {
      {R"(g (float[2, 3, 8] q, float[2, 3, 8] k, float[2, 3, 8] v) => (float[2, 3, 8] y) {
            y = Attention (q, k, v)
          })",
       "3-D inputs without q_num_heads and kv_num_heads"},
      {R"(g (float[2, 3, 4, 8] q, float[2, 2, 4, 8] k, float[2, 2, 4, 8] v) => (float[2, 3, 4, 8] y) {
            y = Attention (q, k, v)
          })",
       "q_num_heads 3 is not a multiple of kv_num_heads 2"},
  };
  for (const auto& [graph, reason] : declined) {
    SCOPED_TRACE(reason);
    TempDir dir;
    const fs::path model = write_model_text("<ir_version: 10, opset_import: [\"\": 23]>\n" + graph, dir / "m.onnx");
    const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--opset", "13"});
    EXPECT_EQ(result.exit_code, 1) << result.err;
    EXPECT_NE(result.out.find("attention-23-lowering left node 'Attention -> y' as it was: " + reason), std::string::npos) << result.out;
    EXPECT_NE(result.err.find("Attention x1 (main graph) keeps it there as it is"), std::string::npos) << result.err;
    EXPECT_EQ(opset_import(read_model(dir / "out.onnx"), ""), 23);
  }
}

}  // namespace
}  // namespace onnx_rewrite
