// com.microsoft.nchwc back to NCHW (rules/defuse-nchwc/nchwc.rules, rules/defuse-nchwc/nchwc.cc) on NCHWc graphs
// written here the way ORT's NchwcTransformer writes them, with filters reordered by MLAS's
// loops (reorder.cpp). For the block size ORT uses on this machine the NCHWc graph itself runs in
// ORT (its NCHWc kernels are the reference, and the original NCHW model must agree with them, which
// also checks these graphs are built right); for the other block size the rewrite is compared with
// the original NCHW model. Models ORT optimized itself are in defusion_test.cc (OptimizedConvNet).
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/tensor.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

Rewritten defuse(const std::string& text, const std::string& explain_op = "") {
  RewriteOptions options;
  options.target = "onnx";
  options.explain = explain_op;
  return rewrite_text(text, builtin_rules(), options);
}

int nchwc_ops(const onnx::ModelProto& model) {
  int found = 0;
  for (const auto& [key, count] : count_ops(model)) found += key.first == "com.microsoft.nchwc" ? count : 0;
  return found;
}

void record(const std::string& what, double max_abs) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::cout << fmt::format("[ ORT      ] {}.{} {}: max_abs {:.3g}\n", test->test_suite_name(), test->name(), what, max_abs);
}

// The NCHWc block size of ORT's MLAS here: the filter count it pads 8 filters to.
int64_t ort_block_size() {
  static const int64_t block = [] {
    TempDir dir;
    const auto model = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
probe (float[1, 16, 6, 6] x) => (float[1, 8, 6, 6] y) <float[8, 16, 1, 1] w = {
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}> {
  y = Conv (x, w)
})", dir / "probe.onnx");
    const auto optimized = dir / "probe.all.onnx";
    const auto result = run_command({"node", (source_dir() / "tests" / "ort" / "optimize.js").string(), model.string(),
                                     optimized.string(), "--level", "all"});
    // ORT failing is a failure of every test that asks, not a machine without the kernels.
    if (result.exit_code != 0) throw std::runtime_error("tests/ort/optimize.js failed on the probe model: " + result.err);
    const Model optimized_model = parse_model(read_file(optimized), "probe");
    for (const auto& tensor : optimized_model.proto.graph().initializer()) {
      if (tensor.dims_size() == 4) return tensor.dims(0);
    }
    return int64_t{0};  // no NCHWc kernels here
  }();
  return block;
}

// ---- Building NCHWc graphs -----------------------------------------------------------------------

std::vector<float> numbers(int64_t count, double scale, uint32_t seed) {
  std::vector<float> out;
  for (int64_t i = 0; i < count; ++i) {
    seed = seed * 1664525u + 1013904223u;
    out.push_back(static_cast<float>(scale * (2.0 * (seed >> 8) / double(1u << 24) - 1.0)));
  }
  return out;
}

std::string tensor_text(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& values) {
  std::vector<std::string> parts;
  for (float v : values) parts.push_back(fmt::format("{:.9g}", v));
  return fmt::format("float[{}] {} = {{{}}}", fmt::join(dims, ", "), name, fmt::join(parts, ", "));
}

int64_t round_up(int64_t n, int64_t block) { return (n + block - 1) / block * block; }

// MlasReorderFilterOIHWBiBo, as its loops: OIHW [O, I, K] to [O/B][I/B][K][Bi][Bo], both channel
// counts zero-padded to the block. `wrong_order` swaps Bi and Bo: what a rewrite reading the
// blocks in the wrong order would see (the negative control below).
std::vector<float> reorder_oihwbibo(const std::vector<float>& w, int64_t outputs, int64_t inputs, int64_t kernel,
                                    int64_t block, bool wrong_order = false) {
  std::vector<float> d;
  for (int64_t ob = 0; ob < outputs; ob += block) {
    for (int64_t ib = 0; ib < round_up(inputs, block); ib += block) {
      for (int64_t k = 0; k < kernel; ++k) {
        for (int64_t bi = 0; bi < block; ++bi) {
          for (int64_t bo = 0; bo < block; ++bo) {
            const int64_t o = ob + (wrong_order ? bi : bo), i = ib + (wrong_order ? bo : bi);
            d.push_back(o < outputs && i < inputs ? w[static_cast<size_t>((o * inputs + i) * kernel + k)] : 0.f);
          }
        }
      }
    }
  }
  return d;
}

// MlasReorderFilterOIHWBo: OIHW to [O/B][I][K][Bo], the output channels zero-padded.
std::vector<float> reorder_oihwbo(const std::vector<float>& w, int64_t outputs, int64_t inputs, int64_t kernel,
                                  int64_t block) {
  std::vector<float> d;
  for (int64_t ob = 0; ob < outputs; ob += block) {
    for (int64_t i = 0; i < inputs; ++i) {
      for (int64_t k = 0; k < kernel; ++k) {
        for (int64_t bo = 0; bo < block; ++bo) {
          const int64_t o = ob + bo;
          d.push_back(o < outputs ? w[static_cast<size_t>((o * inputs + i) * kernel + k)] : 0.f);
        }
      }
    }
  }
  return d;
}

std::vector<float> padded(std::vector<float> v, int64_t size) {
  v.resize(static_cast<size_t>(size), 0.f);
  return v;
}

// A conv net and the NCHWc graph ORT would make of it for block size `block`: an NCHW-input
// Conv + Relu (OIHWBo), a Conv whose sum input is its own input + Relu (OIHWBiBo, C = 2B + 4
// channels padded to 3B), a pointwise Conv + LeakyRelu, a depthwise strided Conv + Clip
// (OIHWBo), MaxPool, AveragePool, HardSigmoid on the blocked tensor, Upsample, GlobalAveragePool,
// and ReorderOutput to NCHW and NHWC.
struct NetPair {
  std::string nchw, nchwc;
};

NetPair conv_net(int64_t block, bool wrong_order = false) {
  const int64_t c = 2 * block + 4, cp = round_up(c, block), d = 2 * block;
  const auto w1 = numbers(c * 3 * 9, 0.4, 1), b1 = numbers(c, 0.3, 2);
  const auto w2 = numbers(c * c * 9, 0.08, 3), b2 = numbers(c, 0.3, 4);
  const auto w3 = numbers(d * c, 0.2, 5);
  const auto w4 = numbers(d * 9, 0.4, 6), b4 = numbers(d, 0.3, 7);
  NetPair net;
  net.nchw = fmt::format(R"(<ir_version: 8, opset_import: ["": 17]>
net (float[1, 3, 10, 10] x) => (float[1, {c}, 10, 10] y0, float[1, {d}, 1, 1] y1, float[1, 5, 5, {d}] y2)
    <{w1}, {b1}, {w2}, {b2}, {w3}, {w4}, {b4}, float lo = {{-1.0}}, float hi = {{1.0}}, float[4] sc = {{1, 1, 2, 2}}> {{
  c1 = Conv <pads = [1, 1, 1, 1]> (x, w1, b1)
  r1 = Relu (c1)
  c2 = Conv <pads = [1, 1, 1, 1]> (r1, w2, b2)
  s2 = Add (c2, r1)
  y0 = Relu (s2)
  c3 = Conv (y0, w3)
  l3 = LeakyRelu <alpha = 0.1> (c3)
  c4 = Conv <pads = [1, 1, 1, 1], strides = [2, 2], group = {d}> (l3, w4, b4)
  k4 = Clip (c4, lo, hi)
  mp = MaxPool <kernel_shape = [2, 2], pads = [0, 0, 1, 1]> (k4)
  ap = AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], count_include_pad = 0> (mp)
  hs = HardSigmoid <alpha = 0.3, beta = 0.4> (ap)
  up = Resize <mode = "nearest", coordinate_transformation_mode = "asymmetric", nearest_mode = "floor"> (hs, , sc)
  y1 = GlobalAveragePool (up)
  y2 = Transpose <perm = [0, 2, 3, 1]> (hs)
}})",
                         fmt::arg("c", c), fmt::arg("d", d), fmt::arg("w1", tensor_text("w1", {c, 3, 3, 3}, w1)),
                         fmt::arg("b1", tensor_text("b1", {c}, b1)), fmt::arg("w2", tensor_text("w2", {c, c, 3, 3}, w2)),
                         fmt::arg("b2", tensor_text("b2", {c}, b2)), fmt::arg("w3", tensor_text("w3", {d, c, 1, 1}, w3)),
                         fmt::arg("w4", tensor_text("w4", {d, 1, 3, 3}, w4)), fmt::arg("b4", tensor_text("b4", {d}, b4)));
  net.nchwc = fmt::format(R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft.nchwc": 1]>
net (float[1, 3, 10, 10] x) => (float[1, {c}, 10, 10] y0, float[1, {d}, 1, 1] y1, float[1, 5, 5, {d}] y2)
    <{w1}, {b1}, {w2}, {b2}, {w3}, {w4}, {b4}> {{
  r1 = com.microsoft.nchwc.Conv <pads = [1, 1, 1, 1], activation = "Relu"> (x, w1, b1)
  r2 = com.microsoft.nchwc.Conv <pads = [1, 1, 1, 1], activation = "Relu"> (r1, w2, b2, r1)
  y0 = com.microsoft.nchwc.ReorderOutput <channels = {c}> (r2)
  l3 = com.microsoft.nchwc.Conv <activation = "LeakyRelu", activation_params = [0.1]> (r2, w3)
  k4 = com.microsoft.nchwc.Conv <pads = [1, 1, 1, 1], strides = [2, 2], group = {d}, activation = "Clip", activation_params = [-1.0, 1.0]> (l3, w4, b4)
  mp = com.microsoft.nchwc.MaxPool <kernel_shape = [2, 2], pads = [0, 0, 1, 1]> (k4)
  ap = com.microsoft.nchwc.AveragePool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], count_include_pad = 0> (mp)
  hs = HardSigmoid <alpha = 0.3, beta = 0.4> (ap)
  up = com.microsoft.nchwc.Upsample <scales = [1, 1, 2, 2]> (hs)
  g = com.microsoft.nchwc.GlobalAveragePool (up)
  y1 = com.microsoft.nchwc.ReorderOutput <channels = {d}> (g)
  y2 = com.microsoft.nchwc.ReorderOutput <channels = {d}, channels_last = 1> (hs)
}})",
                          fmt::arg("c", c), fmt::arg("d", d),
                          fmt::arg("w1", tensor_text("w1", {cp, 3, 3, 3}, reorder_oihwbo(w1, c, 3, 9, block))),
                          fmt::arg("b1", tensor_text("b1", {cp}, padded(b1, cp))),
                          fmt::arg("w2", tensor_text("w2", {cp, cp, 3, 3}, reorder_oihwbibo(w2, c, c, 9, block, wrong_order))),
                          fmt::arg("b2", tensor_text("b2", {cp}, padded(b2, cp))),
                          fmt::arg("w3", tensor_text("w3", {d, cp, 1, 1}, reorder_oihwbibo(w3, d, c, 1, block))),
                          fmt::arg("w4", tensor_text("w4", {d, 1, 3, 3}, reorder_oihwbo(w4, d, 1, 9, block))),
                          fmt::arg("b4", tensor_text("b4", {d}, b4)));
  return net;
}

// Defuses `nchwc_text` and proves: no NCHWc op left, `check --target onnx` passes, ORT computes
// with the result what it computes with `reference_text` (the NCHW original or the NCHWc graph).
void expect_defused_computes(const std::string& nchwc_text, const std::string& reference_text, const std::string& what,
                             const std::vector<std::string>& extra = {}) {
  const auto defused = defuse(nchwc_text);
  EXPECT_EQ(nchwc_ops(defused.model), 0) << canonical_nodes(defused.model, interface_names(defused.model));
  TempDir dir;
  const auto reference = write_model_text(reference_text, dir / "reference.onnx");
  const auto candidate = dir / "defused.onnx";
  write_file(candidate, defused.bytes);
  const auto check = run_cli({"check", candidate.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  auto options = extra;
  options.insert(options.end(), {"--trials", "3"});
  const auto comparison = ort_compare(reference, candidate, options);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  record(what, comparison.max_abs);
}

// ---- Tests -----------------------------------------------------------------------------------------

class NchwcNet : public ::testing::TestWithParam<int64_t> {};

TEST_P(NchwcNet, DefusedComputesTheNchwOriginal) {
  const int64_t block = GetParam();
  if (ort_block_size() == 0) GTEST_SKIP() << "ONNX Runtime has no NCHWc kernels on this machine";
  const auto net = conv_net(block);
  if (block == ort_block_size()) {
    // The NCHWc graph is what ORT's kernels take: built right, it computes the original's numbers.
    TempDir dir;
    const auto nchw = write_model_text(net.nchw, dir / "nchw.onnx");
    const auto comparison = ort_compare(nchw, write_model_text(net.nchwc, dir / "nchwc.onnx"), {"--trials", "2"});
    EXPECT_TRUE(comparison.ok) << comparison.output;
    record("NCHWc graph in ORT vs NCHW original", comparison.max_abs);
  }
  expect_defused_computes(net.nchwc, net.nchw, "rewrite vs NCHW original");
}

// The negative control: the net's weights are random (seeded), so a channel-order bug shows. With
// the second Conv's filter blocks in another order than ORT's (Bi and Bo swapped), the rewrite
// must not compute the NCHW original.
TEST(NchwcNet, AWrongChannelOrderShows) {
  const auto net = conv_net(8, true);
  const auto defused = defuse(net.nchwc);
  EXPECT_EQ(nchwc_ops(defused.model), 0);
  TempDir dir;
  const auto reference = write_model_text(net.nchw, dir / "reference.onnx");
  const auto candidate = dir / "defused.onnx";
  write_file(candidate, defused.bytes);
  const auto comparison = ort_compare(reference, candidate, {"--trials", "1"});
  EXPECT_EQ(comparison.exit_code, 1) << "a wrong channel order went unseen: " << comparison.output;
  record("wrong channel order vs NCHW original", comparison.max_abs);
}

// 8 and 16 are MLAS's block sizes; the graphs pad C = 2B + 4 channels to 3B, which tells B.
INSTANTIATE_TEST_SUITE_P(BlockSizes, NchwcNet, ::testing::Values(8, 16),
                         [](const auto& info) { return fmt::format("block{}", info.param); });

struct UpsampleCase {
  std::string name;
  int opset;
  std::string mode, transform;
};

class NchwcUpsample : public ::testing::TestWithParam<UpsampleCase> {};

// Upsample against ORT's NchwcUpsample kernel itself, every mode and opset spelling.
TEST_P(NchwcUpsample, ComputesAsOrtsKernel) {
  const auto& c = GetParam();
  const int64_t block = ort_block_size();
  if (block == 0) GTEST_SKIP() << "ONNX Runtime has no NCHWc kernels on this machine";
  const std::string text = fmt::format(R"(<ir_version: 8, opset_import: ["": {}, "com.microsoft.nchwc": 1]>
up (float[2, {}, 5, 4] x) => (float[2, {}, 10, 12] y) {{
  b = com.microsoft.nchwc.ReorderInput (x)
  u = com.microsoft.nchwc.Upsample <scales = [1, 1, 2, 3], mode = "{}", coordinate_transformation_mode = "{}"> (b)
  y = com.microsoft.nchwc.ReorderOutput <channels = {}> (u)
}})", c.opset, block, block, c.mode, c.transform, block);
  expect_defused_computes(text, text, "rewrite vs ORT's NCHWc kernels");
}

INSTANTIATE_TEST_SUITE_P(Modes, NchwcUpsample,
                         ::testing::Values(UpsampleCase{"nearest_upsample9", 9, "nearest", "asymmetric"},
                                           UpsampleCase{"nearest_resize10", 10, "nearest", "asymmetric"},
                                           UpsampleCase{"nearest_resize11", 11, "nearest", "asymmetric"},
                                           UpsampleCase{"nearest_resize13", 13, "nearest", "asymmetric"},
                                           UpsampleCase{"linear_asymmetric_upsample9", 9, "linear", "asymmetric"},
                                           UpsampleCase{"linear_asymmetric_resize13", 13, "linear", "asymmetric"},
                                           UpsampleCase{"linear_half_pixel_resize11", 11, "linear", "half_pixel"},
                                           UpsampleCase{"linear_half_pixel_resize18", 18, "linear", "half_pixel"},
                                           UpsampleCase{"linear_align_corners_resize13", 13, "linear", "align_corners"}),
                         [](const auto& info) { return info.param.name; });

// ReorderInput/ReorderOutput with channels_last, and channels padded in between (C = B + 4).
TEST(NchwcReorder, ChannelsLastWithPaddedChannels) {
  const int64_t block = ort_block_size();
  if (block == 0) GTEST_SKIP() << "ONNX Runtime has no NCHWc kernels on this machine";
  const std::string text = fmt::format(R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft.nchwc": 1]>
nhwc (float[2, 5, 6, {0}] x) => (float[2, 5, 6, {0}] y, float[2, {0}, 5, 6] z) {{
  b = com.microsoft.nchwc.ReorderInput <channels_last = 1> (x)
  p = com.microsoft.nchwc.MaxPool <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (b)
  y = com.microsoft.nchwc.ReorderOutput <channels = {0}, channels_last = 1> (p)
  z = com.microsoft.nchwc.ReorderOutput <channels = {0}> (p)
}})", block + 4);
  expect_defused_computes(text, text, "rewrite vs ORT's NCHWc kernels");
}

// ORT's Reshape [0, -1, 0, 0, B] around an Add whose input shapes it couldn't prove equal: with
// q one row high the Add broadcasts, in the blocked layout and in the rewrite alike.
TEST(NchwcReshape, SplitViewBroadcastsAsInTheBlockedLayout) {
  const int64_t block = ort_block_size();
  if (block == 0) GTEST_SKIP() << "ONNX Runtime has no NCHWc kernels on this machine";
  const auto w = numbers(block * block, 0.3, 9);
  const auto reordered = reorder_oihwbibo(w, block, block, 1, block);
  const std::string text = fmt::format(R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft.nchwc": 1]>
split (float[1, {0}, h1, w1] p, float[1, {0}, h2, w2] q) => (float[1, {0}, h1, w1] y) <{1}, int64[5] split = {{0, -1, 0, 0, {0}}}, int64[4] unsplit = {{0, -1, 0, 0}}> {{
  pb = com.microsoft.nchwc.ReorderInput (p)
  qb = com.microsoft.nchwc.ReorderInput (q)
  pc = com.microsoft.nchwc.Conv (pb, w)
  qc = com.microsoft.nchwc.Conv (qb, w)
  ps = Reshape (pc, split)
  qs = Reshape (qc, split)
  s = Add (ps, qs)
  sb = Reshape (s, unsplit)
  y = com.microsoft.nchwc.ReorderOutput <channels = {0}> (sb)
}})", block, tensor_text("w", {block, block, 1, 1}, reordered));
  expect_defused_computes(text, text, "same shapes", {"--dim", "h1=4", "--dim", "w1=3", "--dim", "h2=4", "--dim", "w2=3"});
  expect_defused_computes(text, text, "q broadcast over rows", {"--dim", "h1=4", "--dim", "w1=3", "--dim", "h2=1", "--dim", "w2=3"});
}

// ORT pads a depthwise Conv's channels, group included (C = B + 4 becomes group Cp); when the
// value entering ReorderInput has no known channel count (a Reshape to a shape given as input,
// as ShuffleNet's channel shuffle), the count comes from the ReorderOutput downstream.
TEST(NchwcReorder, PaddedDepthwiseConvAfterAnOpaqueReshape) {
  const int64_t block = ort_block_size();
  if (block == 0) GTEST_SKIP() << "ONNX Runtime has no NCHWc kernels on this machine";
  const int64_t c = block + 4, cp = round_up(c, block);
  const auto w = numbers(c * 9, 0.4, 12), b = numbers(c, 0.3, 13);
  const std::string nchwc = fmt::format(R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft.nchwc": 1]>
dw (float[1, {0}, 6, 6] x, int64[4] shape) => (float[1, {0}, 6, 6] y) <{1}, {2}> {{
  r = Reshape (x, shape)
  rb = com.microsoft.nchwc.ReorderInput (r)
  cb = com.microsoft.nchwc.Conv <group = {3}, pads = [1, 1, 1, 1], activation = "Relu"> (rb, w, b)
  y = com.microsoft.nchwc.ReorderOutput <channels = {0}> (cb)
}})", c, tensor_text("w", {cp, 1, 3, 3}, reorder_oihwbo(w, c, 1, 9, block)), tensor_text("b", {cp}, padded(b, cp)), cp);
  const std::string nchw = fmt::format(R"(<ir_version: 8, opset_import: ["": 17]>
dw (float[1, {0}, 6, 6] x, int64[4] shape) => (float[1, {0}, 6, 6] y) <{1}, {2}> {{
  r = Reshape (x, shape)
  c = Conv <group = {0}, pads = [1, 1, 1, 1]> (r, w, b)
  y = Relu (c)
}})", c, tensor_text("w", {c, 1, 3, 3}, w), tensor_text("b", {c}, b));
  // shape = [0, 0, 0, 0]: Reshape keeps every dim, but nothing before run time says so.
  expect_defused_computes(nchwc, nchwc, "rewrite vs ORT's NCHWc kernels", {"--int-range", "0,0"});
  expect_defused_computes(nchwc, nchw, "rewrite vs NCHW original", {"--int-range", "0,0"});
}

// A blocked value read by an op that depends on the layout keeps its whole region as it is
// (rewriting part of it would change what the rest computes); check lists what stays.
TEST(NchwcRegion, StaysWholeWhenAnOpReadsTheLayout) {
  const std::string text = R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft.nchwc": 1]>
g (float[1, 16, 4, 4] x, float[1, 8, 4, 4] other) => (float[1, 16, 4, 4] y, float[1, 4, 4, 16] t, float[1, 8, 4, 4] z) {
  b = com.microsoft.nchwc.ReorderInput (x)
  p = com.microsoft.nchwc.MaxPool <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (b)
  y = com.microsoft.nchwc.ReorderOutput <channels = 16> (p)
  t = Transpose <perm = [0, 2, 3, 1]> (p)
  ob = com.microsoft.nchwc.ReorderInput (other)
  z = com.microsoft.nchwc.ReorderOutput <channels = 8> (ob)
})";
  const auto defused = defuse(text, "MaxPool");
  EXPECT_EQ(nchwc_ops(defused.model), 3) << canonical_nodes(defused.model, interface_names(defused.model));
  EXPECT_NE(defused.explain.find("the NCHWc region of 4 nodes stays as it is: Transpose"), std::string::npos) << defused.explain;
  EXPECT_NE(defused.explain.find("reads the blocked layout"), std::string::npos) << defused.explain;
  TempDir dir;
  const auto file = dir / "out.onnx";
  write_file(file, defused.bytes);
  const auto check = run_cli({"check", file.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 1);
  EXPECT_NE(check.out.find("com.microsoft.nchwc.MaxPool x1"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find("com.microsoft.nchwc.ReorderInput x1"), std::string::npos) << check.out;  // the other region went
}

// 12 filters fit neither block size: the graph isn't ORT's, nothing is guessed.
TEST(NchwcRegion, StaysWhenNoBlockSizeFits) {
  const auto defused = defuse(R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft.nchwc": 1]>
g (float[1, 3, 4, 4] x) => (float[1, 12, 4, 4] y) <float[12, 3, 1, 1] w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}> {
  c = com.microsoft.nchwc.Conv (x, w)
  y = com.microsoft.nchwc.ReorderOutput <channels = 12> (c)
})", "Conv");
  EXPECT_EQ(nchwc_ops(defused.model), 2);
  EXPECT_NE(defused.explain.find("no NCHWc block size fits the graph (not 8: Conv"), std::string::npos) << defused.explain;
}

// NCHWc nodes in a model that does not import their domain (invalid; ONNX Runtime refuses it):
// the rule is for models importing it, so the region stays whole, Reshape and all.
TEST(NchwcRegion, StaysWhereTheModelDoesNotImportTheDomain) {
  const std::string text = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[1, 16, 4, 4] x) => (float[1, 16, 4, 4] y) {
  b = com.microsoft.nchwc.ReorderInput (x)
  p = com.microsoft.nchwc.MaxPool <kernel_shape = [3, 3], pads = [1, 1, 1, 1]> (b)
  y = com.microsoft.nchwc.ReorderOutput <channels = 16> (p)
})";
  auto imported = text;
  const std::string onnx_import = "\"\": 17";
  imported.replace(imported.find(onnx_import), onnx_import.size(), onnx_import + ", \"com.microsoft.nchwc\": 1");
  EXPECT_EQ(nchwc_ops(defuse(imported).model), 0);
  const auto defused = defuse(text, "MaxPool");
  EXPECT_EQ(nchwc_ops(defused.model), 3);
  EXPECT_NE(defused.explain.find("the model imports com.microsoft.nchwc 0"), std::string::npos) << defused.explain;
}

// ---- The ONNX model zoo's light models, optimized by ORT at level all ---------------------------

// The light models hold every weight as a ConstantOfShape of one value (0.02): each channel of a
// layer computes the same, and the signal fades through the net to a uniform softmax, so a rewrite
// that put channels in the wrong order would compute the same numbers. Each weight becomes a
// Constant of seeded random values, scaled by what reads it so the signal neither fades nor blows
// up: Conv and Gemm weights uniform in ±√(6 / fan-in) (He), BatchNormalization scale and variance
// and the factors of a Mul or Div in [0.5, 1.5), everything else (biases, means) in ±0.1; and the
// output's Softmax, if any, left out. Returns how many weights were made random.
int randomize_weights(onnx::ModelProto& model, uint32_t seed) {
  std::map<std::string, const onnx::TensorProto*> initializers;
  for (const auto& tensor : model.graph().initializer()) initializers[tensor.name()] = &tensor;
  std::map<std::string, std::pair<const onnx::NodeProto*, int>> reader;  // a value's first reader, and at which input
  for (const auto& node : model.graph().node()) {
    for (int i = 0; i < node.input_size(); ++i) reader.try_emplace(node.input(i), &node, i);
  }
  int randomized = 0;
  for (auto& node : *model.mutable_graph()->mutable_node()) {
    if (node.op_type() != "ConstantOfShape" || !node.domain().empty() || node.input_size() != 1) continue;
    const auto shape_tensor = initializers.find(node.input(0));
    if (shape_tensor == initializers.end()) continue;
    const auto shape = decode_tensor(*shape_tensor->second);
    bool is_float = true;
    for (const auto& attribute : node.attribute()) is_float = is_float && attribute.t().data_type() == onnx::TensorProto::FLOAT;
    if (!shape || !is_float) continue;
    const auto dims = shape->ints();
    int64_t count = 1;
    for (int64_t d : dims) count *= d;
    double low = -0.1, high = 0.1;
    auto it = reader.find(node.output(0));
    while (it != reader.end() && (it->second.first->op_type() == "Unsqueeze" || it->second.first->op_type() == "Reshape")) {
      it = reader.find(it->second.first->output(0));  // a weight reshaped for broadcasting: who reads it then
    }
    if (it != reader.end()) {
      const auto& [consumer, input] = it->second;
      const std::string& op = consumer->op_type();
      int64_t fan_in = 0;
      if (op == "Conv" && input == 1 && dims.size() >= 2) fan_in = count / dims[0];
      if ((op == "Gemm" || op == "MatMul") && input == 1 && dims.size() == 2) {
        bool trans_b = false;
        for (const auto& attribute : consumer->attribute()) trans_b = trans_b || (attribute.name() == "transB" && attribute.i() != 0);
        fan_in = dims[trans_b ? 1 : 0];
      }
      if (fan_in > 0) high = std::sqrt(6.0 / static_cast<double>(fan_in)), low = -high;
      if ((op == "BatchNormalization" && (input == 1 || input == 4)) || op == "Mul" || op == "Div") low = 0.5, high = 1.5;
    }
    onnx::TensorProto weights;
    weights.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) weights.add_dims(d);
    auto* values = weights.mutable_float_data();
    values->Reserve(static_cast<int>(count));
    for (int64_t i = 0; i < count; ++i) {
      seed = seed * 1664525u + 1013904223u;
      values->Add(static_cast<float>(low + (high - low) * ((seed >> 8) / double(1u << 24))));
    }
    node.set_op_type("Constant");
    node.clear_input();
    node.clear_attribute();
    auto* attribute = node.add_attribute();
    attribute->set_name("value");
    attribute->set_type(onnx::AttributeProto::TENSOR);
    *attribute->mutable_t() = std::move(weights);
    ++randomized;
  }
  // A Softmax giving an output saturates (one class near 1, the rest near 0) and would hide a
  // difference: its input is compared instead.
  for (auto& node : *model.mutable_graph()->mutable_node()) {
    if (node.op_type() != "Softmax" || !node.domain().empty()) continue;
    for (const auto& output : model.graph().output()) {
      if (output.name() != node.output(0)) continue;
      node.set_op_type("Identity");
      node.clear_attribute();
    }
  }
  return randomized;
}

class OptimizedLightModel : public ::testing::TestWithParam<std::string> {};

// ORT writes NCHWc (and FusedConv / FusedGemm) for these CNNs; the rewrite has none left, passes
// `check --target onnx` and computes the original's outputs, the original's weights made random
// so that the channel order shows (the corpus' expected outputs are for its constant weights, so
// they are not compared: the original run in ORT is the reference).
TEST_P(OptimizedLightModel, DefusedComputesTheOriginal) {
  ASSERT_TEST_DATA(corpus, "conformance");
  const auto light = corpus / "light" / ("light_" + GetParam() + ".onnx");
  TempDir dir;
  auto random = read_model(light);
  EXPECT_GT(randomize_weights(random, 39), 0) << "no ConstantOfShape weights in " << light;
  const auto original = dir / "random.onnx";
  write_file(original, serialize(random));
  const auto optimized = dir / "optimized.onnx", defused = dir / "defused.onnx";
  const auto optimize = run_command({"node", (source_dir() / "tests" / "ort" / "optimize.js").string(), original.string(),
                                     optimized.string(), "--level", "all"});
  ASSERT_EQ(optimize.exit_code, 0) << optimize.err;
  std::cout << "[ ORT      ] " << GetParam() << " at level all: " << optimize.out;
  const auto rewrite = run_cli({"rewrite", optimized.string(), "-o", defused.string(), "--target", "onnx"});
  EXPECT_EQ(rewrite.exit_code, 0) << rewrite.out << rewrite.err;
  if (GetParam() == "resnet50") {  // every channel count a multiple of 16: both block sizes fit
    EXPECT_NE(rewrite.out.find("fits block sizes 8 and 16"), std::string::npos) << rewrite.out;
  }
  const auto result = parse_model(read_file(defused), "defused");
  for (const auto& [key, count] : count_ops(result.proto)) EXPECT_EQ(key.first.rfind("com.microsoft", 0), std::string::npos) << key.first << "." << key.second;
  // Reorders that change nothing leave no Identity behind: their readers read the value itself.
  const auto identities = [](const onnx::ModelProto& model) {
    const auto counts = count_ops(model);
    const auto it = counts.find({"", "Identity"});
    return it == counts.end() ? 0 : it->second;
  };
  EXPECT_LE(identities(result.proto), identities(read_model(original))) << rewrite.out;
  // ORT folded each BatchNormalization into its Conv: rounded otherwise than the original's two
  // steps, which random weights show (resnet50: 6e-4 relative on logits near 40). A filter pair
  // swapped in one Conv moved these outputs by 0.19 to 110 relative (max_rel), in each of the nine
  // nets (measured by hand once).
  const auto comparison = ort_compare(original, defused, {"--trials", "1", "--rtol", "2e-3"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
  record("rewrite vs original", comparison.max_abs);
}

INSTANTIATE_TEST_SUITE_P(Zoo, OptimizedLightModel,
                         ::testing::Values("resnet50", "densenet121", "inception_v1", "inception_v2", "shufflenet",
                                           "squeezenet", "bvlc_alexnet", "vgg19", "zfnet512"));

}  // namespace
}  // namespace onnx_rewrite
