// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss lowered to opset 11, proven on ground
// truth: every ONNX backend case of the two ops (2-D to 5-D inputs, with and without weight,
// ignore_index inside and outside the classes, negative ones, none/sum/mean, log_prob used,
// float and double) rewritten with --opset 11 and 9 reproduces its expected outputs in ONNX Runtime.
#include <gtest/gtest.h>

#include <algorithm>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// The corpus' node/ cases named `prefix`*, but not their function-body (_expanded) versions.
std::vector<std::string> cases_named(const fs::path& corpus, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(corpus / "node")) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(prefix) && !name.ends_with("_expanded")) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// At 11 GatherElements exists; at 9 it is a Gather at positions from the static dims.
TEST(LossLowering, NegativeLogLikelihoodCasesKeepTheirOutputsAtOpsets11And9) {
  ASSERT_TEST_DATA(corpus, "conformance");
  const auto cases = cases_named(corpus, "test_nllloss_");
  EXPECT_GE(cases.size(), 18u);
  for (int opset : {11, 9}) expect_conformance_cases_lowered(corpus, cases, opset, {"NegativeLogLikelihoodLoss"});
}

TEST(LossLowering, SoftmaxCrossEntropyCasesKeepTheirOutputsAtOpsets11And9) {
  ASSERT_TEST_DATA(corpus, "conformance");
  const auto cases = cases_named(corpus, "test_sce_");
  EXPECT_GE(cases.size(), 34u);
  for (int opset : {11, 9}) expect_conformance_cases_lowered(corpus, cases, opset, {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"});
}

// A reduction the op doesn't have is named, and the node keeps the model at its opset.
TEST(LossLowering, AnUnknownReductionIsNamed) {
  TempDir dir;
  const fs::path model = write_model_text(R"(
    <ir_version: 7, opset_import: ["": 13]>
    g (float[3, 5] input, int64[3] target) => (float loss) {
      loss = NegativeLogLikelihoodLoss <reduction = "max"> (input, target)
    })",
                                          dir / "m.onnx");
  const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--opset", "11"});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_NE(result.out.find("reduction 'max' is not none, sum or mean"), std::string::npos) << result.out;
  EXPECT_EQ(opset_import(read_model(dir / "out.onnx"), ""), 13);
}

}  // namespace
}  // namespace onnx_rewrite
