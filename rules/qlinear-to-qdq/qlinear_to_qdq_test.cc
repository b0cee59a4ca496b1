// The qlinear-to-qdq rules: ONNX Runtime's quantized contrib ops (QLinearAdd, QLinearMul,
// QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearSoftmax, QLinearConcat,
// QGemm) become DequantizeLinear -> float op -> QuantizeLinear under --target onnx. The oracle is
// qlinear_reference.js: the contrib op written from README.md's semantics in exact integer math
// (float32 only where ORT's kernel computes in float32), which gives the same verdict on every
// CPU. Each test rewrites the model, runs the QDQ model in ORT (graph optimizations off, so ORT
// can't fuse the QDQ back into the same kernel) and measures it against the reference in
// quantization steps (quant_compare.js): the largest difference and the number of differing
// elements are both asserted (0 and 0 where README.md says exact). ORT's own kernel is compared
// with the reference too, where a probe shows it exact on this CPU (MLAS's u8s8 GEMM is not on
// x86 without VNNI). Every comparison has a negative control: the same rewrite with its output
// zero point off by one must fail it. Then: near misses declined with the reason --explain
// prints, opset raising, and a model ORT fused from QDQ and saved itself. (A second control rounds
// down instead of to nearest in the output QuantizeLinear: it must fail too.)
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "test_support.h"
#include "quant_compare.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// ---- Running both models in ORT (quant_compare.h) ------------------------------------------------

void record(const std::string& what, const OutputStats& s) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const bool integer = s.type != "float32";
  std::cout << fmt::format("[ numbers  ] {}.{}{}: {} {}\n", test->test_suite_name(), test->name(), what.empty() ? "" : " " + what,
                           s.type,
                           integer ? fmt::format("max_step {} differing {} of {} ({:.3f}%)", s.max_step, s.differing, s.count,
                                                 100.0 * s.differing / std::max(1L, s.count))
                                   : fmt::format("max_abs {:.3g} max_rel {:.3g} rel_to_max {:.3g}", s.max_step, s.max_rel, s.rel_to_max));
}

Rewritten to_qdq(const onnx::ModelProto& proto, const std::string& explain = "", std::optional<int> max_opset = std::nullopt) {
  RewriteOptions options;
  options.target = "onnx";
  options.explain = explain;
  options.max_opset = max_opset;
  return rewrite_proto(proto, builtin_rules(), options);
}

int com_microsoft_nodes(const onnx::ModelProto& model) {
  int n = 0;
  for (const auto& [key, count] : count_ops(model)) {
    if (key.first == "com.microsoft") n += count;
  }
  return n;
}

int count(const onnx::ModelProto& model, const std::string& op_type, const std::string& domain = "") {
  const auto counts = count_ops(model);
  auto it = counts.find({domain, op_type});
  return it == counts.end() ? 0 : it->second;
}

// The rewritten model has no com.microsoft node left and `check --target onnx` passes on it.
void expect_standard(const Rewritten& rewritten, const fs::path& file) {
  EXPECT_EQ(com_microsoft_nodes(rewritten.model), 0) << canonical_nodes(rewritten.model, interface_names(rewritten.model));
  const auto check = run_cli({"check", file.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

// ---- Test models ---------------------------------------------------------------------------------

// n integers in [lo, hi] from a fixed linear congruential sequence, as ONNX text "{a, b, ...}".
std::string ints(int n, int lo, int hi, unsigned seed = 7) {
  std::vector<std::string> values;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    values.push_back(std::to_string(lo + static_cast<int>((seed >> 16) % static_cast<unsigned>(hi - lo + 1))));
  }
  return fmt::format("{{{}}}", fmt::join(values, ", "));
}

std::string floats(const std::vector<double>& values) { return fmt::format("{{{}}}", fmt::join(values, ", ")); }

struct QuantCase {
  std::string name;
  int opset;
  std::string graph;             // ONNX text of the graph with the contrib op
  std::vector<std::string> ops;  // standard ops the rewrite must produce
  double max_step = 0;           // tolerance, in quantization steps (float outputs: relative to the largest value)
  std::vector<std::string> compare = {};
  long max_differing = 0;        // how many elements may differ (integer outputs), over the 3 trials
  bool round_down_control = true;  // the second negative control applies (see uint8_y_scale_1_over_255)
};

void PrintTo(const QuantCase& c, std::ostream* os) { *os << c.name; }

class QuantOp : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantOp, IsQdqAsTheReferenceComputes) {
  const auto& c = GetParam();
  const auto original = parse_model_text(contrib_model_text(c.opset, c.graph));
  const auto rewritten = to_qdq(original);
  for (const auto& op : c.ops) {
    EXPECT_GE(count(rewritten.model, op), 1) << op << "\n" << canonical_nodes(rewritten.model, interface_names(rewritten.model));
  }
  EXPECT_EQ(opset_import(rewritten.model, ""), c.opset) << "the import is kept";
  TempDir dir;
  const auto a = dir / "contrib.onnx";
  const auto b = dir / "qdq.onnx";
  write_file(a, serialize(original));
  write_file(b, rewritten.bytes);
  expect_standard(rewritten, b);
  std::vector<std::string> extra{"--trials", "3"};
  extra.insert(extra.end(), c.compare.begin(), c.compare.end());
  const Tolerance tolerance{c.max_step, c.max_differing};
  const auto comparison = quant_compare(a, b, extra);
  ASSERT_TRUE(comparison.ran) << comparison.text;
  ASSERT_FALSE(comparison.outputs.empty()) << comparison.text;
  for (const auto& [name, stats] : comparison.outputs) {
    EXPECT_TRUE(within(stats, tolerance)) << name << ": " << describe(stats) << "\n" << comparison.text;
    record(comparison.outputs.size() > 1 ? name : "", stats);
  }
  // ORT's kernel, where the probe found it exact on this CPU: exactly the reference.
  for (const auto& [name, stats] : comparison.kernel) {
    EXPECT_TRUE(within(stats, {1e-6, 0})) << "ORT's kernel against the reference, " << name << ": " << describe(stats) << "\n" << comparison.text;
  }
  for (const auto& name : comparison.inexact) std::cout << "[ kernel   ] " << name << ": ORT's kernel is inexact on this CPU, not compared\n";
  // Negative control: the output zero point off by one fails the same comparison.
  write_file(dir / "off.onnx", serialize(zero_point_off_by_one(read_model(b))));
  const auto control = quant_compare(a, dir / "off.onnx", extra);
  ASSERT_TRUE(control.ran) << control.text;
  bool caught = false;
  for (const auto& [name, stats] : control.outputs) caught = caught || !within(stats, tolerance);
  EXPECT_TRUE(caught) << "a zero point off by one passes the comparison:\n" << control.text;
  // And rounding down instead of to nearest (integer outputs).
  auto down = read_model(b);
  if (c.round_down_control && round_down_instead(down)) {
    write_file(dir / "down.onnx", serialize(down));
    const auto rounded_down = quant_compare(a, dir / "down.onnx", extra);
    ASSERT_TRUE(rounded_down.ran) << rounded_down.text;
    bool caught_down = false;
    for (const auto& [name, stats] : rounded_down.outputs) caught_down = caught_down || !within(stats, tolerance);
    EXPECT_TRUE(caught_down) << "rounding down instead of to nearest passes the comparison:\n" << rounded_down.text;
  }
}

std::string case_name(const ::testing::TestParamInfo<QuantCase>& info) { return info.param.name; }

// QLinearAdd / QLinearMul with the given operand shapes and type; zero points given as text
// (empty: the input is absent).
std::string binary(const std::string& op, const std::string& type, const std::string& a_shape, const std::string& b_shape,
                   const std::string& out_shape, double as, const std::string& az, double bs, const std::string& bz, double cs,
                   const std::string& cz) {
  std::vector<std::string> inits{fmt::format("float as = {{{}}}", as), fmt::format("float bs = {{{}}}", bs),
                                 fmt::format("float cs = {{{}}}", cs)};
  if (!az.empty()) inits.push_back(fmt::format("{} az = {{{}}}", type, az));
  if (!bz.empty()) inits.push_back(fmt::format("{} bz = {{{}}}", type, bz));
  if (!cz.empty()) inits.push_back(fmt::format("{} cz = {{{}}}", type, cz));
  // ORT's type inference refuses an absent zero point that is followed by other inputs: only the
  // trailing C_zero_point can be left out.
  return fmt::format(R"(g ({0}[{1}] a, {0}[{2}] b) => ({0}[{3}] c) <{4}> {{
    c = com.microsoft.{5} (a, as, {6}, b, bs, {7}, cs{8}) }})",
                     type, a_shape, b_shape, out_shape, fmt::join(inits, ", "), op, az.empty() ? "" : "az", bz.empty() ? "" : "bz",
                     cz.empty() ? "" : ", cz");
}

INSTANTIATE_TEST_SUITE_P(
    Binary, QuantOp,
    ::testing::Values(
        QuantCase{"add_uint8_same_shape", 13, binary("QLinearAdd", "uint8", "2, 8, 6, 6", "2, 8, 6, 6", "2, 8, 6, 6", 0.05, "128", 0.04, "120", 0.08, "125"),
                  {"DequantizeLinear", "Add", "QuantizeLinear"}, 1, {}, 173},
        QuantCase{"add_int8_per_channel_broadcast", 17, binary("QLinearAdd", "int8", "2, 8, 6, 6", "1, 8, 1, 1", "2, 8, 6, 6", 0.03, "-3", 0.05, "5", 0.06, "-10"),
                  {"Add"}, 1, {}, 70},
        QuantCase{"add_uint8_scalar_operand_first", 11, binary("QLinearAdd", "uint8", "1", "4, 32", "4, 32", 0.02, "0", 0.1, "130", 0.1, "128"),
                  {"Add"}},
        QuantCase{"add_int8_no_output_zero_point", 13, binary("QLinearAdd", "int8", "3, 40", "3, 40", "3, 40", 0.05, "3", 0.04, "-2", 0.07, ""),
                  {"Add"}},
        QuantCase{"add_uint8_equal_scales", 13, binary("QLinearAdd", "uint8", "4, 64", "4, 64", "4, 64", 0.05, "128", 0.05, "128", 0.05, "128"),
                  {"Add"}},
        QuantCase{"mul_uint8_same_shape", 13, binary("QLinearMul", "uint8", "2, 8, 6, 6", "2, 8, 6, 6", "2, 8, 6, 6", 0.05, "128", 0.004, "0", 0.03, "128"),
                  {"DequantizeLinear", "Mul", "QuantizeLinear"}, 1, {}, 2},
        QuantCase{"mul_int8_broadcast_opset10", 10, binary("QLinearMul", "int8", "2, 8, 6, 6", "2, 1, 6, 6", "2, 8, 6, 6", 0.05, "2", 0.02, "-4", 0.05, "0"),
                  {"Mul"}, 1, {}, 18},
        QuantCase{"mul_int8_no_output_zero_point", 13, binary("QLinearMul", "int8", "3, 40", "40", "3, 40", 0.05, "-1", 0.02, "1", 0.1, ""),
                  {"Mul"}, 1, {}, 12},
        QuantCase{"add_uint8_scales_as_inputs", 13, R"(g (uint8[2, 30] a, float as, uint8 az, uint8[2, 30] b, float bs, uint8 bz, float cs, uint8 cz) => (uint8[2, 30] c) {
          c = com.microsoft.QLinearAdd (a, as, az, b, bs, bz, cs, cz) })",
                  {"Add"}, 1, {"--range", "as=0.01,0.1", "--range", "bs=0.01,0.1", "--range", "cs=0.05,0.2"}}),
    case_name);

// QLinearSigmoid / QLinearLeakyRelu.
std::string activation(const std::string& op, const std::string& attributes, const std::string& type, double xs,
                       const std::string& xz, double ys, const std::string& yz) {
  std::vector<std::string> inits{fmt::format("float xs = {{{}}}", xs), fmt::format("float ys = {{{}}}", ys)};
  if (!xz.empty()) inits.push_back(fmt::format("{} xz = {{{}}}", type, xz));
  if (!yz.empty()) inits.push_back(fmt::format("{} yz = {{{}}}", type, yz));
  // Five inputs even when zero points are absent: ORT's kernel reads InputDefs()[4] unchecked.
  return fmt::format(R"(g ({0}[2, 8, 5, 5] x) => ({0}[2, 8, 5, 5] y) <{1}> {{
    y = com.microsoft.{2} {3} (x, xs, {4}, ys, {5}) }})",
                     type, fmt::join(inits, ", "), op, attributes, xz.empty() ? "" : "xz", yz.empty() ? "" : "yz");
}

INSTANTIATE_TEST_SUITE_P(
    Activation, QuantOp,
    ::testing::Values(
        QuantCase{"sigmoid_uint8", 13, activation("QLinearSigmoid", "", "uint8", 0.05, "128", 1.0 / 256, "0"), {"Sigmoid"}},
        QuantCase{"sigmoid_int8_no_zero_points", 12, activation("QLinearSigmoid", "", "int8", 0.06, "", 1.0 / 255, ""), {"Sigmoid"}},
        QuantCase{"sigmoid_int8_output_zero_point", 17, activation("QLinearSigmoid", "", "int8", 0.03, "10", 1.0 / 256, "-128"), {"Sigmoid"}},
        QuantCase{"leaky_relu_uint8_default_alpha", 13, activation("QLinearLeakyRelu", "", "uint8", 0.05, "128", 0.04, "100"), {"LeakyRelu"}},
        QuantCase{"leaky_relu_int8_alpha", 10, activation("QLinearLeakyRelu", "<alpha = 0.2>", "int8", 0.05, "-5", 0.03, "-60"), {"LeakyRelu"}}),
    case_name);

std::string gap(const std::string& type, const std::string& in, const std::string& out, int channels_last, double xs,
                const std::string& xz, double ys, const std::string& yz) {
  return fmt::format(R"(g ({0}[{1}] x) => ({0}[{2}] y) <float xs = {{{3}}}, {0} xz = {{{4}}}, float ys = {{{5}}}, {0} yz = {{{6}}}> {{
    y = com.microsoft.QLinearGlobalAveragePool <channels_last = {7}> (x, xs, xz, ys, yz) }})",
                     type, in, out, xs, xz, ys, yz, channels_last);
}

INSTANTIATE_TEST_SUITE_P(
    GlobalAveragePool, QuantOp,
    ::testing::Values(
        // onnxruntime.quantization keeps the input's scale and zero point when it has none for the output.
        QuantCase{"nchw_uint8_input_params", 13, gap("uint8", "4, 64, 7, 7", "4, 64, 1, 1", 0, 0.05, "128", 0.05, "128"),
                  {"GlobalAveragePool"}},
        QuantCase{"nchw_int8", 17, gap("int8", "4, 64, 7, 7", "4, 64, 1, 1", 0, 0.05, "-3", 0.01, "5"), {"GlobalAveragePool"}},
        QuantCase{"nchw_uint8_1d_opset10", 10, gap("uint8", "4, 64, 10", "4, 64, 1", 0, 0.02, "100", 0.005, "128"), {"GlobalAveragePool"}},
        QuantCase{"channels_last_uint8", 13, gap("uint8", "4, 7, 7, 64", "4, 1, 1, 64", 1, 0.05, "128", 0.02, "128"), {"ReduceMean"}, 1, {}, 8},
        QuantCase{"channels_last_int8_3d_opset18", 18, gap("int8", "4, 3, 4, 5, 32", "4, 1, 1, 1, 32", 1, 0.04, "0", 0.004, "-2"),
                  {"ReduceMean"}, 1, {}, 20}),
    case_name);

std::string softmax(const std::string& type, const std::string& shape, const std::string& attributes, double xs,
                    const std::string& xz, const std::string& yz, const std::string& ys = "0.00390625") {
  return fmt::format(R"(g ({0}[{1}] x) => ({0}[{1}] y) <float xs = {{{2}}}, {0} xz = {{{3}}}, float ys = {{{6}}}, {0} yz = {{{4}}}> {{
    y = com.microsoft.QLinearSoftmax <{5}> (x, xs, xz, ys, yz) }})",
                     type, shape, xs, xz, yz, attributes, ys);
}

INSTANTIATE_TEST_SUITE_P(
    Softmax, QuantOp,
    ::testing::Values(
        // onnxruntime.quantization's output parameters: 1/256 and 0 (uint8) or -128 (int8).
        QuantCase{"uint8_opset13_last_axis", 13, softmax("uint8", "8, 8, 16", "opset = 13, axis = -1", 0.1, "128", "0"), {"Softmax"}},
        QuantCase{"int8_opset13_last_axis", 13, softmax("int8", "8, 8, 16", "opset = 13, axis = -1", 0.1, "0", "-128"), {"Softmax"}},
        QuantCase{"int8_dominant_element", 13, softmax("int8", "8, 8, 16", "opset = 13, axis = -1", 1.0, "0", "-128"), {"Softmax"}},
        QuantCase{"uint8_opset11_coerced_axis1", 11, softmax("uint8", "8, 4, 8", "opset = 11, axis = 1", 0.1, "128", "0"), {"Softmax"}},
        QuantCase{"uint8_opset11_coerced_in_opset13_model", 13, softmax("uint8", "8, 4, 8", "opset = 11, axis = 1", 0.1, "128", "0"),
                  {"Flatten", "Softmax", "Reshape"}},
        QuantCase{"uint8_opset13_axis1", 13, softmax("uint8", "8, 4, 8", "opset = 13, axis = 1", 0.1, "128", "0"), {"Softmax"}},
        QuantCase{"uint8_opset13_axis1_in_opset12_model", 12, softmax("uint8", "8, 4, 8", "opset = 13, axis = 1", 0.1, "128", "0"),
                  {"Transpose", "Softmax"}},
        // Without axis ORT takes the schema's -1 whatever the opset (measured: axis 1 differs by 255 steps).
        QuantCase{"uint8_no_axis_opset1_means_last_axis", 11, softmax("uint8", "8, 4, 8", "opset = 1", 0.1, "128", "0"), {"Softmax"}},
        QuantCase{"int8_no_axis_opset13_means_last", 13, softmax("int8", "8, 4, 8", "opset = 13", 0.1, "0", "-128"), {"Softmax"}},
        // ORT scales by floor(1 / y_scale): 254 for y_scale = float(1/255) (1/y_scale = 254.99998),
        // where QuantizeLinear divides by y_scale; the largest probabilities come out a step lower.
        // Rounding down is not caught here: the kernel's own floor(1/y_scale) = 254 already puts large
        // probabilities a step lower (185 elements), more than rounding down moves (140; most outputs
        // are 0). The zero point control still fails.
        QuantCase{"uint8_y_scale_1_over_255", 13, softmax("uint8", "64, 16", "opset = 13, axis = -1", 0.3, "128", "0", "0.0039215689"),
                  {"Softmax"}, 1, {}, 200, false},
        QuantCase{"uint8_y_scale_0_003", 13, softmax("uint8", "64, 16", "opset = 13, axis = -1", 0.3, "128", "0", "0.003"), {"Softmax"}, 1, {}, 30}),
    case_name);

std::string concat_of(int tensors) {
  std::vector<std::string> inputs, args{"ys", "yz"};
  for (int i = 0; i < tensors; ++i) {
    inputs.push_back(fmt::format("uint8[1, 2] x{}", i));
    args.insert(args.end(), {fmt::format("x{}", i), "ys", "yz"});
  }
  return fmt::format(R"(g ({}) => (uint8[1, {}] y) <float ys = {{0.05}}, uint8 yz = {{128}}> {{
    y = com.microsoft.QLinearConcat <axis = 1> ({}) }})",
                     fmt::join(inputs, ", "), 2 * tensors, fmt::join(args, ", "));
}

INSTANTIATE_TEST_SUITE_P(
    Concat, QuantOp,
    ::testing::Values(
        QuantCase{"uint8_two_inputs_same_params", 13, R"(g (uint8[1, 8, 4, 4] a, uint8[1, 4, 4, 4] b) => (uint8[1, 12, 4, 4] y)
          <float ys = {0.05}, uint8 yz = {128}> {
          y = com.microsoft.QLinearConcat <axis = 1> (ys, yz, a, ys, yz, b, ys, yz) })",
                  {"Concat"}, 0},
        QuantCase{"uint8_three_inputs", 13, R"(g (uint8[2, 8, 3] a, uint8[2, 5, 3] b, uint8[2, 1, 3] c) => (uint8[2, 14, 3] y)
          <float ys = {0.05}, uint8 yz = {128}, float as = {0.03}, uint8 az = {100}, float bs = {0.08}, uint8 bz = {128}, float cs = {0.05}, uint8 cz = {128}> {
          y = com.microsoft.QLinearConcat <axis = 1> (ys, yz, a, as, az, b, bs, bz, c, cs, cz) })",
                  {"Concat"}},
        QuantCase{"int8_negative_axis_opset10", 10, R"(g (int8[3, 4, 5] a, int8[3, 4, 2] b) => (int8[3, 4, 7] y)
          <float ys = {0.05}, int8 yz = {0}, float as = {0.02}, int8 az = {-10}, float bs = {0.1}, int8 bz = {3}> {
          y = com.microsoft.QLinearConcat <axis = -1> (ys, yz, a, as, az, b, bs, bz) })",
                  {"Concat"}},
        // Any number of inputs: one variadic pattern (no cap at a count written out in the rule).
        QuantCase{"uint8_65_inputs", 13, concat_of(65), {"Concat"}, 0}),
    case_name);

// QGemm: A [M, K] (uint8 or int8), constant weights B ([K, N] or [N, K] with transB) and
// optional int32 C; y_scale chosen so that Y spans about ±100 steps.
struct Gemm {
  std::string a_type = "uint8", b_type = "int8";
  int m = 32, k = 32, n = 16;
  bool trans_a = false, trans_b = false;
  double alpha = 1;
  bool per_column = false;
  std::string c_shape = "";  // "" no C
  bool y_scale = true;
};

std::string qgemm(const Gemm& g) {
  const bool signed_b = g.b_type == "int8";
  const std::string b_shape = g.trans_b ? fmt::format("{}, {}", g.n, g.k) : fmt::format("{}, {}", g.k, g.n);
  const std::string a_shape = g.trans_a ? fmt::format("{}, {}", g.k, g.m) : fmt::format("{}, {}", g.m, g.k);
  std::vector<double> b_scales;
  std::vector<int> b_zps;
  for (int i = 0; i < (g.per_column ? g.n : 1); ++i) {
    b_scales.push_back(0.004 + 0.002 * i);
    b_zps.push_back(signed_b ? (i % 3) - 1 : 120 + i);
  }
  const double a_scale = 0.03;
  // |A - a_zp| and |B - b_zp| are uniform up to ~128: the product's standard deviation is about
  // sqrt(K)·74·74; y_scale puts it at ~40 steps, so that few outputs saturate.
  const double b_scale_mean = g.per_column ? 0.004 + 0.001 * (g.n - 1) : 0.004;
  const double y_scale = std::abs(g.alpha) * a_scale * b_scale_mean * std::sqrt(static_cast<double>(g.k)) * 74 * 74 / 40;
  const std::string dims = g.per_column ? fmt::format("[{}]", g.n) : "";
  std::vector<std::string> inits{
      fmt::format("float a_scale = {{{}}}", a_scale),
      fmt::format("{} a_zp = {{{}}}", g.a_type, g.a_type == "uint8" ? 128 : 1),
      fmt::format("{}[{}] b = {}", g.b_type, b_shape, signed_b ? ints(g.k * g.n, -127, 127) : ints(g.k * g.n, 0, 255)),
      fmt::format("float{} b_scale = {}", dims, floats(b_scales)),
      fmt::format("{}{} b_zp = {{{}}}", g.b_type, dims, fmt::join(b_zps, ", "))};
  std::string c_input, y_inputs;
  if (!g.c_shape.empty()) {
    int elements = 1;
    std::stringstream dims_text(g.c_shape);
    for (std::string d; std::getline(dims_text, d, ',');) elements *= std::stoi(d);
    inits.push_back(fmt::format("int32[{}] c = {}", g.c_shape, ints(elements, -3000, 3000, 11)));
    c_input = "c";
  }
  std::string out_type = "float";
  if (g.y_scale) {
    inits.push_back(fmt::format("float y_scale = {{{}}}", y_scale));
    inits.push_back(fmt::format("{} y_zp = {{{}}}", g.a_type, g.a_type == "uint8" ? 128 : 0));
    y_inputs = ", y_scale, y_zp";
    out_type = g.a_type;
  }
  std::vector<std::string> attributes;
  if (g.trans_a) attributes.push_back("transA = 1");
  if (g.trans_b) attributes.push_back("transB = 1");
  if (g.alpha != 1) attributes.push_back(fmt::format("alpha = {:.4f}", g.alpha));
  return fmt::format(R"(g ({0}[{1}] a) => ({2}[{3}, {4}] y) <{5}> {{
    y = com.microsoft.QGemm {6} (a, a_scale, a_zp, b, b_scale, b_zp, {7}{8}) }})",
                     g.a_type, a_shape, out_type, g.m, g.n, fmt::join(inits, ", "),
                     attributes.empty() ? "" : fmt::format("<{}>", fmt::join(attributes, ", ")), c_input, y_inputs);
}

INSTANTIATE_TEST_SUITE_P(
    QGemm, QuantOp,
    ::testing::Values(
        QuantCase{"u8s8_per_tensor_bias_trans_b", 13, qgemm({.trans_b = true, .c_shape = "16"}), {"Gemm", "QuantizeLinear"}},
        QuantCase{"u8s8_per_column_trans_b", 13, qgemm({.trans_b = true, .per_column = true, .c_shape = "16"}), {"Gemm"}},
        QuantCase{"u8s8_per_column_opset11_spelled", 11, qgemm({.per_column = true, .c_shape = "16"}), {"Gemm", "Cast"}},
        QuantCase{"u8s8_trans_a_alpha_no_bias", 13, qgemm({.trans_a = true, .alpha = 0.5}), {"Gemm"}},
        QuantCase{"u8s8_float_output_per_column", 13, qgemm({.trans_b = true, .per_column = true, .c_shape = "16", .y_scale = false}),
                  {"Gemm"}, 1e-6},
        QuantCase{"u8s8_float_output_alpha_bias_matrix", 13, qgemm({.alpha = 2.0, .c_shape = "32, 16", .y_scale = false}), {"Gemm"}, 1e-6},
        QuantCase{"s8s8_per_column_bias", 17, qgemm({.a_type = "int8", .per_column = true, .c_shape = "1, 16"}), {"Gemm"}},
        QuantCase{"u8u8_bias_matrix", 13, qgemm({.b_type = "uint8", .c_shape = "32, 16"}), {"Gemm"}},
        QuantCase{"u8s8_per_column_bias_column_vector", 13, qgemm({.per_column = true, .c_shape = "32, 1"}), {"Gemm", "Cast"}},
        QuantCase{"u8s8_no_bias_opset10", 10, qgemm({}), {"Gemm"}}),
    case_name);

// ---- Near misses -------------------------------------------------------------------------------

struct Declined {
  std::string name;
  std::string graph;
  std::string op;      // the op that must stay
  std::string reason;  // what --explain says
  int opset = 13;
};

void PrintTo(const Declined& c, std::ostream* os) { *os << c.name; }

class Declines : public ::testing::TestWithParam<Declined> {};

TEST_P(Declines, NodeStaysWithTheReason) {
  const auto& c = GetParam();
  const auto original = parse_model_text(contrib_model_text(c.opset, c.graph));
  const auto rewritten = to_qdq(original, c.op);
  EXPECT_EQ(count(rewritten.model, c.op, "com.microsoft"), 1) << rewritten.explain;
  EXPECT_NE(rewritten.explain.find(c.reason), std::string::npos) << rewritten.explain;
}

std::string declined_name(const ::testing::TestParamInfo<Declined>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(
    QLinear, Declines,
    ::testing::Values(
        Declined{"scale_with_two_elements",
                 R"(g (uint8[2, 3] a, uint8[2, 3] b) => (uint8[2, 3] c) <float[2] as = {0.1, 0.2}, float bs = {0.1}, float cs = {0.1}> {
                   c = com.microsoft.QLinearAdd (a, as, , b, bs, , cs, ) })",
                 "QLinearAdd", "a_scale has 2 elements; ORT's QLinearAdd kernel takes one (per-tensor quantization)"},
        Declined{"float16_scale",
                 R"(g (uint8[2, 3] x, float16 xs) => (uint8[2, 3] y) <float ys = {0.1}> {
                   y = com.microsoft.QLinearSigmoid (x, xs, , ys, ) })",
                 "QLinearSigmoid", "x_scale is float16; ORT's kernel reads float scales"},
        Declined{"int8_output_of_unknown_type",
                 R"(g (x, float xs, float ys) => (y) {
                   y = com.microsoft.QLinearLeakyRelu (x, xs, , ys, ) })",
                 "QLinearLeakyRelu", "the element type of X is unknown"},
        Declined{"softmax_without_opset",
                 R"(g (uint8[2, 8] x) => (uint8[2, 8] y) <float xs = {0.1}, float ys = {0.00390625}, uint8 yz = {0}> {
                   y = com.microsoft.QLinearSoftmax <axis = -1> (x, xs, , ys, yz) })",
                 "QLinearSoftmax", "no opset attribute"},
        Declined{"softmax_one_axis_below_13_unknown_rank",
                 R"(g (uint8[2, 8, 3] x0, int64[R] shape) => (uint8[2, 8, 3] y) <float xs = {0.1}, float ys = {0.00390625}, uint8 yz = {0}> {
                   x = Reshape (x0, shape)
                   y = com.microsoft.QLinearSoftmax <opset = 13, axis = 1> (x, xs, , ys, yz) })",
                 "QLinearSoftmax", "the rank of X is unknown; softmax over axis 1 needs it below ai.onnx 13", 12},
        Declined{"channels_last_unknown_rank",
                 R"(g (uint8[2, 3, 3, 8] x0, int64[R] shape) => (uint8[2, 1, 1, 8] y) <float xs = {0.1}, uint8 xz = {1}, float ys = {0.1}, uint8 yz = {0}> {
                   x = Reshape (x0, shape)
                   y = com.microsoft.QLinearGlobalAveragePool <channels_last = 1> (x, xs, xz, ys, yz) })",
                 "QLinearGlobalAveragePool", "the rank of X is unknown; channels_last averages over axes 1..rank-2"},
        Declined{"gap_rank_2",
                 R"(g (uint8[2, 8] x) => (uint8[2, 8] y) <float xs = {0.1}, uint8 xz = {1}, float ys = {0.1}, uint8 yz = {0}> {
                   y = com.microsoft.QLinearGlobalAveragePool (x, xs, xz, ys, yz) })",
                 "QLinearGlobalAveragePool", "X has rank 2; ORT's kernel needs at least 3"},
        Declined{"concat_with_an_incomplete_triple",
                 R"(g (uint8[1, 2] a, uint8[1, 2] b) => (uint8[1, 4] y) <float ys = {0.05}, uint8 yz = {128}> {
                   y = com.microsoft.QLinearConcat <axis = 1> (ys, yz, a, ys, yz, b, ys) })",
                 "QLinearConcat", "QLinearConcat has 7 inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) triples"},
        Declined{"qgemm_y_scale_without_zero_point",
                 R"(g (uint8[2, 4] a) => (float[2, 3] y) <float as = {0.1}, uint8 az = {1}, int8[4, 3] b = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
                   float bs = {0.1}, int8 bz = {0}, float ys = {0.2}> {
                   y = com.microsoft.QGemm (a, as, az, b, bs, bz, , ys, ) })",
                 "QGemm", "y_scale without y_zero_point"},
        Declined{"qgemm_scale_and_zero_point_sizes_differ",
                 R"(g (uint8[2, 4] a) => (uint8[2, 3] y) <float as = {0.1}, uint8 az = {1}, int8[4, 3] b = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
                   float[3] bs = {0.1, 0.2, 0.3}, int8 bz = {0}, float ys = {0.2}, uint8 yz = {0}> {
                   y = com.microsoft.QGemm (a, as, az, b, bs, bz, , ys, yz) })",
                 "QGemm", "b_scale has 3 elements and b_zero_point 1"},
        Declined{"qgemm_per_column_size_is_not_n",
                 R"(g (uint8[2, 4] a) => (uint8[2, 3] y) <float as = {0.1}, uint8 az = {1}, int8[4, 3] b = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
                   float[4] bs = {0.1, 0.2, 0.3, 0.4}, int8[4] bz = {0, 0, 0, 0}, float ys = {0.2}, uint8 yz = {0}> {
                   y = com.microsoft.QGemm (a, as, az, b, bs, bz, , ys, yz) })",
                 "QGemm", "b_scale has 4 elements and B 3 columns"}),
    declined_name);

// ---- Opsets --------------------------------------------------------------------------------------

// DequantizeLinear and QuantizeLinear need ai.onnx 10: a model importing 9 is raised when that
// changes no other node; check --target onnx passes and the numbers are the kernel's.
TEST(Opsets, ImportBelow10IsRaisedWhenSafe) {
  const auto original = parse_model_text(contrib_model_text(9, binary("QLinearAdd", "uint8", "2, 16", "2, 16", "2, 16", 0.05, "128", 0.04, "120", 0.08, "125")));
  const auto rewritten = to_qdq(original, "QLinearAdd");
  EXPECT_EQ(opset_import(rewritten.model, ""), 10) << rewritten.explain;
  EXPECT_EQ(count(rewritten.model, "QLinearAdd", "com.microsoft"), 0) << rewritten.explain;
  TempDir dir;
  write_file(dir / "a.onnx", serialize(original));
  write_file(dir / "b.onnx", rewritten.bytes);
  expect_standard(rewritten, dir / "b.onnx");
  const auto comparison = quant_compare(dir / "a.onnx", dir / "b.onnx");
  ASSERT_TRUE(comparison.ran) << comparison.text;
  EXPECT_TRUE(within(comparison.outputs.at("c"), {1, 8})) << comparison.text;
  record("", comparison.outputs.at("c"));
  write_file(dir / "off.onnx", serialize(zero_point_off_by_one(read_model(dir / "b.onnx"))));
  const auto control = quant_compare(dir / "a.onnx", dir / "off.onnx");
  ASSERT_TRUE(control.ran) << control.text;
  EXPECT_FALSE(within(control.outputs.at("c"), {1, 8})) << "negative control (zero point off by one)\n" << control.text;
}

// ---- A model ORT fused from QDQ and saved itself ----------------------------------------------

// A QDQ network (x + x2, SiLU as x·sigmoid(x), LeakyRelu, Concat, global pooling, Flatten, a
// per-column int8 Gemm, Softmax), the layout onnxruntime.quantization's QDQ format writes.
std::string qdq_network(int opset) {
  return fmt::format(R"(<ir_version: 8, opset_import: ["": {0}]>
g (float[2, 8, 6, 6] x, float[2, 8, 6, 6] x2) => (float[2, 4] y, uint8[2, 8, 6, 6] qa, uint8[2, 8, 6, 6] qg, uint8[2, 8, 6, 6] qm,
    uint8[2, 8, 6, 6] ql, uint8[2, 16, 6, 6] qc, uint8[2, 16, 1, 1] qp, uint8[2, 4] qy, uint8[2, 4] qo)
  <float s1 = {{0.03}}, uint8 z1 = {{128}}, float s2 = {{0.02}}, uint8 z2 = {{100}}, float sa = {{0.045}}, uint8 za = {{120}},
   float sg = {{0.00390625}}, uint8 zg = {{0}}, float sm = {{0.035}}, uint8 zm = {{30}}, float sl = {{0.03}}, uint8 zl = {{40}},
   float sc = {{0.04}}, uint8 zc = {{64}}, float sp = {{0.02}}, uint8 zp = {{40}},
   int8[4, 16] wq = {1}, float[4] ws = {{0.02, 0.03, 0.025, 0.04}}, int8[4] wz = {{0, 0, 0, 0}},
   int32[4] bq = {{100, -200, 300, -50}}, float[4] bs = {{0.0004, 0.0006, 0.0005, 0.0008}},
   float sy = {{0.05}}, uint8 zy = {{128}}, float so = {{0.00390625}}, uint8 zo = {{0}}> {{
  q1 = QuantizeLinear (x, s1, z1)
  d1 = DequantizeLinear (q1, s1, z1)
  q2 = QuantizeLinear (x2, s2, z2)
  d2 = DequantizeLinear (q2, s2, z2)
  a = Add (d1, d2)
  qa = QuantizeLinear (a, sa, za)
  da = DequantizeLinear (qa, sa, za)
  g = Sigmoid (da)
  qg = QuantizeLinear (g, sg, zg)
  dg = DequantizeLinear (qg, sg, zg)
  m = Mul (da, dg)
  qm = QuantizeLinear (m, sm, zm)
  dm = DequantizeLinear (qm, sm, zm)
  l = LeakyRelu <alpha = 0.1> (dm)
  ql = QuantizeLinear (l, sl, zl)
  dl = DequantizeLinear (ql, sl, zl)
  c = Concat <axis = 1> (dl, d1)
  qc = QuantizeLinear (c, sc, zc)
  dc = DequantizeLinear (qc, sc, zc)
  p = GlobalAveragePool (dc)
  qp = QuantizeLinear (p, sp, zp)
  dp = DequantizeLinear (qp, sp, zp)
  f = Flatten (dp)
  qf = QuantizeLinear (f, sp, zp)
  df = DequantizeLinear (qf, sp, zp)
  w = DequantizeLinear <axis = 0> (wq, ws, wz)
  bias = DequantizeLinear <axis = 0> (bq, bs)
  gm = Gemm <transB = 1> (df, w, bias)
  qy = QuantizeLinear (gm, sy, zy)
  dy = DequantizeLinear (qy, sy, zy)
  sx = Softmax <axis = -1> (dy)
  qo = QuantizeLinear (sx, so, zo)
  y = DequantizeLinear (qo, so, zo)
}}
)",
                     opset, ints(64, -127, 127));
}

// ORT (level extended) fuses the QDQ network into its QLinear kernels and saves the result; the
// rewrite turns that back into QDQ, which ORT (optimizations off) runs within a few output steps of
// its own fused kernels. At level extended ORT fuses the rewritten model again into the very same
// kernels: identical numbers (the evidence that the QDQ form is the one ORT recognizes).
TEST(OrtFused, QdqNetworkRoundTrips) {
  TempDir dir;
  const auto qdq = dir / "qdq.onnx";
  write_file(qdq, serialize(parse_model_text(qdq_network(13))));
  const auto fused = dir / "fused.onnx";
  const auto optimized = run_command({"node", (source_dir() / "tests" / "ort" / "optimize.js").string(), qdq.string(), fused.string(),
                                      "--level", "extended"});
  ASSERT_EQ(optimized.exit_code, 0) << optimized.out << optimized.err;
  const auto fused_model = read_model(fused);
  for (const char* op : {"QLinearAdd", "QLinearSigmoid", "QLinearMul", "QLinearLeakyRelu", "QLinearConcat", "QLinearGlobalAveragePool",
                         "QGemm", "QLinearSoftmax"}) {
    EXPECT_EQ(count(fused_model, op, "com.microsoft"), 1) << op << "\n" << optimized.out;
  }
  const auto rewritten = rewrite_and_check(fused, dir / "rewritten.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(com_microsoft_nodes(rewritten->model), 0);
  // Against the reference evaluation of the fused model (its QuantizeLinear, DequantizeLinear and
  // Flatten included): every quantized tensor on the way within one step, at most 2 % + 2 of its
  // elements differing (a tie rounded the other way early moves a few later elements), and y,
  // the DequantizeLinear of uint8 with scale 1/256, exact.
  const std::vector<std::string> extra{"--trials", "5", "--float-range", "-3,3"};
  const auto comparison = quant_compare(fused, rewritten->output, extra);
  ASSERT_TRUE(comparison.ran) << comparison.text;
  auto tolerance = [](const std::string& name, const OutputStats& stats) {
    return name == "y" ? Tolerance{0, 0} : Tolerance{1, stats.count / 50 + 2};
  };
  for (const auto& [name, stats] : comparison.outputs) {
    EXPECT_TRUE(within(stats, tolerance(name, stats))) << name << ": " << describe(stats) << "\n" << comparison.text;
    record(name, stats);
  }
  for (const auto& [name, stats] : comparison.kernel) {
    EXPECT_TRUE(within(stats, {})) << "ORT's kernels against the reference, " << name << ": " << describe(stats) << "\n" << comparison.text;
  }
  for (const auto& name : comparison.inexact) std::cout << "[ kernel   ] " << name << ": ORT's kernels are inexact on this CPU, not compared\n";
  // Negative control: the last zero point off by one fails it.
  write_file(dir / "off.onnx", serialize(zero_point_off_by_one(read_model(rewritten->output))));
  const auto control = quant_compare(fused, dir / "off.onnx", extra);
  ASSERT_TRUE(control.ran) << control.text;
  bool caught = false;
  for (const auto& [name, stats] : control.outputs) caught = caught || !within(stats, tolerance(name, stats));
  EXPECT_TRUE(caught) << control.text;
  // Re-fused by ORT at level extended: the same kernels, the same numbers.
  const auto refused =
      quant_compare(fused, rewritten->output, {"--trials", "5", "--float-range", "-3,3", "--level-b", "extended"}, false);
  ASSERT_TRUE(refused.ran) << refused.text;
  EXPECT_EQ(refused.outputs.at("y").max_step, 0) << refused.text;
}

// ---- What inspect says ---------------------------------------------------------------------------

TEST(Inspect, NamesTheRuleOfEachOp) {
  const auto model = parse_model_text(contrib_model_text(13, R"(g (uint8[1, 4, 3, 3] x, uint8[1, 4, 3, 3] x2) => (uint8[1, 4] y) <float s = {0.05}, uint8 z = {128}, float s2 = {0.00390625}, uint8 z2 = {0},
      int8[4, 8] w = {1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8}, int8 wz = {0}> {
    a = com.microsoft.QLinearAdd (x, s, z, x2, s, z, s, z)
    m = com.microsoft.QLinearMul (a, s, z, x, s, z, s, z)
    sg = com.microsoft.QLinearSigmoid (m, s, z, s2, z2)
    l = com.microsoft.QLinearLeakyRelu (sg, s2, z2, s, z)
    c = com.microsoft.QLinearConcat <axis = 1> (s, z, l, s, z, x, s, z)
    p = com.microsoft.QLinearGlobalAveragePool (c, s, z, s, z)
    f = Flatten (p)
    q = com.microsoft.QGemm <transB = 1> (f, s, z, w, s, wz, , s, z)
    y = com.microsoft.QLinearSoftmax <opset = 13> (q, s, z, s2, z2) })"));
  TempDir dir;
  write_file(dir / "m.onnx", serialize(model));
  const auto inspect = run_cli({"inspect", (dir / "m.onnx").string()});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  for (const auto& [op, rule] : std::vector<std::pair<std::string, std::string>>{
           {"QLinearAdd", "qlinear-add-to-qdq"},
           {"QLinearMul", "qlinear-mul-to-qdq"},
           {"QLinearSigmoid", "qlinear-sigmoid-to-qdq"},
           {"QLinearLeakyRelu", "qlinear-leaky-relu-to-qdq"},
           {"QLinearConcat", "qlinear-concat-to-qdq"},
           {"QLinearGlobalAveragePool", "qlinear-global-average-pool-to-qdq"},
           {"QGemm", "qgemm-to-qdq"},
           {"QLinearSoftmax", "qlinear-softmax-to-qdq"}}) {
    std::smatch m;
    const std::regex line("com\\.microsoft\\." + op + " x1: ([^\\n]*)");
    ASSERT_TRUE(std::regex_search(inspect.out, m, line)) << op << "\n" << inspect.out;
    EXPECT_NE(m[1].str().find(rule), std::string::npos) << op << ": " << m[1] << "\n" << inspect.out;
  }
  // check names every op before the rewrite; after it, nothing is left.
  const auto check = run_cli({"check", (dir / "m.onnx").string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 1);
  for (const char* op : {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat", "QLinearGlobalAveragePool",
                         "QGemm", "QLinearSoftmax"}) {
    EXPECT_NE(check.out.find(fmt::format("com.microsoft.{} x1", op)), std::string::npos) << op << "\n" << check.out;
  }
  const auto rewritten = rewrite_and_check(dir / "m.onnx", dir / "out.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(com_microsoft_nodes(rewritten->model), 0);
}

}  // namespace
}  // namespace onnx_rewrite
