// The ONNX registry tutorial's custom ops (rules/registry-tutorial/registry-tutorial.rules): CustomOpOne = x + y
// and CustomOpTwo = round half to even, rewritten by the CLI, checked loadable and run in ONNX
// Runtime against naive references (tests/ort/lib/naive/add.js, rules/registry-tutorial/round_half_even.js).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

fs::path round_reference() { return family_file("registry-tutorial", "round_half_even.js"); }

// ---- CustomOpOne(x, y) = x + y ---------------------------------------------------------------

TEST(CustomOpOne, IsAddExactly) {
  TempDir dir;
  for (const std::string shape : {"3, 5", "N, 4, 6"}) {
    for (const std::string target : {"onnx", "ort"}) {
      const auto input = write_model_text(fmt::format(R"(
        <ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
        g (float[{0}] x, float[{0}] y) => (float[{0}] z) {{
          z = test.customop.CustomOpOne (x, y)
        }})", shape), dir / "one.onnx");
      const auto rewritten = rewrite_and_check(input, dir / "out.onnx", target);
      ASSERT_TRUE(rewritten);
      EXPECT_EQ(op_count(rewritten->ops, {"", "Add"}), 1);
      EXPECT_EQ(opset_import(rewritten->model, "test.customop"), 0);
      EXPECT_EQ(opset_import(rewritten->model, ""), 17);
      std::vector<std::string> run{"--rtol", "0", "--atol", "0", "--float-range", "-100,100"};
      if (shape.starts_with("N")) run.insert(run.end(), {"--dim", "N=3"});
      const auto comparison = ort_compare_reference(rewritten->output, "add", R"({"a": "x", "b": "y", "output": "z"})", run);
      EXPECT_TRUE(comparison.ok) << comparison.output;
      report_numbers(fmt::format("CustomOpOne [{}] --target {} (exact)", shape, target), comparison);
    }
  }
}

// ---- CustomOpTwo(x) = round, halves to even --------------------------------------------------

// z = CustomOpTwo(k * 0.5) for integer k: every half from -4.5 to 4.5 and the integers between.
std::string halves_model(int opset, const std::string& z_type) {
  return fmt::format(R"(
    <ir_version: 8, opset_import: ["": {0}, "test.customop": 1]>
    g (int32[64] k) => ({1}[64] z) <float half = {{0.5}}> {{
      kf = Cast <to = 1> (k)
      x = Mul (kf, half)
      z = test.customop.CustomOpTwo (x)
    }})", opset, z_type);
}

const std::vector<std::string> kIntegersAroundZero = {"--int-range", "-9,9", "--rtol", "0", "--atol", "0", "--trials", "5"};

TEST(CustomOpTwo, RoundsHalvesToEven) {
  TempDir dir;
  const auto input = write_model_text(halves_model(17, "float"), dir / "two.onnx");
  for (const std::string target : {"onnx", "ort"}) {
    const auto rewritten = rewrite_and_check(input, dir / "out.onnx", target);
    ASSERT_TRUE(rewritten);
    EXPECT_EQ(op_count(rewritten->ops, {"", "Round"}), 1);
    EXPECT_EQ(opset_import(rewritten->model, "test.customop"), 0);
    const auto comparison = ort_compare_reference(rewritten->output, round_reference(), R"({"x": "k", "scale": 0.5})",
                                                  kIntegersAroundZero);
    EXPECT_TRUE(comparison.ok) << comparison.output;
    report_numbers("CustomOpTwo on halves --target " + target, comparison);
    // The inputs do contain halves: rounding them away from zero would not pass.
    const auto away = ort_compare_reference(rewritten->output, round_reference(), R"({"x": "k", "scale": 0.5, "halves": "away"})",
                                            kIntegersAroundZero);
    EXPECT_EQ(away.exit_code, 1) << away.output;
  }
}

TEST(CustomOpTwo, RoundsRandomFloats) {
  TempDir dir;
  const auto input = write_model_text(R"(
    <ir_version: 8, opset_import: ["": 13, "test.customop": 1]>
    g (float[N, 7] x) => (float[N, 7] z) {
      z = test.customop.CustomOpTwo (x)
    })", dir / "two.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  const auto comparison = ort_compare_reference(rewritten->output, round_reference(), "{}",
                                                {"--dim", "N=4", "--float-range", "-50,50", "--rtol", "0", "--atol", "0"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers("CustomOpTwo on random floats", comparison);
}

// ONNX Runtime's kernel declares the output int32; a model that says so gets Round then Cast.
TEST(CustomOpTwo, KeepsADeclaredInt32Output) {
  TempDir dir;
  const auto input = write_model_text(halves_model(17, "int32"), dir / "two.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(op_count(rewritten->ops, {"", "Round"}), 1);
  EXPECT_EQ(op_count(rewritten->ops, {"", "Cast"}), 2);  // the model's own, and the one to int32
  const auto comparison = ort_compare_reference(rewritten->output, round_reference(),
                                                R"({"x": "k", "scale": 0.5, "outputType": "int32"})", kIntegersAroundZero);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers("CustomOpTwo with int32 output", comparison);
}

// Round exists from opset 11: an opset-10 model is raised, as every other node allows it.
TEST(CustomOpTwo, RaisesOpset10To11) {
  TempDir dir;
  const auto input = write_model_text(halves_model(10, "float"), dir / "two.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(opset_import(rewritten->model, ""), 11);
  const auto comparison = ort_compare_reference(rewritten->output, round_reference(), R"({"x": "k", "scale": 0.5})",
                                                kIntegersAroundZero);
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

// ---- the tutorial's export: a local function around both ops --------------------------------

TEST(RegistryTutorialTestdata, ModelIsGeneratedFromItsText) {
  TempDir dir;
  const auto generated = dir / "generated.onnx";
  const auto made = run_command({(build_dir() / "text-to-onnx").string(),
                                 (family_file("registry-tutorial", "testdata") / "registry-tutorial-addandround.onnxtxt").string(),
                                 generated.string()});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(read_file(generated), read_file(family_file("registry-tutorial", "testdata") / "registry-tutorial-addandround.onnx"));
}

// --target onnx inlines the function, --target ort keeps it; either way both custom ops go, and
// the model computes round(x + x).
TEST(RegistryTutorialTestdata, ComputesAddAndRound) {
  const fs::path seed = family_file("registry-tutorial", "testdata") / "registry-tutorial-addandround.onnx";
  TempDir dir;
  for (const std::string target : {"onnx", "ort"}) {
    const auto rewritten = rewrite_and_check(seed, dir / (target + ".onnx"), target);
    ASSERT_TRUE(rewritten);
    EXPECT_FALSE(rewritten->ops.count({"test.customop", "CustomOpOne"}));
    EXPECT_FALSE(rewritten->ops.count({"test.customop", "CustomOpTwo"}));
    EXPECT_EQ(rewritten->model.functions_size(), target == "onnx" ? 0 : 1);
    const auto comparison = ort_compare_reference(rewritten->output, round_reference(),
                                                  R"({"x": "l_tensor_x_", "output": "custom_addandround_0", "scale": 2})",
                                                  {"--float-range", "-20,20", "--rtol", "0", "--atol", "0", "--trials", "10"});
    EXPECT_TRUE(comparison.ok) << comparison.output;
    report_numbers("rules/registry-tutorial/testdata/registry-tutorial-addandround --target " + target, comparison);
  }
}

}  // namespace
}  // namespace onnx_rewrite
