// `--to-opset N` (docs/cli.md): a model converted to exactly opset N, up here (down is
// rules/opset-down's), imports N and computes in ONNX Runtime what the original computes.
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
    <ir_version: 4, opset_import: ["": 9]>
    g (float[1, 1, 2, 2] x) => (float[1, 1, 4, 4] y) <float[4] scales = {1.0, 1.0, 2.0, 2.0}> {
      y = Upsample <mode = "nearest"> (x, scales)
    })", dir / "original.onnx");
  const auto result = run_cli({"rewrite", original.string(), "-o", (dir / "out.onnx").string(), "--to-opset", "10"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("the model imports ai.onnx opset 9, below --to-opset 10"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("Upsample x1 (main graph) keeps it there as it is: Upsample does not exist at opset 10"), std::string::npos)
      << result.err;
  EXPECT_EQ(opset_import(read_model(dir / "out.onnx"), ""), 9);
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
