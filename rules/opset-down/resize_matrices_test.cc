// Resize as interpolation matrices (rules/opset-down/resize.rules,
// resize-as-interpolation-matrices-lowering): each Resize at its own opset run by ONNX Runtime's
// Resize kernel against its lowering (--opset 17, 10, 9, 7) on random inputs; every mode, the
// coordinate modes, up and down, antialias, axes, keep_aspect_ratio_policy, exclude_outside,
// 3-D/4-D/5-D, float, double, float16, uint8, int64. ONNX Runtime has no double or int64 Resize: their reference resizes in float or
// int32 between Casts. The conformance corpus's Resize cases, their scales, sizes and roi made
// constants, lowered against their expected outputs. What can't be lowered stays, the reason given.
#include <algorithm>
#include <iterator>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

struct Resized {
  std::string name;
  int opset;                 // the model's import
  std::string node;          // the Resize's attributes and the inputs after x: "<mode = ...> (x, , s)"
  std::string x, y;          // dims
  std::string initializers;  // scales, sizes, roi
  std::vector<int> targets;  // --opset
  std::vector<std::string> types = {"float", "double"};
};

// Failures name the node, not its bytes.
void PrintTo(const Resized& r, std::ostream* os) { *os << r.name; }

const char* kUp4 = "float[4] s = {1, 1, 2, 1.5}";
const char* kDown4 = "float[4] s = {1, 1, 0.6, 0.5}";

const std::vector<Resized> kResized = {
    // linear, 4-D (ORT's bilinear), each coordinate mode, up and down
    {"linear_half_pixel_up", 13, R"(<mode = "linear"> (x, , s))", "1, 2, 4, 6", "1, 2, 8, 9", kUp4, {10, 9, 7}, {"float", "double", "float16"}},
    {"linear_half_pixel_down", 13, R"(<mode = "linear"> (x, , s))", "2, 3, 10, 12", "2, 3, 6, 6", kDown4, {10}},
    {"linear_align_corners_up", 13, R"(<mode = "linear", coordinate_transformation_mode = "align_corners"> (x, , s))", "1, 2, 4, 6",
     "1, 2, 8, 9", kUp4, {10}},
    {"linear_align_corners_down", 13, R"(<mode = "linear", coordinate_transformation_mode = "align_corners"> (x, , s))",
     "2, 3, 10, 12", "2, 3, 6, 6", kDown4, {9}},
    {"linear_asymmetric_up", 13, R"(<mode = "linear", coordinate_transformation_mode = "asymmetric"> (x, , s))", "1, 2, 4, 6",
     "1, 2, 8, 9", kUp4, {10}},
    {"linear_asymmetric_down", 13, R"(<mode = "linear", coordinate_transformation_mode = "asymmetric"> (x, , s))", "2, 3, 10, 12",
     "2, 3, 6, 6", kDown4, {10}},
    {"linear_pytorch_half_pixel_sizes", 13,
     R"(<mode = "linear", coordinate_transformation_mode = "pytorch_half_pixel"> (x, , , sizes))", "1, 2, 5, 7", "1, 2, 3, 1",
     "int64[4] sizes = {1, 2, 3, 1}", {10, 7}},
    {"linear_half_pixel_symmetric_up", 19, R"(<mode = "linear", coordinate_transformation_mode = "half_pixel_symmetric"> (x, , s))",
     "1, 2, 4, 6", "1, 2, 8, 9", kUp4, {18, 10}},
    {"linear_half_pixel_symmetric_down", 19,
     R"(<mode = "linear", coordinate_transformation_mode = "half_pixel_symmetric"> (x, , s))", "2, 3, 10, 12", "2, 3, 6, 6", kDown4,
     {17}},
    {"linear_tf_crop_and_resize_extrapolation", 13,
     R"(<mode = "linear", coordinate_transformation_mode = "tf_crop_and_resize", extrapolation_value = 7.5> (x, roi, , sizes))",
     "1, 2, 6, 7", "1, 2, 5, 9", "float[8] roi = {0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4}, int64[4] sizes = {1, 2, 5, 9}", {10, 7}},
    {"linear_tf_crop_and_resize_inside", 13,
     R"(<mode = "linear", coordinate_transformation_mode = "tf_crop_and_resize"> (x, roi, , sizes))", "1, 2, 6, 7", "1, 2, 4, 3",
     "float[8] roi = {0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8}, int64[4] sizes = {1, 2, 4, 3}", {9}},
    // linear 3-D (last two axes) and 5-D (trilinear)
    {"linear_3d_up", 13, R"(<mode = "linear"> (x, , s))", "3, 4, 5", "3, 8, 7", "float[3] s = {1, 2, 1.5}", {10}},
    {"linear_3d_large_axis_kept", 13, R"(<mode = "linear"> (x, , s))", "5000, 4, 6", "5000, 8, 9", "float[3] s = {1, 2, 1.5}", {10},
     {"float"}},  // 5000 × 5000 is above the cap: an axis kept as it is needs no matrix
    {"linear_5d_down", 13, R"(<mode = "linear"> (x, , s))", "1, 2, 6, 8, 10", "1, 2, 3, 6, 5", "float[5] s = {1, 1, 0.5, 0.75, 0.5}",
     {10, 7}},
    {"linear_5d_up_align_corners", 13, R"(<mode = "linear", coordinate_transformation_mode = "align_corners"> (x, , s))",
     "1, 2, 3, 4, 5", "1, 2, 6, 6, 10", "float[5] s = {1, 1, 2, 1.5, 2}", {9}},
    // antialias (18): 3-D, 4-D, 5-D downsampling, scales and sizes
    {"linear_antialias_down", 18, R"(<mode = "linear", antialias = 1> (x, , s))", "2, 3, 10, 12", "2, 3, 6, 6", kDown4, {17, 10}, {"float", "double", "float16"}},
    {"linear_antialias_sizes", 18, R"(<mode = "linear", antialias = 1> (x, , , sizes))", "1, 2, 16, 9", "1, 2, 5, 4",
     "int64[4] sizes = {1, 2, 5, 4}", {10}},
    {"linear_antialias_up_and_down", 18, R"(<mode = "linear", antialias = 1> (x, , s))", "1, 2, 12, 5", "1, 2, 4, 8",
     "float[4] s = {1, 1, 0.34, 1.6}", {9}},
    {"linear_antialias_align_corners", 18,
     R"(<mode = "linear", antialias = 1, coordinate_transformation_mode = "align_corners"> (x, , s))", "2, 3, 10, 12", "2, 3, 6, 6",
     kDown4, {10}},
    {"linear_antialias_3d", 18, R"(<mode = "linear", antialias = 1> (x, , s))", "2, 12, 16", "2, 5, 4", "float[3] s = {1, 0.45, 0.25}",
     {17}},
    {"linear_antialias_5d", 18, R"(<mode = "linear", antialias = 1> (x, , s))", "1, 2, 8, 9, 10", "1, 2, 4, 3, 5",
     "float[5] s = {1, 1, 0.5, 0.34, 0.5}", {10}},
    {"linear_antialias_exclude_outside", 18, R"(<mode = "linear", antialias = 1, exclude_outside = 1> (x, , s))", "2, 3, 10, 12",
     "2, 3, 6, 6", kDown4, {17}},
    // cubic, 4-D (ORT's bicubic)
    {"cubic_half_pixel_up", 13, R"(<mode = "cubic"> (x, , s))", "1, 2, 4, 6", "1, 2, 8, 9", kUp4, {10, 7}},
    {"cubic_half_pixel_down", 13, R"(<mode = "cubic"> (x, , s))", "2, 3, 10, 12", "2, 3, 6, 6", kDown4, {10}, {"float", "double", "float16"}},
    {"cubic_align_corners_up", 13, R"(<mode = "cubic", coordinate_transformation_mode = "align_corners"> (x, , s))", "1, 2, 4, 6",
     "1, 2, 8, 9", kUp4, {9}},
    {"cubic_asymmetric_down", 13, R"(<mode = "cubic", coordinate_transformation_mode = "asymmetric"> (x, , s))", "2, 3, 10, 12",
     "2, 3, 6, 6", kDown4, {10}},
    {"cubic_pytorch_half_pixel_up", 13, R"(<mode = "cubic", coordinate_transformation_mode = "pytorch_half_pixel"> (x, , s))",
     "1, 2, 4, 6", "1, 2, 8, 9", kUp4, {10}},
    // an output of length 1 samples at 0 (the specification; onnx's reference takes -0.5)
    {"cubic_pytorch_half_pixel_to_one", 13,
     R"(<mode = "cubic", coordinate_transformation_mode = "pytorch_half_pixel"> (x, , , sizes))", "1, 2, 5, 7", "1, 2, 3, 1",
     "int64[4] sizes = {1, 2, 3, 1}", {10}},
    {"cubic_a_exclude_outside_up", 13, R"(<mode = "cubic", cubic_coeff_a = -0.5, exclude_outside = 1> (x, , s))", "1, 2, 4, 6",
     "1, 2, 8, 9", kUp4, {10}},
    {"cubic_a_exclude_outside_down", 13, R"(<mode = "cubic", cubic_coeff_a = -0.5, exclude_outside = 1> (x, , s))", "2, 3, 10, 12",
     "2, 3, 6, 6", kDown4, {9}},
    {"cubic_tf_crop_and_resize_extrapolation", 13,
     R"(<mode = "cubic", coordinate_transformation_mode = "tf_crop_and_resize", extrapolation_value = -3.0> (x, roi, , sizes))",
     "1, 2, 6, 7", "1, 2, 5, 9", "float[8] roi = {0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4}, int64[4] sizes = {1, 2, 5, 9}", {10}},
    {"cubic_antialias_down", 18, R"(<mode = "cubic", antialias = 1> (x, , s))", "2, 3, 10, 12", "2, 3, 6, 6", kDown4, {17, 10}},
    {"cubic_antialias_exclude_outside", 18, R"(<mode = "cubic", antialias = 1, exclude_outside = 1, cubic_coeff_a = -0.5> (x, , s))",
     "1, 2, 16, 9", "1, 2, 5, 4", "float[4] s = {1, 1, 0.32, 0.45}", {10}},
    {"cubic_half_pixel_symmetric", 19, R"(<mode = "cubic", coordinate_transformation_mode = "half_pixel_symmetric"> (x, , s))",
     "1, 2, 4, 6", "1, 2, 8, 9", kUp4, {18, 9}},
    // axes and keep_aspect_ratio_policy (18)
    {"linear_axes_3_2", 18, R"(<mode = "linear", axes = [3, 2]> (x, , s))", "1, 2, 4, 6", "1, 2, 6, 12", "float[2] s = {2, 1.5}", {17, 10}},
    {"linear_not_larger", 18, R"(<mode = "linear", keep_aspect_ratio_policy = "not_larger", axes = [2, 3]> (x, , , sizes))", "1, 2, 4, 6",
     "1, 2, 5, 8", "int64[2] sizes = {7, 8}", {17}},
    {"cubic_not_smaller", 18, R"(<mode = "cubic", keep_aspect_ratio_policy = "not_smaller", axes = [2, 3]> (x, , , sizes))",
     "1, 2, 4, 6", "1, 2, 5, 8", "int64[2] sizes = {3, 8}", {10}},
    // nearest: each nearest_mode and coordinate mode, up and down, every type through Gather
    {"nearest_round_prefer_floor_half_pixel_up", 13, R"(<mode = "nearest"> (x, , s))", "1, 2, 4, 6", "1, 2, 8, 9", kUp4, {10, 7},
     {"float", "uint8", "int64"}},
    {"nearest_round_prefer_ceil_asymmetric_down", 13,
     R"(<mode = "nearest", nearest_mode = "round_prefer_ceil", coordinate_transformation_mode = "asymmetric"> (x, , s))",
     "2, 3, 10, 12", "2, 3, 6, 6", kDown4, {10}, {"float", "double", "uint8"}},
    {"nearest_floor_align_corners_up", 13,
     R"(<mode = "nearest", nearest_mode = "floor", coordinate_transformation_mode = "align_corners"> (x, , s))", "1, 2, 4, 6",
     "1, 2, 8, 9", kUp4, {9}, {"float", "int64"}},
    {"nearest_ceil_half_pixel_down", 13, R"(<mode = "nearest", nearest_mode = "ceil"> (x, , s))", "2, 3, 10, 12", "2, 3, 6, 6", kDown4,
     {10}, {"float", "uint8"}},
    {"nearest_ceil_pytorch_half_pixel_up", 13,
     R"(<mode = "nearest", nearest_mode = "ceil", coordinate_transformation_mode = "pytorch_half_pixel"> (x, , s))", "1, 2, 4, 6",
     "1, 2, 8, 9", kUp4, {10}, {"float"}},
    {"nearest_tf_half_pixel_for_nn", 11,
     R"(<mode = "nearest", coordinate_transformation_mode = "tf_half_pixel_for_nn"> (x, roi, s))", "1, 2, 4, 6", "1, 2, 8, 9",
     "float[0] roi = {}, float[4] s = {1, 1, 2, 1.5}", {10, 7}, {"float", "uint8"}},
    {"nearest_tf_crop_and_resize_inside", 13,
     R"(<mode = "nearest", coordinate_transformation_mode = "tf_crop_and_resize"> (x, roi, , sizes))", "1, 2, 6, 7", "1, 2, 4, 3",
     "float[8] roi = {0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8}, int64[4] sizes = {1, 2, 4, 3}", {9}, {"float"}},
    {"nearest_tf_crop_and_resize_extrapolation", 13,
     R"(<mode = "nearest", coordinate_transformation_mode = "tf_crop_and_resize", extrapolation_value = 5.0> (x, roi, , sizes))",
     "1, 2, 6, 7", "1, 2, 5, 9", "float[8] roi = {0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4}, int64[4] sizes = {1, 2, 5, 9}", {10, 9},
     {"float", "uint8", "int64"}},
    {"nearest_3d_all_axes", 13, R"(<mode = "nearest"> (x, , s))", "3, 4, 5", "6, 2, 7", "float[3] s = {2, 0.5, 1.5}", {10},
     {"float", "int64"}},
    {"nearest_5d", 13, R"(<mode = "nearest", nearest_mode = "floor"> (x, , s))", "1, 2, 3, 4, 5", "2, 2, 6, 2, 7",
     "float[5] s = {2, 1, 2, 0.5, 1.5}", {10}, {"float", "uint8"}},
    {"nearest_axes_2_3", 18, R"(<mode = "nearest", axes = [2, 3]> (x, , , sizes))", "1, 2, 4, 6", "1, 2, 7, 3",
     "int64[2] sizes = {7, 3}", {17, 10}, {"float", "uint8"}},
    {"nearest_not_smaller", 18, R"(<mode = "nearest", keep_aspect_ratio_policy = "not_smaller"> (x, , , sizes))", "1, 2, 4, 6",
     "1, 3, 5, 8", "int64[4] sizes = {1, 2, 3, 8}", {17, 9}, {"float", "int64"}},
};

// The model, and its reference in ONNX Runtime: double resized in float, int64 in int32.
std::string resize_model(const Resized& r, const std::string& type, bool reference) {
  const std::string header = fmt::format(R"(<ir_version: {}, opset_import: ["": {}]>
    g ({}[{}] x) => ({}[{}] y) <{}> {{)",
                                         ir_version_for(r.opset), r.opset, type, r.x, type, r.y, r.initializers);
  const std::string inputs = r.node.substr(r.node.find("(x") + 2);
  const std::string attributes = r.node.substr(0, r.node.find("(x"));
  const bool cast = reference && (type == "double" || type == "int64");
  if (!cast) return fmt::format("{}\n  y = Resize {}(x{}\n}}", header, attributes, inputs);
  const int inner = type == "double" ? onnx::TensorProto::FLOAT : onnx::TensorProto::INT32;
  const int outer = type == "double" ? onnx::TensorProto::DOUBLE : onnx::TensorProto::INT64;
  return fmt::format("{}\n  xi = Cast <to = {}> (x)\n  yi = Resize {}(xi{}\n  y = Cast <to = {}> (yi)\n}}", header, inner, attributes,
                     inputs, outer);
}

class ResizeAsMatrices : public ::testing::TestWithParam<std::tuple<Resized, std::string>> {};

TEST_P(ResizeAsMatrices, ComputesWhatOrtsResizeComputes) {
  const auto& [resized, type] = GetParam();
  TempDir dir;
  const fs::path original = write_model_text(resize_model(resized, type, false), dir / "original.onnx");
  const fs::path reference = write_model_text(resize_model(resized, type, true), dir / "reference.onnx");
  for (const int opset : resized.targets) {
    SCOPED_TRACE(fmt::format("--opset {}", opset));
    const fs::path lowered_path = dir / fmt::format("lowered_{}.onnx", opset);
    const auto lowered = rewrite_and_check(original, lowered_path, "onnx", opset);
    ASSERT_TRUE(lowered);
    EXPECT_EQ(opset_import(lowered->model, ""), opset);
    EXPECT_EQ(op_count(lowered->ops, {"", "Resize"}), 0);
    // Nearest copies elements: exact, but for double, whose reference went through float.
    const bool nearest = resized.node.find(R"(mode = "nearest")") != std::string::npos;
    const bool exact = type == "uint8" || type == "int64" || (nearest && type != "double");
    // float16: weights rounded to float16 (the kernel computes them in float), summed in float16.
    const std::string tolerance = exact ? "0" : type == "double" ? "1e-6" : type == "float16" ? "1e-2" : "1e-5";
    const auto comparison = ort_compare(reference, lowered_path, {"--trials", "2", "--rtol", tolerance, "--atol", tolerance});
    EXPECT_TRUE(comparison.ok) << comparison.output;
    report_numbers(fmt::format("{} {} at {}", resized.name, type, opset), comparison);
  }
}

std::vector<std::tuple<Resized, std::string>> resized_types() {
  std::vector<std::tuple<Resized, std::string>> all;
  for (const auto& r : kResized) {
    for (const auto& type : r.types) all.emplace_back(r, type);
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Table, ResizeAsMatrices, ::testing::ValuesIn(resized_types()), [](const auto& info) {
  return std::get<0>(info.param).name + "_" + std::get<1>(info.param);
});

// sizes as exporters compute them, the batch and channels from Shape: a constant shape fact.
TEST(ResizeAsMatrices, SizesFromTheShapeOfX) {
  TempDir dir;
  const fs::path original = write_model_text(R"(
    <ir_version: 8, opset_import: ["": 13]>
    g (float[1, 2, 4, 6] x) => (float[1, 2, 8, 9] y) <int64[1] start = {0}, int64[1] end = {2}, int64[2] hw = {8, 9}> {
      shape = Shape (x)
      nc = Slice (shape, start, end)
      sizes = Concat <axis = 0> (nc, hw)
      y = Resize <mode = "linear", coordinate_transformation_mode = "pytorch_half_pixel"> (x, , , sizes)
    })", dir / "original.onnx");
  const auto lowered = rewrite_and_check(original, dir / "lowered.onnx", "onnx", 9);
  ASSERT_TRUE(lowered);
  EXPECT_EQ(op_count(lowered->ops, {"", "Resize"}), 0);
  EXPECT_EQ(op_count(lowered->ops, {"", "MatMul"}), 2);
  const auto comparison = ort_compare(original, dir / "lowered.onnx", {"--rtol", "1e-5", "--atol", "1e-5"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

// torchvision's LRASPP: the batch known only at run time, sizes taking it from Shape (x): the
// batch axis is left as it is, the others resized (and a scale of 1 on it does the same).
TEST(ResizeAsMatrices, ABatchKnownOnlyAtRunTime) {
  TempDir dir;
  const fs::path original = write_model_text(R"(
    <ir_version: 8, opset_import: ["": 13]>
    g (float[N, 2, 4, 6] x) => (float[N, 2, 8, 9] y, float[N, 2, 8, 12] z)
      <int64[1] start = {0}, int64[1] end = {2}, int64[2] hw = {8, 9}, float[4] scales = {1.0, 1.0, 2.0, 2.0}> {
      shape = Shape (x)
      nc = Slice (shape, start, end)
      sizes = Concat <axis = 0> (nc, hw)
      y = Resize <mode = "linear", coordinate_transformation_mode = "half_pixel"> (x, , , sizes)
      z = Resize <mode = "cubic"> (x, , scales)
    })", dir / "original.onnx");
  const auto lowered = rewrite_and_check(original, dir / "lowered.onnx", "onnx", 10);
  ASSERT_TRUE(lowered);
  EXPECT_EQ(op_count(lowered->ops, {"", "Resize"}), 0);
  const auto comparison = ort_compare(original, dir / "lowered.onnx", {"--dim", "N=3", "--rtol", "1e-5", "--atol", "1e-5"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

// The corpus's Resize cases feed scales, sizes and roi as graph inputs; here they are constants
// (their test data as initializers), x alone stays an input.
const std::vector<std::string> kConformance = {
    "test_resize_downsample_scales_cubic", "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside",
    "test_resize_downsample_scales_cubic_align_corners", "test_resize_downsample_scales_cubic_antialias",
    "test_resize_downsample_scales_linear", "test_resize_downsample_scales_linear_align_corners",
    "test_resize_downsample_scales_linear_antialias", "test_resize_downsample_scales_linear_half_pixel_symmetric",
    "test_resize_downsample_scales_nearest", "test_resize_downsample_sizes_cubic", "test_resize_downsample_sizes_cubic_antialias",
    "test_resize_downsample_sizes_linear_antialias", "test_resize_downsample_sizes_linear_pytorch_half_pixel",
    "test_resize_downsample_sizes_nearest", "test_resize_downsample_sizes_nearest_not_larger",
    "test_resize_downsample_sizes_nearest_not_smaller", "test_resize_tf_crop_and_resize", "test_resize_tf_crop_and_resize_axes_2_3",
    "test_resize_tf_crop_and_resize_axes_3_2", "test_resize_tf_crop_and_resize_extrapolation_value", "test_resize_upsample_scales_cubic",
    "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside", "test_resize_upsample_scales_cubic_align_corners",
    "test_resize_upsample_scales_cubic_asymmetric", "test_resize_upsample_scales_linear", "test_resize_upsample_scales_linear_align_corners",
    "test_resize_upsample_scales_linear_half_pixel_symmetric", "test_resize_upsample_scales_nearest",
    "test_resize_upsample_scales_nearest_axes_2_3", "test_resize_upsample_scales_nearest_axes_3_2", "test_resize_upsample_sizes_cubic",
    "test_resize_upsample_sizes_nearest", "test_resize_upsample_sizes_nearest_axes_2_3", "test_resize_upsample_sizes_nearest_axes_3_2",
    "test_resize_upsample_sizes_nearest_ceil_half_pixel", "test_resize_upsample_sizes_nearest_floor_align_corners",
    "test_resize_upsample_sizes_nearest_not_larger", "test_resize_upsample_sizes_nearest_not_smaller",
    "test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric"};

// align_corners downsampling by 0.6: the expected outputs divide by the output length unrounded
// (2.4 - 1, as onnx's reference computes), ONNX Runtime's kernel and the specification's formula
// by the output's size (2 - 1). Compared with ONNX Runtime's kernel instead.
const std::set<std::string> kOrtDisagrees = {"test_resize_downsample_scales_cubic_align_corners",
                                             "test_resize_downsample_scales_linear_align_corners"};

// Those whose node uses Resize-18/19's attributes: no Resize at 17 says what they say.
bool uses_newer_attributes(const onnx::ModelProto& model) {
  for (const auto& node : model.graph().node()) {
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == "antialias" || attribute.name() == "axes" || attribute.name() == "keep_aspect_ratio_policy") return true;
      if (attribute.name() == "coordinate_transformation_mode" && attribute.s() == "half_pixel_symmetric") return true;
    }
  }
  return false;
}

// `corpus`/node/NAME with every graph input after the first an initializer of its test data, in
// `out`/node/NAME.
void write_frozen_case(const fs::path& corpus, const std::string& name, const fs::path& out) {
  const fs::path from = corpus / "node" / name;
  onnx::ModelProto model = read_model(from / "model.onnx");
  auto& graph = *model.mutable_graph();
  for (int i = 1; i < graph.input_size(); ++i) {
    onnx::TensorProto tensor;
    ASSERT_TRUE(tensor.ParseFromString(read_file(from / "test_data_set_0" / fmt::format("input_{}.pb", i)))) << name;
    tensor.set_name(graph.input(i).name());
    *graph.add_initializer() = tensor;
  }
  graph.mutable_input()->DeleteSubrange(1, graph.input_size() - 1);
  const fs::path to = out / "node" / name;
  fs::create_directories(to / "test_data_set_0");
  write_file(to / "model.onnx", serialize(model));
  for (const char* file : {"input_0.pb", "output_0.pb"}) fs::copy_file(from / "test_data_set_0" / file, to / "test_data_set_0" / file);
}

TEST(ResizeAsMatrices, ConformanceCasesWithConstantSizesKeepTheirOutputs) {
  ASSERT_TEST_DATA(corpus, "conformance");
  TempDir frozen;
  std::vector<std::string> newer;
  for (const auto& name : kConformance) {
    write_frozen_case(corpus, name, frozen.path());
    if (uses_newer_attributes(read_model(frozen.path() / "node" / name / "model.onnx"))) newer.push_back(name);
  }
  EXPECT_EQ(newer.size(), 16u);
  std::vector<std::string> judged;
  std::copy_if(kConformance.begin(), kConformance.end(), std::back_inserter(judged),
               [](const std::string& name) { return !kOrtDisagrees.contains(name); });
  for (const int opset : {10, 9, 7}) {
    SCOPED_TRACE(fmt::format("--opset {}", opset));
    expect_conformance_cases_lowered(frozen.path(), judged, opset, {"Resize"}, 1e-5);
  }
  expect_conformance_cases_lowered(frozen.path(), newer, 17, {"Resize"}, 1e-5);
  for (const auto& name : kOrtDisagrees) {
    const fs::path original = frozen.path() / "node" / name / "model.onnx";
    const auto lowered = rewrite_and_check(original, frozen.path() / (name + "_10.onnx"), "onnx", 10);
    ASSERT_TRUE(lowered);
    EXPECT_EQ(op_count(lowered->ops, {"", "Resize"}), 0) << name;
    const auto comparison = ort_compare(original, frozen.path() / (name + "_10.onnx"), {"--rtol", "1e-5", "--atol", "1e-5"});
    EXPECT_TRUE(comparison.ok) << name << ": " << comparison.output;
  }
}

// A Resize the target's own Resize says is left to the Resize rules as a node: at 11, Resize-11
// with empty tensors (resize-optional-inputs-13-lowering); at 17, Resize-13 as it is.
TEST(ResizeAsMatrices, LeavesWhatTheTargetsResizeSays) {
  TempDir dir;
  const Resized plain{"plain", 13, R"(<mode = "linear"> (x, , s))", "1, 2, 4, 6", "1, 2, 8, 9", kUp4, {}};
  const fs::path original = write_model_text(resize_model(plain, "float", false), dir / "original.onnx");
  for (const int opset : {11, 17}) {
    const auto lowered = rewrite_and_check(original, dir / "lowered.onnx", "onnx", opset);
    ASSERT_TRUE(lowered);
    EXPECT_EQ(op_count(lowered->ops, {"", "Resize"}), 1) << opset;
    EXPECT_EQ(op_count(lowered->ops, {"", "MatMul"}), 0) << opset;
  }
}

// What the rule declines stays above 11, the reason shown by --explain. (The summary's note
// names it only for imports above 18: the engine counts a rule as a lowering by the top of its
// `requires`.)
TEST(ResizeAsMatrices, DeclinesWithTheReason) {
  struct Case {
    std::string graph;
    std::string reason;
    std::string opset = "10";
  };
  const std::vector<Case> cases = {
      {R"(g (float[1, 2, H, 6] x) => (float[1, 2, A, 9] y) <float[4] s = {1, 1, 2, 1.5}> {
            y = Resize <mode = "linear"> (x, , s)
          })",
       "the size of 'x' on axis 2 is known only at run time"},
      {R"(g (float[1, 2, 4, 6] x, float[4] s) => (float[1, 2, A, B] y) {
            y = Resize <mode = "linear"> (x, , s)
          })",
       "'scales' is computed at run time"},
      {R"(g (float[1, 2, 4, 6] x, int64[4] sizes) => (float[1, 2, A, B] y) {
            y = Resize <mode = "nearest"> (x, , , sizes)
          })",
       "'sizes' is computed at run time"},
      {R"(g (float[1, 1, 4096, 6] x) => (float[1, 1, 8192, 6] y) <float[4] s = {1, 1, 2, 1}> {
            y = Resize <mode = "linear"> (x, , s)
          })",
       "above the cap of 4194304"},
      {R"(g (int32[1, 2, 4, 6] x) => (int32[1, 2, 8, 9] y) <float[4] s = {1, 1, 2, 1.5}> {
            y = Resize <mode = "linear"> (x, , s)
          })",
       "the element type is int32; ORT's MatMul kernel takes"},
      {R"(g (float[1, 2, 6, 7] x) => (float[1, 2, 5, 9] y) <float[8] roi = {0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4}, int64[4] sizes = {1, 2, 5, 9}> {
            y = Resize <mode = "nearest", coordinate_transformation_mode = "tf_crop_and_resize"> (x, roi, , sizes)
          })",
       "the Where that fills extrapolation_value needs opset 9", "8"},
      // An INT extrapolation_value: read as a float it would be 0; ONNX Runtime refuses the node.
      {R"(g (float[1, 2, 6, 7] x) => (float[1, 2, 5, 9] y) <float[8] roi = {0, 0, -0.2, 0.3, 1, 1, 0.9, 1.4}, int64[4] sizes = {1, 2, 5, 9}> {
            y = Resize <mode = "linear", coordinate_transformation_mode = "tf_crop_and_resize", extrapolation_value = 3> (x, roi, , sizes)
          })",
       "attribute extrapolation_value has another type than Resize's"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    const fs::path model = write_model_text(fmt::format("<ir_version: 8, opset_import: [\"\": 13]>\n{}", c.graph), dir / "m.onnx");
    const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--opset", c.opset, "--explain", "Resize"});
    EXPECT_EQ(result.exit_code, 1) << c.graph << ": " << result.err;
    EXPECT_NE((result.out + result.err).find(c.reason), std::string::npos) << c.graph << ": " << result.out << result.err;
  }
}

}  // namespace
}  // namespace onnx_rewrite
