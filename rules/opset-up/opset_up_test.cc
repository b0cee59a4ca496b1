// `--to-opset N` (docs/cli.md): a model converted to exactly opset N, up here (down is
// rules/opset-down's), imports N and computes in ONNX Runtime what the original computes.
#include <algorithm>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

struct Raised {
  std::string name;
  int opset;  // --to-opset
  std::string model;
};

const std::vector<Raised> kRaised = {
    {"attributes_of_opset_9_to_18", 18, R"(
      <ir_version: 4, opset_import: ["": 9]>
      g (float[3, 5] x) => (float[3, 2] v, int64[3, 2] i, float[1, 3, 1] m, float[3, 2] s, float[3, 5] c, float[3, 7] p) {
        v, i = TopK <axis = 1, k = 2> (x)
        r = ReduceMean <axes = [1]> (x)
        m = Unsqueeze <axes = [0]> (r)
        s = Slice <starts = [1], ends = [3], axes = [1]> (x)
        c = Clip <min = -0.25, max = 0.5> (x)
        p = Pad <pads = [0, 1, 0, 1], value = 1.5> (x)
      })"},
    {"attributes_of_opset_11_to_13", 13, R"(
      <ir_version: 6, opset_import: ["": 11]>
      g (float[2, 1, 6] x) => (float[2, 2] a, float[2, 4] b, float[1, 1, 6] t) {
        q = Squeeze <axes = [1]> (x)
        a, b = Split <axis = 1, split = [2, 4]> (q)
        t = ReduceSum <axes = [0]> (x)
      })"},
    // Before 13 these coerce x to 2-D at the axis; torch writes the last axis as a number.
    {"softmax_family_of_opset_11_to_13", 13, R"(
      <ir_version: 6, opset_import: ["": 11]>
      g (float[2, 3, 4] x, float[3, 5] z) => (float[2, 3, 4] a, float[2, 3, 4] b, float[2, 3, 4] c, float[2, 3, 4] d,
                                                 float[3, 5] e) {
        a = Softmax <axis = 1> (x)
        b = LogSoftmax (x)
        c = Softmax <axis = 2> (x)
        d = Hardmax <axis = 0> (x)
        e = Softmax <axis = -1> (z)
      })"},
    // Opset 11 let axes and indices count from the back, and 8 let Max broadcast: a node using
    // that below was invalid there and means at the newer version what it was written for;
    // one that does not means the same. Either way the import goes up as it is.
    {"relaxed_steps_of_opset_7_to_13", 13, R"(
      <ir_version: 3, opset_import: ["": 7]>
      g (float[2, 3, 4] x, float[2, 3, 4] b) => (float[2, 3, 1] m, float[2, 4] g, float[2, 3, 8] c, float[2, 3, 4] y) {
        m = ReduceMean <axes = [-1]> (x)
        i = Constant <value = int64 {-1}> ()
        g = Gather <axis = 1> (x, i)
        c = Concat <axis = -1> (x, x)
        y = Max (x, b)
      })"},
    {"nothing_to_adapt_7_to_17", 17, R"(
      <ir_version: 3, opset_import: ["": 7]>
      g (float[2, 3] x) => (float[2, 3] y) {
        r = Relu (x)
        y = Add (r, x)
      })"},
};

class ToOpset : public ::testing::TestWithParam<Raised> {};

TEST_P(ToOpset, RaisedModelsImportExactlyNAndComputeTheSame) {
  const Raised& raised = GetParam();
  TempDir dir;
  const auto original = write_model_text(raised.model, dir / "original.onnx");
  const auto result = run_cli({"rewrite", original.string(), "-o", (dir / "raised.onnx").string(), "--to-opset",
                               std::to_string(raised.opset)});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const auto model = read_model(dir / "raised.onnx");
  EXPECT_EQ(opset_import(model, ""), raised.opset);
  const int64_t released_with = raised.opset == 13 ? 7 : 8;  // ONNX's IR for opsets 13, 17, 18
  EXPECT_GE(model.ir_version(), released_with) << "an import needs its IR";
  const auto check = run_cli({"check", (dir / "raised.onnx").string(), "--opset", std::to_string(raised.opset)});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  const auto comparison = ort_compare(original, dir / "raised.onnx", {});
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

INSTANTIATE_TEST_SUITE_P(Adapters, ToOpset, ::testing::ValuesIn(kRaised), [](const auto& info) { return info.param.name; });

// A node of a type its opset's schema lacks (torch writes Min of int64 at 9, valid from 12; ONNX
// Runtime refuses that export) is valid once raised, and computes what the same graph written at
// the newer opset computes.
TEST(ToOpset, ANodeOfATypeOnlyTheNewerVersionHasIsRaisedAsItIs) {
  TempDir dir;
  const std::string graph = R"(
      g (int64[2, 3] a, int64[2, 3] b) => (int64[2, 3] y) {
        y = Min (a, b)
      })";
  const auto original = write_model_text(R"(<ir_version: 4, opset_import: ["": 9]>)" + graph, dir / "original.onnx");
  const auto written_at_13 = write_model_text(R"(<ir_version: 7, opset_import: ["": 13]>)" + graph, dir / "at13.onnx");
  const auto result = run_cli({"rewrite", original.string(), "-o", (dir / "raised.onnx").string(), "--to-opset", "13"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_EQ(opset_import(read_model(dir / "raised.onnx"), ""), 13);
  const auto comparison = ort_compare(written_at_13, dir / "raised.onnx", {"--int-range", "-50,50"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

// What has no adapter is named, and the model stays at its opset (exit 1).
TEST(ToOpset, ANodeWithoutAnAdapterIsNamed) {
  TempDir dir;
  const auto original = write_model_text(R"(
    <ir_version: 5, opset_import: ["": 10]>
    g (float[3, 4] x) => (float[3, 4] y) <int64[1, 2] i = {1, 2}, float[1, 2] u = {5.0, 6.0}> {
      y = Scatter <axis = 1> (x, i, u)
    })", dir / "original.onnx");
  const auto result = run_cli({"rewrite", original.string(), "-o", (dir / "out.onnx").string(), "--to-opset", "13"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("the model imports ai.onnx opset 10, below --to-opset 13"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("Scatter x1 (main graph) keeps it there as it is: Scatter does not exist at opset 13"), std::string::npos)
      << result.err;
  EXPECT_EQ(opset_import(read_model(dir / "out.onnx"), ""), 10);
}

// Upsample-7 (scales an attribute) and Upsample-9 (an input), nearest and linear, integer and
// fractional scales, as the Resize of each opset from 10: the same numbers in ONNX Runtime.
struct Upsampled {
  std::string name;
  int opset;       // the model's: 7 or 9
  std::string mode;
  std::string x_type;
  std::string scales;  // a float list
  std::string y_type;
};

int count_op(const onnx::ModelProto& model, const std::string& op) {
  return static_cast<int>(std::count_if(model.graph().node().begin(), model.graph().node().end(),
                                        [&](const onnx::NodeProto& node) { return node.op_type() == op; }));
}

std::string upsample_model(const Upsampled& u) {
  if (u.opset == 7) {
    return fmt::format(R"(
      <ir_version: 3, opset_import: ["": 7]>
      g ({} x) => ({} y) {{
        y = Upsample <mode = "{}", scales = [{}]> (x)
      }})", u.x_type, u.y_type, u.mode, u.scales);
  }
  const size_t rank = static_cast<size_t>(std::count(u.scales.begin(), u.scales.end(), ',') + 1);
  return fmt::format(R"(
      <ir_version: 4, opset_import: ["": 9]>
      g ({} x) => ({} y) <float[{}] scales = {{{}}}> {{
        y = Upsample <mode = "{}"> (x, scales)
      }})", u.x_type, u.y_type, rank, u.scales, u.mode);
}

const std::vector<Upsampled> kUpsampled = {
    {"nearest_9_by_2", 9, "nearest", "float[1, 2, 5, 7]", "1.0, 1.0, 2.0, 2.0", "float[1, 2, 10, 14]"},
    {"nearest_9_by_1_5_and_2_5", 9, "nearest", "float[2, 3, 5, 7]", "1.0, 1.0, 1.5, 2.5", "float[2, 3, 7, 17]"},
    // floor(out / 1.7) and Resize-11's default round(half_pixel) part at out = 5: 2 and 3.
    {"nearest_9_by_1_7_and_2_7", 9, "nearest", "float[2, 3, 5, 7]", "1.0, 1.0, 1.7, 2.7", "float[2, 3, 8, 18]"},
    {"nearest_9_by_3_every_axis", 9, "nearest", "float[1, 2, 3, 4]", "2.0, 1.0, 3.0, 3.0", "float[2, 2, 9, 12]"},
    {"nearest_9_rank_3", 9, "nearest", "float[2, 5, 3]", "1.0, 1.5, 3.0", "float[2, 7, 9]"},
    {"linear_9_by_2", 9, "linear", "float[1, 2, 5, 7]", "1.0, 1.0, 2.0, 2.0", "float[1, 2, 10, 14]"},
    {"linear_9_by_1_5_and_2_5", 9, "linear", "float[2, 3, 5, 7]", "1.0, 1.0, 1.5, 2.5", "float[2, 3, 7, 17]"},
    {"linear_9_by_3", 9, "linear", "float[1, 2, 3, 4]", "1.0, 1.0, 3.0, 3.0", "float[1, 2, 9, 12]"},
    {"linear_9_rank_2", 9, "linear", "float[5, 7]", "1.5, 3.0", "float[7, 21]"},
    {"nearest_7_by_1_5", 7, "nearest", "float[1, 2, 5, 7]", "1.0, 1.0, 1.5, 1.5", "float[1, 2, 7, 10]"},
    {"nearest_7_by_3", 7, "nearest", "float[1, 2, 3, 4]", "1.0, 1.0, 3.0, 3.0", "float[1, 2, 9, 12]"},
    {"linear_7_by_1_5_and_2_5", 7, "linear", "float[1, 2, 5, 7]", "1.0, 1.0, 1.5, 2.5", "float[1, 2, 7, 17]"},
    {"linear_7_by_2", 7, "linear", "float[1, 2, 5, 7]", "1.0, 1.0, 2.0, 2.0", "float[1, 2, 10, 14]"},
};

class UpsampleAsResize : public ::testing::TestWithParam<std::tuple<Upsampled, int>> {};

TEST_P(UpsampleAsResize, ComputesWhatUpsampleComputes) {
  const auto& [upsampled, opset] = GetParam();
  TempDir dir;
  const auto original = write_model_text(upsample_model(upsampled), dir / "original.onnx");
  const auto result = run_cli({"rewrite", original.string(), "-o", (dir / "raised.onnx").string(), "--to-opset",
                               std::to_string(opset)});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("upsample-as-resize-10-raising: 1 match"), std::string::npos) << result.out;
  const auto model = read_model(dir / "raised.onnx");
  EXPECT_EQ(opset_import(model, ""), opset);
  EXPECT_EQ(count_op(model, "Resize"), 1);
  EXPECT_EQ(count_op(model, "Upsample"), 0);
  const auto check = run_cli({"check", (dir / "raised.onnx").string(), "--opset", std::to_string(opset)});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  const auto comparison = ort_compare(original, dir / "raised.onnx", {"--trials", "3", "--rtol", "1e-6", "--atol", "1e-6"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers(fmt::format("{} at {}", upsampled.name, opset), comparison);
}

INSTANTIATE_TEST_SUITE_P(Upsample, UpsampleAsResize,
                         ::testing::Combine(::testing::ValuesIn(kUpsampled), ::testing::Values(10, 11, 13, 18, 21)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_to_" + std::to_string(std::get<1>(info.param));
                         });

// Written with Resize-11's defaults (half_pixel, round_prefer_floor), the same node computes
// something else: the comparison above can tell. (Nearest agrees with floor at integer scales
// and at 1.5 or 2.5; at 1.7 it does not.)
TEST(UpsampleAsResize, ResizeWithItsOwnDefaultsDiffers) {
  TempDir dir;
  for (const char* mode : {"nearest", "linear"}) {
    const auto wrong = write_model_text(fmt::format(R"(
      <ir_version: 7, opset_import: ["": 13]>
      g (float[2, 3, 5, 7] x) => (float[2, 3, 8, 18] y) <float[4] scales = {{1.0, 1.0, 1.7, 2.7}}> {{
        y = Resize <mode = "{}"> (x, , scales)
      }})", mode), dir / "wrong.onnx");
    const auto reference = write_model_text(upsample_model({"", 9, mode, "float[2, 3, 5, 7]", "1.0, 1.0, 1.7, 2.7", "float[2, 3, 8, 18]"}),
                                            dir / "reference.onnx");
    EXPECT_FALSE(ort_compare(reference, wrong, {}).ok) << mode;
  }
}

// Upsample scales computed at run time (torch's F.interpolate at opset 9 writes them so) go to
// Resize as they are.
TEST(UpsampleAsResize, ScalesComputedAtRunTime) {
  TempDir dir;
  const auto original = write_model_text(R"(
    <ir_version: 4, opset_import: ["": 9]>
    g (float[1, 2, 4, 6] x) => (float[1, 2, 8, 9] y) <float[2] ones = {1.0, 1.0}, float[2] hw = {1.0, 0.75}, float two = {2.0}> {
      s = Mul (hw, two)
      scales = Concat <axis = 0> (ones, s)
      y = Upsample <mode = "linear"> (x, scales)
    })", dir / "original.onnx");
  for (int opset : {10, 13}) {
    const auto raised = dir / fmt::format("raised{}.onnx", opset);
    const auto result = run_cli({"rewrite", original.string(), "-o", raised.string(), "--to-opset", std::to_string(opset)});
    ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
    EXPECT_EQ(opset_import(read_model(raised), ""), opset);
    const auto comparison = ort_compare(original, raised, {});
    EXPECT_TRUE(comparison.ok) << comparison.output;
  }
}

// A mode Resize-10 lacks (ONNX Runtime's Upsample also runs "cubic") is declined with the reason,
// and the model stays at its opset.
TEST(UpsampleAsResize, CubicIsDeclined) {
  TempDir dir;
  const auto original = write_model_text(R"(
    <ir_version: 4, opset_import: ["": 9]>
    g (float[1, 1, 4, 4] x) => (float[1, 1, 8, 8] y) <float[4] scales = {1.0, 1.0, 2.0, 2.0}> {
      y = Upsample <mode = "cubic"> (x, scales)
    })", dir / "original.onnx");
  const auto result = run_cli({"rewrite", original.string(), "-o", (dir / "out.onnx").string(), "--to-opset", "13"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("Upsample does not exist at opset 13"), std::string::npos) << result.err;
  EXPECT_EQ(opset_import(read_model(dir / "out.onnx"), ""), 9);
  const auto explained = run_cli({"rewrite", original.string(), "--dry-run", "--to-opset", "13", "--explain", "Upsample"});
  EXPECT_NE((explained.out + explained.err).find("upsample-as-resize-10-raising"), std::string::npos) << explained.out << explained.err;
  EXPECT_NE((explained.out + explained.err).find("cubic"), std::string::npos) << explained.out << explained.err;
}

// Down, it lowers as --opset does; the two options exclude each other.
TEST(ToOpset, DownItLowersAsOpsetDoes) {
  TempDir dir;
  const auto original = write_model_text(R"(
    <ir_version: 8, opset_import: ["": 17]>
    g (float[3, 4] x) => (float[1, 3, 4] y) <int64[1] axes = {0}> {
      y = Unsqueeze (x, axes)
    })", dir / "original.onnx");
  const auto result = run_cli({"rewrite", original.string(), "-o", (dir / "down.onnx").string(), "--to-opset", "11"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(opset_import(read_model(dir / "down.onnx"), ""), 11);
  EXPECT_TRUE(ort_compare(original, dir / "down.onnx", {}).ok);
  const auto both = run_cli({"rewrite", original.string(), "-o", (dir / "x.onnx").string(), "--to-opset", "11", "--opset", "11"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_FALSE(fs::exists(dir / "x.onnx"));
}

}  // namespace
}  // namespace onnx_rewrite
