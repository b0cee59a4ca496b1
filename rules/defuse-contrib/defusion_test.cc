// The de-fusion rules (rules/defuse-contrib/defuse-*.rules, rules/defuse-contrib/contrib_defusion.cc): ONNX Runtime's
// com.microsoft ops (and its own ai.onnx LayerNormalization-1 / SimplifiedLayerNormalization)
// become standard ONNX under --target onnx. Each op and attribute variant is proven against
// ONNX Runtime's own contrib kernel (the com.microsoft model run in ORT is the reference; BiasAdd
// and BiasSoftmax, which have no CPU kernel, against naive references in tests/ort/reference/),
// and end to end on models ORT optimized and saved itself (tests/ort/optimize.js): no
// com.microsoft op left, `check --target onnx` passes, the outputs are the original model's.
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

using Defused = Rewritten;

Defused defuse(const onnx::ModelProto& proto, const std::string& explain_op = "") {
  RewriteOptions options;
  options.target = "onnx";
  options.explain = explain_op;
  return rewrite_proto(proto, builtin_rules(), options);
}

// Nodes ONNX Runtime's optimizer writes that standard ONNX lacks: com.microsoft*, and its own
// SimplifiedLayerNormalization / LayerNormalization-1 in the ai.onnx domain below opset 17.
std::map<std::string, int> runtime_only_ops(const onnx::ModelProto& model) {
  int opset = 0;
  for (const auto& import : model.opset_import()) {
    if (import.domain().empty() || import.domain() == "ai.onnx") opset = static_cast<int>(import.version());
  }
  std::map<std::string, int> found;
  for (const auto& [key, count] : count_ops(model)) {
    const auto& [domain, op] = key;
    const bool ort_only = domain.rfind("com.microsoft", 0) == 0 ||
                          (domain.empty() && op == "SimplifiedLayerNormalization") ||
                          (domain.empty() && op == "LayerNormalization" && opset < 17);
    if (ort_only) found[(domain.empty() ? "ai.onnx" : domain) + "." + op] += count;
  }
  return found;
}

std::string op_list(const std::map<std::string, int>& ops) {
  std::vector<std::string> parts;
  for (const auto& [op, count] : ops) parts.push_back(fmt::format("{} x{}", op, count));
  return parts.empty() ? "(none)" : fmt::format("{}", fmt::join(parts, ", "));
}

int count(const onnx::ModelProto& model, const std::string& op_type) {
  const auto counts = count_ops(model);
  auto it = counts.find({"", op_type});
  return it == counts.end() ? 0 : it->second;
}

void record(const std::string& what, double max_abs) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::cout << fmt::format("[ ORT      ] {}.{}{}: max_abs {:.3g}\n", test->test_suite_name(), test->name(),
                           what.empty() ? "" : " " + what, max_abs);
}

// The rewritten model has no runtime-only op left and passes `check --target onnx`.
void expect_standard(const Defused& defused, const fs::path& file) {
  EXPECT_EQ(op_list(runtime_only_ops(defused.model)), "(none)") << defused.explain;
  const auto check = run_cli({"check", file.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

// ONNX Runtime computes with the rewritten model what it computes with `original` (its own
// contrib kernels), and the rewritten model is standard ONNX.
void expect_same_in_ort(const fs::path& original, const Defused& defused, const std::vector<std::string>& extra,
                        const std::string& what = "") {
  const auto candidate = original.parent_path() / (original.stem().string() + ".defused.onnx");
  write_file(candidate, defused.bytes);
  const auto comparison = ort_compare(original, candidate, extra);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  record(what, comparison.max_abs);
  expect_standard(defused, candidate);
}

// ---- Single ops against ONNX Runtime's contrib kernels ------------------------------------------

struct OpCase {
  std::string name;
  int opset;
  std::string graph;             // a model in ONNX text using the contrib op
  std::vector<std::string> ops;  // standard ops the rewrite must produce
  std::vector<std::string> compare = {};  // extra compare.js options
};

class ContribOp : public ::testing::TestWithParam<OpCase> {};

TEST_P(ContribOp, IsStandardAndComputesAsOrtsKernel) {
  const auto& c = GetParam();
  const auto original = parse_model_text(model(c.opset, c.graph));
  const auto defused = defuse(original);
  for (const auto& op : c.ops) {
    EXPECT_GE(count(defused.model, op), 1) << op << "\n" << canonical_nodes(defused.model, interface_names(defused.model));
  }
  TempDir dir;
  const auto path = dir / "original.onnx";
  write_file(path, serialize(original));
  std::vector<std::string> extra{"--trials", "3", "--float-range", "-3,3"};
  extra.insert(extra.end(), c.compare.begin(), c.compare.end());
  expect_same_in_ort(path, defused, extra);
}

std::string case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(
    Gelu, ContribOp,
    ::testing::Values(
        OpCase{"gelu_erf_formula", 14, R"(g (float[3, 4, 16] x) => (float[3, 4, 16] y) { y = com.microsoft.Gelu (x) })",
               {"Erf"}},
        OpCase{"gelu_opset20", 20, R"(g (float[3, 4, 16] x) => (float[3, 4, 16] y) { y = com.microsoft.Gelu (x) })",
               {"Gelu"}},
        OpCase{"bias_gelu_erf_formula", 13,
               R"(g (float[2, 8, 16] x, float[16] bias) => (float[2, 8, 16] y) { y = com.microsoft.BiasGelu (x, bias) })",
               {"Erf", "Add"}},
        OpCase{"bias_gelu_opset21", 21,
               R"(g (float[2, 8, 16] x, float[16] bias) => (float[2, 8, 16] y) { y = com.microsoft.BiasGelu (x, bias) })",
               {"Gelu", "Add"}},
        OpCase{"fast_gelu_tanh_formula", 13, R"(g (float[2, 8, 16] x) => (float[2, 8, 16] y) { y = com.microsoft.FastGelu (x) })",
               {"Tanh"}},
        OpCase{"fast_gelu_bias_tanh_formula", 17,
               R"(g (float[2, 8, 16] x, float[16] bias) => (float[2, 8, 16] y) { y = com.microsoft.FastGelu (x, bias) })",
               {"Tanh", "Add"}},
        OpCase{"fast_gelu_bias_opset20", 20,
               R"(g (float[2, 8, 16] x, float[16] bias) => (float[2, 8, 16] y) { y = com.microsoft.FastGelu (x, bias) })",
               {"Gelu", "Add"}},
        OpCase{"quick_gelu_default_alpha", 17, R"(g (float[4, 32] x) => (float[4, 32] y) { y = com.microsoft.QuickGelu (x) })",
               {"Sigmoid"}},
        OpCase{"quick_gelu_alpha_1", 11,
               R"(g (float[4, 32] x) => (float[4, 32] y) { y = com.microsoft.QuickGelu <alpha = 1.0> (x) })", {"Sigmoid"}},
        OpCase{"quick_gelu_negative_alpha", 17,
               R"(g (float[4, 32] x) => (float[4, 32] y) { y = com.microsoft.QuickGelu <alpha = -0.4> (x) })", {"Sigmoid"}}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    FusedMatMul, ContribOp,
    ::testing::Values(
        OpCase{"trans_a_trans_b_alpha_2d", 17, R"(g (float[8, 4] a, float[6, 8] b) => (float[4, 6] y) {
          y = com.microsoft.FusedMatMul <transA = 1, transB = 1, alpha = 0.5> (a, b) })", {"Transpose", "MatMul", "Mul"}},
        OpCase{"trans_b_alpha_rank4", 17, R"(g (float[2, 3, 5, 8] a, float[2, 3, 7, 8] b) => (float[2, 3, 5, 7] y) {
          y = com.microsoft.FusedMatMul <transB = 1, alpha = 0.125> (a, b) })", {"Transpose", "MatMul", "Mul"}},
        OpCase{"trans_batch_a_rank4", 17, R"(g (float[5, 2, 3, 8] a, float[2, 3, 8, 7] b) => (float[2, 3, 5, 7] y) {
          y = com.microsoft.FusedMatMul <transBatchA = 1> (a, b) })", {"Transpose", "MatMul"}},
        OpCase{"trans_batch_b_rank4", 17, R"(g (float[2, 3, 5, 8] a, float[8, 2, 3, 7] b) => (float[2, 3, 5, 7] y) {
          y = com.microsoft.FusedMatMul <transBatchB = 1, alpha = 2.0> (a, b) })", {"Transpose", "MatMul", "Mul"}},
        OpCase{"trans_batch_a_and_trans_a", 17, R"(g (float[8, 2, 3, 5] a, float[2, 3, 8, 7] b) => (float[2, 3, 5, 7] y) {
          y = com.microsoft.FusedMatMul <transBatchA = 1, transA = 1> (a, b) })", {"Transpose", "MatMul"}},
        OpCase{"trans_batch_b_and_trans_b", 17, R"(g (float[2, 3, 5, 8] a, float[7, 2, 3, 8] b) => (float[2, 3, 5, 7] y) {
          y = com.microsoft.FusedMatMul <transBatchB = 1, transB = 1, alpha = -1.5> (a, b) })", {"Transpose", "MatMul", "Mul"}},
        OpCase{"trans_batch_both_rank3", 17, R"(g (float[5, 4, 8] a, float[8, 4, 6] b) => (float[4, 5, 6] y) {
          y = com.microsoft.FusedMatMul <transBatchA = 1, transBatchB = 1> (a, b) })", {"Transpose", "MatMul"}},
        OpCase{"vector_ignores_trans_a", 17, R"(g (float[8] a, float[6, 8] b) => (float[6] y) {
          y = com.microsoft.FusedMatMul <transA = 1, transB = 1> (a, b) })", {"MatMul"}},
        OpCase{"broadcast_rank4_by_matrix", 13, R"(g (float[2, 3, 8, 5] a, float[6, 8] b) => (float[2, 3, 5, 6] y) {
          y = com.microsoft.FusedMatMul <transA = 1, transB = 1, alpha = 0.25> (a, b) })", {"Transpose", "MatMul", "Mul"}},
        OpCase{"transpose_matmul_legacy_name", 11, R"(g (float[8, 4] a, float[8, 6] b) => (float[4, 6] y) {
          y = com.microsoft.TransposeMatMul <transA = 1> (a, b) })", {"Transpose", "MatMul"}}),
    case_name);

std::string fused_gemm(const std::string& attributes, bool with_c = true) {
  return fmt::format(R"(g (float[4, 6] a, float[5, 6] b{}) => (float[4, 5] y) {{
    y = com.microsoft.FusedGemm <transB = 1, alpha = 0.7, beta = 1.3, {}> (a, b{}) }})",
                     with_c ? ", float[5] c" : "", attributes, with_c ? ", c" : "");
}

INSTANTIATE_TEST_SUITE_P(
    FusedGemm, ContribOp,
    ::testing::Values(
        OpCase{"relu", 17, fused_gemm(R"(activation = "Relu")"), {"Gemm", "Relu"}},
        OpCase{"leaky_relu", 17, fused_gemm(R"(activation = "LeakyRelu", activation_alpha = 0.2)"), {"Gemm", "LeakyRelu"}},
        OpCase{"sigmoid", 17, fused_gemm(R"(activation = "Sigmoid")"), {"Gemm", "Sigmoid"}},
        OpCase{"tanh_no_c", 17, fused_gemm(R"(activation = "Tanh")", false), {"Gemm", "Tanh"}},
        OpCase{"hard_sigmoid", 17, fused_gemm(R"(activation = "HardSigmoid", activation_alpha = 0.3, activation_beta = 0.4)"),
               {"HardSigmoid"}},
        OpCase{"elu", 17, fused_gemm(R"(activation = "Elu", activation_alpha = 0.8)"), {"Elu"}},
        OpCase{"selu", 17, fused_gemm(R"(activation = "Selu", activation_alpha = 1.6, activation_gamma = 1.1)"), {"Selu"}},
        OpCase{"celu", 17, fused_gemm(R"(activation = "Celu", activation_alpha = 0.5)"), {"Celu"}},
        OpCase{"celu_spelled_below_12", 11, fused_gemm(R"(activation = "Celu", activation_alpha = 0.5)"), {"Exp", "Max", "Min"}},
        OpCase{"softplus", 17, fused_gemm(R"(activation = "Softplus")"), {"Softplus"}},
        OpCase{"softsign", 17, fused_gemm(R"(activation = "Softsign")"), {"Softsign"}},
        OpCase{"thresholded_relu", 17, fused_gemm(R"(activation = "ThresholdedRelu", activation_alpha = 0.3)"), {"ThresholdedRelu"}},
        OpCase{"scaled_tanh", 17, fused_gemm(R"(activation = "ScaledTanh", activation_alpha = 1.5, activation_beta = 0.4)"), {"Tanh"}},
        OpCase{"parametric_softplus", 17,
               fused_gemm(R"(activation = "ParametricSoftplus", activation_alpha = 1.5, activation_beta = 0.7)"), {"Softplus"}},
        OpCase{"trans_a_no_c_opset10", 10, R"(g (float[6, 4] a, float[6, 5] b) => (float[4, 5] y) {
          y = com.microsoft.FusedGemm <transA = 1, activation = "Relu"> (a, b) })", {"Gemm", "Relu"}}),
    case_name);

std::string fused_conv(const std::string& attributes, const std::string& inputs = "x, w, b") {
  return fmt::format(R"(g (float[1, 4, 9, 9] x, float[8, 4, 3, 3] w, float[8] b, float[1, 8, 9, 9] z) => (float[1, 8, 9, 9] y) {{
    y = com.microsoft.FusedConv <pads = [1, 1, 1, 1]{}> ({}) }})",
                     attributes.empty() ? "" : ", " + attributes, inputs);
}

INSTANTIATE_TEST_SUITE_P(
    FusedConv, ContribOp,
    ::testing::Values(
        OpCase{"no_activation_with_sum", 17, fused_conv("", "x, w, b, z"), {"Conv", "Add"}},
        OpCase{"relu", 17, fused_conv(R"(activation = "Relu")"), {"Conv", "Relu"}},
        OpCase{"relu_with_sum_no_bias", 17, fused_conv(R"(activation = "Relu")", "x, w, , z"), {"Conv", "Add", "Relu"}},
        OpCase{"tanh", 17, fused_conv(R"(activation = "Tanh")"), {"Tanh"}},
        OpCase{"sigmoid", 17, fused_conv(R"(activation = "Sigmoid")"), {"Sigmoid"}},
        OpCase{"leaky_relu", 17, fused_conv(R"(activation = "LeakyRelu", activation_params = [0.2])", "x, w, b, z"),
               {"LeakyRelu", "Add"}},
        OpCase{"clip", 17, fused_conv(R"(activation = "Clip", activation_params = [-0.5, 0.5])"), {"Clip"}},
        OpCase{"clip_attributes_opset10", 10, fused_conv(R"(activation = "Clip", activation_params = [-0.5, 0.5])"), {"Clip"}},
        OpCase{"hard_sigmoid", 17, fused_conv(R"(activation = "HardSigmoid", activation_params = [0.3, 0.6])"),
               {"HardSigmoid"}},
        OpCase{"grouped_strided_dilated", 17, R"(g (float[2, 6, 11, 11] x, float[4, 3, 3, 3] w, float[4] b) => (float[2, 4, 5, 5] y) {
          y = com.microsoft.FusedConv <group = 2, strides = [2, 2], dilations = [2, 2], pads = [1, 2, 2, 1], activation = "Relu"> (x, w, b) })",
               {"Conv", "Relu"}},
        OpCase{"auto_pad_same_upper_1d", 17, R"(g (float[1, 3, 20] x, float[5, 3, 4] w) => (float[1, 5, 10] y) {
          y = com.microsoft.FusedConv <auto_pad = "SAME_UPPER", strides = [2], activation = "Tanh"> (x, w) })",
               {"Conv", "Tanh"}}),
    case_name);

const char* kSkipLayerNormInputs = "float[2, 5, 16] x, float[2, 5, 16] skip, float[16] gamma, float[16] beta, float[16] bias";

INSTANTIATE_TEST_SUITE_P(
    SkipLayerNorm, ContribOp,
    ::testing::Values(
        OpCase{"all_inputs_all_outputs_opset17", 17, fmt::format(R"(g ({}) => (float[2, 5, 16] y, float[2, 5, 1] mean, float[2, 5, 1] inv, float[2, 5, 16] sum) {{
          y, mean, inv, sum = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (x, skip, gamma, beta, bias) }})", kSkipLayerNormInputs),
               {"LayerNormalization"}},
        OpCase{"all_inputs_all_outputs_spelled", 14, fmt::format(R"(g ({}) => (float[2, 5, 16] y, float[2, 5, 1] mean, float[2, 5, 1] inv, float[2, 5, 16] sum) {{
          y, mean, inv, sum = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (x, skip, gamma, beta, bias) }})", kSkipLayerNormInputs),
               {"ReduceMean", "Sqrt"}},
        OpCase{"no_beta_no_bias_2d_skip_default_epsilon", 17, R"(g (float[2, 5, 16] x, float[5, 16] skip, float[16] gamma) => (float[2, 5, 16] y) {
          y = com.microsoft.SkipLayerNormalization (x, skip, gamma) })", {"LayerNormalization"}},
        OpCase{"no_beta_no_bias_2d_skip_spelled", 12, R"(g (float[2, 5, 16] x, float[5, 16] skip, float[16] gamma) => (float[2, 5, 16] y) {
          y = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (x, skip, gamma) })", {"ReduceMean"}},
        OpCase{"bias_only_sum_output_broadcast_skip", 17, R"(g (float[2, 5, 16] x, float[1, 5, 16] skip, float[16] gamma, float[16] bias) => (float[2, 5, 16] y, float[2, 5, 16] sum) {
          y, , , sum = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (x, skip, gamma, , bias) })", {"LayerNormalization"}},
        OpCase{"inv_std_only_spelled", 14, fmt::format(R"(g ({}) => (float[2, 5, 16] y, float[2, 5, 1] inv) {{
          y, , inv = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (x, skip, gamma, beta) }})", kSkipLayerNormInputs),
               {"ReduceMean"}},
        OpCase{"float16_spelled", 14, R"(g (float16[2, 5, 16] x, float16[2, 5, 16] skip, float16[16] gamma, float16[16] beta) => (float16[2, 5, 16] y) {
          y = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (x, skip, gamma, beta) })", {"Cast", "ReduceMean"},
               {"--rtol", "2e-3", "--atol", "2e-3"}},
        OpCase{"float16_opset17", 17, R"(g (float16[2, 5, 16] x, float16[2, 5, 16] skip, float16[16] gamma, float16[16] beta) => (float16[2, 5, 16] y, float[2, 5, 1] mean) {
          y, mean = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (x, skip, gamma, beta) })", {"LayerNormalization"},
               {"--rtol", "2e-3", "--atol", "2e-3"}}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    SkipSimplifiedLayerNorm, ContribOp,
    ::testing::Values(
        OpCase{"bias_all_outputs_spelled", 17, R"(g (float[2, 5, 16] x, float[2, 5, 16] skip, float[16] gamma, float[16] bias) => (float[2, 5, 16] y, float[2, 5, 1] mean, float[2, 5, 1] inv, float[2, 5, 16] sum) {
          y, mean, inv, sum = com.microsoft.SkipSimplifiedLayerNormalization <epsilon = 1e-5> (x, skip, gamma, bias) })",
               {"ReduceMean", "ConstantOfShape"}},
        OpCase{"no_bias_2d_input", 14, R"(g (float[6, 16] x, float[6, 16] skip, float[16] gamma) => (float[6, 16] y) {
          y = com.microsoft.SkipSimplifiedLayerNormalization <epsilon = 1e-6> (x, skip, gamma) })", {"ReduceMean"}},
        OpCase{"bias_sum_output_opset23", 23, R"(g (float[2, 5, 16] x, float[2, 5, 16] skip, float[16] gamma, float[16] bias) => (float[2, 5, 16] y, float[2, 5, 16] sum) {
          y, , , sum = com.microsoft.SkipSimplifiedLayerNormalization <epsilon = 1e-5> (x, skip, gamma, bias) })",
               {"RMSNormalization"}},
        // float16: ORT's kernel sums input + skip + bias in float and normalizes that unrounded sum.
        // With x in [1024, 1025) (float16 steps of 1 there), skip in [0, 1) and bias -1024, a
        // float16 sum keeps nothing of skip. (ORT's CPU provider runs float16 Add in float, so only
        // the RMSNormalization-23 form, which has a float16 kernel, shows it in ORT; SumStaysInFloat
        // checks the spelled form.)
        OpCase{"float16_bias_sum_in_float_opset23", 23, R"(g (float16[2, 5, 64] x, float16[2, 5, 64] skip, float16[64] gamma, float16[64] bias) => (float16[2, 5, 64] y, float16[2, 5, 64] sum) {
          y, , , sum = com.microsoft.SkipSimplifiedLayerNormalization <epsilon = 1e-5> (x, skip, gamma, bias) })",
               {"Cast", "RMSNormalization"}, {"--range", "x=1024,1025", "--range", "skip=0,1", "--range", "bias=-1024,-1024", "--rtol", "1e-3", "--atol", "0"}},
        // Ordinary values: one float16 step at most (summation order). Normalizing the float16-rounded
        // sum instead, as the rewrite did before, is off by up to 2 steps on 23 % of the elements.
        OpCase{"float16_opset23_one_step", 23, R"(g (float16[4, 8, 64] x, float16[4, 8, 64] skip, float16[64] gamma, float16[64] bias) => (float16[4, 8, 64] y) {
          y = com.microsoft.SkipSimplifiedLayerNormalization <epsilon = 1e-5> (x, skip, gamma, bias) })",
               {"Cast", "RMSNormalization"}, {"--float-range", "-4,4", "--trials", "8", "--rtol", "9.8e-4", "--atol", "0"}}),
    case_name);

// float16 Skip(Simplified)LayerNormalization: input, skip and bias are widened before they are
// added (ORT's kernel sums in float); a runtime with float16 Add would otherwise round the sum.
TEST(SkipLayerNorm, SumStaysInFloat) {
  for (const std::string op : {"SkipSimplifiedLayerNormalization", "SkipLayerNormalization"}) {
    for (int opset : {14, 17, 23}) {
      const auto defused = defuse(parse_model_text(model(opset, fmt::format(R"(g (float16[2, 5, 64] x, float16[2, 5, 64] skip, float16[64] gamma, float16[64] bias) => (float16[2, 5, 64] y, float16[2, 5, 64] sum) {{
        y, , , sum = com.microsoft.{} <epsilon = 1e-5> (x, skip, gamma, {}bias) }})", op, op == "SkipLayerNormalization" ? "bias, " : ""))));
      std::map<std::string, std::string> producer;  // value -> op type
      for (const auto& node : defused.model.graph().node()) {
        for (const auto& output : node.output()) producer[output] = node.op_type();
      }
      int adds = 0;  // the two Adds of the sum, each reading widened values (a Cast or the first Add)
      for (const auto& node : defused.model.graph().node()) {
        if (node.op_type() != "Add") continue;
        for (const auto& input : node.input()) {
          EXPECT_TRUE(input != "x" && input != "skip" && input != "bias") << op << " opset " << opset << ": Add reads " << input;
        }
        bool widened = true;
        for (const auto& input : node.input()) widened = widened && (producer[input] == "Cast" || producer[input] == "Add");
        if (widened) ++adds;
      }
      EXPECT_EQ(adds, 2) << op << " opset " << opset << "\n" << canonical_nodes(defused.model, interface_names(defused.model));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    LayerNorm, ContribOp,
    ::testing::Values(
        OpCase{"ort_layer_norm_1_all_outputs", 14, R"(g (float[2, 5, 16] x, float[16] scale, float[16] bias) => (float[2, 5, 16] y, float[2, 5, 1] mean, float[2, 5, 1] inv) {
          y, mean, inv = LayerNormalization <epsilon = 1e-5> (x, scale, bias) })", {"ReduceMean"}},
        OpCase{"ort_layer_norm_1_axis_1_no_bias", 13, R"(g (float[2, 5, 16] x, float[5, 16] scale) => (float[2, 5, 16] y) {
          y = LayerNormalization <axis = 1, epsilon = 1e-3> (x, scale) })", {"ReduceMean"}},
        OpCase{"ort_layer_norm_1_axis_minus_2_opset10", 10, R"(g (float[2, 5, 16] x, float[5, 16] scale, float[5, 16] bias) => (float[2, 5, 16] y, float[2, 1, 1] inv) {
          y, , inv = LayerNormalization <axis = -2> (x, scale, bias) })", {"ReduceMean"}},
        OpCase{"simplified_with_inv_std", 14, R"(g (float[2, 5, 16] x, float[16] scale) => (float[2, 5, 16] y, float[2, 5, 1] inv) {
          y, inv = SimplifiedLayerNormalization <epsilon = 1e-6> (x, scale) })", {"ReduceMean"}},
        OpCase{"simplified_axis_1", 17, R"(g (float[2, 5, 16] x, float[5, 16] scale) => (float[2, 5, 16] y) {
          y = SimplifiedLayerNormalization <axis = 1> (x, scale) })", {"ReduceMean"}},
        OpCase{"simplified_opset23", 23, R"(g (float[2, 5, 16] x, float[16] scale) => (float[2, 5, 16] y) {
          y = SimplifiedLayerNormalization <epsilon = 1e-6> (x, scale) })", {"RMSNormalization"}},
        OpCase{"simplified_float16", 17, R"(g (float16[2, 5, 16] x, float16[16] scale) => (float16[2, 5, 16] y) {
          y = SimplifiedLayerNormalization (x, scale) })", {"Cast"}, {"--rtol", "2e-3", "--atol", "2e-3"}}),
    case_name);

// ---- Ops without a CPU kernel: against naive references -----------------------------------------

fs::path reference(const std::string& name) { return family_file("defuse-contrib", (name + ".js")); }

void expect_matches_reference(const std::string& text, const std::string& module, const std::string& params,
                              const std::vector<std::string>& must_have) {
  const auto defused = defuse(parse_model_text(text));
  for (const auto& op : must_have) EXPECT_GE(count(defused.model, op), 1) << op;
  TempDir dir;
  const auto file = dir / "defused.onnx";
  write_file(file, defused.bytes);
  const auto comparison = ort_compare_reference(file, reference(module), params, {"--trials", "3", "--float-range", "-3,3"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
  record("", comparison.max_abs);
  expect_standard(defused, file);
}

TEST(BiasAdd, IsXPlusBiasPlusSkip) {
  expect_matches_reference(model(17, R"(g (float[2, 16, 8] x, float[8] bias, float[2, 16, 8] skip) => (float[2, 16, 8] y) {
    y = com.microsoft.BiasAdd (x, bias, skip) })"), "bias_add", "{}", {"Add"});
}

struct SoftmaxCase {
  std::string name;
  int opset;
  std::string data, bias;  // shapes
  int axis;
  int inner;
};

class BiasSoftmax : public ::testing::TestWithParam<SoftmaxCase> {};

TEST_P(BiasSoftmax, IsSoftmaxOfTheSumFromAxis) {
  const auto& c = GetParam();
  const std::string text = model(c.opset, fmt::format(R"(g (float[{}] data, float[{}] bias) => (float[{}] y) {{
    y = com.microsoft.BiasSoftmax <axis = {}, is_inner_broadcast = {}> (data, bias) }})", c.data, c.bias, c.data, c.axis, c.inner));
  expect_matches_reference(text, "bias_softmax", fmt::format(R"({{"axis": {}}})", c.axis), {"Softmax"});
}

// The shapes of ORT's own BiasSoftmax tests (bias_softmax_op_test.cc), the BERT mask, and axes
// that are not the last at opsets before and after Softmax-13.
INSTANTIATE_TEST_SUITE_P(
    Shapes, BiasSoftmax,
    ::testing::Values(SoftmaxCase{"bert_mask_inner", 17, "2, 4, 8, 8", "2, 1, 1, 8", 3, 1},
                      SoftmaxCase{"inner_broadcast_axis_4", 13, "8, 4, 4, 2, 2, 8", "8, 4, 1, 1, 2, 8", 4, 1},
                      SoftmaxCase{"inner_broadcast_negative_axis_opset12", 12, "8, 4, 4, 2, 2, 8", "8, 1, 1, 2, 2, 8", -3, 1},
                      SoftmaxCase{"inner_empty_bias_batch_opset11", 11, "8, 4, 4, 2, 2, 8", "1, 2, 8", 4, 1},
                      SoftmaxCase{"outer_broadcast", 17, "8, 4, 4, 2, 2, 8", "1, 4, 2, 2, 8", 4, 0},
                      SoftmaxCase{"outer_broadcast_lower_rank_opset10", 10, "8, 4, 4, 2, 2, 8", "4, 4, 2, 2, 8", 3, 0},
                      SoftmaxCase{"outer_last_axis", 17, "4, 2, 64", "2, 64", 2, 0}),
    [](const auto& info) { return info.param.name; });

// ---- What stays ----------------------------------------------------------------------------------

// Ops with no standard equivalent stay; `check` fails listing them, and so does `rewrite`
// (rotary attention: no de-fusion, and no CPU kernel either).
TEST(Unsupported, AttentionStaysAndCheckListsIt) {
  TempDir dir;
  const auto file = write_model_text(model(17, R"(g (float[2, 8, 16] x, float[16, 48] w, float[48] b, int32[2] mask, float[2, 8, 16] r, float[16] gamma) => (float[2, 8, 16] y) {
    a = com.microsoft.Attention <num_heads = 2, do_rotary = 1> (x, w, b, mask)
    y = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (a, r, gamma)
  })"), dir / "attention.onnx");
  const auto out = dir / "out.onnx";
  const auto rewrite = run_cli({"rewrite", file.string(), "-o", out.string(), "--target", "onnx"});
  EXPECT_EQ(rewrite.exit_code, 1) << rewrite.out;
  EXPECT_NE(rewrite.err.find("com.microsoft.Attention x1"), std::string::npos) << rewrite.err;
  ASSERT_TRUE(fs::exists(out)) << rewrite.err;
  const auto check = run_cli({"check", out.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 1);
  const std::string listing = check.out + check.err;
  EXPECT_NE(listing.find("com.microsoft.Attention x1"), std::string::npos) << listing;
  EXPECT_EQ(listing.find("SkipLayerNormalization"), std::string::npos) << listing;  // that one did go
}

// A transpose needs the input's rank; where nothing tells it, the node stays and --explain says why.
TEST(Declines, UnknownRankKeepsFusedMatMulWithAReason) {
  const auto defused = defuse(parse_model_text(R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft": 1, "acme": 1]>
g (float[2, 8] x, float[6, 8] b) => (float[2, 6] y) {
    a = acme.Frob (x)
    y = com.microsoft.FusedMatMul <transB = 1, transA = 1> (a, b) })"), "FusedMatMul");
  EXPECT_EQ(op_list(runtime_only_ops(defused.model)), "com.microsoft.FusedMatMul x1");
  EXPECT_NE(defused.explain.find("the rank of input a is unknown"), std::string::npos) << defused.explain;
}

// ONNX Runtime refuses a node whose attribute has the wrong type; reading an INT alpha as a
// float (0) or a FLOAT transA as an int (absent) would quietly compute something else.
TEST(Declines, AttributesOfTheWrongTypeStayWithAReason) {
  struct Case {
    std::string node, op, reason;
  };
  for (const auto& c : {Case{"y = com.microsoft.QuickGelu <alpha = 3> (x)", "QuickGelu", "attribute 'alpha' is INT, the op takes FLOAT"},
                        Case{"y = com.microsoft.FusedMatMul <transA = 1.0> (x, x)", "FusedMatMul",
                             "attribute 'transA' is FLOAT, the op takes INT"},
                        Case{"y = com.microsoft.FusedGemm <activation = 1> (x, x)", "FusedGemm",
                             "attribute 'activation' is INT, the op takes STRING"}}) {
    SCOPED_TRACE(c.node);
    const auto defused = defuse(parse_model_text(fmt::format(R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft": 1]>
g (float[4, 4] x) => (float[4, 4] y) {{
    {} }})",
                                                             c.node)),
                                c.op);
    EXPECT_EQ(op_list(runtime_only_ops(defused.model)), "com.microsoft." + c.op + " x1");
    EXPECT_NE(defused.explain.find(c.reason), std::string::npos) << defused.explain;
  }
}

TEST(Declines, ActivationOrtRefusesStays) {
  const auto defused = defuse(parse_model_text(model(17, fused_conv(R"(activation = "Gelu")"))), "FusedConv");
  EXPECT_EQ(op_list(runtime_only_ops(defused.model)), "com.microsoft.FusedConv x1");
  EXPECT_NE(defused.explain.find("activation 'Gelu' is not one ONNX Runtime's MLAS kernels implement"), std::string::npos)
      << defused.explain;
}

TEST(Declines, ForOrtTheFusedOpsStay) {
  RewriteOptions options;
  options.target = "ort";
  const auto rewritten = rewrite_text(model(17, R"(g (float[2, 8] x) => (float[2, 8] y) { y = com.microsoft.Gelu (x) })"),
                                      builtin_rules(), options);
  EXPECT_EQ(op_list(runtime_only_ops(rewritten.model)), "com.microsoft.Gelu x1");
}

// ---- End to end: models ONNX Runtime optimized and saved itself ---------------------------------

// Gives the graph inputs' symbolic dims values (ORT fuses SkipLayerNormalization only with
// static shapes).
void fix_dims(onnx::ModelProto& model, const std::map<std::string, int64_t>& values) {
  for (auto& input : *model.mutable_graph()->mutable_input()) {
    for (auto& dim : *input.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
      if (dim.has_dim_param() && values.count(dim.dim_param())) dim.set_dim_value(values.at(dim.dim_param()));
    }
  }
}

// The runtime-only ops of a model file.
std::map<std::string, int> optimized_ops(const fs::path& optimized) {
  return runtime_only_ops(parse_model(read_file(optimized), optimized.string()).proto);
}

// Has ORT optimize `original` at `level` and save it; rewrites that with --target onnx through
// the CLI; proves no runtime-only op is left, `check --target onnx` passes and ORT computes the
// original's outputs with it. Returns the runtime-only ops ORT wrote.
std::map<std::string, int> optimize_and_defuse(const fs::path& original, const std::string& level,
                                               const std::vector<std::string>& compare_extra) {
  const auto optimized = original.parent_path() / (original.stem().string() + "." + level + ".onnx");
  const auto defused = original.parent_path() / (original.stem().string() + "." + level + ".defused.onnx");
  const auto optimize = run_command({"node", (source_dir() / "tests" / "ort" / "optimize.js").string(), original.string(),
                                     optimized.string(), "--level", level});
  if (optimize.exit_code != 0) {
    ADD_FAILURE() << optimize.err;
    return {};
  }
  const auto ops = optimized_ops(optimized);
  std::cout << fmt::format("[ ORT      ] {} at level {} wrote: {}\n", original.filename().string(), level, op_list(ops));
  const auto rewrite = run_cli({"rewrite", optimized.string(), "-o", defused.string(), "--target", "onnx"});
  EXPECT_EQ(rewrite.exit_code, 0) << rewrite.out << rewrite.err;
  EXPECT_EQ(op_list(optimized_ops(defused)), "(none)");
  const auto check = run_cli({"check", defused.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  const auto comparison = ort_compare(original, defused, compare_extra);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  record(fmt::format("{} {}", original.stem().string(), level), comparison.max_abs);
  return ops;
}

struct BertCase {
  std::string name;
  std::vector<std::string> generator_options;
  bool static_shapes;
  std::vector<std::string> expected_ops;  // runtime-only ops ORT must write (so the rewrite is exercised)
};

class OptimizedBert : public ::testing::TestWithParam<BertCase> {};

TEST_P(OptimizedBert, DefusedComputesTheOriginal) {
  const auto& c = GetParam();
  TempDir dir;
  const auto generated = dir / "generated.onnx";
  std::vector<std::string> argv{(build_dir() / "gen-bert").string(), "--out", generated.string(), "--layers", "2", "--hidden", "32",
                                "--heads", "2", "--intermediate", "64", "--vocab", "100", "--max-pos", "64"};
  argv.insert(argv.end(), c.generator_options.begin(), c.generator_options.end());
  const auto generate = run_command(argv);
  ASSERT_EQ(generate.exit_code, 0) << generate.err;
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(read_file(generated)));
  scale_weights(proto, "MatMul", 20.f);
  if (c.static_shapes) fix_dims(proto, {{"batch", 2}, {"sequence", 8}});
  const auto original = dir / (c.name + ".onnx");
  write_file(original, serialize(proto));
  std::vector<std::string> compare{"--range", "input_ids=0,99", "--range", "attention_mask=0,1", "--range", "token_type_ids=0,1",
                                   "--trials", "3"};
  if (!c.static_shapes) compare.insert(compare.end(), {"--dim", "batch=2", "--dim", "sequence=8"});
  for (const std::string level : {"extended", "all"}) {
    const auto ops = optimize_and_defuse(original, level, compare);
    for (const auto& op : c.expected_ops) {
      EXPECT_TRUE(ops.count(op)) << op << " not written by ORT at " << level << ": " << op_list(ops);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    GenBert, OptimizedBert,
    ::testing::Values(
        BertCase{"opset14_erf_dynamic", {"--opset", "14"}, false,
                 {"ai.onnx.LayerNormalization", "com.microsoft.BiasGelu", "com.microsoft.FusedMatMul"}},
        BertCase{"opset14_erf_static", {"--opset", "14"}, true,
                 {"ai.onnx.LayerNormalization", "com.microsoft.SkipLayerNormalization", "com.microsoft.Gelu",
                  "com.microsoft.FusedMatMul"}},
        BertCase{"opset17_tanh_static", {"--opset", "17", "--gelu", "tanh"}, true,
                 {"com.microsoft.SkipLayerNormalization", "com.microsoft.FastGelu", "com.microsoft.FusedMatMul"}},
        BertCase{"opset17_fused_layernorm_dynamic", {"--opset", "17", "--layernorm", "fused", "--gelu", "tanh"}, false,
                 {"com.microsoft.FastGelu", "com.microsoft.FusedMatMul"}}),
    [](const auto& info) { return info.param.name; });


// A small conv net in ONNX text with the patterns ORT fuses on CPU: Conv + Relu, Conv + Add +
// Relu, Conv + Clip, depthwise Conv + HardSigmoid, grouped Conv + BatchNormalization + LeakyRelu,
// BatchNormalization after pooling, Transpose to NHWC, nearest and linear Resize, Concat, pooling
// of every kind, Gemm + Relu, and an Add of two branches with different symbolic sizes. Some
// channel counts (24, 20, 40) are not multiples of the NCHWc block, so ORT pads them.
std::string conv_net(int opset) {
  uint32_t seed = 11;
  auto numbers = [&](int64_t count, double scale) {
    std::vector<std::string> out;
    for (int64_t i = 0; i < count; ++i) {
      seed = seed * 1664525u + 1013904223u;
      out.push_back(fmt::format("{:.4f}", scale * (2.0 * (seed >> 8) / double(1u << 24) - 1.0)));
    }
    return fmt::format("{}", fmt::join(out, ", "));
  };
  std::vector<std::string> weights;
  auto weight = [&](const std::string& name, const std::vector<int64_t>& dims, double scale, double offset = 0) {
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    std::string values = numbers(count, scale);
    if (offset != 0) {  // BatchNormalization variances: positive
      std::vector<std::string> shifted;
      std::stringstream in(values);
      for (std::string v; std::getline(in, v, ',');) shifted.push_back(fmt::format("{:.4f}", offset + std::stod(v)));
      values = fmt::format("{}", fmt::join(shifted, ", "));
    }
    weights.push_back(fmt::format("float[{}] {} = {{{}}}", fmt::join(dims, ", "), name, values));
  };
  weight("w1", {24, 3, 3, 3}, 0.3);
  weight("b1", {24}, 0.3);
  weight("w2", {24, 24, 3, 3}, 0.1);
  weight("b2", {24}, 0.3);
  weight("w3", {32, 24, 1, 1}, 0.2);
  weight("wd", {32, 1, 3, 3}, 0.4);
  weight("bd", {32}, 0.3);
  weight("wg", {32, 8, 3, 3}, 0.2);
  weight("s", {32}, 1.0);
  weight("bb", {32}, 0.5);
  weight("m", {32}, 0.2);
  weight("v", {32}, 0.4, 1.0);
  weight("w5", {20, 32, 1, 1}, 0.3);
  weight("w6", {12, 40, 3, 3}, 0.1);
  weight("wa", {16, 12, 1, 1}, 0.3);
  weight("wb", {16, 12, 1, 1}, 0.3);
  weight("s3", {32}, 1.0);
  weight("bb3", {32}, 0.5);
  weight("m3", {32}, 0.2);
  weight("v3", {32}, 0.4, 1.0);
  weight("g1", {10, 32}, 0.3);
  weight("gb", {10}, 0.3);
  const std::string roi = opset >= 13 ? "" : "roi";
  return fmt::format(R"(<ir_version: 8, opset_import: ["": {0}]>
conv_net (float[1, 3, 16, 16] x, float[1, 12, h1, w1] p, float[1, 12, h2, w2] q)
    => (float[1, 12, 16, 16] y, float[1, 16, 16, 16] z, float[1, 16, h1, w1] pq, float[1, 8, 8, 20] t, float[1, 10] u)
    <{1}, float[4] sc = {{1.0, 1.0, 2.0, 2.0}}, float[0] roi = {{}}, float lo = {{-1.0}}, float hi = {{1.0}}> {{
  c1 = Conv <pads = [1, 1, 1, 1]> (x, w1, b1)
  r1 = Relu (c1)
  c2 = Conv <pads = [1, 1, 1, 1]> (r1, w2, b2)
  a2 = Add (c2, r1)
  r2 = Relu (a2)
  c3 = Conv <strides = [2, 2]> (r2, w3)
  k3 = Clip (c3, lo, hi)
  mp = MaxPool <kernel_shape = [2, 2], pads = [0, 0, 1, 1]> (k3)
  bn3 = BatchNormalization <epsilon = 1e-5> (mp, s3, bb3, m3, v3)
  cd = Conv <pads = [1, 1, 1, 1], group = 32> (bn3, wd, bd)
  hs = HardSigmoid <alpha = 0.25, beta = 0.5> (cd)
  ap = AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], count_include_pad = 0> (hs)
  cg = Conv <pads = [1, 1, 1, 1], group = 4> (ap, wg)
  bn = BatchNormalization <epsilon = 1e-5> (cg, s, bb, m, v)
  lr = LeakyRelu <alpha = 0.1> (bn)
  ga = GlobalAveragePool (hs)
  gm = GlobalMaxPool (ap)
  gs = Add (ga, gm)
  f = Flatten (gs)
  gg = Gemm <transB = 1> (f, g1, gb)
  u = Relu (gg)
  c5 = Conv (lr, w5)
  t = Transpose <perm = [0, 2, 3, 1]> (c5)
  up = Resize <mode = "nearest", coordinate_transformation_mode = "asymmetric", nearest_mode = "floor"> (c5, {2}, sc)
  ul = Resize <mode = "linear", coordinate_transformation_mode = "half_pixel"> (c5, {2}, sc)
  cat = Concat <axis = 1> (up, ul)
  c6 = Conv <pads = [1, 1, 1, 1]> (cat, w6)
  y = Sigmoid (c6)
  ay = AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (y)
  za = Conv (ay, wa)
  z = Tanh (za)
  pa = Conv (p, wa)
  qb = Conv (q, wb)
  pq = Add (pa, qb)
}})",
                     opset, fmt::join(weights, ",\n     "), roi);
}

class OptimizedConvNet : public ::testing::TestWithParam<int> {};

TEST_P(OptimizedConvNet, DefusedComputesTheOriginal) {
  const int opset = GetParam();
  TempDir dir;
  const auto original = write_model_text(conv_net(opset), dir / fmt::format("conv_net_opset{}.onnx", opset));
  const std::vector<std::string> compare{"--dim", "h1=6", "--dim", "w1=5", "--dim", "h2=6", "--dim", "w2=5", "--trials", "3"};
  const auto extended = optimize_and_defuse(original, "extended", compare);
  for (const char* op : {"com.microsoft.FusedConv", "com.microsoft.FusedGemm"}) {
    EXPECT_TRUE(extended.count(op)) << op << " not written at level extended: " << op_list(extended);
  }
  const auto all = optimize_and_defuse(original, "all", compare);
  for (const char* op : {"com.microsoft.nchwc.Conv", "com.microsoft.nchwc.ReorderInput", "com.microsoft.nchwc.ReorderOutput",
                         "com.microsoft.nchwc.Upsample", "com.microsoft.nchwc.MaxPool", "com.microsoft.nchwc.AveragePool",
                         "com.microsoft.nchwc.GlobalAveragePool", "com.microsoft.nchwc.GlobalMaxPool"}) {
    EXPECT_TRUE(all.count(op)) << op << " not written at level all: " << op_list(all);
  }
}

INSTANTIATE_TEST_SUITE_P(Opsets, OptimizedConvNet, ::testing::Values(11, 13, 17),
                         [](const auto& info) { return fmt::format("opset{}", info.param); });

}  // namespace
}  // namespace onnx_rewrite
