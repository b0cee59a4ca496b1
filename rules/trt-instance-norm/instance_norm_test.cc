// TRTInstanceNormalization (mmdeploy) and MMCVInstanceNormalization (mmcv) back to ai.onnx
// InstanceNormalization: rewritten by the CLI for each target, checked loadable, and run in ONNX
// Runtime against a naive reference of the plugins' formula (instance_norm.js).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

fs::path reference() { return family_file("trt-instance-norm", "instance_norm.js"); }

struct Case {
  std::string op;      // as the exporter writes it, domain included
  std::string domain;  // its import ("" when it sits in the default domain)
  std::string shape;
  std::string epsilon_attribute;  // "" leaves the plugin's default, 1e-5
  double epsilon;
};

std::string model_text(const Case& c) {
  const std::string imports = c.domain.empty() ? R"("": 11)" : fmt::format(R"("": 11, "{}": 1)", c.domain);
  const std::string attributes = c.epsilon_attribute.empty() ? "" : fmt::format("<epsilon = {}>", c.epsilon_attribute);
  return fmt::format(R"(
    <ir_version: 6, opset_import: [{0}]>
    g (float[{1}] x, float[C] scale, float[C] bias) => (float[{1}] y) {{
      y = {2} {3} (x, scale, bias)
    }})", imports, c.shape, c.op, attributes);
}

TEST(TrtInstanceNormalization, MatchesThePluginFormulaOnEveryTarget) {
  const std::vector<Case> cases = {
      {"mmdeploy.TRTInstanceNormalization", "mmdeploy", "N, C, 10", "", 1e-5},           // mmdeploy's [N, G, L] view
      {"mmdeploy.TRTInstanceNormalization", "mmdeploy", "N, C, 7", "1e-3", 1e-3},
      {"MMCVInstanceNormalization", "", "N, C, 5, 6", "", 1e-5},                          // mmcv's renamed node
      {"MMCVInstanceNormalization", "", "N, C, 3, 4", "0.25", 0.25},
  };
  TempDir dir;
  for (const auto& c : cases) {
    for (const std::string target : {"onnx", "ort"}) {
      SCOPED_TRACE(fmt::format("{} [{}] eps {} --target {}", c.op, c.shape, c.epsilon, target));
      const auto input = write_model_text(model_text(c), dir / "in.onnx");
      const auto rewritten = rewrite_and_check(input, dir / "out.onnx", target);
      ASSERT_TRUE(rewritten);
      EXPECT_EQ(op_count(rewritten->ops, {"", "InstanceNormalization"}), 1);
      EXPECT_EQ(rewritten->ops.size(), 1u) << "nothing but the InstanceNormalization";
      if (!c.domain.empty()) {
        EXPECT_EQ(opset_import(rewritten->model, c.domain), 0) << "the plugin's domain is dropped";
      }
      EXPECT_EQ(opset_import(rewritten->model, ""), 11) << "the model's opset is kept";
      const auto comparison = ort_compare_reference(rewritten->output, reference(), fmt::format(R"({{"epsilon": {}}})", c.epsilon),
                                                    {"--dim", "N=3", "--dim", "C=4", "--rtol", "1e-5", "--atol", "1e-5",
                                                     "--trials", "2"});
      EXPECT_TRUE(comparison.ok) << comparison.output;
      std::cout << fmt::format("[ numbers  ] {} [{}] --target {}: max_abs {:.2e}\n", c.op, c.shape, target, comparison.max_abs);
    }
  }
}

TEST(TrtInstanceNormalization, LeavesOtherPluginsAlone) {
  // TensorRT's own InstanceNormalization_TRT plugin takes its scales as attributes: not this op.
  const auto rewritten = rewrite_text(R"(
    <ir_version: 6, opset_import: ["": 11, "trt": 1]>
    g (float[2, 3, 4] x) => (float[2, 3, 4] y) {
      y = trt.InstanceNormalization_TRT <epsilon = 1e-5, scales = [1.0, 1.0, 1.0], bias = [0.0, 0.0, 0.0]> (x)
    })", builtin_rules());
  EXPECT_TRUE(rewritten.result.rules.empty());
  ASSERT_EQ(rewritten.model.graph().node_size(), 1) << rewritten.model.DebugString();
  EXPECT_EQ(rewritten.model.graph().node(0).op_type(), "InstanceNormalization_TRT");
}

}  // namespace
}  // namespace onnx_rewrite
