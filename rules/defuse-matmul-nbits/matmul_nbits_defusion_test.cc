// The MatMulNBits de-fusion rules (defuse-matmul-nbits.rules, matmul_nbits_defusion.cc):
// com.microsoft MatMulNBits becomes DequantizeLinear-21 on repacked 4/8-bit weights + MatMul
// (ai.onnx >= 21) or the weights unpacked at run time (ai.onnx >= 13) under --target onnx. Every
// bit width, block size, zero-point form, padded K, bias, float16 and accuracy level is proven
// against ONNX Runtime's own kernel (the com.microsoft model run in ORT is the reference), bit
// for bit where ORT computes in float; declines and fallbacks by their --explain text.
#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/tensor.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;
using onnx::TensorProto;

std::string contrib_ops(const OpCounts& ops) {
  std::vector<std::string> found;
  for (const auto& [key, count] : ops) {
    if (key.first.rfind("com.microsoft", 0) == 0) found.push_back(fmt::format("{}.{} x{}", key.first, key.second, count));
  }
  return found.empty() ? "(none)" : fmt::format("{}", fmt::join(found, ", "));
}

void record(const std::string& what, double max_abs) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::cout << fmt::format("[ ORT      ] {}.{}{}: max_abs {:.3g}\n", test->test_suite_name(), test->name(),
                           what.empty() ? "" : " " + what, max_abs);
}

// A MatMulNBits model with random quantized weights (what a quantizer writes: B bytes, scales,
// zero points as initializers).
struct Spec {
  std::string name;
  int opset;
  int64_t k, n, bits, block_size;
  std::string zero = "";       // "" (none), "uint8" (packed), "float" (A's type)
  bool bias = false;
  bool half = false;           // A, Y, scales, bias (and float zero points) in float16
  int64_t accuracy_level = 0;
  std::vector<std::string> ops = {};     // standard ops the rewrite must produce
  std::vector<std::string> absent = {};  // standard ops it must not produce
  std::vector<std::string> options = {"--rtol", "0", "--atol", "0"};  // bit for bit unless said
  bool b_input = false;        // B a graph input (random bytes each trial)
  bool external = false;       // B stored as external data
};

std::string literal(const std::vector<double>& values) {
  std::vector<std::string> parts;
  for (double v : values) parts.push_back(fmt::format("{}", v));
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

onnx::ModelProto nbits_model(const Spec& s) {
  std::mt19937 rng(static_cast<uint32_t>(s.k * 131 + s.n * 7 + s.bits * 3 + s.block_size));
  const int64_t k_blocks = (s.k + s.block_size - 1) / s.block_size, blob = s.block_size * s.bits / 8;
  const int64_t zero_columns = (k_blocks * s.bits + 7) / 8;
  auto uniform = [&](double lo, double hi, int64_t count, bool integer = false) {
    std::vector<double> values;
    std::uniform_real_distribution<double> real(lo, hi);
    std::uniform_int_distribution<int> whole(static_cast<int>(lo), static_cast<int>(hi));
    for (int64_t i = 0; i < count; ++i) values.push_back(integer ? whole(rng) : std::round(real(rng) * 1e5) / 1e5);
    return values;
  };
  const std::string b_type = fmt::format("uint8[{}, {}, {}]", s.n, k_blocks, blob);
  std::vector<std::string> inputs{fmt::format("float[batch, 3, {}] a", s.k)}, initializers;
  if (s.b_input) inputs.push_back(b_type + " b");
  else initializers.push_back(fmt::format("{} b = {}", b_type, literal(uniform(0, 255, s.n * k_blocks * blob, true))));
  initializers.push_back(fmt::format("float[{}, {}] scales = {}", s.n, k_blocks, literal(uniform(-0.1, 0.1, s.n * k_blocks))));
  std::string zero_input;
  if (s.zero == "uint8") {
    initializers.push_back(fmt::format("uint8[{}, {}] zp = {}", s.n, zero_columns, literal(uniform(0, 255, s.n * zero_columns, true))));
    zero_input = "zp";
  } else if (s.zero == "float") {
    initializers.push_back(fmt::format("float[{}, {}] zp = {}", s.n, k_blocks, literal(uniform(0, 15, s.n * k_blocks))));
    zero_input = "zp";
  }
  if (s.bias) initializers.push_back(fmt::format("float[{}] bias = {}", s.n, literal(uniform(-1, 1, s.n))));
  const std::string text = contrib_model_text(
      s.opset, fmt::format(R"(g ({}) => (float[batch, 3, {}] y) <{}> {{
        y = com.microsoft.MatMulNBits <K = {}, N = {}, bits = {}, block_size = {}, accuracy_level = {}> (a, b, scales, {}, , {})
      }})",
                           fmt::join(inputs, ", "), s.n, fmt::join(initializers, ", "), s.k, s.n, s.bits, s.block_size,
                           s.accuracy_level, zero_input, s.bias ? "bias" : ""));
  auto proto = parse_model_text(text);
  if (s.half) {
    auto& graph = *proto.mutable_graph();
    for (auto* infos : {graph.mutable_input(), graph.mutable_output()}) {
      for (auto& info : *infos) {
        auto* type = info.mutable_type()->mutable_tensor_type();
        if (type->elem_type() == TensorProto::FLOAT) type->set_elem_type(TensorProto::FLOAT16);
      }
    }
    for (auto& tensor : *graph.mutable_initializer()) {
      if (tensor.data_type() != TensorProto::FLOAT) continue;
      const auto values = decode_tensor(tensor);
      const std::string name = tensor.name();
      tensor = make_tensor(TensorProto::FLOAT16, values->dims, values->numbers);
      tensor.set_name(name);
    }
  }
  return proto;
}

// Moves B's bytes into `directory`/weights.bin (external data).
void externalize_b(onnx::ModelProto& proto, const fs::path& directory) {
  for (auto& tensor : *proto.mutable_graph()->mutable_initializer()) {
    if (tensor.name() != "b") continue;
    std::string bytes;  // the parser writes uint8 literals to int32_data
    const auto values = decode_tensor(tensor);  // kept: a range-for over a temporary's member dangles
    for (int64_t v : values->integers) bytes.push_back(static_cast<char>(v));
    write_file(directory / "weights.bin", bytes);
    const auto length = bytes.size();
    tensor.clear_raw_data();
    tensor.clear_int32_data();
    tensor.set_data_location(TensorProto::EXTERNAL);
    for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
             {"location", "weights.bin"}, {"offset", "0"}, {"length", std::to_string(length)}}) {
      auto* entry = tensor.add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    }
  }
}

class MatMulNBits : public ::testing::TestWithParam<Spec> {};

// The rewrite (CLI) passes `check --target onnx`, leaves no com.microsoft op, uses the expected
// standard ops, and ORT computes with it what its MatMulNBits kernel computes.
TEST_P(MatMulNBits, IsStandardAndComputesAsOrtsKernel) {
  const auto& s = GetParam();
  TempDir dir;
  auto proto = nbits_model(s);
  if (s.external) externalize_b(proto, dir.path());
  const auto original = dir / "original.onnx";
  write_file(original, serialize(proto));
  const auto rewritten = rewrite_and_check(original, dir / "defused.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(contrib_ops(rewritten->ops), "(none)");
  EXPECT_EQ(opset_import(rewritten->model, ""), s.opset);
  for (const auto& op : s.ops) EXPECT_GE(op_count(rewritten->ops, {"", op}), 1) << op;
  for (const auto& op : s.absent) EXPECT_EQ(op_count(rewritten->ops, {"", op}), 0) << op;
  std::vector<std::string> options{"--trials", "3", "--float-range", "-2,2", "--dim", "batch=2"};
  if (s.b_input) options.insert(options.end(), {"--range", "b=0,255"});
  options.insert(options.end(), s.options.begin(), s.options.end());
  const auto comparison = ort_compare(original, rewritten->output, options);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  record("", comparison.max_abs);
}

const std::vector<std::string> kUnpacked{"Mod", "BitShift", "MatMul"};
const std::vector<std::string> kDequantized{"DequantizeLinear", "MatMul"};
// ORT quantizes A to int8 at accuracy_level 4: only a tolerance compares.
const std::vector<std::string> kInt8Accuracy{"--rtol", "0.05", "--atol", "0.05"};

INSTANTIATE_TEST_SUITE_P(
    Unpacked, MatMulNBits,
    ::testing::Values(
        Spec{"bits4_symmetric_bs32", 17, 64, 16, 4, 32, "", false, false, 0, kUnpacked},
        Spec{"bits4_zero_points_odd_blocks_bias", 17, 96, 24, 4, 32, "uint8", true, false, 0, kUnpacked},
        Spec{"bits4_padded_k80_zero_points", 13, 80, 16, 4, 32, "uint8", false, false, 0, {"Slice", "Mod"}},
        Spec{"bits4_float_zero_points_bs16", 17, 64, 8, 4, 16, "float", true, false, 0, {"Neg"}},
        Spec{"bits4_bs128_k200", 17, 200, 8, 4, 128, "", true, false, 0, {"Slice"}},
        Spec{"bits8_symmetric", 17, 64, 16, 8, 32, "", false, false, 0, {"Cast", "MatMul"}, {"Mod", "BitShift"}},
        Spec{"bits8_zero_points", 17, 96, 8, 8, 64, "uint8", true, false, 0, {"Sub"}, {"Mod"}},
        Spec{"bits2_symmetric", 17, 64, 8, 2, 16, "", false, false, 0, kUnpacked},
        Spec{"bits2_zero_points_padded", 17, 80, 8, 2, 16, "uint8", false, false, 0, kUnpacked},
        Spec{"float16_zero_points_bias", 17, 96, 16, 4, 32, "uint8", true, true, 0, {"Cast"}},
        Spec{"float16_float_zero_points", 17, 64, 8, 4, 32, "float", false, true, 0, {"Neg"}},
        Spec{"b_computed_at_run_time", 17, 64, 8, 4, 32, "uint8", false, false, 0, kUnpacked, {}, {"--rtol", "0", "--atol", "0"}, true},
        Spec{"accuracy_level4", 17, 128, 16, 4, 32, "", false, false, 4, kUnpacked, {}, kInt8Accuracy},
        Spec{"accuracy_level4_float16", 17, 128, 16, 4, 32, "", false, true, 4, kUnpacked, {}, kInt8Accuracy}),
    [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Dequantized, MatMulNBits,
    ::testing::Values(
        Spec{"bits4_symmetric_int4", 21, 64, 16, 4, 32, "", false, false, 0, kDequantized, {"Mod", "Transpose"}},
        Spec{"bits4_zero_points_odd_blocks_bias", 21, 96, 24, 4, 32, "uint8", true, false, 0, kDequantized, {"Mod"}},
        Spec{"bits4_padded_k80_zero_points", 21, 80, 16, 4, 32, "uint8", false, false, 0, kDequantized, {"Slice"}},
        Spec{"bits4_bs16", 22, 64, 8, 4, 16, "", true, false, 0, kDequantized},
        Spec{"bits4_bs128_k200", 21, 200, 8, 4, 128, "uint8", true, false, 0, kDequantized},
        Spec{"bits8_symmetric_int8", 21, 64, 16, 8, 32, "", false, false, 0, kDequantized},
        Spec{"bits8_zero_points", 24, 96, 8, 8, 64, "uint8", true, false, 0, kDequantized},
        Spec{"float16_zero_points_bias", 21, 96, 16, 4, 32, "uint8", true, true, 0, {"DequantizeLinear", "Cast"}},
        Spec{"accuracy_level4", 21, 128, 16, 4, 32, "", false, false, 4, kDequantized, {}, kInt8Accuracy},
        // What DequantizeLinear can't take falls back to the unpacking rule at the model's opset.
        Spec{"bits2_falls_back", 21, 64, 8, 2, 16, "uint8", false, false, 0, kUnpacked, {"DequantizeLinear"}},
        Spec{"float_zero_points_fall_back", 21, 64, 8, 4, 16, "float", false, false, 0, {"Neg"}, {"DequantizeLinear"}},
        Spec{"b_at_run_time_falls_back", 21, 64, 8, 4, 32, "", false, false, 0, kUnpacked, {"DequantizeLinear"},
             {"--rtol", "0", "--atol", "0"}, true},
        Spec{"b_external_falls_back", 21, 64, 8, 4, 32, "uint8", true, false, 0, kUnpacked, {"DequantizeLinear"},
             {"--rtol", "0", "--atol", "0"}, false, true}),
    [](const auto& info) { return info.param.name; });

// The weights DequantizeLinear reads: a [K, N] int4 initializer repacked from B (q - 8: the
// signed form of the default zero point), uint4 with uint8 zero points.
TEST(Dequantized, WeightsAreFourBitInitializers) {
  for (const std::string zero : {"", "uint8"}) {
    RewriteOptions options;
    options.target = "onnx";
    const auto rewritten = rewrite_proto(nbits_model(Spec{"", 21, 80, 16, 4, 32, zero}), builtin_rules(), options);
    int found = 0;
    for (const auto& tensor : rewritten.model.graph().initializer()) {
      if (tensor.data_type() != (zero.empty() ? 22 : 21)) continue;
      if (tensor.dims_size() == 2 && tensor.dims(0) == 80 && tensor.dims(1) == 16) ++found;
    }
    EXPECT_EQ(found, 1) << "zero points: " << zero;
  }
}

// decode_tensor reads 4-bit tensors (the engine's check of every new constant): low nibble first,
// an odd count padded, int4 sign-extended.
TEST(Dequantized, FourBitTensorsDecode) {
  TensorProto tensor;
  tensor.set_data_type(21);
  tensor.add_dims(3);
  tensor.set_raw_data(std::string{'\x21', '\x0F'});
  auto values = decode_tensor(tensor);
  ASSERT_TRUE(values);
  EXPECT_EQ(values->integers, (std::vector<int64_t>{1, 2, 15}));
  tensor.set_data_type(22);
  values = decode_tensor(tensor);
  ASSERT_TRUE(values);
  EXPECT_EQ(values->integers, (std::vector<int64_t>{1, 2, -1}));
  tensor.set_raw_data(std::string{'\x21'});  // 2 elements' bytes for 3
  EXPECT_FALSE(decode_tensor(tensor));
}

// ---- Declines and fallbacks: --explain says why -------------------------------------------------

struct DeclineCase {
  std::string name;
  int opset;
  std::string graph;
  std::string reason;  // in the --explain text
  bool stays = true;   // the node stays (else a lower-priority rule takes it)
};

class Declines : public ::testing::TestWithParam<DeclineCase> {};

TEST_P(Declines, ExplainSaysWhy) {
  const auto& c = GetParam();
  RewriteOptions options;
  options.target = "onnx";
  options.explain = "MatMulNBits";
  const auto rewritten = rewrite_text(contrib_model_text(c.opset, c.graph), builtin_rules(), options);
  EXPECT_EQ(contrib_ops(count_ops(rewritten.model)), c.stays ? "com.microsoft.MatMulNBits x1" : "(none)");
  EXPECT_NE(rewritten.explain.find(c.reason), std::string::npos) << rewritten.explain;
}

const char* kInputs = "float[2, 64] a, uint8[8, 2, 16] b, float[8, 2] scales";

INSTANTIATE_TEST_SUITE_P(
    NBits, Declines,
    ::testing::Values(
        DeclineCase{"g_idx", 17, fmt::format(R"(g ({}, int32[64] g) => (float[2, 8] y) {{
          y = com.microsoft.MatMulNBits <K = 64, N = 8, bits = 4, block_size = 32> (a, b, scales, , g) }})", kInputs),
                    "g_idx (act-order groups, deprecated) is not rewritten"},
        DeclineCase{"bits3", 17, R"(g (float[2, 64] a, uint8[8, 2, 12] b, float[8, 2] scales) => (float[2, 8] y) {
          y = com.microsoft.MatMulNBits <K = 64, N = 8, bits = 3, block_size = 32> (a, b, scales) })",
                    "bits = 3: ONNX Runtime's CPU kernel takes 2, 4 and 8"},
        DeclineCase{"block_size_512", 17, R"(g (float[2, 512] a, uint8[8, 1, 256] b, float[8, 1] scales) => (float[2, 8] y) {
          y = com.microsoft.MatMulNBits <K = 512, N = 8, bits = 4, block_size = 512> (a, b, scales) })",
                    "block_size = 512: ONNX Runtime 1.30 takes 16, 32, 64, 128 and 256 only"},
        DeclineCase{"bfloat16", 17, R"(g (bfloat16[2, 64] a, uint8[8, 2, 16] b, bfloat16[8, 2] scales) => (bfloat16[2, 8] y) {
          y = com.microsoft.MatMulNBits <K = 64, N = 8, bits = 4, block_size = 32> (a, b, scales) })",
                    "bfloat16: ONNX Runtime's CPU provider has no bfloat16 MatMulNBits"},
        DeclineCase{"b_shape_contradicts_k", 17, R"(g (float[2, 64] a, uint8[8, 4, 16] b, float[8, 2] scales) => (float[2, 8] y) {
          y = com.microsoft.MatMulNBits <K = 64, N = 8, bits = 4, block_size = 32> (a, b, scales) })",
                    "B is [8, 4, 16], not [8, 2, 16] as K, N, bits and block_size say"},
        DeclineCase{"zero_points_shape_contradicts_k", 17, R"(g (float[2, 64] a, uint8[8, 2, 16] b, float[8, 2] scales, uint8[8, 2] zp) => (float[2, 8] y) {
          y = com.microsoft.MatMulNBits <K = 64, N = 8, bits = 4, block_size = 32> (a, b, scales, zp) })",
                    "zero_points is [8, 2], not [8, 1] as K, N, bits and block_size say"},
        DeclineCase{"runtime_b_falls_back", 21, fmt::format(R"(g ({}) => (float[2, 8] y) {{
          y = com.microsoft.MatMulNBits <K = 64, N = 8, bits = 4, block_size = 32> (a, b, scales) }})", kInputs),
                    "B is not a constant (DequantizeLinear needs the weights repacked now)", false},
        DeclineCase{"bits2_falls_back", 21, R"(g (float[2, 64] a, uint8[8, 4, 4] b, float[8, 4] scales) => (float[2, 8] y) {
          y = com.microsoft.MatMulNBits <K = 64, N = 8, bits = 2, block_size = 16> (a, b, scales) })",
                    "2-bit weights: DequantizeLinear takes 2-bit types from ai.onnx 25 only", false}),
    [](const auto& info) { return info.param.name; });

// A model importing ai.onnx 21 at IR version 9 can't hold int4 initializers: unpacked instead.
TEST(Dequantized, IrVersion9FallsBackToUnpacking) {
  auto proto = nbits_model(Spec{"", 21, 64, 8, 4, 32});
  proto.set_ir_version(9);
  RewriteOptions options;
  options.target = "onnx";
  options.explain = "MatMulNBits";
  const auto rewritten = rewrite_proto(proto, builtin_rules(), options);
  EXPECT_EQ(contrib_ops(count_ops(rewritten.model)), "(none)");
  EXPECT_EQ(op_count(count_ops(rewritten.model), {"", "DequantizeLinear"}), 0);
  EXPECT_GE(op_count(count_ops(rewritten.model), {"", "BitShift"}), 1);
  EXPECT_NE(rewritten.explain.find("4-bit initializers need IR version 10 (the model has 9"), std::string::npos) << rewritten.explain;
}

// accuracy_level 4 is rewritten with a note: ORT's int8 arithmetic is not reproduced.
TEST(AccuracyLevel4, RewrittenWithANote) {
  RewriteOptions options;
  options.target = "onnx";
  const auto rewritten = rewrite_proto(nbits_model(Spec{"", 17, 64, 8, 4, 32, "", false, false, 4}), builtin_rules(), options);
  EXPECT_EQ(contrib_ops(count_ops(rewritten.model)), "(none)");
  std::string notes = fmt::format("{}", fmt::join(rewritten.result.notes, "\n"));
  EXPECT_NE(notes.find("accuracy_level = 4: ONNX Runtime quantizes A to int8"), std::string::npos) << notes;
}

TEST(Cli, InspectNamesTheRules) {
  TempDir dir;
  const auto file = dir / "nbits.onnx";
  write_file(file, serialize(nbits_model(Spec{"", 17, 64, 8, 4, 32})));
  const auto inspect = run_cli({"inspect", file.string()});
  EXPECT_NE(inspect.out.find("com.microsoft.MatMulNBits x1: defuse-matmul-nbits-dq [onnx], defuse-matmul-nbits [onnx]"),
            std::string::npos)
      << inspect.out;
  const auto check = run_cli({"check", file.string(), "--target", "onnx"});
  EXPECT_EQ(check.exit_code, 1);
  EXPECT_NE((check.out + check.err).find("com.microsoft.MatMulNBits x1"), std::string::npos) << check.out << check.err;
}

}  // namespace
}  // namespace onnx_rewrite
