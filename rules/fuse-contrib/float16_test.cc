// float16 and bfloat16 fusions (rules/fuse-contrib/README.md, the element type): a spelled-out
// float16 LayerNorm, RMSNorm, residual LayerNorm or GELU becomes the fused op, which computes in
// float and rounds once. Proven in ONNX Runtime against an independent float reference (the same
// math in float on the same float16 inputs and constants): like the spelled-out float16 model, the
// fused one is never more than one float16 step away from it, and on average about as close.
// bfloat16: the normalizations ORT's CPU has bfloat16 kernels for, within one bfloat16 step of the
// float math (ORT's CPU can't run the spelled-out bfloat16 model).
#include <gtest/gtest.h>

#include <iostream>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/tensor.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

onnx::NodeProto cast(const std::string& input, const std::string& output, int32_t to) {
  onnx::NodeProto node;
  node.set_op_type("Cast");
  node.add_input(input);
  node.add_output(output);
  auto* attribute = node.add_attribute();
  attribute->set_name("to");
  attribute->set_type(onnx::AttributeProto::INT);
  attribute->set_i(to);
  return node;
}

// The model with float inputs and outputs around its body (so that compare.js feeds every model
// the same numbers): each input `x` is `x_in` rounded to `type` (then widened back to float for
// the reference), each output `y` is `y_out` = Cast (y, float).
onnx::ModelProto with_float_interface(onnx::ModelProto model, int32_t type, bool reference) {
  auto& graph = *model.mutable_graph();
  std::vector<onnx::NodeProto> nodes;
  for (auto& input : *graph.mutable_input()) {
    const std::string name = input.name();
    input.set_name(name + "_in");
    input.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    if (reference) {
      nodes.push_back(cast(name + "_in", name + "_rounded", type));
      nodes.push_back(cast(name + "_rounded", name, onnx::TensorProto::FLOAT));
    } else {
      nodes.push_back(cast(name + "_in", name, type));
    }
  }
  for (const auto& node : graph.node()) nodes.push_back(node);
  for (auto& output : *graph.mutable_output()) {
    const std::string name = output.name();
    output.set_name(name + "_out");
    output.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    nodes.push_back(cast(name, name + "_out", onnx::TensorProto::FLOAT));
  }
  graph.clear_node();
  for (auto& node : nodes) *graph.add_node() = std::move(node);
  return model;
}

struct HalfCase {
  std::string name;
  int32_t type;        // float16 or bfloat16
  std::string target;  // "ort", or "onnx" with --fuse
  int opset;
  std::string inputs;  // float[...] graph inputs besides x
  std::string body;    // float nodes computing y from x (float[N, 5, 16]), γ and β (float[16])
  std::string domain;  // the fused op expected
  std::string op_type;
};

void PrintTo(const HalfCase& c, std::ostream* os) { *os << c.name; }

std::string float_model(const HalfCase& c) {
  return fmt::format(R"(<ir_version: {0}, opset_import: ["": {1}]>
g (float[N, 5, 16] x{2}) => (float[N, 5, 16] y)
  <float[16] gamma = {{0.5, 0.75, 1, 1.25, 1.5, 0.5, 0.75, 1, 1.25, 1.5, 0.5, 0.75, 1, 1.25, 1.5, 2}},
   float[16] beta = {{-1, -0.5, 0, 0.5, 1, -1, -0.5, 0, 0.5, 1, -1, -0.5, 0, 0.5, 1, 0.25}}> {{
{3}
}})",
                     ir_version_for(c.opset), c.opset, c.inputs, c.body);
}

// ReduceMean over the last axis: an attribute before opset 18, a constant input from 18.
std::string mean_last(int opset, const std::string& out, const std::string& in) {
  if (opset < 18) return fmt::format("  {} = ReduceMean <axes = [-1]> ({})\n", out, in);
  return fmt::format("  {0}_axes = Constant <value = int64[1] {{-1}}> ()\n  {0} = ReduceMean ({1}, {0}_axes)\n", out, in);
}

std::string layer_norm(int opset, const std::string& x) {
  return mean_last(opset, "m", x) + fmt::format("  d = Sub ({}, m)\n", x) +
         "  two = Constant <value = float {2.0}> ()\n  p = Pow (d, two)\n" + mean_last(opset, "v", "p") +
         "  eps = Constant <value = float {1e-5}> ()\n  ve = Add (v, eps)\n  sd = Sqrt (ve)\n  n = Div (d, sd)\n"
         "  ns = Mul (n, gamma)\n  y = Add (ns, beta)";
}

std::string rms_norm(int opset, const std::string& x = "x") {
  return fmt::format("  two = Constant <value = float {{2.0}}> ()\n  p = Pow ({}, two)\n", x) + mean_last(opset, "v", "p") +
         fmt::format("  eps = Constant <value = float {{1e-6}}> ()\n  ve = Add (v, eps)\n  sd = Sqrt (ve)\n  n = Div ({}, sd)\n"
                     "  y = Mul (n, gamma)",
                     x);
}

std::string gelu_erf(const std::string& x) {
  return fmt::format(R"(  k = Constant <value = float {{1.4142135}}> ()
  h = Div ({0}, k)
  e = Erf (h)
  one = Constant <value = float {{1.0}}> ()
  a = Add (e, one)
  m = Mul ({0}, a)
  half = Constant <value = float {{0.5}}> ()
  y = Mul (m, half))",
                     x);
}

std::string gelu_tanh(const std::string& x) {
  return fmt::format(R"(  three = Constant <value = float {{3.0}}> ()
  c = Pow ({0}, three)
  k_cubic = Constant <value = float {{0.044715}}> ()
  cm = Mul (c, k_cubic)
  i = Add ({0}, cm)
  k = Constant <value = float {{0.7978845608}}> ()
  s = Mul (i, k)
  t = Tanh (s)
  one = Constant <value = float {{1.0}}> ()
  a = Add (t, one)
  m = Mul ({0}, a)
  half = Constant <value = float {{0.5}}> ()
  y = Mul (m, half))",
                     x);
}

const char* kQuickGelu = R"(  k = Constant <value = float {1.702}> ()
  t = Mul (x, k)
  s = Sigmoid (t)
  y = Mul (x, s))";

constexpr int32_t kHalf = onnx::TensorProto::FLOAT16;
constexpr int32_t kBfloat = onnx::TensorProto::BFLOAT16;

std::vector<HalfCase> half_cases() {
  const std::string residual = "  xr = Add (x, r)\n" + layer_norm(17, "xr");
  return {
      {"LayerNorm", kHalf, "ort", 17, "", layer_norm(17, "x"), "", "LayerNormalization"},
      {"LayerNorm_opset13", kHalf, "ort", 13, "", layer_norm(13, "x"), "", "LayerNormalization"},
      {"ResidualLayerNorm", kHalf, "ort", 17, ", float[N, 5, 16] r", residual, "com.microsoft", "SkipLayerNormalization"},
      {"RMSNorm", kHalf, "ort", 17, "", rms_norm(17), "", "SimplifiedLayerNormalization"},  // ORT's, in the default domain
      {"GeluErf", kHalf, "ort", 17, "", gelu_erf("x"), "com.microsoft", "Gelu"},
      {"GeluTanh", kHalf, "ort", 17, "", gelu_tanh("x"), "com.microsoft", "FastGelu"},
      {"BiasGelu", kHalf, "ort", 17, "", "  xb = Add (x, beta)\n" + gelu_erf("xb"), "com.microsoft", "BiasGelu"},
      {"QuickGelu", kHalf, "ort", 17, "", kQuickGelu, "com.microsoft", "QuickGelu"},
      {"BiasGeluTanh", kHalf, "ort", 17, "", "  xb = Add (x, beta)\n" + gelu_tanh("xb"), "com.microsoft", "FastGelu"},
      {"ResidualRMSNorm", kHalf, "ort", 17, ", float[N, 5, 16] r", "  xr = Add (x, r)\n" + rms_norm(17, "xr"), "com.microsoft",
       "SkipSimplifiedLayerNormalization"},
      {"LayerNorm_fuse", kHalf, "onnx", 17, "", layer_norm(17, "x"), "", "LayerNormalization"},
      {"RMSNorm_fuse", kHalf, "onnx", 23, "", rms_norm(23), "", "RMSNormalization"},
      {"GeluErf_fuse", kHalf, "onnx", 20, "", gelu_erf("x"), "", "Gelu"},
      {"GeluTanh_fuse", kHalf, "onnx", 20, "", gelu_tanh("x"), "", "Gelu"},
      {"LayerNorm_bfloat16", kBfloat, "ort", 17, "", layer_norm(17, "x"), "", "LayerNormalization"},
      {"LayerNorm_opset13_bfloat16", kBfloat, "ort", 13, "", layer_norm(13, "x"), "", "LayerNormalization"},
      {"ResidualLayerNorm_bfloat16", kBfloat, "ort", 17, ", float[N, 5, 16] r", residual, "com.microsoft", "SkipLayerNormalization"},
      {"RMSNorm_bfloat16", kBfloat, "ort", 17, "", rms_norm(17), "", "SimplifiedLayerNormalization"},
      {"LayerNorm_fuse_bfloat16", kBfloat, "onnx", 17, "", layer_norm(17, "x"), "", "LayerNormalization"},
  };
}

class Float16Fusion : public ::testing::TestWithParam<HalfCase> {};

TEST_P(Float16Fusion, IsWithinOneStepOfTheFloatMathAsTheSpelledOutFormIs) {
  const HalfCase& c = GetParam();
  onnx::ModelProto half = parse_model_text(float_model(c));
  convert_tensors(half, onnx::TensorProto::FLOAT, c.type);
  declare_interface(half, c.type);
  onnx::ModelProto reference = half;
  convert_tensors(reference, c.type, onnx::TensorProto::FLOAT);
  declare_interface(reference, onnx::TensorProto::FLOAT);
  half = with_float_interface(half, c.type, false);
  reference = with_float_interface(reference, c.type, true);

  RewriteOptions options;
  options.target = c.target;
  options.fuse = c.target == "onnx";
  const auto fused = rewrite_proto(half, builtin_rules(), options);
  EXPECT_EQ(op_count(count_ops(fused.model), {c.domain, c.op_type}), 1) << canonical_nodes(fused.model, interface_names(fused.model));
  EXPECT_EQ(fused.model.graph().node_size(), 3 + (c.inputs.empty() ? 0 : 1))  // the Casts of the interface and the fused op
      << canonical_nodes(fused.model, interface_names(fused.model));

  TempDir dir;
  write_file(dir / "reference.onnx", serialize(reference));
  write_file(dir / "spelled.onnx", serialize(half));
  write_file(dir / "fused.onnx", fused.bytes);
  // One step is 2^-10 to 2^-11 of |y| in float16 (2^-7 to 2^-8 in bfloat16); where a sum cancels
  // to near 0 (γ·x̂ + β), one step of its terms (|γ·x̂| < 4 here: 2^-9, bfloat16 2^-6).
  const bool bfloat = c.type == kBfloat;
  const std::vector<std::string> one_step{"--dim",  "N=4", "--float-range", "-4,4",
                                          "--trials", "3", "--rtol", bfloat ? "0.0078125" : "0.0009765625",
                                          "--atol", bfloat ? "0.015625" : "0.001953125"};
  const auto fused_error = ort_compare(dir / "reference.onnx", dir / "fused.onnx", one_step);
  EXPECT_TRUE(fused_error.ok) << fused_error.output;
  if (bfloat) {
    std::cout << fmt::format("[ ORT      ] {}: |float - bfloat16| fused mean {:.3g} max {:.3g}\n", c.name, fused_error.mean_abs,
                             fused_error.max_abs);
  } else {
    const auto spelled = ort_compare(dir / "reference.onnx", dir / "spelled.onnx", one_step);
    std::cout << fmt::format("[ ORT      ] {}: |float - float16| spelled out mean {:.3g} max {:.3g}, fused mean {:.3g} max {:.3g}\n",
                             c.name, spelled.mean_abs, spelled.max_abs, fused_error.mean_abs, fused_error.max_abs);
    EXPECT_TRUE(spelled.ok) << spelled.output;
    // ORT's CPU runs the spelled-out float16 ops in float between Casts, so that model is the float
    // math rounded once too; the fused kernels' one-pass variance (E[x²] - E[x]²) adds a little.
    EXPECT_LE(fused_error.mean_abs, 1.5 * spelled.mean_abs);
  }

  const auto check = run_cli({"check", (dir / "fused.onnx").string(), "--target", c.target});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

INSTANTIATE_TEST_SUITE_P(Fusion, Float16Fusion, ::testing::ValuesIn(half_cases()), [](const auto& info) { return info.param.name; });

// A bfloat16 GELU, or RMSNorm at opset 23, stays spelled out: ORT's CPU has no bfloat16 kernel for
// the fused op (RMSNormalization-23 it expands into bfloat16 arithmetic), nor for the spelled-out
// arithmetic, to prove a fusion against.
TEST(Bfloat16, GeluAndRMSNormalizationAreLeftAlone) {
  const HalfCase cases[] = {{"GeluErf", kBfloat, "ort", 17, "", gelu_erf("x"), "com.microsoft", "Gelu"},
                            {"RMSNorm_fuse", kBfloat, "onnx", 23, "", rms_norm(23), "", "RMSNormalization"}};
  const char* reasons[] = {"the element type is bfloat16; ORT's Gelu kernel takes float, float16",
                           "the element type is bfloat16; ORT has no bfloat16 RMSNormalization kernel"};
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE(cases[i].name);
    onnx::ModelProto model = parse_model_text(float_model(cases[i]));
    convert_tensors(model, onnx::TensorProto::FLOAT, kBfloat);
    declare_interface(model, kBfloat);
    RewriteOptions options;
    options.target = cases[i].target;
    options.fuse = cases[i].target == "onnx";
    options.explain = "Mul";
    const auto result = rewrite_proto(model, builtin_rules(), options);
    EXPECT_FALSE(result.result.changed());
    EXPECT_NE(result.explain.find(reasons[i]), std::string::npos) << result.explain;
  }
}

}  // namespace
}  // namespace onnx_rewrite
