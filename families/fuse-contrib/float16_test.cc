// float16 fusions (families/fuse-contrib/README.md, "Element types"): a spelled-out float16
// LayerNorm, RMSNorm, residual LayerNorm or GELU becomes the fused op, which computes in float and
// rounds once. Proven in ONNX Runtime against an independent float reference (the same math in
// float on the same float16 inputs and constants): like the spelled-out float16 model, the fused
// one is never more than one float16 step away from it, and on average about as close.
#include <gtest/gtest.h>

#include <iostream>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/tensor.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// The tensors of a model (initializers and Constant values) of one element type, converted to another.
void convert_tensors(onnx::ModelProto& model, int32_t from, int32_t to) {
  auto convert = [&](onnx::TensorProto& tensor) {
    if (tensor.data_type() != from) return;
    const auto values = decode_tensor(tensor);
    const std::string name = tensor.name();
    tensor = make_tensor(to, values->dims, values->numbers);
    tensor.set_name(name);
  };
  auto& graph = *model.mutable_graph();
  for (auto& tensor : *graph.mutable_initializer()) convert(tensor);
  for (auto& node : *graph.mutable_node()) {
    for (auto& attribute : *node.mutable_attribute()) {
      if (attribute.has_t()) convert(*attribute.mutable_t());
    }
  }
}

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
// the same numbers): each input `x` is `x_in` rounded to float16 (then widened back to float for
// the reference), each output `y` is `y_out` = Cast (y, float).
onnx::ModelProto with_float_interface(onnx::ModelProto model, bool reference) {
  auto& graph = *model.mutable_graph();
  std::vector<onnx::NodeProto> nodes;
  for (auto& input : *graph.mutable_input()) {
    const std::string name = input.name();
    input.set_name(name + "_in");
    input.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    if (reference) {
      nodes.push_back(cast(name + "_in", name + "_half", onnx::TensorProto::FLOAT16));
      nodes.push_back(cast(name + "_half", name, onnx::TensorProto::FLOAT));
    } else {
      nodes.push_back(cast(name + "_in", name, onnx::TensorProto::FLOAT16));
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

std::string rms_norm(int opset) {
  return "  two = Constant <value = float {2.0}> ()\n  p = Pow (x, two)\n" + mean_last(opset, "v", "p") +
         "  eps = Constant <value = float {1e-6}> ()\n  ve = Add (v, eps)\n  sd = Sqrt (ve)\n  n = Div (x, sd)\n"
         "  y = Mul (n, gamma)";
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

const char* kGeluTanh = R"(  three = Constant <value = float {3.0}> ()
  c = Pow (x, three)
  k_cubic = Constant <value = float {0.044715}> ()
  cm = Mul (c, k_cubic)
  i = Add (x, cm)
  k = Constant <value = float {0.7978845608}> ()
  s = Mul (i, k)
  t = Tanh (s)
  one = Constant <value = float {1.0}> ()
  a = Add (t, one)
  m = Mul (x, a)
  half = Constant <value = float {0.5}> ()
  y = Mul (m, half))";

const char* kQuickGelu = R"(  k = Constant <value = float {1.702}> ()
  t = Mul (x, k)
  s = Sigmoid (t)
  y = Mul (x, s))";

std::vector<HalfCase> half_cases() {
  return {
      {"LayerNorm", "ort", 17, "", layer_norm(17, "x"), "", "LayerNormalization"},
      {"LayerNorm_opset13", "ort", 13, "", layer_norm(13, "x"), "", "LayerNormalization"},
      {"ResidualLayerNorm", "ort", 17, ", float[N, 5, 16] r", "  xr = Add (x, r)\n" + layer_norm(17, "xr"), "com.microsoft",
       "SkipLayerNormalization"},
      {"RMSNorm", "ort", 17, "", rms_norm(17), "", "SimplifiedLayerNormalization"},  // ORT's, in the default domain
      {"GeluErf", "ort", 17, "", gelu_erf("x"), "com.microsoft", "Gelu"},
      {"GeluTanh", "ort", 17, "", kGeluTanh, "com.microsoft", "FastGelu"},
      {"BiasGelu", "ort", 17, "", "  xb = Add (x, beta)\n" + gelu_erf("xb"), "com.microsoft", "BiasGelu"},
      {"QuickGelu", "ort", 17, "", kQuickGelu, "com.microsoft", "QuickGelu"},
      {"LayerNorm_fuse", "onnx", 17, "", layer_norm(17, "x"), "", "LayerNormalization"},
      {"RMSNorm_fuse", "onnx", 23, "", rms_norm(23), "", "RMSNormalization"},
      {"GeluErf_fuse", "onnx", 20, "", gelu_erf("x"), "", "Gelu"},
      {"GeluTanh_fuse", "onnx", 20, "", kGeluTanh, "", "Gelu"},
  };
}

class Float16Fusion : public ::testing::TestWithParam<HalfCase> {};

TEST_P(Float16Fusion, IsNeverFurtherFromTheFloatMathThanTheSpelledOutForm) {
  const HalfCase& c = GetParam();
  const onnx::ModelProto float_proto = parse_model_text(float_model(c));
  onnx::ModelProto half = as_float16(float_proto);
  onnx::ModelProto reference = half;
  convert_tensors(reference, onnx::TensorProto::FLOAT16, onnx::TensorProto::FLOAT);
  for (auto* infos : {reference.mutable_graph()->mutable_input(), reference.mutable_graph()->mutable_output()}) {
    for (auto& info : *infos) info.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  half = with_float_interface(half, false);
  reference = with_float_interface(reference, true);

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
  // One float16 step is 2^-10 to 2^-11 of |y|; where a sum cancels to near 0 (γ·x̂ + β), one step
  // of its terms (|γ·x̂| < 4 here: 2^-9).
  const std::vector<std::string> one_step{"--dim", "N=4",          "--float-range", "-4,4",       "--trials",
                                          "3",     "--rtol",       "0.0009765625",  "--atol",     "0.001953125"};
  const auto spelled = ort_compare(dir / "reference.onnx", dir / "spelled.onnx", one_step);
  const auto fused_error = ort_compare(dir / "reference.onnx", dir / "fused.onnx", one_step);
  std::cout << fmt::format("[ ORT      ] {}: |float - float16| spelled out mean {:.3g} max {:.3g}, fused mean {:.3g} max {:.3g}\n",
                           c.name, spelled.mean_abs, spelled.max_abs, fused_error.mean_abs, fused_error.max_abs);
  EXPECT_TRUE(spelled.ok) << spelled.output;
  EXPECT_TRUE(fused_error.ok) << fused_error.output;
  // ORT's CPU runs the spelled-out float16 ops in float between Casts, so that model is the float
  // math rounded once too; the fused kernels' one-pass variance (E[x²] - E[x]²) adds a little.
  EXPECT_LE(fused_error.mean_abs, 1.5 * spelled.mean_abs);

  const auto check = run_cli({"check", (dir / "fused.onnx").string(), "--target", c.target});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

INSTANTIATE_TEST_SUITE_P(Fusion, Float16Fusion, ::testing::ValuesIn(half_cases()), [](const auto& info) { return info.param.name; });

// bfloat16 stays spelled out: ORT's CPU has no kernels for its spelled-out arithmetic, so no fusion
// of it could be proven.
TEST(Bfloat16Fusion, IsLeftAlone) {
  HalfCase c{"LayerNorm", "ort", 17, "", layer_norm(17, "x"), "", "LayerNormalization"};
  onnx::ModelProto model = parse_model_text(float_model(c));
  convert_tensors(model, onnx::TensorProto::FLOAT, onnx::TensorProto::BFLOAT16);
  for (auto* infos : {model.mutable_graph()->mutable_input(), model.mutable_graph()->mutable_output()}) {
    for (auto& info : *infos) info.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::BFLOAT16);
  }
  RewriteOptions options;
  options.target = "ort";
  options.explain = "Mul";
  const auto result = rewrite_proto(model, builtin_rules(), options);
  EXPECT_FALSE(result.result.changed());
  EXPECT_NE(result.explain.find("the element type is bfloat16"), std::string::npos) << result.explain;
}

}  // namespace
}  // namespace onnx_rewrite
