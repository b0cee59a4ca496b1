// mmdeploy::grid_sampler / mmcv::grid_sampler (grid-sampler.rules, grid_sampler.cc): every
// interpolation mode, padding mode and align_corners, rewritten for ai.onnx 11 (Gather, bit-exact)
// and 16 / 20 (GridSample), checked loadable for both targets and run in ONNX Runtime against a
// naive port of mmdeploy's kernel (grid_sampler.js), on random grids reaching beyond the image
// and on grids quantized so that nearest lands on .5 ties.
#include <gtest/gtest.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

fs::path reference_module() { return family_file("mmdeploy-grid-sampler", "grid_sampler.js"); }

struct Attributes {
  int mode = 0, padding = 0, align_corners = 0;
  std::string text() const {
    return fmt::format("align_corners = {}, interpolation_mode = {}, padding_mode = {}", align_corners, mode, padding);
  }
  std::string params() const {
    return fmt::format(R"({{"interpolationMode": {}, "paddingMode": {}, "alignCorners": {}}})", mode, padding, align_corners);
  }
  std::string name() const {
    static const char* modes[] = {"bilinear", "nearest", "bicubic"};
    static const char* paddings[] = {"zeros", "border", "reflection"};
    return fmt::format("{}_{}_ac{}", modes[mode], paddings[padding], align_corners);
  }
};

// y = DOMAIN.grid_sampler <...> (x, grid). With `quantized`, the grid is the graph input divided
// into steps of 1/8 first (Floor(raw * 8) / 8): with sizes 8 every coordinate is a multiple of a
// half pixel, so nearest meets .5 ties everywhere.
std::string model_text(const Attributes& a, int opset, const std::string& domain, const std::string& x_dims,
                       const std::string& grid_dims, const std::string& y_dims, bool quantized = false) {
  const std::string grid = quantized ? "grid_q" : "grid";
  const std::string prelude = quantized ? "  eight = Constant <value = float {8.0}> ()\n"
                                          "  scaled = Mul (grid, eight)\n"
                                          "  steps = Floor (scaled)\n"
                                          "  grid_q = Div (steps, eight)\n"
                                        : "";
  return fmt::format(
      "<ir_version: {}, opset_import: [\"\": {}, \"{}\": 1]>\n"
      "g (float[{}] x, float[{}] grid) => (float[{}] y) {{\n{}  y = {}.grid_sampler <{}> (x, {})\n}}\n",
      ir_version_for(opset), opset, domain, x_dims, grid_dims, y_dims, prelude, domain, a.text(), grid);
}

// The reference quantizes the same way when the model does.
std::string reference_params(const Attributes& a, bool quantized) {
  if (!quantized) return a.params();
  std::string params = a.params();
  params.pop_back();
  return params + R"(, "quantize": 8})";
}

std::multiset<std::string> op_types(const onnx::ModelProto& model) {
  std::multiset<std::string> ops;
  for (const auto& node : model.graph().node()) ops.insert((node.domain().empty() ? "" : node.domain() + ".") + node.op_type());
  return ops;
}

// Rewrites and checks for both targets; returns the rewritten model (nullopt after a failure).
std::optional<CheckedRewrite> rewritten(const fs::path& input, const fs::path& output) {
  auto result = rewrite_and_check(input, output, "onnx");
  if (!result) return std::nullopt;
  const CommandResult ort = run_cli({"check", output.string(), "--target", "ort"});
  EXPECT_EQ(ort.exit_code, 0) << ort.out << ort.err;
  return result;
}

std::vector<Attributes> every_combination() {
  std::vector<Attributes> all;
  for (int mode : {0, 1, 2}) {
    for (int padding : {0, 1, 2}) {
      for (int align_corners : {0, 1}) all.push_back({mode, padding, align_corners});
    }
  }
  return all;
}

// ---- Every mode x padding x align_corners: Gather at 11, GridSample at 16 ----------------------

class GridSamplerCase : public ::testing::TestWithParam<Attributes> {};

TEST_P(GridSamplerCase, GatherAt11IsBitExactGridSampleAt16WithinRounding) {
  const Attributes& a = GetParam();
  TempDir dir;
  for (int opset : {11, 16}) {
    // mmdeploy at 11 (its usual export), mmcv's spelling at 16; a batch of 2, a non-square image.
    const std::string domain = opset == 11 ? "mmdeploy" : "mmcv";
    const auto input = write_model_text(model_text(a, opset, domain, "2, 3, 5, 7", "2, 4, 6, 2", "2, 3, 4, 6"),
                                        dir / fmt::format("in{}.onnx", opset));
    const auto result = rewritten(input, dir / fmt::format("out{}.onnx", opset));
    ASSERT_TRUE(result);
    const auto ops = op_types(result->model);
    // GridSample rounds before it reflects: that one combination keeps the Gather form at 16.
    const bool grid_sample = opset >= 16 && !(a.mode == 1 && a.padding == 2 && a.align_corners == 0);
    EXPECT_EQ(ops.count("GridSample"), grid_sample ? 1u : 0u);
    EXPECT_EQ(ops.count("Gather") >= 1, !grid_sample);
    // Exact where the rewrite computes the kernel's float steps (Gather) or picks a pixel (nearest).
    const bool exact = !grid_sample || a.mode == 1;
    const std::vector<std::string> tolerance =
        exact ? std::vector<std::string>{"--atol", "0", "--rtol", "0"} : std::vector<std::string>{"--atol", "1e-6", "--rtol", "1e-5"};
    std::vector<std::string> options{"--range", "grid=-2.5,2.5", "--range", "x=-10,10", "--trials", "2"};
    options.insert(options.end(), tolerance.begin(), tolerance.end());
    const auto comparison = ort_compare_reference(result->output, reference_module(), a.params(), options);
    EXPECT_TRUE(comparison.ok) << comparison.output;
    report_numbers(fmt::format("{} opset {} ({})", a.name(), opset, grid_sample ? "GridSample" : "Gather"), comparison);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, GridSamplerCase, ::testing::ValuesIn(every_combination()),
                         [](const auto& info) { return info.param.name(); });

// ---- Half-pixel ties ---------------------------------------------------------------------------

// Grids in steps of 1/8 on an 8 x 8 image: every coordinate lands on a pixel centre or half-way
// between two, for both align_corners. The Gather form rounds as torch does (reflect, then
// nearbyint); bilinear and bicubic (floor() of integral coordinates) are checked on such grids too.
TEST(GridSamplerTies, NearestRoundsHalfToEvenAfterPaddingAsTorchDoes) {
  TempDir dir;
  for (const Attributes& a : every_combination()) {
    if (a.mode != 1 && a.padding != 2) continue;
    for (int opset : {11, 16}) {
      if (a.mode != 1 && opset != 11) continue;
      const auto input = write_model_text(model_text(a, opset, "mmdeploy", "1, 2, 8, 8", "1, 6, 5, 2", "1, 2, 6, 5", true),
                                          dir / "in.onnx");
      const auto result = rewritten(input, dir / "out.onnx");
      ASSERT_TRUE(result);
      const bool grid_sample = op_types(result->model).count("GridSample") == 1;
      const std::vector<std::string> tolerance = !grid_sample || a.mode == 1 ? std::vector<std::string>{"--atol", "0", "--rtol", "0"}
                                                                             : std::vector<std::string>{"--atol", "1e-6", "--rtol", "1e-5"};
      std::vector<std::string> options{"--range", "grid=-2.5,2.5", "--trials", "3"};
      options.insert(options.end(), tolerance.begin(), tolerance.end());
      const auto comparison = ort_compare_reference(result->output, reference_module(), reference_params(a, true), options);
      EXPECT_TRUE(comparison.ok) << a.name() << " opset " << opset << ": " << comparison.output;
      if (a.mode == 1) report_numbers(fmt::format("ties {} opset {}", a.name(), opset), comparison);
    }
  }
}

// Why GridSample is not used for nearest + reflection + align_corners 0: on the same tie grids,
// ONNX Runtime's GridSample (round, then reflect) picks other pixels than torch's kernel.
TEST(GridSamplerTies, GridSampleDiffersForNearestReflectionWithoutAlignCorners) {
  TempDir dir;
  const auto model = write_model_text(R"(
    <ir_version: 8, opset_import: ["": 16]>
    g (float[1, 2, 8, 8] x, float[1, 6, 5, 2] grid) => (float[1, 2, 6, 5] y) {
      eight = Constant <value = float {8.0}> ()
      scaled = Mul (grid, eight)
      steps = Floor (scaled)
      grid_q = Div (steps, eight)
      y = GridSample <align_corners = 0, mode = "nearest", padding_mode = "reflection"> (x, grid_q)
    })", dir / "grid_sample.onnx");
  const Attributes a{1, 2, 0};
  const auto comparison = ort_compare_reference(model, reference_module(), reference_params(a, true),
                                                {"--range", "grid=-2.5,2.5", "--trials", "3", "--atol", "0", "--rtol", "0"});
  EXPECT_EQ(comparison.exit_code, 1) << comparison.output;  // a value mismatch, not an error
}

// ---- Symbolic shapes, 5-D, the mmdeploy test model ----------------------------------------------

TEST(GridSamplerShapes, SymbolicBatchAndImageSize) {
  TempDir dir;
  for (const Attributes& a : {Attributes{0, 2, 1}, Attributes{2, 2, 0}, Attributes{1, 1, 0}, Attributes{0, 0, 0}}) {
    const auto input = write_model_text(model_text(a, 11, "mmdeploy", "N, 3, H, W", "N, 4, 5, 2", "N, 3, 4, 5"), dir / "in.onnx");
    const auto result = rewritten(input, dir / "out.onnx");
    ASSERT_TRUE(result);
    for (const auto& [n, h, w] : {std::tuple{2, 6, 5}, std::tuple{1, 1, 1}, std::tuple{3, 4, 9}}) {
      const auto comparison =
          ort_compare_reference(result->output, reference_module(), a.params(),
                                {"--dim", fmt::format("N={}", n), "--dim", fmt::format("H={}", h), "--dim", fmt::format("W={}", w),
                                 "--range", "grid=-2.5,2.5", "--trials", "2", "--atol", "0", "--rtol", "0"});
      EXPECT_TRUE(comparison.ok) << a.name() << " " << n << "x" << h << "x" << w << ": " << comparison.output;
    }
  }
}

// A one-pixel axis with reflection and align_corners: the kernel's reflection returns 0 (its span
// is 0), static or symbolic.
TEST(GridSamplerShapes, OnePixelAxisReflection) {
  TempDir dir;
  for (const char* dims : {"1, 2, 1, 6", "1, 2, H, W"}) {
    const Attributes a{0, 2, 1};
    const auto input = write_model_text(model_text(a, 11, "mmdeploy", dims, "1, 3, 4, 2", "1, 2, 3, 4"), dir / "in.onnx");
    const auto result = rewritten(input, dir / "out.onnx");
    ASSERT_TRUE(result);
    std::vector<std::string> options{"--range", "grid=-3,3", "--atol", "0", "--rtol", "0"};
    if (std::string(dims).find('H') != std::string::npos) options.insert(options.end(), {"--dim", "H=1", "--dim", "W=6"});
    const auto comparison = ort_compare_reference(result->output, reference_module(), a.params(), options);
    EXPECT_TRUE(comparison.ok) << dims << ": " << comparison.output;
  }
}

// 5-D (the TensorRT plugin's trilinear / nearest) becomes GridSample-20.
TEST(GridSamplerShapes, FiveDimensionalAtOpset20) {
  TempDir dir;
  for (const Attributes& a : {Attributes{0, 0, 0}, Attributes{0, 2, 1}, Attributes{1, 1, 0}, Attributes{0, 1, 1}}) {
    const auto input = write_model_text(model_text(a, 20, "mmdeploy", "2, 3, 4, 5, 6", "2, 3, 2, 4, 3", "2, 3, 3, 2, 4"),
                                        dir / "in.onnx");
    const auto result = rewritten(input, dir / "out.onnx");
    ASSERT_TRUE(result);
    EXPECT_EQ(op_types(result->model).count("GridSample"), 1u);
    const auto comparison = ort_compare_reference(result->output, reference_module(), a.params(),
                                                  {"--range", "grid=-2.5,2.5", "--atol", "1e-6", "--rtol", "1e-5"});
    EXPECT_TRUE(comparison.ok) << a.name() << ": " << comparison.output;
    report_numbers(fmt::format("5-D {} opset 20", a.name()), comparison);
  }
}

// ---- Declines ------------------------------------------------------------------------------------

struct Decline {
  std::string name;
  std::string model;
  std::string reason;  // what --explain must say
};

std::vector<Decline> declines() {
  return {
      {"five_d_below_20", model_text({0, 0, 0}, 17, "mmdeploy", "1, 1, 2, 3, 4", "1, 2, 2, 2, 3", "1, 1, 2, 2, 2"),
       "a 5-D grid_sampler needs GridSample-20 (ai.onnx >= 20); the Gather decomposition is 4-D only"},
      {"five_d_bicubic", model_text({2, 0, 0}, 20, "mmdeploy", "1, 1, 2, 3, 4", "1, 2, 2, 2, 3", "1, 1, 2, 2, 2"),
       "bicubic sampling is 4-D only (torch, ONNX GridSample)"},
      {"unknown_mode", model_text({3, 0, 0}, 11, "mmdeploy", "1, 1, 3, 4", "1, 2, 2, 2", "1, 1, 2, 2"),
       "interpolation_mode = 3 is none of torch's 0 (bilinear), 1 (nearest), 2 (bicubic)"},
      {"unknown_padding", model_text({0, 5, 0}, 16, "mmcv", "1, 1, 3, 4", "1, 2, 2, 2", "1, 1, 2, 2"),
       "padding_mode = 5 is none of torch's 0 (zeros), 1 (border), 2 (reflection)"},
      {"double", R"(<ir_version: 6, opset_import: ["": 11, "mmdeploy": 1]>
g (double[1, 1, 3, 4] x, double[1, 2, 2, 2] grid) => (double[1, 1, 2, 2] y) {
  y = mmdeploy.grid_sampler <align_corners = 0, interpolation_mode = 0, padding_mode = 0> (x, grid)
})",
       "the input is double: mmdeploy's and mmcv's grid_sampler kernels are float32 only"},
      {"grid_not_pairs", model_text({0, 0, 0}, 11, "mmdeploy", "1, 1, 3, 4", "1, 2, 2, 3", "1, 1, 2, 2"),
       "the grid's last dim is 3, a 4-D grid_sampler needs 2"},
  };
}

class GridSamplerDecline : public ::testing::TestWithParam<Decline> {};

TEST_P(GridSamplerDecline, LeavesTheNodeAndSaysWhy) {
  const Decline& d = GetParam();
  TempDir dir;
  const auto input = write_model_text(d.model, dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--explain", "grid_sampler"});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;  // target not met: the node stays
  EXPECT_NE(result.out.find(d.reason), std::string::npos) << result.out;
  const auto out = read_model(dir / "out.onnx");
  EXPECT_EQ(out.graph().node(out.graph().node_size() - 1).op_type(), "grid_sampler");
}

INSTANTIATE_TEST_SUITE_P(Forms, GridSamplerDecline, ::testing::ValuesIn(declines()),
                         [](const auto& info) { return info.param.name; });

// `inspect` names the op and the rules that cover it; `check` fails before and passes after.
TEST(GridSamplerCli, InspectNamesTheRulesAndCheckPassesAfter) {
  TempDir dir;
  const auto input = write_model_text(model_text({0, 0, 0}, 11, "mmdeploy", "1, 3, 8, 8", "1, 4, 4, 2", "1, 3, 4, 4"), dir / "in.onnx");
  const auto inspect = run_cli({"inspect", input.string()});
  EXPECT_NE(inspect.out.find("mmdeploy.grid_sampler x1: grid-sampler-to-grid-sample [onnx, ort], grid-sampler-gather [onnx, ort]"),
            std::string::npos)
      << inspect.out;
  const auto before = run_cli({"check", input.string(), "--target", "onnx"});
  EXPECT_EQ(before.exit_code, 1) << before.out;
  EXPECT_NE(before.out.find("mmdeploy.grid_sampler"), std::string::npos) << before.out;
  EXPECT_TRUE(rewritten(input, dir / "out.onnx"));
}

}  // namespace
}  // namespace onnx_rewrite
