// The dynamic-quant-matmul rules: com.microsoft DynamicQuantizeMatMul and MatMulIntegerToFloat
// become [DynamicQuantizeLinear ->] MatMulInteger -> Cast -> Mul [-> Add] (default) or
// [DynamicQuantizeLinear ->] DequantizeLinear -> MatMul [-> Add] (the *-qdq rules, selected by
// --skip of the default). The oracle is quant_matmul_reference.js: the contrib op written from
// README.md's semantics (exact int32 accumulation, then the kernel's float32 steps), the same on
// every CPU; rules/qlinear-to-qdq/quant_compare.js measures the rewrite (run in ORT, optimizations
// off) against it. The integer form must be bit-exact; the qdq form within a stated fraction of
// the largest output. ORT's own kernel is compared too where a probe finds it exact on this CPU
// (MLAS's u8s8 GEMM saturates int16 pair sums on x86 without VNNI), and every comparison must fail
// on a zero point off by one. int8 weights are drawn from [-64, 63]: then no pair of u8·s8
// products exceeds int16, and MatMulInteger (the integer form, run by MLAS) is exact on every CPU.
// Then near misses, opset raising, and a model ORT fused and saved itself.
#include <gtest/gtest.h>

#include <iostream>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "test_support.h"
#include "../qlinear-to-qdq/quant_compare.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

Rewritten rewrite(const onnx::ModelProto& proto, bool qdq, const std::string& explain = "") {
  RewriteOptions options;
  options.target = "onnx";
  options.explain = explain;
  if (qdq) options.skip = {"dynamic-quantize-matmul", "matmul-integer-to-float"};
  return rewrite_proto(proto, builtin_rules(), options);
}

int count(const onnx::ModelProto& model, const std::string& op_type, const std::string& domain = "") {
  const auto counts = count_ops(model);
  auto it = counts.find({domain, op_type});
  return it == counts.end() ? 0 : it->second;
}

int com_microsoft_nodes(const onnx::ModelProto& model) {
  int n = 0;
  for (const auto& [key, c] : count_ops(model)) {
    if (key.first == "com.microsoft") n += c;
  }
  return n;
}

void record(const std::string& what, const OutputStats& s) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::cout << fmt::format("[ numbers  ] {}.{}{}: max_abs {:.3g} rel_to_max {:.3g} differing {} of {}\n", test->test_suite_name(), test->name(),
                           what.empty() ? "" : " " + what, s.max_step, s.rel_to_max, s.differing, s.count);
}

// quant_compare.js against the references (qlinear_reference.js for QuantizeLinear & co. and
// this family's quant_matmul_reference.js), ORT's kernel compared where exact (bit for bit).
QuantComparison against_reference(const fs::path& contrib, const fs::path& candidate, std::vector<std::string> extra) {
  extra.insert(extra.end(), {"--kernel-rtol", "0"});
  return quant_compare(contrib, candidate, extra, true, {family_file("dynamic-quant-matmul", "quant_matmul_reference.js")});
}

// The rewrite within `tolerance` of the reference (a fraction of the largest output), ORT's kernel
// exact where compared, and the same rewrite with a zero point off by one outside the tolerance.
void expect_as_reference(const fs::path& contrib, const fs::path& candidate, const std::vector<std::string>& extra, double tolerance,
                         const std::string& what) {
  const auto comparison = against_reference(contrib, candidate, extra);
  ASSERT_TRUE(comparison.ran) << what << ": " << comparison.text;
  ASSERT_FALSE(comparison.outputs.empty()) << comparison.text;
  for (const auto& [name, stats] : comparison.outputs) {
    EXPECT_TRUE(within(stats, {tolerance, 0})) << what << " " << name << ": " << describe(stats) << "\n" << comparison.text;
    record(comparison.outputs.size() > 1 ? what + " " + name : what, stats);
  }
  for (const auto& [name, stats] : comparison.kernel) {
    EXPECT_TRUE(within(stats, {0, 0})) << "ORT's kernel against the reference, " << name << ": " << describe(stats) << "\n" << comparison.text;
  }
  for (const auto& name : comparison.inexact) std::cout << "[ kernel   ] " << name << ": ORT's kernel is inexact on this CPU, not compared\n";
  TempDir dir;
  write_file(dir / "off.onnx", serialize(zero_point_off_by_one(read_model(candidate))));
  const auto control = against_reference(contrib, dir / "off.onnx", extra);
  ASSERT_TRUE(control.ran) << control.text;
  bool caught = false;
  for (const auto& [name, stats] : control.outputs) caught = caught || !within(stats, {tolerance, 0});
  EXPECT_TRUE(caught) << what << ": a zero point off by one passes the comparison:\n" << control.text;
}

// n integers in [lo, hi] from a fixed linear congruential sequence, as ONNX text.
std::string ints(int n, int lo, int hi, unsigned seed = 7) {
  std::vector<std::string> values;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    values.push_back(std::to_string(lo + static_cast<int>((seed >> 16) % static_cast<unsigned>(hi - lo + 1))));
  }
  return fmt::format("{{{}}}", fmt::join(values, ", "));
}

std::string floats(int n, double first, double step) {
  std::vector<std::string> values;
  for (int i = 0; i < n; ++i) values.push_back(fmt::format("{:.5f}", first + step * i));
  return fmt::format("{{{}}}", fmt::join(values, ", "));
}

struct MatMulCase {
  std::string name;
  int opset;
  std::string graph;
  bool qdq_too = true;  // the qdq form covers it as well
  std::vector<std::string> compare = {};
};

void PrintTo(const MatMulCase& c, std::ostream* os) { *os << c.name; }

class FloatOutput : public ::testing::TestWithParam<MatMulCase> {};

// The qdq form sums float products: within this fraction of the largest output of the reference.
constexpr double kQdqTolerance = 1e-6;

// Both forms against the reference: the integer form accumulates exactly and scales as the kernel
// does (bit-exact); the qdq form accumulates in float.
TEST_P(FloatOutput, ComputesAsTheReference) {
  const auto& c = GetParam();
  const auto original = parse_model_text(contrib_model_text(c.opset, c.graph));
  TempDir dir;
  write_file(dir / "contrib.onnx", serialize(original));
  for (bool qdq : {false, true}) {
    if (qdq && !c.qdq_too) continue;
    const auto rewritten = rewrite(original, qdq);
    EXPECT_EQ(com_microsoft_nodes(rewritten.model), 0) << canonical_nodes(rewritten.model, interface_names(rewritten.model));
    EXPECT_EQ(count(rewritten.model, qdq ? "MatMul" : "MatMulInteger"), 1);
    EXPECT_EQ(opset_import(rewritten.model, ""), c.opset);
    const auto file = dir / (qdq ? "qdq.onnx" : "integer.onnx");
    write_file(file, rewritten.bytes);
    const auto check = run_cli({"check", file.string(), "--target", "onnx"});
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
    std::vector<std::string> extra{"--trials", "3", "--float-range", "-3,3"};
    extra.insert(extra.end(), c.compare.begin(), c.compare.end());
    expect_as_reference(dir / "contrib.onnx", file, extra, qdq ? kQdqTolerance : 0, qdq ? "qdq" : "integer");
  }
}

std::string case_name(const ::testing::TestParamInfo<MatMulCase>& info) { return info.param.name; }

// DynamicQuantizeMatMul: A float [a_shape], B (b_type) [b_shape] constant; b_scale/b_zp shapes.
std::string dynamic(const std::string& a_shape, const std::string& y_shape, const std::string& b_type, const std::string& b_shape,
                    int b_count, const std::string& scale_shape, int scale_count, bool zero_point, int bias) {
  const bool s8 = b_type == "int8";
  std::vector<std::string> inits{fmt::format("{}[{}] b = {}", b_type, b_shape, s8 ? ints(b_count, -64, 63) : ints(b_count, 0, 255)),
                                 fmt::format("float{} bs = {}", scale_shape, floats(scale_count, 0.01, 0.003))};
  if (zero_point) inits.push_back(fmt::format("{}{} bz = {}", b_type, scale_shape, s8 ? ints(scale_count, -3, 3, 3) : ints(scale_count, 120, 135, 3)));
  if (bias) inits.push_back(fmt::format("float[{}] bias = {}", bias, floats(bias, -0.5, 0.1)));
  return fmt::format(R"(g (float[{}] a) => (float[{}] y) <{}> {{
    y = com.microsoft.DynamicQuantizeMatMul (a, b, bs, {}, {}) }})",
                     a_shape, y_shape, fmt::join(inits, ", "), zero_point ? "bz" : "", bias ? "bias" : "");
}

INSTANTIATE_TEST_SUITE_P(
    DynamicQuantizeMatMul, FloatOutput,
    ::testing::Values(
        MatMulCase{"uint8_b_per_tensor_no_zero_point", 13, dynamic("4, 16", "4, 8", "uint8", "16, 8", 128, "", 1, false, 0)},
        MatMulCase{"int8_b_per_column_zero_point_bias_3d", 13, dynamic("2, 5, 16", "2, 5, 8", "int8", "16, 8", 128, "[8]", 8, true, 8)},
        MatMulCase{"uint8_b_zero_point_bias_opset11", 11, dynamic("3, 16", "3, 8", "uint8", "16, 8", 128, "", 1, true, 8)},
        MatMulCase{"int8_batched_b_per_column", 17, dynamic("2, 5, 16", "2, 5, 8", "int8", "2, 16, 8", 256, "[2, 1, 8]", 16, true, 8),
                   false},
        // A b_scale [5, 1] is not a GEMM scale: ORT multiplies it after adding the bias.
        MatMulCase{"b_scale_per_row_scales_the_bias", 13, dynamic("5, 16", "5, 8", "int8", "16, 8", 128, "[5, 1]", 5, false, 8), false}),
    case_name);

std::string to_float(const std::string& a_type, const std::string& a_shape, const std::string& y_shape, const std::string& b_type,
                     const std::string& b_shape, int b_count, const std::string& a_scale, const std::string& b_scale, bool a_zp,
                     const std::string& b_zp, int bias) {
  const bool s8 = b_type == "int8";
  std::vector<std::string> inits{fmt::format("{}[{}] b = {}", b_type, b_shape, s8 ? ints(b_count, -64, 63) : ints(b_count, 0, 255)),
                                 "float" + a_scale, "float" + b_scale};
  if (a_zp) inits.push_back(fmt::format("{} az = {{{}}}", a_type, a_type == "uint8" ? 131 : -2));
  if (!b_zp.empty()) inits.push_back(b_type + b_zp);
  if (bias) inits.push_back(fmt::format("float[{}] bias = {}", bias, floats(bias, -0.5, 0.1)));
  return fmt::format(R"(g ({}[{}] a) => (float[{}] y) <{}> {{
    y = com.microsoft.MatMulIntegerToFloat (a, b, as, bs, {}, {}, {}) }})",
                     a_type, a_shape, y_shape, fmt::join(inits, ", "), a_zp ? "az" : "", b_zp.empty() ? "" : "bz", bias ? "bias" : "");
}

INSTANTIATE_TEST_SUITE_P(
    MatMulIntegerToFloat, FloatOutput,
    ::testing::Values(
        MatMulCase{"u8s8_per_column_zero_points_bias", 13,
                   to_float("uint8", "4, 16", "4, 8", "int8", "16, 8", 128, " as = {0.02}", "[8] bs = " + floats(8, 0.01, 0.002), true,
                            "[8] bz = " + ints(8, -2, 2, 5), 8),
                   true, {"--range", "a=0,255"}},
        MatMulCase{"s8s8_per_tensor_no_zero_points", 13,
                   to_float("int8", "4, 16", "4, 8", "int8", "16, 8", 128, " as = {0.03}", " bs = {0.015}", false, "", 0), true,
                   {"--range", "a=-128,127"}},
        MatMulCase{"u8u8_3d_no_bias", 13,
                   to_float("uint8", "2, 3, 16", "2, 3, 8", "uint8", "16, 8", 128, " as = {0.02}", " bs = {0.01}", true, " bz = {128}", 0), true,
                   {"--range", "a=0,255"}},
        // a_scale per column and b_scale per tensor: the kernel swaps them back (FixupScaleTensor).
        MatMulCase{"scales_given_the_other_way_round", 13,
                   to_float("uint8", "4, 16", "4, 8", "int8", "16, 8", 128, "[8] as = " + floats(8, 0.01, 0.002), " bs = {0.02}", true,
                            "", 8),
                   false, {"--range", "a=0,255"}},
        MatMulCase{"u8s8_opset10", 10,
                   to_float("uint8", "4, 16", "4, 8", "int8", "16, 8", 128, " as = {0.02}", " bs = {0.01}", true, " bz = {0}", 8), true,
                   {"--range", "a=0,255"}}),
    case_name);

// ---- Near misses ---------------------------------------------------------------------------------

struct Declined {
  std::string name;
  std::string graph;
  std::string op;
  std::string reason;
  bool qdq = false;
};

void PrintTo(const Declined& c, std::ostream* os) { *os << c.name; }

class Declines : public ::testing::TestWithParam<Declined> {};

TEST_P(Declines, NodeStaysWithTheReason) {
  const auto& c = GetParam();
  const auto original = parse_model_text(contrib_model_text(13, c.graph));
  const auto rewritten = rewrite(original, c.qdq, c.op);
  EXPECT_EQ(count(rewritten.model, c.op, "com.microsoft"), 1) << rewritten.explain;
  EXPECT_NE(rewritten.explain.find(c.reason), std::string::npos) << rewritten.explain;
}

std::string declined_name(const ::testing::TestParamInfo<Declined>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(
    MatMul, Declines,
    ::testing::Values(
        Declined{"b_of_unknown_shape", R"(g (float[4, 16] a, int8[K, N] b) => (float[4, N] y) <float bs = {0.02}> {
          y = com.microsoft.DynamicQuantizeMatMul (a, b, bs) })",
                 "DynamicQuantizeMatMul", "the shape of B is unknown"},
        Declined{"float16_scale", R"(g (uint8[4, 16] a, float16 bs, int8[16, 8] b) => (float[4, 8] y) <float as = {0.02}> {
          y = com.microsoft.MatMulIntegerToFloat (a, b, as, bs) })",
                 "MatMulIntegerToFloat", "b_scale is float16; ORT's CPU kernel takes float"},
        Declined{"per_row_a_zero_point", R"(g (uint8[4, 16] a, int8[16, 8] b) => (float[4, 8] y) <float as = {0.02}, float bs = {0.02}, uint8[4] az = {1, 2, 3, 4}> {
          y = com.microsoft.MatMulIntegerToFloat (a, b, as, bs, az) })",
                 "MatMulIntegerToFloat", "a_zero_point has more than one element"},
        Declined{"b_zero_point_per_row", R"(g (uint8[4, 16] a, int8[16, 8] b) => (float[4, 8] y) <float as = {0.02}, float bs = {0.02}, int8[8, 1] bz = {1, 2, 3, 4, 5, 6, 7, 8}> {
          y = com.microsoft.MatMulIntegerToFloat (a, b, as, bs, , bz) })",
                 "MatMulIntegerToFloat", "b_zero_point is neither per tensor nor per column of B"},
        Declined{"qdq_form_batched_scale", R"(g (float[2, 5, 16] a, int8[2, 16, 8] b, float[2, 1, 8] bs) => (float[2, 5, 8] y) {
          y = com.microsoft.DynamicQuantizeMatMul (a, b, bs) })",
                 "DynamicQuantizeMatMul", "the qdq form takes per-column scales of a 2-D B only", true}),
    declined_name);

// ---- Opsets ------------------------------------------------------------------------------------

// DynamicQuantizeLinear needs ai.onnx 11: a model importing 10 is raised when that is safe.
TEST(Opsets, DynamicQuantizeMatMulRaisesTheImportTo11) {
  const auto original = parse_model_text(contrib_model_text(10, dynamic("4, 16", "4, 8", "int8", "16, 8", 128, "[8]", 8, true, 8)));
  const auto rewritten = rewrite(original, false, "DynamicQuantizeMatMul");
  EXPECT_EQ(opset_import(rewritten.model, ""), 11) << rewritten.explain;
  EXPECT_EQ(com_microsoft_nodes(rewritten.model), 0) << rewritten.explain;
  TempDir dir;
  write_file(dir / "a.onnx", serialize(original));
  write_file(dir / "b.onnx", rewritten.bytes);
  expect_as_reference(dir / "a.onnx", dir / "b.onnx", {"--float-range", "-3,3"}, 0, "integer");
}

// ---- What ORT fused and saved itself -------------------------------------------------------------

// onnxruntime.quantization's dynamic quantization of a MatMul (DynamicQuantizeLinear,
// MatMulInteger, Cast, Mul by the product of the scales, Add of the bias), and a QDQ MatMul whose
// output stays float: ORT (level extended) fuses them into DynamicQuantizeMatMul and
// MatMulIntegerToFloat; the rewrite gives back what the kernels compute.
TEST(OrtFused, DynamicQuantizationRoundTrips) {
  const std::string text = fmt::format(R"(<ir_version: 8, opset_import: ["": 13]>
g (float[2, 6, 16] x) => (float[2, 6, 8] y, float[2, 6, 8] y2)
  <int8[16, 8] w = {0}, float[8] ws = {1}, int8[8] wz = {2}, float[8] bias = {3}, float s = {{0.025}}, uint8 z = {{128}}> {{
  q, q_scale, q_zp = DynamicQuantizeLinear (x)
  m = MatMulInteger (q, w, q_zp, wz)
  f = Cast <to = 1> (m)
  scale = Mul (q_scale, ws)
  p = Mul (f, scale)
  y = Add (p, bias)
  qx = QuantizeLinear (x, s, z)
  dx = DequantizeLinear (qx, s, z)
  dw = DequantizeLinear <axis = 1> (w, ws, wz)
  y2 = MatMul (dx, dw)
}}
)",
                                       ints(128, -64, 63), floats(8, 0.01, 0.002), ints(8, -2, 2, 5), floats(8, -0.5, 0.1));
  TempDir dir;
  write_file(dir / "quantized.onnx", serialize(parse_model_text(text)));
  const auto fused = dir / "fused.onnx";
  const auto optimized = run_command({"node", (source_dir() / "tests" / "ort" / "optimize.js").string(), (dir / "quantized.onnx").string(),
                                      fused.string(), "--level", "extended"});
  ASSERT_EQ(optimized.exit_code, 0) << optimized.out << optimized.err;
  const auto fused_model = read_model(fused);
  EXPECT_EQ(count(fused_model, "DynamicQuantizeMatMul", "com.microsoft"), 1) << optimized.out;
  EXPECT_EQ(count(fused_model, "MatMulIntegerToFloat", "com.microsoft"), 1) << optimized.out;
  const auto rewritten = rewrite_and_check(fused, dir / "rewritten.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(com_microsoft_nodes(rewritten->model), 0);
  expect_as_reference(fused, rewritten->output, {"--float-range", "-3,3"}, 0, "integer");
}

}  // namespace
}  // namespace onnx_rewrite
