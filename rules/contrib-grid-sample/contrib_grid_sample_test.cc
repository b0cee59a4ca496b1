// The contrib-grid-sample rule: com.microsoft GridSample becomes ai.onnx GridSample (-16, or -20
// with its renamed modes) under --target onnx. ONNX Runtime runs both with one kernel, so every
// mode, padding mode and align_corners must give ORT's contrib results exactly (compare.js with
// zero tolerance), grid values reaching past [-1, 1] so the padding modes matter. Then the
// import raised from below 16, a raise blocked by a node that would change meaning, and near
// misses.
#include <gtest/gtest.h>

#include <iostream>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

Rewritten rewrite(const onnx::ModelProto& proto, const std::string& explain = "") {
  RewriteOptions options;
  options.target = "onnx";
  options.explain = explain;
  return rewrite_proto(proto, builtin_rules(), options);
}

int count(const onnx::ModelProto& model, const std::string& op_type, const std::string& domain = "") {
  const auto counts = count_ops(model);
  auto it = counts.find({domain, op_type});
  return it == counts.end() ? 0 : it->second;
}

std::string attribute_of(const onnx::ModelProto& model, const std::string& op_type, const std::string& name) {
  for (const auto& node : model.graph().node()) {
    if (node.op_type() != op_type || !node.domain().empty()) continue;
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == name) return attribute.s();
    }
  }
  return "";
}

struct Case {
  std::string mode;
  std::string padding;
  int align_corners;
  int opset;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.mode << "/" << c.padding << "/" << c.align_corners << "/" << c.opset; }

class Modes : public ::testing::TestWithParam<Case> {};

TEST_P(Modes, SameNumbersAsOrtsContribKernel) {
  const auto& c = GetParam();
  const auto original = parse_model_text(contrib_model_text(c.opset, fmt::format(R"(
    g (float[2, 3, 7, 9] x, float[2, 5, 6, 2] grid) => (float[2, 3, 5, 6] y) {{
      y = com.microsoft.GridSample <mode = "{}", padding_mode = "{}", align_corners = {}> (x, grid) }})",
                                                                                 c.mode, c.padding, c.align_corners)));
  const auto rewritten = rewrite(original);
  ASSERT_EQ(count(rewritten.model, "GridSample"), 1) << rewritten.explain;
  EXPECT_EQ(count(rewritten.model, "GridSample", "com.microsoft"), 0);
  EXPECT_EQ(opset_import(rewritten.model, ""), c.opset);
  const std::string expected_mode = c.opset < 20 ? c.mode : c.mode == "bilinear" ? "linear" : c.mode == "bicubic" ? "cubic" : c.mode;
  EXPECT_EQ(attribute_of(rewritten.model, "GridSample", "mode"), expected_mode);
  TempDir dir;
  write_file(dir / "contrib.onnx", serialize(original));
  write_file(dir / "standard.onnx", rewritten.bytes);
  const auto check = run_cli({"check", (dir / "standard.onnx").string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  const auto comparison = ort_compare(dir / "contrib.onnx", dir / "standard.onnx",
                                      {"--trials", "2", "--range", "grid=-1.3,1.3", "--float-range", "-2,2", "--rtol", "0", "--atol", "0"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
  EXPECT_EQ(comparison.max_abs, 0);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    for (const char* padding : {"zeros", "border", "reflection"}) {
      for (int align : {0, 1}) cases.push_back({mode, padding, align, 16});
    }
    cases.push_back({mode, "border", 0, 20});
    cases.push_back({mode, "reflection", 1, 22});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(GridSample, Modes, ::testing::ValuesIn(all_cases()), [](const ::testing::TestParamInfo<Case>& info) {
  return fmt::format("{}_{}_align{}_opset{}", info.param.mode, info.param.padding, info.param.align_corners, info.param.opset);
});

// Defaults (no attributes) at 16 and 20: bilinear / linear, zeros, align_corners 0.
TEST(Defaults, NoAttributesStayNoAttributes) {
  for (int opset : {16, 20}) {
    const auto original = parse_model_text(contrib_model_text(opset, R"(
      g (float[1, 2, 4, 4] x, float[1, 3, 3, 2] grid) => (float[1, 2, 3, 3] y) { y = com.microsoft.GridSample (x, grid) })"));
    const auto rewritten = rewrite(original);
    ASSERT_EQ(count(rewritten.model, "GridSample"), 1) << rewritten.explain;
    TempDir dir;
    write_file(dir / "a.onnx", serialize(original));
    write_file(dir / "b.onnx", rewritten.bytes);
    const auto comparison = ort_compare(dir / "a.onnx", dir / "b.onnx", {"--range", "grid=-1.2,1.2", "--rtol", "0", "--atol", "0"});
    EXPECT_TRUE(comparison.ok) << comparison.output;
  }
}

// Below ai.onnx 16 the import is raised to 16 when nothing else changes meaning.
TEST(Opsets, ImportBelow16IsRaised) {
  const auto original = parse_model_text(contrib_model_text(13, R"(
    g (float[1, 2, 6, 6] x, float[1, 4, 4, 2] grid) => (float[1, 2, 4, 4] y) {
      r = Relu (x)
      y = com.microsoft.GridSample <mode = "nearest", padding_mode = "reflection"> (r, grid) })"));
  const auto rewritten = rewrite(original, "GridSample");
  EXPECT_EQ(opset_import(rewritten.model, ""), 16) << rewritten.explain;
  EXPECT_EQ(count(rewritten.model, "GridSample"), 1) << rewritten.explain;
  TempDir dir;
  write_file(dir / "a.onnx", serialize(original));
  write_file(dir / "b.onnx", rewritten.bytes);
  const auto check = run_cli({"check", (dir / "b.onnx").string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  const auto comparison = ort_compare(dir / "a.onnx", dir / "b.onnx", {"--range", "grid=-1.2,1.2", "--rtol", "0", "--atol", "0"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

// RoiAlign-16 changed its default coordinate transformation: a model at 13 with a RoiAlign can't
// be raised, the GridSample stays, --explain and check say so.
TEST(Opsets, RaiseBlockedByANodeThatWouldChangeMeaning) {
  const auto original = parse_model_text(contrib_model_text(13, R"(
    g (float[1, 2, 6, 6] x, float[1, 4, 4, 2] grid, float[3, 4] rois, int64[3] index) => (float[1, 2, 4, 4] y, float[3, 2, 2, 2] r) {
      r = RoiAlign <output_height = 2, output_width = 2> (x, rois, index)
      y = com.microsoft.GridSample (x, grid) })"));
  const auto rewritten = rewrite(original, "GridSample");
  EXPECT_EQ(opset_import(rewritten.model, ""), 13);
  EXPECT_EQ(count(rewritten.model, "GridSample", "com.microsoft"), 1) << rewritten.explain;
  EXPECT_NE(rewritten.explain.find("RoiAlign"), std::string::npos) << rewritten.explain;
  TempDir dir;
  write_file(dir / "b.onnx", rewritten.bytes);
  const auto check = run_cli({"check", (dir / "b.onnx").string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 1);
  EXPECT_NE(check.out.find("com.microsoft.GridSample x1"), std::string::npos) << check.out;
}

struct Declined {
  std::string name;
  std::string graph;
  std::string reason;
};

void PrintTo(const Declined& c, std::ostream* os) { *os << c.name; }

class Declines : public ::testing::TestWithParam<Declined> {};

TEST_P(Declines, NodeStaysWithTheReason) {
  const auto& c = GetParam();
  const auto rewritten = rewrite(parse_model_text(contrib_model_text(16, c.graph)), "GridSample");
  EXPECT_EQ(count(rewritten.model, "GridSample", "com.microsoft"), 1) << rewritten.explain;
  EXPECT_NE(rewritten.explain.find(c.reason), std::string::npos) << rewritten.explain;
}

INSTANTIATE_TEST_SUITE_P(
    GridSample, Declines,
    ::testing::Values(
        Declined{"linear_is_not_a_contrib_mode", R"(g (float[1, 2, 4, 4] x, float[1, 3, 3, 2] grid) => (float[1, 2, 3, 3] y) {
          y = com.microsoft.GridSample <mode = "linear"> (x, grid) })",
                 "mode \"linear\" is not one of bilinear, nearest, bicubic"},
        Declined{"unknown_padding_mode", R"(g (float[1, 2, 4, 4] x, float[1, 3, 3, 2] grid) => (float[1, 2, 3, 3] y) {
          y = com.microsoft.GridSample <padding_mode = "wrap"> (x, grid) })",
                 "padding_mode \"wrap\" is not one of zeros, border, reflection"},
        Declined{"double_input", R"(g (double[1, 2, 4, 4] x, double[1, 3, 3, 2] grid) => (double[1, 2, 3, 3] y) {
          y = com.microsoft.GridSample (x, grid) })",
                 "x is double; ORT's contrib kernel takes float only"},
        Declined{"volumetric_input", R"(g (float[1, 2, 4, 4, 4] x, float[1, 3, 3, 3, 3] grid) => (float[1, 2, 3, 3, 3] y) {
          y = com.microsoft.GridSample (x, grid) })",
                 "x has rank 5; the contrib op takes 4-D tensors"},
        Declined{"align_corners_as_string", R"(g (float[1, 2, 4, 4] x, float[1, 3, 3, 2] grid) => (float[1, 2, 3, 3] y) {
          y = com.microsoft.GridSample <align_corners = "1"> (x, grid) })",
                 "attribute 'align_corners' is STRING, the op takes INT"}),
    [](const ::testing::TestParamInfo<Declined>& info) { return info.param.name; });

}  // namespace
}  // namespace onnx_rewrite
