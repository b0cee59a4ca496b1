// `--target onnx --fuse`: spelled-out patterns become the standard ops that compute them
// (HardSigmoid, HardSwish-14, Gemm here; Gelu-20, LayerNormalization-17, RMSNormalization-23
// and Conv+BatchNormalization through the fuse-contrib rules that also fuse for onnx), each
// proven in ONNX Runtime against the unfused model; without --fuse nothing changes.
#include <gtest/gtest.h>

#include <set>

#include <fmt/format.h>

#include "engine/active_rules.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

std::string model(int opset, const std::string& graph) {
  return fmt::format("<ir_version: {}, opset_import: [\"\": {}]>\n{}", ir_version_for(opset), opset, graph);
}

struct FuseCase {
  std::string name;
  std::string text;      // the model
  std::string op_type;   // the one op left, or "" when nothing may change
  std::vector<std::string> compare = {"--dim", "N=3", "--float-range", "-8,8", "--trials", "3"};
};

// Rewrites with --fuse, checks the target, and compares in ORT; without --fuse the model is an
// exact copy.
void expect_fused(const FuseCase& c) {
  TempDir dir;
  const auto input = write_model_text(c.text, dir / "in.onnx");
  const auto plain = run_cli({"rewrite", input.string(), "-o", (dir / "plain.onnx").string(), "--target", "onnx"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(read_file(dir / "plain.onnx"), read_file(input)) << "without --fuse nothing changes";

  const auto fused = run_cli({"rewrite", input.string(), "-o", (dir / "fused.onnx").string(), "--target", "onnx", "--fuse"});
  ASSERT_EQ(fused.exit_code, 0) << fused.out << fused.err;
  const auto out = read_model(dir / "fused.onnx");
  if (c.op_type.empty()) {
    EXPECT_EQ(out.graph().node_size(), read_model(input).graph().node_size()) << fused.out;
    return;
  }
  int kept = 0;
  for (const auto& node : out.graph().node()) kept += node.op_type() != "Constant";
  EXPECT_EQ(kept, 1) << fused.out;
  EXPECT_EQ(op_count(count_ops(out), {"", c.op_type}), 1) << fused.out;
  const auto check = run_cli({"check", (dir / "fused.onnx").string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 0) << check.out;
  const auto comparison = ort_compare(input, dir / "fused.onnx", c.compare);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers(c.name, comparison);
}

class Fuse : public ::testing::TestWithParam<FuseCase> {};

TEST_P(Fuse, IsTheStandardOpAndComputesTheSame) { expect_fused(GetParam()); }

const std::string kClip11 = R"(
    k_three = Constant <value = float {3.0}> ()
    a = Add (x, k_three)
    k_lo = Constant <value = float {0.0}> ()
    k_hi = Constant <value = float {6.0}> ()
    r = Clip (a, k_lo, k_hi))";
const std::string kClip6 = R"(
    k_three = Constant <value = float {3.0}> ()
    a = Add (k_three, x)
    r = Clip <min = 0.0, max = 6.0> (a))";

std::string unary(int opset, const std::string& body) {
  return model(opset, fmt::format("act (float[N, 4, 8] x) => (float[N, 4, 8] y) {{{}\n}}", body));
}

const std::string kSix = "\n    k_six = Constant <value = float {6.0}> ()";
const std::string kSixth = "\n    k_sixth = Constant <value = float {0.16666667}> ()";

INSTANTIATE_TEST_SUITE_P(
    HardActivations, Fuse,
    ::testing::Values(
        FuseCase{"hardsigmoid_clip11_div", unary(13, kClip11 + kSix + "\n    y = Div (r, k_six)"), "HardSigmoid"},
        FuseCase{"hardsigmoid_clip11_mul", unary(13, kClip11 + kSixth + "\n    y = Mul (k_sixth, r)"), "HardSigmoid"},
        FuseCase{"hardsigmoid_clip6_div", unary(10, kClip6 + kSix + "\n    y = Div (r, k_six)"), "HardSigmoid"},
        FuseCase{"hardswish_torch_below_14", unary(14, R"(
    h = HardSigmoid <alpha = 0.16666667, beta = 0.5> (x)
    y = Mul (x, h))"), "HardSwish"},
        FuseCase{"hardswish_keras", unary(14, kClip11 + "\n    p = Mul (x, r)" + kSix + "\n    y = Div (p, k_six)"), "HardSwish"},
        FuseCase{"hardswish_hardsigmoid_spelled", unary(17, kClip11 + kSix + "\n    h = Div (r, k_six)\n    y = Mul (h, x)"),
                 "HardSwish"},
        FuseCase{"hardswish_times_sixth", unary(18, kClip11 + "\n    p = Mul (x, r)" + kSixth + "\n    y = Mul (p, k_sixth)"),
                 "HardSwish"},
        // Not relu6(x + 3) / 6: stays.
        FuseCase{"clip_to_five_stays", unary(13, R"(
    k_three = Constant <value = float {3.0}> ()
    a = Add (x, k_three)
    k_lo = Constant <value = float {0.0}> ()
    k_hi = Constant <value = float {5.0}> ()
    r = Clip (a, k_lo, k_hi)
    k_six = Constant <value = float {6.0}> ()
    y = Div (r, k_six))"), ""}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Gemm, Fuse,
    ::testing::Values(
        FuseCase{"matmul_add_bias", model(13, R"(linear (float[N, 4] a) => (float[N, 3] y)
      <float[4, 3] w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, float[3] bias = {0.5, -1, 2}> {
    m = MatMul (a, w)
    y = Add (bias, m)
  })"), "Gemm"},
        FuseCase{"matmul_add_scalar_bias", model(17, R"(linear (float[N, 4] a, float[4, 3] w) => (float[N, 3] y)
      <float bias = {0.25}> {
    m = MatMul (a, w)
    y = Add (m, bias)
  })"), "Gemm"},
        // Batched MatMul and a bias that could widen the output are not Gemm: they stay.
        FuseCase{"batched_matmul_stays", model(13, R"(linear (float[N, 2, 4] a) => (float[N, 2, 3] y)
      <float[4, 3] w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, float[3] bias = {0.5, -1, 2}> {
    m = MatMul (a, w)
    y = Add (m, bias)
  })"), ""},
        FuseCase{"matrix_bias_stays", model(13, R"(linear (float[1, 4] a) => (float[5, 3] y)
      <float[4, 3] w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, float[5, 3] bias = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}> {
    m = MatMul (a, w)
    y = Add (m, bias)
  })"), ""}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    DivMul, Fuse,
    ::testing::Values(
        FuseCase{"rms_norm_reciprocal", model(17, R"(rms (float[N, 4] x, float[N, 1] s) => (float[N, 4] y) {
    one = Constant <value = float {1.0}> ()
    r = Div (one, s)
    y = Mul (r, x)
  })"), "Div", {"--dim", "N=3", "--float-range", "0.5,8", "--trials", "3"}},
        // Two over y is not the reciprocal, and an integer 1 / y is 0 or 1: they stay.
        FuseCase{"two_over_y_stays", model(17, R"(rms (float[N, 4] x, float[N, 1] s) => (float[N, 4] y) {
    two = Constant <value = float {2.0}> ()
    r = Div (two, s)
    y = Mul (r, x)
  })"), ""},
        FuseCase{"integer_reciprocal_stays", model(17, R"(rms (int64[N, 4] x, int64[N, 1] s) => (int64[N, 4] y) {
    one = Constant <value = int64 {1}> ()
    r = Div (one, s)
    y = Mul (r, x)
  })"), ""}),
    [](const auto& info) { return info.param.name; });

// The fuse-contrib fusions that write standard ops fuse for onnx too, with --fuse.
INSTANTIATE_TEST_SUITE_P(
    StandardOps, Fuse,
    ::testing::Values(
        FuseCase{"gelu_erf_opset20", unary(20, R"(
    k_sqrt2 = Constant <value = float {1.4142135381698608}> ()
    h = Div (x, k_sqrt2)
    e = Erf (h)
    k_one = Constant <value = float {1.0}> ()
    a = Add (e, k_one)
    p = Mul (x, a)
    k_half = Constant <value = float {0.5}> ()
    y = Mul (p, k_half))"), "Gelu"},
        // Gelu is ai.onnx only from 20: at 17 it stays (no com.microsoft for standard runtimes).
        FuseCase{"gelu_erf_opset17_stays", unary(17, R"(
    k_sqrt2 = Constant <value = float {1.4142135381698608}> ()
    h = Div (x, k_sqrt2)
    e = Erf (h)
    k_one = Constant <value = float {1.0}> ()
    a = Add (e, k_one)
    p = Mul (x, a)
    k_half = Constant <value = float {0.5}> ()
    y = Mul (p, k_half))"), ""},
        FuseCase{"layernorm_opset17", model(17, R"(ln (float[N, 5, 8] x) => (float[N, 5, 8] y)
      <float[8] gamma = {1, 0.5, 2, 1.5, 1, 0.25, 3, 1}, float[8] beta = {0, 0.1, -0.2, 0.3, 0, 1, -1, 0.5}> {
    mean = ReduceMean <axes = [-1]> (x)
    d = Sub (x, mean)
    sq = Mul (d, d)
    var = ReduceMean <axes = [-1]> (sq)
    eps = Constant <value = float {1e-5}> ()
    ve = Add (var, eps)
    s = Sqrt (ve)
    n = Div (d, s)
    g = Mul (n, gamma)
    y = Add (g, beta)
  })"), "LayerNormalization"},
        FuseCase{"rmsnorm_opset23", model(23, R"(rms (float[N, 5, 8] x) => (float[N, 5, 8] y)
      <float[8] gamma = {1, 0.5, 2, 1.5, 1, 0.25, 3, 1}> {
    two = Constant <value = float {2.0}> ()
    sq = Pow (x, two)
    axes = Constant <value = int64[1] {-1}> ()
    var = ReduceMean <keepdims = 1> (sq, axes)
    eps = Constant <value = float {1e-6}> ()
    ve = Add (var, eps)
    s = Sqrt (ve)
    r = Reciprocal (s)
    n = Mul (x, r)
    y = Mul (gamma, n)
  })"), "RMSNormalization"},
        FuseCase{"conv_batchnorm", model(17, R"(conv_bn (float[N, 2, 5, 5] x) => (float[N, 3, 5, 5] y)
      <float[3, 2, 1, 1] w = {1, 2, 3, 4, -1, 0.5}, float[3] gamma = {1, 2, 0.5}, float[3] beta = {0.5, -0.5, 1},
       float[3] mean = {1, -1, 0.25}, float[3] var = {0.25, 4, 1}> {
    c = Conv (x, w)
    y = BatchNormalization <epsilon = 1e-5> (c, gamma, beta, mean, var)
  })"), "Conv"}),
    [](const auto& info) { return info.param.name; });

TEST(FuseHardSwish, RaisesTheImportTo14WhereNothingElseChangesButNeverAboveOpset) {
  TempDir dir;
  const auto input = write_model_text(unary(13, R"(
    h = HardSigmoid <alpha = 0.16666667, beta = 0.5> (x)
    y = Mul (x, h))"), dir / "in.onnx");
  auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--fuse"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("opset import ai.onnx: 13 -> 14"), std::string::npos) << result.out;
  EXPECT_EQ(read_model(dir / "out.onnx").graph().node(0).op_type(), "HardSwish");
  EXPECT_TRUE(ort_compare(input, dir / "out.onnx", {"--dim", "N=2"}).ok);

  // (--ir-version keeps the IR --opset 13 alone would lower to 7, so that the copy is exact.)
  result = run_cli({"rewrite", input.string(), "-o", (dir / "capped.onnx").string(), "--fuse", "--opset", "13", "--ir-version", "8"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(read_file(dir / "capped.onnx"), read_file(input));
}

// float16 constants hold 1/6 as 0.16663 and √2 as 1.4140625: compared at their own precision,
// they still match; ORT runs HardSwish in float16.
TEST(FuseHardSwish, Float16ConstantsMatchAtTheirOwnPrecision) {
  TempDir dir;
  const auto model = as_float16(parse_model_text(unary(14, kClip11 + "\n    p = Mul (x, r)" + kSixth + "\n    y = Mul (p, k_sixth)")));
  write_file(dir / "in.onnx", serialize(model));
  const auto result = run_cli({"rewrite", (dir / "in.onnx").string(), "-o", (dir / "out.onnx").string(), "--fuse"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("rule fuse-hardswish: 1 match"), std::string::npos) << result.out;
  const auto comparison = ort_compare(dir / "in.onnx", dir / "out.onnx", {"--dim", "N=2", "--float-range", "-8,8", "--atol", "1e-2"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers("hardswish_float16", comparison);

  // A float constant is held to the rule's tolerance: 0.1666 is not 1/6.
  const auto near = parse_model_text(unary(14, kClip11 + "\n    p = Mul (x, r)\n    k_sixth = Constant <value = float {0.1666}> ()\n    y = Mul (p, k_sixth)"));
  write_file(dir / "near.onnx", serialize(near));
  const auto kept = run_cli({"rewrite", (dir / "near.onnx").string(), "-o", (dir / "near-out.onnx").string(), "--fuse"});
  EXPECT_NE(kept.out.find("no rule applies"), std::string::npos) << kept.out;
}

TEST(FuseRules, AreListedWithTheirOptInTargetsAndRunOnlyWithFuse) {
  const auto listed = run_cli({"rules"});
  EXPECT_NE(listed.out.find("fuse-hardswish  [with --fuse: onnx]"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("fuse-layernorm  [ort; with --fuse: onnx]"), std::string::npos) << listed.out;
  RewriteOptions options;
  options.target = "onnx";
  std::set<std::string> plain, fused;
  for (const Rule* rule : active_rules(builtin_rules(), options)) plain.insert(rule->id);
  options.fuse = true;
  for (const Rule* rule : active_rules(builtin_rules(), options)) fused.insert(rule->id);
  EXPECT_FALSE(plain.count("fuse-hardswish"));
  EXPECT_FALSE(plain.count("fuse-gelu-erf"));
  EXPECT_TRUE(fused.count("fuse-hardswish"));
  EXPECT_TRUE(fused.count("fuse-gelu-erf"));
  EXPECT_FALSE(fused.count("fuse-conv-activation")) << "com.microsoft only: not for onnx";
}

}  // namespace
}  // namespace onnx_rewrite
