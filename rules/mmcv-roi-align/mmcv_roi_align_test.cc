// MMCVRoiAlign (mmcv-roi-align.rules, mmcv_roi_align.cc): avg and max, aligned 0/1, adaptive and
// fixed sampling ratios, in both domains, rewritten for opsets 11 and 16 (and 22 for standard
// ONNX), checked loadable and run in ONNX Runtime against a naive port of mmcv's kernel
// (mmcv_roi_align.js) on random rois partly outside the map, sub-pixel and empty ones.
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

fs::path reference_module() { return family_file("mmcv-roi-align", "mmcv_roi_align.js"); }

struct Config {
  std::string mode = "avg";
  int aligned = 1, sampling_ratio = 0;
  int height = 3, width = 2;
  double scale = 0.5;
  std::string name() const { return fmt::format("{}_aligned{}_sr{}", mode, aligned, sampling_ratio); }
  std::string attributes() const {
    return fmt::format("aligned = {}, mode = \"{}\", output_height = {}, output_width = {}, sampling_ratio = {}, spatial_scale = {}",
                       aligned, mode, height, width, sampling_ratio, scale);
  }
  std::string params(bool floor_sizes = false) const {
    return fmt::format(R"({{"outputHeight": {}, "outputWidth": {}, "spatialScale": {}, "samplingRatio": {}, "mode": "{}", "aligned": {}{}}})",
                       height, width, scale, sampling_ratio, mode, aligned, floor_sizes ? R"(, "floorSizes": true)" : "");
  }
};

// rois = [batch, x, y, x + w, y + h] built from graph inputs (compare.js draws each input from
// its own range); with `floor_sizes`, w and h are floored first, so that many rois are empty or
// exactly one pixel wide. `extra` adds nodes before the op (an opset-11 Unsqueeze, say).
std::string model_text(const Config& c, int opset, const std::string& domain, const std::string& n = "2", const std::string& k = "9",
                       bool floor_sizes = false, const std::string& extra = "") {
  const std::string sizes = floor_sizes ? "  whf = Floor (wh)\n  x2y2 = Add (xy, whf)\n" : "  x2y2 = Add (xy, wh)\n";
  return fmt::format(
      "<ir_version: {0}, opset_import: [\"\": {1}, \"{2}\": 1]>\n"
      "g (float[{3}, 3, 12, 10] input, float[{4}, 1] batch, float[{4}, 2] xy, float[{4}, 2] wh) => (float[{4}, 3, {5}, {6}] y) {{\n"
      "{7}{8}  rois = Concat <axis = 1> (batch, xy, x2y2)\n"
      "  y = {2}.MMCVRoiAlign <{9}> (input, rois)\n}}\n",
      ir_version_for(opset), opset, domain, n, k, c.height, c.width, extra, sizes, c.attributes());
}

std::vector<std::string> ranges(const std::string& wh = "0,14", int batch = 2) {
  return {"--range", fmt::format("batch=0,{}", batch - 0.01), "--range", "xy=-6,22", "--range", "wh=" + wh,
          "--range", "input=-5,5", "--trials", "2", "--atol", "2e-5", "--rtol", "1e-5"};
}

std::optional<CheckedRewrite> rewritten(const fs::path& input, const fs::path& output, const std::string& target = "onnx",
                                        std::optional<int> opset = std::nullopt) {
  auto result = rewrite_and_check(input, output, target, opset);
  if (result && target == "onnx") {
    const CommandResult ort = run_cli({"check", output.string(), "--target", "ort"});
    EXPECT_EQ(ort.exit_code, 0) << ort.out << ort.err;
  }
  return result;
}

int count(const onnx::ModelProto& model, const std::string& op) {
  int n = 0;
  for (const auto& node : model.graph().node()) n += node.op_type() == op;
  return n;
}

// ---- Every mode, alignment and sampling ratio mmcv takes, at opsets 11 and 16 --------------------

class RoiAlignCase : public ::testing::TestWithParam<Config> {};

TEST_P(RoiAlignCase, MatchesMmcvInOnnxRuntime) {
  const Config& c = GetParam();
  TempDir dir;
  for (int opset : {11, 16}) {
    const std::string domain = opset == 11 ? "mmcv" : "mmdeploy";
    const auto input = write_model_text(model_text(c, opset, domain), dir / "in.onnx");
    const auto result = rewritten(input, dir / "out.onnx");
    ASSERT_TRUE(result);
    EXPECT_EQ(count(result->model, "RoiAlign"), 1);
    EXPECT_EQ(count(result->model, "MaxPool"), c.mode == "max" && c.sampling_ratio > 1 ? 1 : 0);
    // aligned = 1 needs RoiAlign-16: this model's other nodes (Add, Concat) let the import rise.
    EXPECT_EQ(opset_import(result->model, ""), c.aligned == 1 ? std::max(opset, 16) : opset);
    for (const std::string wh : {"0,14", "0,1.5"}) {  // ordinary and sub-pixel rois
      const auto comparison = ort_compare_reference(result->output, reference_module(), c.params(), ranges(wh));
      EXPECT_TRUE(comparison.ok) << "opset " << opset << ", wh " << wh << ": " << comparison.output;
      report_numbers(fmt::format("{} opset {} ({}), roi sizes {}", c.name(), opset, domain, wh), comparison);
    }
  }
}

std::vector<Config> configs() {
  std::vector<Config> all;
  for (const std::string mode : {"avg", "max"}) {
    for (int aligned : {0, 1}) {
      for (int sr : {0, 1, 2, 3}) {
        if (mode == "max" && sr == 0) continue;  // declined, below
        if (mode == "avg" && sr == 3) continue;
        all.push_back({mode, aligned, sr});
      }
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Modes, RoiAlignCase, ::testing::ValuesIn(configs()), [](const auto& info) { return info.param.name(); });

// Empty and one-pixel rois (sizes floored), a batch of 3, 7 x 7 output, scale 0.25, negative
// sampling ratio (adaptive for mmcv, 0 for ONNX).
TEST(RoiAlignShapes, EmptyRoisAndMmdetDefaults) {
  TempDir dir;
  for (Config c : {Config{"avg", 1, 0, 7, 7, 0.25}, Config{"avg", 0, -1, 7, 7, 0.25}, Config{"max", 1, 2, 7, 7, 0.25}}) {
    const auto input = write_model_text(model_text(c, 16, "mmcv", "3", "12", true), dir / "in.onnx");
    const auto result = rewritten(input, dir / "out.onnx");
    ASSERT_TRUE(result);
    const auto comparison = ort_compare_reference(result->output, reference_module(), c.params(true), ranges("0,2", 3));
    EXPECT_TRUE(comparison.ok) << c.name() << ": " << comparison.output;
    report_numbers(fmt::format("{} 7x7, empty and 1-pixel rois", c.name()), comparison);
  }
}

TEST(RoiAlignShapes, SymbolicBatchAndRoiCount) {
  TempDir dir;
  for (Config c : {Config{"avg", 1, 0}, Config{"max", 0, 2}}) {
    const auto input = write_model_text(model_text(c, 16, "mmdeploy", "N", "K"), dir / "in.onnx");
    const auto result = rewritten(input, dir / "out.onnx");
    ASSERT_TRUE(result);
    auto options = ranges();
    options.insert(options.end(), {"--dim", "N=2", "--dim", "K=5"});
    const auto comparison = ort_compare_reference(result->output, reference_module(), c.params(), options);
    EXPECT_TRUE(comparison.ok) << c.name() << ": " << comparison.output;
  }
}

// ONNX RoiAlign's own max mode is another function (the largest weighted corner): on the same
// inputs ONNX Runtime's RoiAlign <mode = "max"> disagrees with mmcv's max.
TEST(RoiAlignMax, OnnxMaxModeIsNotMmcvs) {
  TempDir dir;
  const Config c{"max", 0, 2};
  const auto model = write_model_text(fmt::format(R"(
    <ir_version: 8, opset_import: ["": 16]>
    g (float[2, 3, 12, 10] input, float[9, 1] batch, float[9, 2] xy, float[9, 2] wh) => (float[9, 3, 3, 2] y) {{
      x2y2 = Add (xy, wh)
      column = Cast <to = 7> (batch)
      indices = Squeeze (column)
      boxes = Concat <axis = 1> (xy, x2y2)
      y = RoiAlign <coordinate_transformation_mode = "output_half_pixel", mode = "max", output_height = 3, output_width = 2,
                    sampling_ratio = 2, spatial_scale = 0.5> (input, boxes, indices)
    }})"), dir / "onnx_max.onnx");
  const auto comparison = ort_compare_reference(model, reference_module(), c.params(), ranges());
  EXPECT_EQ(comparison.exit_code, 1) << comparison.output;  // a value mismatch
}

// What mmdeploy's and mmcv's own exports do below opset 16 for aligned = 1 (RoiAlign-10 on rois
// shifted by -0.5 / spatial_scale) is wrong for rois under a pixel, which RoiAlign-10 clamps to
// one: the reason the rules decline aligned = 1 below 16 rather than shift.
TEST(RoiAlignOpsets, ShiftedRoiAlign10IsWrongForSubPixelRois) {
  TempDir dir;
  const Config c{"avg", 1, 0};
  const auto model = write_model_text(R"(
    <ir_version: 6, opset_import: ["": 11]>
    g (float[2, 3, 12, 10] input, float[9, 1] batch, float[9, 2] xy, float[9, 2] wh) => (float[9, 3, 3, 2] y) {
      x2y2 = Add (xy, wh)
      column = Cast <to = 7> (batch)
      indices = Squeeze <axes = [1]> (column)
      boxes = Concat <axis = 1> (xy, x2y2)
      shift = Constant <value = float {1.0}> ()
      shifted = Sub (boxes, shift)
      y = RoiAlign <mode = "avg", output_height = 3, output_width = 2, sampling_ratio = 0, spatial_scale = 0.5> (input, shifted, indices)
    })", dir / "shifted.onnx");
  EXPECT_TRUE(ort_compare_reference(model, reference_module(), c.params(), ranges("2.5,14")).ok);  // rois of a pixel or more (scale 0.5)
  EXPECT_EQ(ort_compare_reference(model, reference_module(), c.params(), ranges("0,1.5")).exit_code, 1);  // sub-pixel
}

// ---- Opsets: 22 for standard ONNX, ORT's missing RoiAlign-22, a raise that would change the model --

TEST(RoiAlignOpsets, RoiAlign22ForOnnxOnlyAndOrtThroughOpset21) {
  TempDir dir;
  const Config c{"avg", 1, 0};
  const auto input = write_model_text(model_text(c, 22, "mmcv"), dir / "in.onnx");
  const auto onnx = rewrite_and_check(input, dir / "onnx.onnx", "onnx");
  ASSERT_TRUE(onnx);
  EXPECT_EQ(count(onnx->model, "RoiAlign"), 1);
  EXPECT_EQ(opset_import(onnx->model, ""), 22);
  // ONNX Runtime 1.30 has no RoiAlign-22 kernel: not for --target ort ...
  const auto ort = run_cli({"rewrite", input.string(), "-o", (dir / "ort.onnx").string(), "--target", "ort", "--explain", "MMCVRoiAlign"});
  EXPECT_EQ(ort.exit_code, 1) << ort.out << ort.err;
  EXPECT_NE(ort.out.find("needs ai.onnx 16..21, the model uses ai.onnx 22"), std::string::npos) << ort.out;
  // ... unless the model is lowered to 21.
  const auto lowered = rewritten(input, dir / "ort21.onnx", "ort", 21);
  ASSERT_TRUE(lowered);
  EXPECT_EQ(opset_import(lowered->model, ""), 21);
  const auto comparison = ort_compare_reference(lowered->output, reference_module(), c.params(), ranges());
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

// aligned = 1 at opset 11 next to an opset-11 Unsqueeze (axes an attribute, an input from 13):
// raising the import would change that node, and RoiAlign-10 can't express aligned. Declined.
TEST(RoiAlignOpsets, AlignedBelow16WhenTheImportCantRise) {
  TempDir dir;
  const Config c{"avg", 1, 0};
  const auto input = write_model_text(
      model_text(c, 11, "mmcv", "2", "9", false, "  b2 = Unsqueeze <axes = [2]> (batch)\n  b3 = Squeeze <axes = [2]> (b2)\n"),
      dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--explain", "MMCVRoiAlign"});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("aligned = 1 needs RoiAlign-16's half_pixel transformation (ai.onnx >= 16)"), std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("raising it from 11 would change the model"), std::string::npos) << result.out;
}

// ---- Declines --------------------------------------------------------------------------------

struct Decline {
  std::string name;
  std::string model;
  std::string reason;
};

std::vector<Decline> declines() {
  return {
      {"max_adaptive", model_text({"max", 1, 0}, 16, "mmcv"),
       "mode \"max\" with an adaptive sampling ratio (<= 0): mmcv takes the largest of ceil(roi size / output size) samples per bin"},
      {"max_negative_ratio", model_text({"max", 0, -1}, 11, "mmdeploy"), "mode \"max\" with an adaptive sampling ratio (<= 0)"},
      {"unknown_mode", model_text({"sum", 0, 2}, 16, "mmcv"), "mode \"sum\" is neither \"avg\" nor \"max\""},
      {"half", R"(<ir_version: 8, opset_import: ["": 16, "mmcv": 1]>
g (float16[1, 3, 8, 8] input, float16[4, 5] rois) => (float16[4, 3, 2, 2] y) {
  y = mmcv.MMCVRoiAlign <aligned = 1, mode = "avg", output_height = 2, output_width = 2, sampling_ratio = 0, spatial_scale = 1.0> (input, rois)
})",
       "input is float16: ONNX Runtime's RoiAlign takes float and double"},
      {"rois_not_k5", R"(<ir_version: 8, opset_import: ["": 16, "mmcv": 1]>
g (float[1, 3, 8, 8] input, float[4, 4] rois) => (float[4, 3, 2, 2] y) {
  y = mmcv.MMCVRoiAlign <aligned = 1, mode = "avg", output_height = 2, output_width = 2, sampling_ratio = 0, spatial_scale = 1.0> (input, rois)
})",
       "rois is not [K, 5]"},
  };
}

class RoiAlignDecline : public ::testing::TestWithParam<Decline> {};

TEST_P(RoiAlignDecline, LeavesTheNodeAndSaysWhy) {
  const Decline& d = GetParam();
  TempDir dir;
  const auto input = write_model_text(d.model, dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--explain", "MMCVRoiAlign"});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find(d.reason), std::string::npos) << result.out;
  EXPECT_EQ(count(read_model(dir / "out.onnx"), "MMCVRoiAlign"), 1);
}

INSTANTIATE_TEST_SUITE_P(Forms, RoiAlignDecline, ::testing::ValuesIn(declines()), [](const auto& info) { return info.param.name; });

TEST(RoiAlignCli, InspectNamesTheRules) {
  TempDir dir;
  const auto input = write_model_text(model_text({"avg", 1, 0}, 11, "mmcv"), dir / "in.onnx");
  const auto inspect = run_cli({"inspect", input.string()});
  EXPECT_NE(inspect.out.find("mmcv.MMCVRoiAlign x1: mmcv-roi-align-to-roi-align-16 [onnx, ort], mmcv-roi-align-to-roi-align-22 "
                             "[onnx], mmcv-roi-align-to-roi-align-10 [onnx, ort]"),
            std::string::npos)
      << inspect.out;
  const auto check = run_cli({"check", input.string(), "--target", "ort"});
  EXPECT_EQ(check.exit_code, 1) << check.out;
  EXPECT_NE(check.out.find("mmcv.MMCVRoiAlign"), std::string::npos) << check.out;
}

}  // namespace
}  // namespace onnx_rewrite
