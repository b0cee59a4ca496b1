// rules/simplify/no-ops.rules: each no-op as exporters write it goes (--simplify), and the model
// computes bit for bit what it did in ONNX Runtime; what only looks like a no-op stays, with the
// reason.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

struct NoOpCase {
  std::string name;
  std::string signature;  // (inputs) => (outputs)
  std::string body;
  std::string rule;       // the rule that must fire ("" for a near miss)
  std::string declined;   // for a near miss: the reason --explain gives
};

std::string model_text(const NoOpCase& c) {
  return fmt::format("<ir_version: 8, opset_import: [\"\": 17]>\ng {} {{\n{}\n}}", c.signature, c.body);
}

class NoOp : public ::testing::TestWithParam<NoOpCase> {};

TEST_P(NoOp, GoesAndTheNumbersStayBitForBit) {
  const NoOpCase& c = GetParam();
  RewriteOptions options;
  options.simplify = true;
  const auto original = parse_model_text(model_text(c));
  const auto rewritten = rewrite_proto(original, builtin_rules(), options);
  if (c.rule.empty()) {
    for (const char* id : {"simplify-no-op-cast", "simplify-inference-dropout", "simplify-neutral-operand", "simplify-no-op-pad",
                           "simplify-no-op-transpose", "simplify-no-op-reshape", "simplify-no-op-slice",
                           "simplify-reshape-known-shape"}) {
      EXPECT_FALSE(rewritten.result.rules.count(id)) << id << " fired on a near miss";
    }
    const size_t op_at = c.body.find("y_op = ") + 7;
    options.explain = c.body.substr(op_at, c.body.find(' ', op_at) - op_at);  // the near miss's op
    const auto explained = rewrite_proto(original, builtin_rules(), options);
    EXPECT_NE(explained.explain.find(c.declined), std::string::npos) << explained.explain;
    return;
  }
  ASSERT_TRUE(rewritten.result.rules.count(c.rule)) << rewritten.explain;
  TempDir dir;
  write_file(dir / "original.onnx", serialize(original));
  write_file(dir / "simplified.onnx", rewritten.bytes);
  std::vector<std::string> args{"--rtol", "0", "--atol", "0", "--trials", "2"};
  if (c.signature.find("[N,") != std::string::npos) args.insert(args.end(), {"--dim", "N=3"});
  const auto comparison = ort_compare(dir / "original.onnx", dir / "simplified.onnx", args);
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

INSTANTIATE_TEST_SUITE_P(
    Simplify, NoOp,
    ::testing::Values(
        NoOpCase{"cast_int64_to_int64", "(int64[3] a, int64[3] b) => (int64[3] y)",
                 "q = Div (a, b)\n c = Cast <to = 7> (q)\n y = Neg (c)", "simplify-no-op-cast", ""},
        NoOpCase{"cast_float_to_float", "(float[2, 3] x) => (float[2, 3] y)", "c = Cast <to = 1> (x)\n y = Relu (c)",
                 "simplify-no-op-cast", ""},
        NoOpCase{"dropout_without_training", "(float[2, 3] x) => (float[2, 3] y)", "d = Dropout (x)\n y = Relu (d)",
                 "simplify-inference-dropout", ""},
        NoOpCase{"dropout_training_false", "(float[2, 3] x) => (float[2, 3] y)",
                 "r = Constant <value = float {0.5}> ()\n t = Constant <value = bool {0}> ()\n d = Dropout (x, r, t)\n y = Relu (d)",
                 "simplify-inference-dropout", ""},
        NoOpCase{"dropout_ratio_zero_training", "(float[2, 3] x) => (float[2, 3] y)",
                 "r = Constant <value = float {0.0}> ()\n t = Constant <value = bool {1}> ()\n d = Dropout (x, r, t)\n y = Relu (d)",
                 "simplify-inference-dropout", ""},
        NoOpCase{"mul_by_one", "(float[2, 3] x) => (float[2, 3] y)", "k = Constant <value = float[1] {1.0}> ()\n m = Mul (k, x)\n y = Relu (m)",
                 "simplify-neutral-operand", ""},
        NoOpCase{"div_by_one", "(float[2, 3] x) => (float[2, 3] y)", "k = Constant <value = float {1.0}> ()\n m = Div (x, k)\n y = Relu (m)",
                 "simplify-neutral-operand", ""},
        NoOpCase{"sub_zero", "(float[2, 3] x) => (float[2, 3] y)", "k = Constant <value = float {0.0}> ()\n m = Sub (x, k)\n y = Relu (m)",
                 "simplify-neutral-operand", ""},
        NoOpCase{"int_add_zero", "(int64[2, 3] x) => (int64[2, 3] y)", "k = Constant <value = int64 {0}> ()\n m = Add (x, k)\n y = Neg (m)",
                 "simplify-neutral-operand", ""},
        NoOpCase{"pad_into_conv", "(float[1, 2, 6, 6] x) => (float[1, 2, 3, 3] y) <float[2, 2, 3, 3] w = {1, -2, 3, 4, 5, -6, 7, 8, 9, 9, 8, 7, -6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0.5, 0.25, 1, 2, -1, 3, 1, 2, 1}, float[2] b = {0.5, -1}>",
                 "pads = Constant <value = int64[8] {0, 0, 0, 0, 0, 0, 1, 1}> ()\n p = Pad (x, pads)\n "
                 "y = Conv <kernel_shape = [3, 3], strides = [2, 2]> (p, w, b)",
                 "simplify-pad-into-conv", ""},
        NoOpCase{"pad_into_padded_conv", "(float[1, 2, 5, 5] x) => (float[1, 2, 6, 5] y) <float[2, 2, 3, 3] w = {1, -2, 3, 4, 5, -6, 7, 8, 9, 9, 8, 7, -6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0.5, 0.25, 1, 2, -1, 3, 1, 2, 1}, float[2] b = {0.5, -1}>",
                 "pads = Constant <value = int64[8] {0, 0, 2, 0, 0, 0, 1, 1}> ()\n z = Constant <value = float {0.0}> ()\n "
                 "p = Pad <mode = \"constant\"> (x, pads, z)\n y = Conv <kernel_shape = [3, 3], pads = [0, 1, 0, 0]> (p, w, b)",
                 "simplify-pad-into-conv", ""},
        NoOpCase{"pad_of_nothing", "(float[1, 2, 4, 4] x) => (float[1, 2, 2, 2] y)",
                 "pads = Constant <value = int64[8] {0, 0, 0, 0, 0, 0, 0, 0}> ()\n p = Pad <mode = \"reflect\"> (x, pads)\n "
                 "y = AveragePool <kernel_shape = [2, 2], strides = [2, 2]> (p)",
                 "simplify-no-op-pad", ""},
        NoOpCase{"transpose_in_place", "(float[2, 3, 4] x) => (float[2, 3, 4] y)", "t = Transpose <perm = [0, 1, 2]> (x)\n y = Relu (t)",
                 "simplify-no-op-transpose", ""},
        NoOpCase{"transpose_of_a_vector", "(float[5] x) => (float[5] y)", "t = Transpose (x)\n y = Relu (t)", "simplify-no-op-transpose", ""},
        NoOpCase{"reshape_to_own_shape", "(float[2, 3] x) => (float[2, 3] y)",
                 "s = Constant <value = int64[2] {-1, 3}> ()\n r = Reshape (x, s)\n y = Relu (r)", "simplify-no-op-reshape", ""},
        NoOpCase{"expand_by_ones", "(float[2, 3] x) => (float[2, 3] y)",
                 "s = Constant <value = int64[2] {1, 3}> ()\n e = Expand (x, s)\n y = Relu (e)", "simplify-no-op-reshape", ""},
        NoOpCase{"slice_of_everything", "(float[2, 3] x) => (float[2, 3] y)",
                 "b = Constant <value = int64[2] {-5, 0}> ()\n e = Constant <value = int64[2] {9223372036854775807, 3}> ()\n "
                 "a = Constant <value = int64[2] {0, -1}> ()\n one = Constant <value = int64[2] {1, 1}> ()\n s = Slice (x, b, e, a, one)\n y = Relu (s)",
                 "simplify-no-op-slice", ""},
        NoOpCase{"reshape_to_batch_by_width", "(float[N, 6, 1, 1] x) => (float[N, 6] y)",
                 "s = Shape (x)\n s32 = Cast <to = 6> (s)\n b = Constant <value = int32[1] {0}> ()\n e = Constant <value = int32[1] {1}> ()\n "
                 "n32 = Slice (s32, b, e)\n n = Cast <to = 7> (n32)\n w = Constant <value = int64[1] {6}> ()\n shape = Concat <axis = 0> (n, w)\n "
                 "r = Reshape (x, shape)\n y = Relu (r)",
                 "simplify-reshape-known-shape", ""},
        // Near misses: they change something.
        NoOpCase{"reshape_to_two_run_time_sizes", "(float[N, 6] x, float[P, Q] z) => (float[P, Q] y)",
                 "shape = Shape (z)\n y_op = Reshape (x, shape)\n y = Relu (y_op)", "", "more than one element of the shape is unknown"},
        NoOpCase{"pad_of_one", "(float[2, 3] x) => (float[2, 4] y)",
                 "pads = Constant <value = int64[4] {0, 0, 0, 1}> ()\n y_op = Pad (x, pads)\n y = Relu (y_op)", "", "the Pad pads or crops"},
        NoOpCase{"transpose_swapping", "(float[2, 2] x) => (float[2, 2] y)", "y_op = Transpose <perm = [1, 0]> (x)\n y = Relu (y_op)", "",
                 "the perm moves an axis"},
        NoOpCase{"reshape_to_other_shape", "(float[2, 3] x) => (float[3, 2] y)",
                 "s = Constant <value = int64[2] {3, 2}> ()\n y_op = Reshape (x, s)\n y = Relu (y_op)", "", "not known to be the input's"},
        NoOpCase{"expand_widening", "(float[2, 1] x) => (float[2, 3] y)",
                 "s = Constant <value = int64[2] {1, 3}> ()\n y_op = Expand (x, s)\n y = Relu (y_op)", "", "may widen axis 1"},
        NoOpCase{"slice_by_two", "(float[4] x) => (float[2] y)",
                 "b = Constant <value = int64[1] {0}> ()\n e = Constant <value = int64[1] {4}> ()\n a = Constant <value = int64[1] {0}> ()\n "
                 "two = Constant <value = int64[1] {2}> ()\n y_op = Slice (x, b, e, a, two)\n y = Relu (y_op)", "", "may leave out elements"},
        NoOpCase{"slice_short_of_the_end", "(float[4] x) => (float[3] y)",
                 "b = Constant <value = int64[1] {0}> ()\n e = Constant <value = int64[1] {-1}> ()\n y_op = Slice (x, b, e)\n y = Relu (y_op)", "",
                 "may leave out elements"},
        NoOpCase{"reflect_pad", "(float[1, 2, 6, 6] x) => (float[1, 2, 3, 3] y) <float[2, 2, 3, 3] w = {1, -2, 3, 4, 5, -6, 7, 8, 9, 9, 8, 7, -6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0.5, 0.25, 1, 2, -1, 3, 1, 2, 1}, float[2] b = {0.5, -1}>",
                 "pads = Constant <value = int64[8] {0, 0, 0, 0, 0, 0, 1, 1}> ()\n p = Pad <mode = \"reflect\"> (x, pads)\n "
                 "y_op = Conv <kernel_shape = [3, 3], strides = [2, 2]> (p, w, b)\n y = Relu (y_op)", "", "not of a constant"},
        NoOpCase{"pad_of_ones", "(float[1, 2, 6, 6] x) => (float[1, 2, 3, 3] y) <float[2, 2, 3, 3] w = {1, -2, 3, 4, 5, -6, 7, 8, 9, 9, 8, 7, -6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0.5, 0.25, 1, 2, -1, 3, 1, 2, 1}, float[2] b = {0.5, -1}>",
                 "pads = Constant <value = int64[8] {0, 0, 0, 0, 0, 0, 1, 1}> ()\n one = Constant <value = float {1.0}> ()\n "
                 "p = Pad (x, pads, one)\n y_op = Conv <kernel_shape = [3, 3], strides = [2, 2]> (p, w, b)\n y = Relu (y_op)", "",
                 "not a constant 0"},
        NoOpCase{"pad_of_channels", "(float[1, 1, 6, 6] x) => (float[1, 2, 3, 3] y) <float[2, 2, 3, 3] w = {1, -2, 3, 4, 5, -6, 7, 8, 9, 9, 8, 7, -6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0.5, 0.25, 1, 2, -1, 3, 1, 2, 1}, float[2] b = {0.5, -1}>",
                 "pads = Constant <value = int64[8] {0, 1, 0, 0, 0, 0, 1, 1}> ()\n p = Pad (x, pads)\n "
                 "y_op = Conv <kernel_shape = [3, 3], strides = [2, 2]> (p, w, b)\n y = Relu (y_op)", "", "batch or channel dims"},
        NoOpCase{"cast_changes_type", "(int64[3] x) => (float[3] y)", "y_op = Cast <to = 1> (x)\n y = Relu (y_op)", "",
                 "the Cast changes the element type"},
        NoOpCase{"dropout_that_drops", "(float[2, 3] x) => (float[2, 3] y)",
                 "r = Constant <value = float {0.5}> ()\n t = Constant <value = bool {1}> ()\n y_op = Dropout (x, r, t)\n y = Relu (y_op)", "",
                 "elements may be dropped"},
        NoOpCase{"float_add_zero", "(float[2, 3] x) => (float[2, 3] y)",
                 "k = Constant <value = float {0.0}> ()\n y_op = Add (x, k)\n y = Relu (y_op)", "", "is not x when x is -0"},
        NoOpCase{"mul_by_one_broadcasting", "(float[3] x) => (float[2, 3] y)",
                 "k = Constant <value = float[2, 1] {1.0, 1.0}> ()\n y_op = Mul (x, k)\n y = Relu (y_op)", "",
                 "more than one element"},
        NoOpCase{"one_over_x", "(float[3] x) => (float[3] y)",
                 "k = Constant <value = float {1.0}> ()\n y_op = Div (k, x)\n y = Relu (y_op)", "", "(x) is not a constant"},
        NoOpCase{"mul_by_two", "(float[3] x) => (float[3] y)",
                 "k = Constant <value = float {2.0}> ()\n y_op = Mul (x, k)\n y = Relu (y_op)", "", "not the operation's neutral element"}),
    [](const ::testing::TestParamInfo<NoOpCase>& info) { return info.param.name; });

// A Dropout whose mask is read keeps computing it.
TEST(InferenceDropout, StaysWhenItsMaskIsRead) {
  RewriteOptions options;
  options.simplify = true;
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y, bool[2, 3] mask) {
  d, mask = Dropout (x)
  y = Relu (d)
})", builtin_rules(), options);
  EXPECT_EQ(op_types(rewritten.model.graph()), (std::vector<std::string>{"Dropout", "Relu"}));
}

// --target ort fuses the Conv and its Relu first; the Pad then goes into the FusedConv.
TEST(PadIntoFusedConv, GoesUnderTargetOrtBitForBit) {
  const auto original = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[1, 2, 6, 6] x) => (float[1, 2, 3, 3] y) <float[2, 1, 3, 3] w = {1, -2, 3, 4, 5, -6, 7, 8, 9, 9, 8, 7, -6, 5, 4, 3, 2, 1}, float[2] b = {0.5, -1}> {
  pads = Constant <value = int64[8] {0, 0, 0, 0, 0, 0, 1, 1}> ()
  p = Pad (x, pads)
  c = Conv <group = 2, kernel_shape = [3, 3], strides = [2, 2]> (p, w, b)
  y = Relu (c)
})");
  RewriteOptions options;
  options.target = "ort";
  options.simplify = true;
  const auto rewritten = rewrite_proto(original, builtin_rules(), options);
  EXPECT_TRUE(rewritten.result.rules.count("simplify-pad-into-fused-conv")) << rewritten.explain;
  EXPECT_EQ(op_types(rewritten.model.graph()), (std::vector<std::string>{"FusedConv"}));
  TempDir dir;
  write_file(dir / "original.onnx", serialize(original));
  write_file(dir / "simplified.onnx", rewritten.bytes);
  const auto comparison = ort_compare(dir / "original.onnx", dir / "simplified.onnx", {"--rtol", "0", "--atol", "0", "--trials", "2"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

}  // namespace
}  // namespace onnx_rewrite
