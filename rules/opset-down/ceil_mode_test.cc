// MaxPool / AveragePool <ceil_mode = 1> below opset 10 (rules/opset-down/ceil-mode.rules): with
// the input's spatial sizes known, the floor-mode pool over more end padding. Each pool at its
// opset (11) against the lowered model (--opset 9, 8, 7) in ONNX Runtime, on sizes where
// rounding up adds a window, with and without pads; the near misses stay above 10, named.
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

struct Pooled {
  std::string name;
  std::string node;    // y = ... (x), or y, i = MaxPool ...
  std::string inputs;  // x's type
  std::string outputs;
};

// Sizes: (in + pads - kernel) / stride not whole on some axis, so ceil_mode adds a window there.
// The outputs are declared with symbols: ONNX 1.12's shape inference does not drop a last window
// that starts in the padding, ONNX Runtime (and ONNX from 1.16) does.
const std::vector<Pooled> kPooled = {
    {"max_k3_s2", "y = MaxPool <ceil_mode = 1, kernel_shape = [3, 3], strides = [2, 2]> (x)", "float[2, 3, 8, 13]",
     "float[N, C, S0, S1] y"},
    {"max_k3_s2_pads_1", "y = MaxPool <ceil_mode = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]> (x)",
     "float[1, 4, 10, 7]", "float[N, C, S0, S1] y"},
    {"max_k3_s2_pads_begin_only", "y = MaxPool <ceil_mode = 1, kernel_shape = [3, 3], pads = [1, 0, 0, 0], strides = [2, 2]> (x)",
     "float[1, 2, 12, 16]", "float[N, C, S0, S1] y"},
    // H: ceil gives 5 windows, the fifth would start at 8, in the end padding: 4, as floor.
    {"max_k3_s2_last_window_in_padding", "y = MaxPool <ceil_mode = 1, kernel_shape = [3, 3], pads = [0, 0, 2, 2], strides = [2, 2]> (x)",
     "float[1, 2, 8, 9]", "float[N, C, S0, S1] y"},
    {"max_k2_s2", "y = MaxPool <ceil_mode = 1, kernel_shape = [2, 2], strides = [2, 2]> (x)", "float[2, 3, 7, 33]",
     "float[N, C, S0, S1] y"},
    {"max_1d_k3_s2", "y = MaxPool <ceil_mode = 1, kernel_shape = [3], strides = [2]> (x)", "float[2, 3, 16]", "float[N, C, S0] y"},
    {"max_3d_k3_s2", "y = MaxPool <ceil_mode = 1, kernel_shape = [3, 3, 3], strides = [2, 2, 2]> (x)", "float[1, 2, 6, 8, 5]",
     "float[N, C, S0, S1, S2] y"},
    {"max_dilations_1_written", "y = MaxPool <ceil_mode = 1, dilations = [1, 1], kernel_shape = [3, 3], strides = [2, 2]> (x)",
     "float[1, 2, 10, 11]", "float[N, C, S0, S1] y"},
    {"average_k3_s2", "y = AveragePool <ceil_mode = 1, kernel_shape = [3, 3], strides = [2, 2]> (x)", "float[2, 3, 8, 13]",
     "float[N, C, S0, S1] y"},
    {"average_k3_s2_pads_1_exclude_pad",
     "y = AveragePool <ceil_mode = 1, count_include_pad = 0, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]> (x)",
     "float[1, 4, 10, 7]", "float[N, C, S0, S1] y"},
    {"average_k2_s2", "y = AveragePool <ceil_mode = 1, kernel_shape = [2, 2], strides = [2, 2]> (x)", "float[2, 3, 7, 33]",
     "float[N, C, S0, S1] y"},
};

std::string pool_model(const Pooled& p) {
  return fmt::format(R"(
    <ir_version: 6, opset_import: ["": 11]>
    g ({} x) => ({}) {{
      {}
    }})", p.inputs, p.outputs, p.node);
}

class CeilModeAsPads : public ::testing::TestWithParam<std::tuple<Pooled, int>> {};

TEST_P(CeilModeAsPads, ComputesWhatTheCeilModePoolComputes) {
  const auto& [pooled, opset] = GetParam();
  TempDir dir;
  const fs::path original = write_model_text(pool_model(pooled), dir / "original.onnx");
  const auto lowered = rewrite_and_check(original, dir / "lowered.onnx", "onnx", opset);
  ASSERT_TRUE(lowered);
  EXPECT_EQ(opset_import(lowered->model, ""), opset);
  for (const auto& node : lowered->model.graph().node()) {
    for (const auto& attribute : node.attribute()) EXPECT_NE(attribute.name(), "ceil_mode") << pooled.name;
  }
  const auto comparison = ort_compare(original, dir / "lowered.onnx", {"--trials", "3", "--rtol", "1e-6", "--atol", "1e-6"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers(fmt::format("{} at {}", pooled.name, opset), comparison);
}

INSTANTIATE_TEST_SUITE_P(Pools, CeilModeAsPads, ::testing::Combine(::testing::ValuesIn(kPooled), ::testing::Values(9, 8, 7)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_to_" + std::to_string(std::get<1>(info.param));
                         });

// MaxPool's Indices output (MaxPool-8): the same indices into the unpadded input, at 8 and 9.
TEST(CeilModeAsPads, MaxPoolIndicesAtEightAndNine) {
  TempDir dir;
  const fs::path original = write_model_text(pool_model({"", "y, i = MaxPool <ceil_mode = 1, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]> (x)",
                                                         "float[1, 3, 10, 7]", "float[1, 3, 6, 4] y, int64[1, 3, 6, 4] i"}),
                                             dir / "original.onnx");
  for (int opset : {9, 8}) {
    const auto lowered = rewrite_and_check(original, dir / "lowered.onnx", "onnx", opset);
    ASSERT_TRUE(lowered);
    EXPECT_EQ(opset_import(lowered->model, ""), opset);
    const auto comparison = ort_compare(original, dir / "lowered.onnx", {});
    EXPECT_TRUE(comparison.ok) << comparison.output;
  }
  // MaxPool-1 has no Indices: at 7 the node stays above 10, the reason given.
  const auto result = run_cli({"rewrite", original.string(), "-o", (dir / "out.onnx").string(), "--opset", "7"});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_NE((result.out + result.err).find("MaxPool-8 added the Indices output"), std::string::npos) << result.out << result.err;
}

// Dropping ceil_mode without the extra padding computes something else (fewer windows): the
// comparison above can tell.
TEST(CeilModeAsPads, FloorModeAloneDiffers) {
  TempDir dir;
  const fs::path original = write_model_text(pool_model(kPooled[0]), dir / "original.onnx");
  const fs::path floor = write_model_text(R"(
    <ir_version: 4, opset_import: ["": 9]>
    g (float[2, 3, 8, 13] x) => (float[2, 3, 3, 6] y) {
      y = MaxPool <kernel_shape = [3, 3], strides = [2, 2]> (x)
    })", dir / "floor.onnx");
  EXPECT_FALSE(ort_compare(original, floor, {}).ok);
}

// What the rule declines stays above 10, with the reason: a spatial size known only at run
// time, AveragePool counting the padding, dilations, auto_pad.
TEST(CeilModeAsPads, NearMissesStayAboveWithTheReason) {
  struct Case {
    std::string node;
    std::string x;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"y = MaxPool <ceil_mode = 1, kernel_shape = [3, 3], strides = [2, 2]> (x)", "float[1, 2, H, 9]",
       "the size of 'x' on axis 2 is known only at run time"},
      {"y = AveragePool <ceil_mode = 1, count_include_pad = 1, kernel_shape = [3, 3], strides = [2, 2]> (x)", "float[1, 2, 8, 9]",
       "AveragePool-10 added attribute ceil_mode, which this node sets"},
      {"y = MaxPool <ceil_mode = 1, dilations = [2, 2], kernel_shape = [3, 3], strides = [2, 2]> (x)", "float[1, 2, 10, 11]",
       "dilations other than 1"},
      {"y = MaxPool <auto_pad = \"SAME_UPPER\", ceil_mode = 1, kernel_shape = [3, 3], strides = [2, 2]> (x)", "float[1, 2, 8, 9]",
       "auto_pad SAME_UPPER"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    const fs::path model = write_model_text(fmt::format(R"(
      <ir_version: 6, opset_import: ["": 11]>
      g ({} x) => (float[1, 2, A, B] y) {{
        {}
      }})", c.x, c.node), dir / "m.onnx");
    const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--opset", "9"});
    EXPECT_EQ(result.exit_code, 1) << c.node << ": " << result.err;
    EXPECT_NE((result.out + result.err).find(c.reason), std::string::npos) << c.node << ": " << result.out << result.err;
  }
}

}  // namespace
}  // namespace onnx_rewrite
