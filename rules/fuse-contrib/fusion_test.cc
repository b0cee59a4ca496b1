// The fusion rules (rules/fuse-contrib/fuse-*.rules, rules/fuse-contrib/contrib_fusion.cc): spelled-out GELU,
// QuickGELU, LayerNorm and RMSNorm become ONNX Runtime's fused ops under --target ort. Every
// fusion is proven in ONNX Runtime against the original model on random inputs (1e-4), and the
// result passes `onnx-rewrite check --target ort`; near misses must stay as they are, with
// --explain saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

// A fused node's attribute, or `otherwise` when it does not write it.
int64_t int_attribute(const onnx::NodeProto& node, std::string_view name, int64_t otherwise) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) return attribute.i();
  }
  return otherwise;
}

float float_attribute(const onnx::NodeProto& node, std::string_view name, float otherwise) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) return attribute.f();
  }
  return otherwise;
}

using namespace testing;

std::string model(int opset, const std::string& graph) {
  return fmt::format("<ir_version: {}, opset_import: [\"\": {}]>\n{}", ir_version_for(opset), opset, graph);
}

// Deterministic numbers for initializers: `count` values in [center - spread, center + spread).
std::string numbers(int count, double center = 0.0, double spread = 1.0, uint32_t seed = 7) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    seed = seed * 1664525u + 1013904223u;
    out.push_back(fmt::format("{:.4f}", center + spread * (2.0 * (seed >> 8) / double(1u << 24) - 1.0)));
  }
  return fmt::format("{{{}}}", fmt::join(out, ", "));
}

using Fused = Rewritten;

// Rewrites a model for ONNX Runtime with the built-in rules; `explain_op` collects --explain.
Fused fuse(const onnx::ModelProto& proto, std::optional<int> max_opset = std::nullopt, const std::string& explain_op = "") {
  RewriteOptions options;
  options.target = "ort";
  options.max_opset = max_opset;
  options.explain = explain_op;
  return rewrite_proto(proto, builtin_rules(), options);
}

Fused fuse(const std::string& text, std::optional<int> max_opset = std::nullopt, const std::string& explain_op = "") {
  return fuse(parse_model_text(text), max_opset, explain_op);
}

int count(const onnx::ModelProto& model, const std::string& domain, const std::string& op_type) {
  const auto counts = count_ops(model);
  auto it = counts.find({domain == "ai.onnx" ? "" : domain, op_type});
  return it == counts.end() ? 0 : it->second;
}

// ONNX Runtime computes the same as the original (A) with the rewritten model (B), and the
// rewritten model passes `check --target ort`. Prints the largest difference for the record.
void expect_same_in_ort(const std::string& original_text, const Fused& rewritten, const std::vector<std::string>& extra = {}) {
  TempDir dir;
  const auto original = write_model_text(original_text, dir / "original.onnx");
  const auto candidate = dir / "rewritten.onnx";
  write_file(candidate, rewritten.bytes);
  const auto comparison = ort_compare(original, candidate, extra);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::cout << fmt::format("[ ORT      ] {}.{}: max_abs {:.3g}\n", test->test_suite_name(), test->name(), comparison.max_abs);
  const auto check = run_cli({"check", candidate.string(), "--target", "ort"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

// ---- GELU ------------------------------------------------------------------------------------

struct ActivationCase {
  std::string name;
  int opset;
  std::string body;       // nodes computing y from x (float[N, 5, 8])
  std::string domain;     // the fused op expected
  std::string op_type;
  std::string attribute;  // an attribute it must carry ("approximate=tanh", "alpha=1.702"), or ""
};

std::string activation_model(const ActivationCase& c) {
  return model(c.opset, fmt::format("act (float[N, 5, 8] x) => (float[N, 5, 8] y) {{\n{}\n}}", c.body));
}

class Activation : public ::testing::TestWithParam<ActivationCase> {};

TEST_P(Activation, FusesAndComputesTheSame) {
  const auto& c = GetParam();
  const std::string text = activation_model(c);
  const auto fused = fuse(text);
  const auto& out = fused.model;
  ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
  const auto& node = out.graph().node(0);
  EXPECT_EQ(node.domain(), c.domain == "ai.onnx" ? "" : c.domain);
  EXPECT_EQ(node.op_type(), c.op_type);
  if (!c.attribute.empty()) {
    const auto name = c.attribute.substr(0, c.attribute.find('='));
    const auto value = c.attribute.substr(c.attribute.find('=') + 1);
    bool found = false;
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() != name) continue;
      found = true;
      if (attribute.type() == onnx::AttributeProto::STRING) EXPECT_EQ(attribute.s(), value);
      else EXPECT_FLOAT_EQ(attribute.f(), std::stof(value));
    }
    EXPECT_TRUE(found) << c.attribute;
  }
  expect_same_in_ort(text, fused, {"--dim", "N=3", "--float-range", "-4,4", "--trials", "3"});
}

const char* kErfTorch = R"(
  k_sqrt2 = Constant <value = float {1.4142135381698608}> ()
  h = Div (x, k_sqrt2)
  e = Erf (h)
  k_one = Constant <value = float {1.0}> ()
  a = Add (e, k_one)
  p = Mul (x, a)
  k_half = Constant <value = float {0.5}> ()
  y = Mul (p, k_half))";

INSTANTIATE_TEST_SUITE_P(
    Gelu, Activation,
    ::testing::Values(
        ActivationCase{"erf_torch", 17, kErfTorch, "com.microsoft", "Gelu", ""},
        ActivationCase{"erf_torch_opset20", 20, kErfTorch, "ai.onnx", "Gelu", ""},
        ActivationCase{"erf_half_x_first", 14, R"(
  k_half = Constant <value = float {0.5}> ()
  hx = Mul (k_half, x)
  k_inv = Constant <value = float {0.7071067811865476}> ()
  h = Mul (x, k_inv)
  e = Erf (h)
  k_one = Constant <value = float {1.0}> ()
  a = Add (k_one, e)
  y = Mul (hx, a))",
                       "com.microsoft", "Gelu", ""},
        ActivationCase{"erf_x_times_half_bracket", 17, R"(
  k_sqrt2 = Constant <value = float {1.41421}> ()
  h = Div (x, k_sqrt2)
  e = Erf (h)
  k_one = Constant <value = float {1.0}> ()
  a = Add (e, k_one)
  k_half = Constant <value = float {0.5}> ()
  q = Mul (a, k_half)
  y = Mul (x, q))",
                       "com.microsoft", "Gelu", ""},
        ActivationCase{"erf_divided_by_two", 17, R"(
  k_inv = Constant <value = float[1] {0.70710678}> ()
  h = Mul (k_inv, x)
  e = Erf (h)
  k_one = Constant <value = float {1.0}> ()
  a = Add (e, k_one)
  p = Mul (a, x)
  k_two = Constant <value = float {2.0}> ()
  y = Div (p, k_two))",
                       "com.microsoft", "Gelu", ""},
        ActivationCase{"tanh_gelu_new", 17, R"(
  k_half = Constant <value = float {0.5}> ()
  hx = Mul (x, k_half)
  k_three = Constant <value = float {3.0}> ()
  c = Pow (x, k_three)
  k_cubic = Constant <value = float {0.044715}> ()
  m = Mul (c, k_cubic)
  i = Add (x, m)
  k_s = Constant <value = float {0.7978845608028654}> ()
  s = Mul (i, k_s)
  t = Tanh (s)
  k_one = Constant <value = float {1.0}> ()
  a = Add (t, k_one)
  y = Mul (hx, a))",
                       "com.microsoft", "FastGelu", ""},
        ActivationCase{"tanh_cube_as_products_opset20", 20, R"(
  x2 = Mul (x, x)
  x3 = Mul (x2, x)
  k_cubic = Constant <value = float {0.044715}> ()
  m = Mul (k_cubic, x3)
  i = Add (m, x)
  k_s = Constant <value = float {0.7978846}> ()
  s = Mul (k_s, i)
  t = Tanh (s)
  k_one = Constant <value = float {1.0}> ()
  a = Add (k_one, t)
  xa = Mul (x, a)
  k_half = Constant <value = float {0.5}> ()
  y = Mul (xa, k_half))",
                       "ai.onnx", "Gelu", "approximate=tanh"},
        ActivationCase{"tanh_fast_gelu_activation", 17, R"(
  k_s = Constant <value = float {0.7978845608}> ()
  xs = Mul (x, k_s)
  k_cubic = Constant <value = float {0.044715}> ()
  cx = Mul (k_cubic, x)
  cxx = Mul (cx, x)
  k_one = Constant <value = float {1.0}> ()
  q = Add (k_one, cxx)
  s = Mul (xs, q)
  t = Tanh (s)
  k_one2 = Constant <value = float {1.0}> ()
  a = Add (k_one2, t)
  k_half = Constant <value = float {0.5}> ()
  hx = Mul (k_half, x)
  y = Mul (hx, a))",
                       "com.microsoft", "FastGelu", ""},
        ActivationCase{"quick_gelu_clip", 17, R"(
  k = Constant <value = float {1.702}> ()
  t = Mul (k, x)
  s = Sigmoid (t)
  y = Mul (s, x))",
                       "com.microsoft", "QuickGelu", "alpha=1.702"},
        ActivationCase{"silu", 17, R"(
  s = Sigmoid (x)
  y = Mul (x, s))",
                       "com.microsoft", "QuickGelu", "alpha=1"},
        ActivationCase{"quick_gelu_opset24", 24, R"(
  k = Constant <value = float {1.702}> ()
  t = Mul (x, k)
  s = Sigmoid (t)
  y = Mul (x, s))",
                       "com.microsoft", "QuickGelu", "alpha=1.702"}),
    [](const auto& info) { return info.param.name; });

// A Linear (MatMul + bias Add, the bias first as torch writes it) then a GELU.
std::string dense_gelu_model(int opset, const std::string& gelu_body) {
  return model(opset, fmt::format(R"(dense (float[N, S, 16] x) => (float[N, S, 8] y)
    <float[16, 8] w = {}, float[8] bias = {}> {{
  mm = MatMul (x, w)
  g = Add (bias, mm)
{}
}})",
                                  numbers(128, 0, 0.5), numbers(8, 0, 0.5, 11), gelu_body));
}

const char* kErfOfG = R"(
  k_sqrt2 = Constant <value = float {1.4142135381698608}> ()
  h = Div (g, k_sqrt2)
  e = Erf (h)
  k_one = Constant <value = float {1.0}> ()
  a = Add (e, k_one)
  p = Mul (g, a)
  k_half = Constant <value = float {0.5}> ()
  y = Mul (p, k_half))";

const char* kTanhOfG = R"(
  k_half = Constant <value = float {0.5}> ()
  hx = Mul (g, k_half)
  k_three = Constant <value = float {3.0}> ()
  c = Pow (g, k_three)
  k_cubic = Constant <value = float {0.044715}> ()
  m = Mul (c, k_cubic)
  i = Add (g, m)
  k_s = Constant <value = float {0.7978845608028654}> ()
  s = Mul (i, k_s)
  t = Tanh (s)
  k_one = Constant <value = float {1.0}> ()
  a = Add (t, k_one)
  y = Mul (hx, a))";

TEST(BiasGelu, AddThenErfGeluIsBiasGeluAtEveryOpset) {
  for (int opset : {14, 17, 20}) {
    SCOPED_TRACE(opset);
    const auto text = dense_gelu_model(opset, kErfOfG);
    const auto fused = fuse(text);
    const auto& out = fused.model;
    EXPECT_EQ(count(out, "com.microsoft", "BiasGelu"), 1);
    EXPECT_EQ(out.graph().node_size(), 2) << canonical_nodes(out, interface_names(out));  // MatMul, BiasGelu
    EXPECT_EQ(fused.result.rules.at("fuse-bias-gelu").matches, 1);
    expect_same_in_ort(text, fused, {"--dim", "N=2", "--dim", "S=7", "--float-range", "-2,2"});
  }
}

TEST(BiasGelu, AddThenTanhGeluIsFastGeluWithBias) {
  for (int opset : {17, 20}) {
    SCOPED_TRACE(opset);
    const auto text = dense_gelu_model(opset, kTanhOfG);
    const auto fused = fuse(text);
    const auto& out = fused.model;
    ASSERT_EQ(count(out, "com.microsoft", "FastGelu"), 1);
    for (const auto& node : out.graph().node()) {
      if (node.op_type() == "FastGelu") {
        EXPECT_EQ(node.input_size(), 2);  // x and the bias
      }
    }
    EXPECT_EQ(out.graph().node_size(), 2);
    expect_same_in_ort(text, fused, {"--dim", "N=2", "--dim", "S=3", "--float-range", "-2,2"});
  }
}

TEST(BiasGelu, BiasOfAnotherShapeStaysAnAdd) {
  // A [1, 8] bias: ORT's BiasGelu takes a 1-D bias only, so the GELU fuses alone.
  const auto text = model(17, fmt::format(R"(dense (float[N, 16] x) => (float[N, 8] y) <float[16, 8] w = {}, float[1, 8] bias = {}> {{
  mm = MatMul (x, w)
  g = Add (mm, bias)
{}
}})",
                                          numbers(128), numbers(8, 0, 1, 3), kErfOfG));
  const auto fused = fuse(text, std::nullopt, "Gelu");
  const auto& out = fused.model;
  EXPECT_EQ(count(out, "com.microsoft", "Gelu"), 1);
  EXPECT_EQ(count(out, "com.microsoft", "BiasGelu"), 0);
  EXPECT_EQ(count(out, "ai.onnx", "Add"), 1);
  EXPECT_NE(fused.explain.find("takes a 1-D bias of the last axis' length"), std::string::npos) << fused.explain;
  expect_same_in_ort(text, fused, {"--dim", "N=4"});
}

TEST(GeluNearMiss, WrongConstantIsNotGelu) {
  // x / 1.5 instead of x / √2.
  std::string body = kErfTorch;
  body.replace(body.find("1.4142135381698608"), 18, "1.5");
  const auto text = activation_model({"", 17, body, "", "", ""});
  const auto fused = fuse(text, std::nullopt, "Mul");
  EXPECT_FALSE(fused.result.changed());
  EXPECT_NE(fused.explain.find("fuse-gelu-erf"), std::string::npos);
  EXPECT_NE(fused.explain.find("holds 1.5, not ≈ 1.41421356 ± 0.0001"), std::string::npos) << fused.explain;
}

TEST(GeluNearMiss, DoubleIsNotFusedForOrtsFloatKernels) {
  std::string body = kErfTorch;
  for (size_t at; (at = body.find("float {")) != std::string::npos;) body.replace(at, 5, "double");
  const auto text = model(17, fmt::format("act (double[N, 8] x) => (double[N, 8] y) {{\n{}\n}}", body));
  const auto fused = fuse(text, std::nullopt, "Mul");
  EXPECT_FALSE(fused.result.changed());
  EXPECT_NE(fused.explain.find("the element type is double; ORT's Gelu kernel takes float"), std::string::npos) << fused.explain;
}

TEST(GeluNearMiss, IntermediateUsedElsewhereBlocksTheFusion) {
  const auto text = model(17, fmt::format("act (float[N, 8] x) => (float[N, 8] y, float[N, 8] e) {{\n{}\n}}", kErfTorch));
  const auto fused = fuse(text, std::nullopt, "Mul");
  EXPECT_FALSE(fused.result.changed());
  EXPECT_NE(fused.explain.find("'e', computed inside the match, is an output of the main graph"), std::string::npos) << fused.explain;
}

TEST(QuickGeluNearMiss, PerChannelAlphaIsNotQuickGelu) {
  const auto text = model(17, R"(act (float[N, 4] x) => (float[N, 4] y) <float[4] k = {1.702, 1.702, 1.0, 1.0}> {
  t = Mul (x, k)
  s = Sigmoid (t)
  y = Mul (x, s)
})");
  const auto fused = fuse(text, std::nullopt, "Mul");
  EXPECT_EQ(count(fused.model, "com.microsoft", "QuickGelu"), 0);
  EXPECT_NE(fused.explain.find("is not a constant scalar"), std::string::npos) << fused.explain;
}

// ---- LayerNorm and RMSNorm -------------------------------------------------------------------

struct Spelling {
  std::string square = "Pow";   // Pow (d, 2) | Mul (d, d)
  std::string inverse = "Div";  // Div (d, s) | Reciprocal | DivOne: Mul (d, Div (1, s))
  bool axes_input = false;      // ReduceMean axes as an input (opset >= 18)
  std::string name() const { return square + "_" + inverse + (axes_input ? "_axes_input" : "_axes_attribute"); }
};

// Nodes computing `y` = LayerNorm (or RMSNorm when `rms`) of `x` over `axes` ("-1", "-2, -1"),
// times `gamma`, plus `beta` unless empty. Names start with `p`.
std::string spelled_norm(bool rms, const std::string& x, const std::string& y, const std::string& axes, const Spelling& s,
                         const std::string& gamma, const std::string& beta, const std::string& p = "", double eps = 1e-5) {
  std::string out;
  auto line = [&](const std::string& text) { out += "  " + text + "\n"; };
  const auto n_axes = std::count(axes.begin(), axes.end(), ',') + 1;
  auto reduce = [&](const std::string& value, const std::string& result) {
    if (s.axes_input) {
      line(fmt::format("{}{}_axes = Constant <value = int64[{}] {{{}}}> ()", p, result, n_axes, axes));
      line(fmt::format("{0}{1} = ReduceMean ({2}, {0}{1}_axes)", p, result, value));
    } else {
      line(fmt::format("{}{} = ReduceMean <axes = [{}]> ({})", p, result, axes, value));
    }
  };
  std::string d = x;
  if (!rms) {
    reduce(x, "mean");
    line(fmt::format("{0}d = Sub ({1}, {0}mean)", p, x));
    d = p + "d";
  }
  if (s.square == "Pow") {
    line(fmt::format("{}two = Constant <value = float {{2.0}}> ()", p));
    line(fmt::format("{0}sq = Pow ({1}, {0}two)", p, d));
  } else {
    line(fmt::format("{0}sq = Mul ({1}, {1})", p, d));
  }
  reduce(p + "sq", "var");
  line(fmt::format("{}eps = Constant <value = float {{{}}}> ()", p, eps));
  line(fmt::format("{0}ve = Add ({0}var, {0}eps)", p));
  line(fmt::format("{0}s = Sqrt ({0}ve)", p));
  const std::string scaled = beta.empty() ? y : p + "g";
  if (s.inverse == "Div") {
    line(fmt::format("{0}n = Div ({1}, {0}s)", p, d));
    line(fmt::format("{} = Mul ({}n, {})", scaled, p, gamma));
  } else {
    if (s.inverse == "Reciprocal") {
      line(fmt::format("{0}r = Reciprocal ({0}s)", p));
    } else {
      line(fmt::format("{}one = Constant <value = float {{1.0}}> ()", p));
      line(fmt::format("{0}r = Div ({0}one, {0}s)", p));
    }
    line(fmt::format("{0}n = Mul ({1}, {0}r)", p, d));
    line(fmt::format("{} = Mul ({}, {}n)", scaled, gamma, p));
  }
  if (!beta.empty()) line(fmt::format("{} = Add ({}g, {})", y, p, beta));
  return out;
}

std::vector<Spelling> all_spellings() {
  std::vector<Spelling> spellings;
  for (const char* square : {"Pow", "Mul"}) {
    for (const char* inverse : {"Div", "Reciprocal", "DivOne"}) {
      for (bool axes_input : {false, true}) spellings.push_back({square, inverse, axes_input});
    }
  }
  return spellings;
}

// A LayerNorm over the last axis of [N, 5, 16], with γ and β, in `type` (float or double).
std::string layer_norm_model(const Spelling& s, int opset, const std::string& type = "float") {
  std::string body = spelled_norm(false, "x", "y", "-1", s, "gamma", "beta");
  for (size_t at; type != "float" && (at = body.find("float {")) != std::string::npos;) body.replace(at, 5, type);
  return model(opset, fmt::format(R"(ln ({0}[N, 5, 16] x) => ({0}[N, 5, 16] y) <{0}[16] gamma = {1}, {0}[16] beta = {2}> {{
{3}}})",
                                  type, numbers(16, 1.0, 0.5), numbers(16, 0.0, 0.5, 5), body));
}

class LayerNormSpelling : public ::testing::TestWithParam<Spelling> {};

TEST_P(LayerNormSpelling, IsLayerNormalization) {
  const Spelling& s = GetParam();
  const int opset = s.axes_input ? 18 : 17;
  const auto text = layer_norm_model(s, opset);
  const auto fused = fuse(text);
  const auto& out = fused.model;
  ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
  EXPECT_EQ(out.graph().node(0).op_type(), "LayerNormalization");
  EXPECT_EQ(out.graph().node(0).input_size(), 3);  // x, γ, β
  EXPECT_EQ(fused.result.rules.at("fuse-layernorm").matches, 1);
  EXPECT_EQ(fused.result.rules.at("fuse-layernorm-bias").matches, 1);
  expect_same_in_ort(text, fused, {"--dim", "N=3", "--float-range", "-3,5"});
}

INSTANTIATE_TEST_SUITE_P(Fusion, LayerNormSpelling, ::testing::ValuesIn(all_spellings()),
                         [](const auto& info) { return info.param.name(); });

// ---- ONNX's function body of LayerNormalization-17/18 -------------------------------------------

struct BodyCase {
  std::string name;
  std::vector<int64_t> dims;
  int64_t axis;
  int opset;          // 17: ReduceMean axes attribute; 18: a constant input
  bool bias;
  bool mean_used = false;         // the Mean output is a graph output
  bool inv_std_dev_used = false;  // the InvStdDev output is
};

// The LayerNormalization-17/18 node as ONNX's context-dependent function body expands it
// (onnx/defs/nn/defs.cc), node for node, with the dead nodes it leaves when Mean and InvStdDev
// are not used.
std::string layer_norm_body(const BodyCase& c) {
  std::vector<std::string> dims;
  for (int64_t d : c.dims) dims.push_back(std::to_string(d));
  const int64_t rank = static_cast<int64_t>(c.dims.size());
  const int64_t first = c.axis < 0 ? c.axis + rank : c.axis;
  std::vector<std::string> normalized(dims.begin() + first, dims.end());
  int64_t count = 1;
  for (int64_t i = first; i < rank; ++i) count *= c.dims[static_cast<size_t>(i)];
  std::vector<std::string> reduced = dims;
  for (int64_t i = first; i < rank; ++i) reduced[static_cast<size_t>(i)] = "1";
  std::string means = c.opset == 17 ? "mean2d = ReduceMean <axes = [1]> (xu)\n  square = Mul (xu, xu)\n"
                                      "  mean_of_square = ReduceMean <axes = [1]> (square)"
                                    : "axes_1 = Constant <value = int64[1] {1}> ()\n  mean2d = ReduceMean (xu, axes_1)\n"
                                      "  square = Mul (xu, xu)\n  mean_of_square = ReduceMean (square, axes_1)";
  const std::string reduced_type = fmt::format("float[{}]", fmt::join(reduced, ", "));
  std::string extra_outputs, extra_nodes;
  if (c.mean_used) {
    extra_outputs += ", " + reduced_type + " mean";
    extra_nodes += "mean = Reshape (mean2d, reduced_shape)\n  ";
  }
  if (c.inv_std_dev_used) {
    extra_outputs += ", " + reduced_type + " inv_std_dev";
    extra_nodes += "inv_std_dev = Reshape (inv_std_dev2d, reduced_shape)";
  }
  return model(c.opset, fmt::format(R"(ln_body (float[{0}] x) => (float[{0}] y{1}) <float[{2}] scale = {3}{4}> {{
  float_epsilon = Constant <value = float {{1e-5}}> ()
  epsilon = Cast <to = 1> (float_epsilon)
  x_shape = Shape (x)
  rank = Size (x_shape)
  zero1d = Constant <value = int64[1] {{0}}> ()
  axis1d = Constant <value = int64[1] {{{5}}}> ()
  prefix_shape = Slice (x_shape, zero1d, axis1d)
  {6}
  suffix_shape = ConstantOfShape <value = int64[1] {{1}}> (num_reduced_axes)
  reduced_shape = Concat <axis = 0> (prefix_shape, suffix_shape)
  x2d = Flatten <axis = {5}> (x)
  xu = Cast <to = 1> (x2d)
  {7}
  square_of_mean = Mul (mean2d, mean2d)
  var = Sub (mean_of_square, square_of_mean)
  var_plus_epsilon = Add (var, epsilon)
  std_dev = Sqrt (var_plus_epsilon)
  deviation = Sub (xu, mean2d)
  normalized = Div (deviation, std_dev)
  normalized_t = Cast <to = 1> (normalized)
  scale2d = Flatten <axis = 0> (scale)
  scaled = Mul (normalized_t, scale2d)
  {8}
  y = Reshape (biased, x_shape)
  inv_std_dev2d = Reciprocal (std_dev)
  {9}
}})",
      fmt::join(dims, ", "), extra_outputs,
      fmt::join(normalized, ", "), numbers(static_cast<int>(count), 1.0, 0.5),
      c.bias ? fmt::format(", float[{}] bias = {}", fmt::join(normalized, ", "), numbers(static_cast<int>(count), 0.0, 0.5, 5)) : "",
      c.axis, c.axis >= 0 ? "num_reduced_axes = Sub (rank, axis1d)" : "num_reduced_axes = Neg (axis1d)", means,
      c.bias ? "bias2d = Flatten <axis = 0> (bias)\n  biased = Add (scaled, bias2d)" : "biased = Identity (scaled)",
      extra_nodes));
}

class LayerNormFunctionBody : public ::testing::TestWithParam<BodyCase> {};

TEST_P(LayerNormFunctionBody, IsLayerNormalizationAgain) {
  const BodyCase& c = GetParam();
  const auto text = layer_norm_body(c);
  const auto fused = fuse(text);
  const auto& out = fused.model;
  ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
  const auto& node = out.graph().node(0);
  EXPECT_EQ(node.op_type(), "LayerNormalization");
  EXPECT_EQ(node.input_size(), c.bias ? 3 : 2);
  EXPECT_EQ(int_attribute(node, "axis", 99), c.axis);
  EXPECT_FLOAT_EQ(float_attribute(node, "epsilon", 0), 1e-5f);
  EXPECT_EQ(fused.result.rules.at("fuse-layernorm-function-body").matches, 1);
  expect_same_in_ort(text, fused, {"--float-range", "-3,5"});

  // The same with --fuse for standard ONNX runtimes.
  TempDir dir;
  const auto input = write_model_text(text, dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--fuse"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto standard = read_model(dir / "out.onnx");
  ASSERT_EQ(standard.graph().node_size(), 1) << result.out;
  EXPECT_EQ(standard.graph().node(0).op_type(), "LayerNormalization");
  EXPECT_TRUE(ort_compare(input, dir / "out.onnx", {"--float-range", "-3,5"}).ok);
}

// The body ONNX writes for a float16 x: the statistics in float between the stash Cast and the
// Cast back to float16. The fused op computes the same way (stash_type 1).
TEST(LayerNormFunctionBody, Float16IsLayerNormalizationAgain) {
  auto proto = as_float16(parse_model_text(layer_norm_body({"last_axis_bias_17", {2, 3, 8}, -1, 17, true})));
  for (auto& node : *proto.mutable_graph()->mutable_node()) {
    if (node.output(0) != "normalized_t") continue;
    node.mutable_attribute(0)->set_i(onnx::TensorProto::FLOAT16);  // the Cast to the output's type
  }
  const auto fused = fuse(proto);
  ASSERT_EQ(fused.model.graph().node_size(), 1) << canonical_nodes(fused.model, interface_names(fused.model));
  EXPECT_EQ(fused.model.graph().node(0).op_type(), "LayerNormalization");
  TempDir dir;
  write_file(dir / "body.onnx", serialize(proto));
  write_file(dir / "fused.onnx", fused.bytes);
  // One float16 step of |y| < 8.
  const auto comparison = ort_compare(dir / "body.onnx", dir / "fused.onnx", {"--float-range", "-3,5", "--atol", "0.004", "--rtol", "0"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers("layer_norm_body_float16", comparison);
}

INSTANTIATE_TEST_SUITE_P(Fusion, LayerNormFunctionBody,
                         ::testing::Values(BodyCase{"last_axis_bias_17", {2, 3, 8}, -1, 17, true},
                                           BodyCase{"axis1_no_bias_18", {2, 3, 4}, 1, 18, false},
                                           BodyCase{"axis2_of_4d_bias_17", {2, 3, 4, 5}, 2, 17, true},
                                           BodyCase{"axis0_bias_18", {3, 4}, 0, 18, true},
                                           BodyCase{"axis_minus3_of_4d_17", {2, 3, 4, 5}, -3, 17, false}),
                         [](const auto& info) { return info.param.name; });

// With the Mean or InvStdDev output used, they come from the op's own outputs, made 2-D again
// for the body's Reshapes to the reduced shape (which stay).
class LayerNormFunctionBodyOutputs : public ::testing::TestWithParam<BodyCase> {};

TEST_P(LayerNormFunctionBodyOutputs, ComeFromTheOpsOwnOutputs) {
  const BodyCase& c = GetParam();
  const auto text = layer_norm_body(c);
  const auto fused = fuse(text);
  const auto& out = fused.model;
  EXPECT_EQ(fused.result.rules.at("fuse-layernorm-function-body").matches, 1);
  ASSERT_EQ(count(out, "", "LayerNormalization"), 1) << canonical_nodes(out, interface_names(out));
  EXPECT_EQ(count(out, "", "ReduceMean"), 0);
  EXPECT_EQ(count(out, "", "Reciprocal"), 0);
  EXPECT_EQ(count(out, "", "Sqrt"), 0);
  for (const auto& node : out.graph().node()) {
    if (node.op_type() == "LayerNormalization") {
      EXPECT_EQ(node.output_size(), 3);
    }
  }
  // Two Reshapes per output read: to 2-D, then (the body's own) to the reduced shape.
  EXPECT_EQ(count(out, "", "Reshape"), 2 * (int{c.mean_used} + int{c.inv_std_dev_used}));
  expect_same_in_ort(text, fused, {"--float-range", "-3,5"});

  // The same with --fuse, as the standard op.
  TempDir dir;
  const auto input = write_model_text(text, dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--fuse"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto standard = read_model(dir / "out.onnx");
  EXPECT_EQ(count(standard, "", "LayerNormalization"), 1) << result.out;
  EXPECT_EQ(count(standard, "", "ReduceMean"), 0) << result.out;
  EXPECT_TRUE(ort_compare(input, dir / "out.onnx", {"--float-range", "-3,5"}).ok);
}

INSTANTIATE_TEST_SUITE_P(Fusion, LayerNormFunctionBodyOutputs,
                         ::testing::Values(BodyCase{"mean_17", {2, 3, 8}, -1, 17, true, true, false},
                                           BodyCase{"inv_std_dev_18", {2, 3, 4, 5}, 2, 18, false, false, true},
                                           BodyCase{"both_axis1_17", {2, 3, 4}, 1, 17, true, true, true},
                                           BodyCase{"both_axis_minus2_18", {2, 3, 4, 5}, -2, 18, true, true, true}),
                         [](const auto& info) { return info.param.name; });

// Below opset 17 ONNX Runtime's own LayerNormalization (default domain, version 1, the op its
// optimizer writes there) is used at the model's opset: no import raised, also under --opset 16.
TEST(LayerNorm, BelowOpset17ItIsOrtsLayerNormalizationAtTheModelsOpset) {
  for (int opset : {9, 14}) {
    const auto text = layer_norm_model({}, opset);
    for (std::optional<int> cap : {std::optional<int>{}, std::optional<int>{16}}) {
      const auto fused = fuse(text, cap);
      const auto& out = fused.model;
      ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
      EXPECT_EQ(count(out, "ai.onnx", "LayerNormalization"), 1);
      EXPECT_EQ(opset_import(out, ""), opset);
      expect_same_in_ort(text, fused, {"--dim", "N=2"});
    }
  }
}

TEST(LayerNorm, TrailingAxesGivenEveryWay) {
  // Over the last two axes of [N, 5, 16] (γ and β [5, 16]), with axes [-2, -1] or [1, 2]; over
  // the last axis as [2]; without β.
  struct Variant {
    std::string axes, params, beta;
    int64_t axis;
  };
  for (const auto& v : {Variant{"-2, -1", "5, 16", "beta", -2}, Variant{"1, 2", "5, 16", "beta", -2}, Variant{"2", "16", "beta", -1},
                        Variant{"-1", "16", "", -1}}) {
    for (bool axes_input : {false, true}) {
      SCOPED_TRACE(v.axes + (axes_input ? " as input" : ""));
      const int elements = v.params == "16" ? 16 : 80;
      const auto text = model(axes_input ? 18 : 17, fmt::format(R"(ln (float[N, 5, 16] x) => (float[N, 5, 16] y)
    <float[{0}] gamma = {1}, float[{0}] beta = {2}> {{
{3}}})",
                                                                v.params, numbers(elements, 1.0, 0.5), numbers(elements, 0, 0.5, 9),
                                                                spelled_norm(false, "x", "y", v.axes, {"Pow", "Div", axes_input},
                                                                             "gamma", v.beta)));
      const auto fused = fuse(text);
    const auto& out = fused.model;
      ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
      const auto& node = out.graph().node(0);
      EXPECT_EQ(node.op_type(), "LayerNormalization");
      EXPECT_EQ(node.input_size(), v.beta.empty() ? 2 : 3);
      EXPECT_EQ(node.attribute(0).name(), "axis");
      EXPECT_EQ(node.attribute(0).i(), v.axis);
      expect_same_in_ort(text, fused, {"--dim", "N=2", "--float-range", "-2,2"});
    }
  }
}

TEST(LayerNorm, DoubleFuses) {
  const auto text = layer_norm_model({"Mul", "Reciprocal", false}, 17, "double");
  const auto fused = fuse(text);
    const auto& out = fused.model;
  EXPECT_EQ(count(out, "ai.onnx", "LayerNormalization"), 1);
  EXPECT_EQ(out.graph().node_size(), 1);
  expect_same_in_ort(text, fused, {"--dim", "N=2"});
}

struct NearMiss {
  std::string name;
  std::string text;
  std::string explain_op;
  std::string reason;  // what --explain must say
};

class LayerNormNearMiss : public ::testing::TestWithParam<NearMiss> {};

TEST_P(LayerNormNearMiss, StaysSpelledOutAndExplainSaysWhy) {
  const auto& c = GetParam();
  const auto fused = fuse(c.text, std::nullopt, c.explain_op);
  EXPECT_EQ(count(fused.model, "ai.onnx", "LayerNormalization"), 0);
  EXPECT_EQ(count(fused.model, "ai.onnx", "RMSNormalization"), 0);
  EXPECT_EQ(fused.model.graph().node_size(), parse_model_text(c.text).graph().node_size());
  EXPECT_NE(fused.explain.find(c.reason), std::string::npos) << fused.explain;
}

std::string layer_norm_text(const std::string& signature, const std::string& body, int opset = 17) {
  return model(opset, fmt::format("{} {{\n{}}}", signature, body));
}

const std::string kLnSignature =
    fmt::format("ln (float[N, 5, 16] x) => (float[N, 5, 16] y) <float[16] gamma = {}>", numbers(16, 1.0, 0.5));

std::string replace_line(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

INSTANTIATE_TEST_SUITE_P(
    Fusion, LayerNormNearMiss,
    ::testing::Values(
        NearMiss{"mean_used_elsewhere",
                 layer_norm_text("ln (float[N, 5, 16] x) => (float[N, 5, 16] y, float[N, 5, 1] mean) <float[16] gamma = " +
                                     numbers(16, 1.0, 0.5) + ">",
                                 spelled_norm(false, "x", "y", "-1", {}, "gamma", "")),
                 "Mul", "'mean', computed inside the match, is an output of the main graph"},
        NearMiss{"mean_read_by_another_node",
                 layer_norm_text("ln (float[N, 5, 16] x) => (float[N, 5, 16] y, float[N, 5, 1] z) <float[16] gamma = " +
                                     numbers(16, 1.0, 0.5) + ">",
                                 spelled_norm(false, "x", "y", "-1", {}, "gamma", "") + "  z = Neg (mean)\n"),
                 "Mul", "'mean', computed inside the match, is also used by node 'Neg -> z'"},
        NearMiss{"mean_used_elsewhere_opset18_is_no_rms_norm_either",
                 layer_norm_text("ln (float[N, 5, 16] x) => (float[N, 5, 16] y, float[N, 5, 1] mean) <float[16] gamma = " +
                                     numbers(16, 1.0, 0.5) + ">",
                                 spelled_norm(false, "x", "y", "-1", {"Pow", "Div", true}, "gamma", ""), 18),
                 "Mul", "x is x' - mean(x'): a LayerNorm's, not an RMSNorm"},
        NearMiss{"non_trailing_axis", layer_norm_text(kLnSignature, spelled_norm(false, "x", "y", "1", {}, "gamma", "")), "Mul",
                 "a ReduceMean reduces axes [1], not trailing axes"},
        NearMiss{"different_axes",
                 layer_norm_text(kLnSignature, replace_line(spelled_norm(false, "x", "y", "-1", {}, "gamma", ""),
                                                            "var = ReduceMean <axes = [-1]>", "var = ReduceMean <axes = [-2, -1]>")),
                 "Mul", "the two ReduceMeans reduce different axes"},
        NearMiss{"epsilon_outside_the_root",
                 layer_norm_text(kLnSignature, replace_line(replace_line(spelled_norm(false, "x", "y", "-1", {}, "gamma", ""),
                                                                         "ve = Add (var, eps)", "ve = Sqrt (var)"),
                                                            "s = Sqrt (ve)", "s = Add (ve, eps)")),
                 "Mul", "the pattern wants ai.onnx.Sqrt"},
        NearMiss{"keepdims_0",
                 layer_norm_text(kLnSignature, replace_line(spelled_norm(false, "x", "y", "-1", {}, "gamma", ""),
                                                            "mean = ReduceMean <axes = [-1]>",
                                                            "mean = ReduceMean <axes = [-1], keepdims = 0>")),
                 "Mul", "attribute keepdims = 0, the pattern wants 1"},
        NearMiss{"scalar_gamma",
                 layer_norm_text("ln (float[N, 5, 16] x) => (float[N, 5, 16] y) <float[1] gamma = {1.5}>",
                                 spelled_norm(false, "x", "y", "-1", {}, "gamma", "")),
                 "Mul", "γ 'gamma' has shape [1], the normalized axes of x have [16]"},
        NearMiss{"axes_not_constant",
                 layer_norm_text("ln (float[N, 5, 16] x, int64[1] axes) => (float[N, 5, 16] y) <float[16] gamma = " +
                                     numbers(16, 1.0, 0.5) + ">",
                                 replace_line(spelled_norm(false, "x", "y", "-1", {"Pow", "Div", true}, "gamma", ""),
                                              "mean = ReduceMean (x, mean_axes)", "mean = ReduceMean (x, axes)"),
                                 18),
                 "Mul", "the axes 'axes' of a ReduceMean are not a constant"},
        NearMiss{"empty_axes_that_reduce_nothing",
                 layer_norm_text(kLnSignature,
                                 replace_line(spelled_norm(false, "x", "y", "-1", {"Pow", "Div", true}, "gamma", ""),
                                              "mean = ReduceMean (x, mean_axes)",
                                              "no_axes = Constant <value = int64[0] {}> ()\n"
                                              "  mean = ReduceMean <noop_with_empty_axes = 1> (x, no_axes)"),
                                 18),
                 "Mul", "a ReduceMean without axes and with noop_with_empty_axes=1 reduces nothing"}),
    [](const auto& info) { return info.param.name; });

// ---- Residual Add + normalization -------------------------------------------------------------

std::string residual_model(bool rms, const Spelling& s, int opset, const std::string& a_shape, const std::string& b_shape,
                           bool sum_is_output) {
  const std::string outputs = sum_is_output ? "float[N, S, 16] y, float[N, S, 16] h" : "float[N, S, 16] y";
  const std::string params = rms ? fmt::format("float[16] gamma = {}", numbers(16, 1.0, 0.5))
                                 : fmt::format("float[16] gamma = {}, float[16] beta = {}", numbers(16, 1.0, 0.5),
                                               numbers(16, 0.0, 0.5, 5));
  return model(opset, fmt::format("block (float[{}] a, float[{}] b) => ({}) <{}> {{\n  h = Add (a, b)\n{}}}", a_shape, b_shape,
                                  outputs, params, spelled_norm(rms, "h", "y", "-1", s, "gamma", rms ? "" : "beta", "n_")));
}

TEST(SkipLayerNorm, ResidualAddThenLayerNorm) {
  for (int opset : {14, 17, 18}) {
    for (bool sum_is_output : {false, true}) {
      SCOPED_TRACE(fmt::format("opset {}, sum is an output: {}", opset, sum_is_output));
      const auto text = residual_model(false, {"Pow", "Div", opset >= 18}, opset, "N, S, 16", "N, S, 16", sum_is_output);
      const auto fused = fuse(text);
      const auto& out = fused.model;
      ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
      const auto& node = out.graph().node(0);
      EXPECT_EQ(node.op_type(), "SkipLayerNormalization");
      EXPECT_EQ(node.input_size(), 4);  // input, skip, γ, β
      EXPECT_EQ(node.output_size(), sum_is_output ? 4 : 1);
      if (sum_is_output) {
        EXPECT_EQ(node.output(3), "h");
      }
      expect_same_in_ort(text, fused, {"--dim", "N=2", "--dim", "S=7"});
    }
  }
}

TEST(SkipLayerNorm, SkipBroadcastOverTheBatchGoesSecond) {
  // b [1, S, 16] + a [N, S, 16] and b [S, 16] + a [N, S, 16]: a has the sum's shape, so a is the input.
  for (const char* b_shape : {"1, S, 16", "S, 16"}) {
    SCOPED_TRACE(b_shape);
    std::string text = residual_model(false, {}, 17, "N, S, 16", b_shape, false);
    text = replace_line(text, "h = Add (a, b)", "h = Add (b, a)");
    const auto fused = fuse(text);
    const auto& out = fused.model;
    ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
    EXPECT_EQ(out.graph().node(0).op_type(), "SkipLayerNormalization");
    EXPECT_EQ(out.graph().node(0).input(0), "a");
    EXPECT_EQ(out.graph().node(0).input(1), "b");
    expect_same_in_ort(text, fused, {"--dim", "N=3", "--dim", "S=5"});
  }
}

TEST(SkipLayerNorm, ShapesOrtDoesNotTakeStayLayerNormalization) {
  struct Variant {
    std::string a, b, reason;
  };
  for (const auto& v : {Variant{"N, S, 2, 16", "N, S, 2, 16", "Skip*LayerNormalization takes rank 2 or 3"},
                        Variant{"N, S, 16", "N, 1, 16", "not provably the same or a broadcast ORT takes"},
                        Variant{"N, S, 16", "N, T, 16", "not provably the same or a broadcast ORT takes"}}) {
    SCOPED_TRACE(v.a + " + " + v.b);
    std::string text = residual_model(false, {}, 17, v.a, v.b, false);
    // The outputs have the operands' rank.
    if (v.a.starts_with("N, S, 2")) {
      text = replace_line(text, "=> (float[N, S, 16] y)", "=> (float[N, S, 2, 16] y)");
    }
    const auto fused = fuse(text, std::nullopt, "LayerNormalization");
    const auto& out = fused.model;
    EXPECT_EQ(count(out, "ai.onnx", "LayerNormalization"), 1);
    EXPECT_EQ(count(out, "com.microsoft", "SkipLayerNormalization"), 0);
    EXPECT_NE(fused.explain.find(v.reason), std::string::npos) << fused.explain;
  }
}

TEST(SkipLayerNorm, DoubleStaysLayerNormalizationForOrtsFloatOnlySkipKernels) {
  // ORT's Skip*LayerNormalization schemas refuse double; LayerNormalization and RMSNormalization take it.
  for (bool rms : {false, true}) {
    SCOPED_TRACE(rms ? "RMSNorm" : "LayerNorm");
    const int opset = rms ? 23 : 17;
    std::string text = residual_model(rms, {"Pow", "Div", opset >= 18}, opset, "N, S, 16", "N, S, 16", false);
    for (size_t at; (at = text.find("float")) != std::string::npos;) text.replace(at, 5, "double");
    const auto fused = fuse(text, std::nullopt, rms ? "RMSNormalization" : "LayerNormalization");
    const auto& out = fused.model;
    EXPECT_EQ(count(out, "ai.onnx", rms ? "RMSNormalization" : "LayerNormalization"), 1);
    EXPECT_EQ(count(out, "com.microsoft", rms ? "SkipSimplifiedLayerNormalization" : "SkipLayerNormalization"), 0);
    EXPECT_NE(fused.explain.find("the element type is double; ORT's Skip"), std::string::npos) << fused.explain;
    expect_same_in_ort(text, fused, {"--dim", "N=2", "--dim", "S=3"});
  }
}

TEST(SkipLayerNorm, ExportedLayerNormalizationWithResidual) {
  // torch >= opset 17 writes LayerNormalization itself.
  const auto text = model(17, fmt::format(R"(block (float[N, S, 16] a, float[N, S, 16] b) => (float[N, S, 16] y)
    <float[16] gamma = {}, float[16] beta = {}> {{
  h = Add (a, b)
  y = LayerNormalization <axis = -1, epsilon = 1e-12> (h, gamma, beta)
}})",
                                          numbers(16, 1.0, 0.5), numbers(16, 0.0, 0.5, 5)));
  const auto fused = fuse(text);
    const auto& out = fused.model;
  EXPECT_EQ(count(out, "com.microsoft", "SkipLayerNormalization"), 1);
  EXPECT_EQ(out.graph().node_size(), 1);
  expect_same_in_ort(text, fused, {"--dim", "N=2", "--dim", "S=4"});
}

class SkipRmsNormSpelling : public ::testing::TestWithParam<Spelling> {};

TEST_P(SkipRmsNormSpelling, IsSkipSimplifiedLayerNormalization) {
  const Spelling& s = GetParam();
  // The residual sum is an output: pre-norm transformers carry it to the next block.
  const auto text = residual_model(true, s, s.axes_input ? 18 : 17, "N, S, 16", "N, S, 16", true);
  const auto fused = fuse(text);
  const auto& out = fused.model;
  ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
  const auto& node = out.graph().node(0);
  EXPECT_EQ(node.op_type(), "SkipSimplifiedLayerNormalization");
  EXPECT_EQ(node.input_size(), 3);
  ASSERT_EQ(node.output_size(), 4);
  EXPECT_EQ(node.output(3), "h");
  expect_same_in_ort(text, fused, {"--dim", "N=2", "--dim", "S=6", "--float-range", "-3,3"});
}

INSTANTIATE_TEST_SUITE_P(Fusion, SkipRmsNormSpelling, ::testing::ValuesIn(all_spellings()),
                         [](const auto& info) { return info.param.name(); });

TEST(RmsNorm, Opset23IsRMSNormalization) {
  for (const auto& s : {Spelling{"Pow", "DivOne", true}, Spelling{"Mul", "Reciprocal", true}, Spelling{"Pow", "Div", true}}) {
    SCOPED_TRACE(s.name());
    const auto text = model(23, fmt::format(R"(t5 (float[N, 5, 16] x) => (float[N, 5, 16] y) <float[16] gamma = {}> {{
{}}})",
                                            numbers(16, 1.0, 0.5), spelled_norm(true, "x", "y", "-1", s, "gamma", "", "", 1e-6)));
    const auto fused = fuse(text);
    const auto& out = fused.model;
    ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
    EXPECT_EQ(out.graph().node(0).op_type(), "RMSNormalization");
    expect_same_in_ort(text, fused, {"--dim", "N=2"});
  }
}

// TensorFlow's layer norm through tf2onnx (nn.batch_normalization's folded form).
TEST(LayerNorm, TensorFlowsFoldedFormIsLayerNormalizationWithBias) {
  for (const auto& [opset, square, rsqrt] : std::vector<std::tuple<int, std::string, std::string>>{
           {13, "sq = Mul (d, d)", "r = Reciprocal (s)"},
           {17, "two = Constant <value = float {2.0}> ()\n  sq = Pow (d, two)", "r = Reciprocal (s)"},
           {17, "sq = Mul (d, d)", "one = Constant <value = float {1.0}> ()\n  r = Div (one, s)"}}) {
    SCOPED_TRACE(fmt::format("opset {}: {}; {}", opset, square, rsqrt));
    const auto text = model(opset, fmt::format(R"(tf_ln (float[N, 5, 16] x) => (float[N, 5, 16] y)
    <float[16] gamma = {}, float[16] beta = {}> {{
  mean = ReduceMean <axes = [-1]> (x)
  d = Sub (x, mean)
  {}
  var = ReduceMean <axes = [-1]> (sq)
  eps = Constant <value = float {{1e-3}}> ()
  ve = Add (var, eps)
  s = Sqrt (ve)
  {}
  inv = Mul (r, gamma)
  xs = Mul (x, inv)
  ms = Mul (mean, inv)
  shift = Sub (beta, ms)
  y = Add (xs, shift)
}})",
                                               numbers(16, 1.0, 0.5), numbers(16, 0.0, 0.5, 5), square, rsqrt));
    const auto fused = fuse(text);
    const auto& out = fused.model;
    ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
    EXPECT_EQ(out.graph().node(0).op_type(), "LayerNormalization");
    EXPECT_EQ(out.graph().node(0).input_size(), 3);
    expect_same_in_ort(text, fused, {"--dim", "N=2", "--float-range", "-3,3"});
  }
}

// Below opset 23, ORT's own SimplifiedLayerNormalization, in the ai.onnx domain where ORT
// registers it (as its optimizer writes it); standard ONNX has no such op.
TEST(RmsNorm, BelowOpset23OrtGetsSimplifiedLayerNormalization) {
  for (const int opset : {13, 17}) {
    SCOPED_TRACE(opset);
    const auto text = model(opset, fmt::format(R"(t5 (float[N, 5, 16] x) => (float[N, 5, 16] y) <float[16] gamma = {}> {{
{}}})",
                                               numbers(16, 1.0, 0.5), spelled_norm(true, "x", "y", "-1", {"Pow", "DivOne", false}, "gamma", "", "", 1e-6)));
    const auto fused = fuse(text);
    const auto& out = fused.model;
    ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
    EXPECT_EQ(out.graph().node(0).op_type(), "SimplifiedLayerNormalization");
    EXPECT_EQ(out.graph().node(0).domain(), "");
    expect_same_in_ort(text, fused, {"--dim", "N=2"});
  }
}

// Gemma's RMSNorm scales by (1 + w): canonicalization folds the constant Add first, then it is
// an RMSNorm like any other.
TEST(RmsNorm, GemmasOnePlusWeightScaleFusesOnceTheAddIsFolded) {
  const auto text = model(17, R"(gemma (float[N, 5, 8] x) => (float[N, 5, 8] y) <float[8] w = {0.1, -0.2, 0.3, 0.0, 0.5, -0.5, 1.0, 0.25}> {
  two = Constant <value = float {2.0}> ()
  sq = Pow (x, two)
  var = ReduceMean <axes = [-1], keepdims = 1> (sq)
  eps = Constant <value = float {1e-6}> ()
  ve = Add (var, eps)
  s = Sqrt (ve)
  one = Constant <value = float {1.0}> ()
  r = Div (one, s)
  n = Mul (x, r)
  one_w = Constant <value = float {1.0}> ()
  scale = Add (one_w, w)
  y = Mul (n, scale)
})");
  const auto fused = fuse(text);
  const auto& out = fused.model;
  EXPECT_EQ(count(out, "ai.onnx", "SimplifiedLayerNormalization"), 1) << canonical_nodes(out, interface_names(out));
  EXPECT_EQ(count(out, "ai.onnx", "Add"), 0);
  expect_same_in_ort(text, fused, {"--dim", "N=2", "--float-range", "-3,3"});
}

// HF LlamaRMSNorm exported in float16: the statistics in float32 between two Casts.
std::string llama_rms_norm(int opset, const std::string& rsqrt) {
  const std::string axes = opset >= 18 ? "axes = Constant <value = int64[1] {-1}> ()\n  var = ReduceMean <keepdims = 1> (sq, axes)"
                                       : "var = ReduceMean <axes = [-1], keepdims = 1> (sq)";
  return model(opset, fmt::format(R"(llama (float16[N, 5, 16] x16, float16[16] gamma) => (float16[N, 5, 16] y) {{
  x = Cast <to = 1> (x16)
  two = Constant <value = float {{2.0}}> ()
  sq = Pow (x, two)
  {}
  eps = Constant <value = float {{1e-6}}> ()
  ve = Add (var, eps)
  s = Sqrt (ve)
  {}
  n = Mul (x, r)
  c = Cast <to = 10> (n)
  y = Mul (gamma, c)
}})",
                                  axes, rsqrt));
}

TEST(RmsNorm, LlamaFloat16BetweenCastsIsOneNodeWithFloatStatistics) {
  const std::string div_one = "one = Constant <value = float {1.0}> ()\n  r = Div (one, s)";
  for (const auto& [opset, rsqrt, op_type] : std::vector<std::tuple<int, std::string, std::string>>{
           {17, div_one, "SimplifiedLayerNormalization"},
           {14, "r = Reciprocal (s)", "SimplifiedLayerNormalization"},
           {23, div_one, "RMSNormalization"}}) {
    SCOPED_TRACE(fmt::format("opset {}, {}", opset, rsqrt));
    const auto text = llama_rms_norm(opset, rsqrt);
    const auto fused = fuse(text);
    const auto& out = fused.model;
    ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
    const auto& node = out.graph().node(0);
    EXPECT_EQ(node.op_type(), op_type);
    EXPECT_EQ(node.input(0), "x16");
    EXPECT_EQ(int_attribute(node, "stash_type", -1), 1);
    // float16 outputs: ORT applies γ before the one rounding the spelled-out form does twice.
    expect_same_in_ort(text, fused, {"--dim", "N=2", "--float-range", "-3,3", "--atol", "1e-2", "--rtol", "1e-2"});
  }
  // A Cast back to another type than the input's is not LLaMA's: left alone, with the reason.
  auto text = llama_rms_norm(17, div_one);
  text.replace(text.find("Cast <to = 10>"), 14, "Cast <to = 1> ");
  text.replace(text.find("float16[N, 5, 16] y"), 19, "float[N, 5, 16] y");
  text.replace(text.find("float16[16] gamma"), 17, "float[16] gamma");
  const auto kept = fuse(text, std::nullopt, "Mul");
  EXPECT_EQ(kept.model.graph().node_size(), 12);
  EXPECT_NE(kept.explain.find("the second Cast is not back to the input's element type"), std::string::npos) << kept.explain;
}

TEST(RmsNorm, Opset23ResidualAddPrefersTheSkipOp) {
  const auto text = residual_model(true, {"Pow", "DivOne", true}, 23, "N, S, 16", "N, S, 16", false);
  const auto fused = fuse(text);
    const auto& out = fused.model;
  ASSERT_EQ(out.graph().node_size(), 1);
  EXPECT_EQ(out.graph().node(0).op_type(), "SkipSimplifiedLayerNormalization");
  EXPECT_EQ(out.graph().node(0).output_size(), 1);
  expect_same_in_ort(text, fused, {"--dim", "N=2", "--dim", "S=3"});
}

TEST(RmsNorm, ExportedRMSNormalizationWithResidual) {
  const auto text = model(23, fmt::format(R"(block (float[N, S, 16] a, float[N, S, 16] b) => (float[N, S, 16] y, float[N, S, 16] h)
    <float[16] gamma = {}> {{
  h = Add (a, b)
  y = RMSNormalization <axis = -1, epsilon = 1e-6> (h, gamma)
}})",
                                          numbers(16, 1.0, 0.5)));
  const auto fused = fuse(text);
    const auto& out = fused.model;
  ASSERT_EQ(out.graph().node_size(), 1);
  EXPECT_EQ(out.graph().node(0).op_type(), "SkipSimplifiedLayerNormalization");
  EXPECT_EQ(out.graph().node(0).output(3), "h");
  expect_same_in_ort(text, fused, {"--dim", "N=2", "--dim", "S=3"});
}

// ---- Conv, Gemm and MatMul (fuse-conv-gemm-activation.rules, fuse-matmul.rules) ------------

// The value of a node's attribute as text ("" when absent).
std::string attribute_text(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() != name) continue;
    switch (attribute.type()) {
      case onnx::AttributeProto::STRING: return attribute.s();
      case onnx::AttributeProto::FLOAT: return fmt::format("{:g}", attribute.f());
      case onnx::AttributeProto::INT: return std::to_string(attribute.i());
      case onnx::AttributeProto::FLOATS: return fmt::format("[{:g}]", fmt::join(attribute.floats(), ", "));
      case onnx::AttributeProto::INTS: return fmt::format("[{}]", fmt::join(attribute.ints(), ", "));
      default: return "?";
    }
  }
  return "";
}

struct ActivationFusion {
  std::string name;
  int opset;
  std::string activation;  // the node computing y from c, in ONNX text
  std::string kind;        // FusedConv/FusedGemm `activation`
  std::string params;      // FusedConv activation_params, or FusedGemm activation_alpha
};

// Conv [N, 3, 7, 7] * [4, 3, 3, 3] (padded, strided, with or without bias) then the activation.
std::string conv_model(const ActivationFusion& c, bool bias, const std::string& type = "float") {
  return model(c.opset, fmt::format(R"(conv ({0}[N, 3, 7, 7] x) => ({0}[N, 4, 4, 4] y) <{0}[4, 3, 3, 3] w = {1}, {0}[4] b = {2}> {{
  c = Conv <pads = [1, 1, 1, 1], strides = [2, 2]> (x, w{3})
  {4}
}})",
                                    type, numbers(108, 0.0, 0.5), numbers(4, 0.0, 0.5, 3), bias ? ", b" : "", c.activation));
}

class ConvActivation : public ::testing::TestWithParam<ActivationFusion> {};

TEST_P(ConvActivation, IsFusedConvAndComputesTheSame) {
  const auto& c = GetParam();
  for (bool bias : {true, false}) {
    const auto text = conv_model(c, bias);
    const auto fused = fuse(text);
    const auto& out = fused.model;
    ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
    const auto& node = out.graph().node(0);
    EXPECT_EQ(node.domain(), "com.microsoft");
    EXPECT_EQ(node.op_type(), "FusedConv");
    EXPECT_EQ(node.input_size(), bias ? 3 : 2);
    EXPECT_EQ(attribute_text(node, "activation"), c.kind);
    EXPECT_EQ(attribute_text(node, "activation_params"), c.params);
    EXPECT_EQ(attribute_text(node, "strides"), "[2, 2]");  // the Conv's own attributes kept
    expect_same_in_ort(text, fused, {"--dim", "N=2", "--float-range", "-3,3"});
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fusion, ConvActivation,
    ::testing::Values(ActivationFusion{"relu", 17, "y = Relu (c)", "Relu", ""},
                      ActivationFusion{"sigmoid", 17, "y = Sigmoid (c)", "Sigmoid", ""},
                      ActivationFusion{"tanh", 17, "y = Tanh (c)", "Tanh", ""},
                      ActivationFusion{"leaky_relu", 17, "y = LeakyRelu <alpha = 0.1> (c)", "LeakyRelu", "[0.1]"},
                      ActivationFusion{"leaky_relu_default", 17, "y = LeakyRelu (c)", "LeakyRelu", "[0.01]"},
                      ActivationFusion{"hard_sigmoid", 17, "y = HardSigmoid <alpha = 0.1666667, beta = 0.5> (c)", "HardSigmoid",
                                       "[0.166667, 0.5]"},
                      ActivationFusion{"hard_sigmoid_default", 17, "y = HardSigmoid (c)", "HardSigmoid", "[0.2, 0.5]"},
                      ActivationFusion{"relu6", 17,
                                       "lo = Constant <value = float {0.0}> ()\n  hi = Constant <value = float {6.0}> ()\n"
                                       "  y = Clip (c, lo, hi)",
                                       "Clip", "[0, 6]"},
                      ActivationFusion{"clip_min_only", 13, "lo = Constant <value = float {-0.5}> ()\n  y = Clip (c, lo)", "Clip",
                                       "[-0.5, 3.40282e+38]"},
                      ActivationFusion{"clip_max_only", 13, "hi = Constant <value = float {0.5}> ()\n  y = Clip (c, , hi)", "Clip",
                                       "[-3.40282e+38, 0.5]"},
                      ActivationFusion{"clip6_attributes", 9, "y = Clip <min = 0.0, max = 6.0> (c)", "Clip", "[0, 6]"}),
    [](const auto& info) { return info.param.name; });

TEST(ConvActivation, NearMissesStayAsTheyAre) {
  const ActivationFusion relu{"", 17, "y = Relu (c)", "", ""};
  // The Conv's output also read elsewhere (here: a graph output).
  std::string text = conv_model(relu, true);
  text.replace(text.find("=> (float[N, 4, 4, 4] y)"), 24, "=> (float[N, 4, 4, 4] y, float[N, 4, 4, 4] c)");
  auto fused = fuse(text, std::nullopt, "Relu");
  EXPECT_FALSE(fused.result.changed());
  EXPECT_NE(fused.explain.find("'c', computed inside the match, is an output of the main graph"), std::string::npos) << fused.explain;
  // double: ORT's FusedConv kernel is float-only.
  fused = fuse(conv_model(relu, true, "double"), std::nullopt, "Relu");
  EXPECT_FALSE(fused.result.changed());
  EXPECT_NE(fused.explain.find("the element type is double; ORT's FusedConv kernel takes float"), std::string::npos) << fused.explain;
  // A Clip bound only known at run time.
  text = conv_model({"", 17, "y = Clip (c, lo)", "", ""}, true);
  text.replace(text.find("(float[N, 3, 7, 7] x)"), 21, "(float[N, 3, 7, 7] x, float lo)");
  fused = fuse(text, std::nullopt, "Clip");
  EXPECT_FALSE(fused.result.changed());
  EXPECT_NE(fused.explain.find("the Clip bound 'lo' is not a one-element constant"), std::string::npos) << fused.explain;
}

// Conv [N, 4, 6, 6] (grouped or not, with or without bias) then an inference BatchNormalization,
// optionally followed by a Relu.
std::string conv_batch_norm_model(int group, bool bias, bool relu, const std::string& extra_output = "") {
  const int per_group = 4 / group;
  return model(15, fmt::format(R"(conv_bn (float[N, 4, 6, 6] x) => (float[N, 6, 6, 6] y{5})
    <float[6, {0}, 3, 3] w = {1}, float[6] b = {2}, float[6] gamma = {3}, float[6] beta = {4},
     float[6] mean = {6}, float[6] var = {7}> {{
  c = Conv <pads = [1, 1, 1, 1], group = {8}> (x, w{9})
  {10} = BatchNormalization <epsilon = 1e-3> (c, gamma, beta, mean, var)
  {11}
}})",
                               per_group, numbers(6 * per_group * 9, 0.0, 0.5), numbers(6, 0.0, 0.5, 3),
                               numbers(6, 1.0, 0.5, 5), numbers(6, 0.0, 0.5, 9), extra_output, numbers(6, 0.0, 0.5, 11),
                               numbers(6, 1.0, 0.8, 13), group, bias ? ", b" : "", relu ? "n" : "y", relu ? "y = Relu (n)" : ""));
}

TEST(ConvBatchNorm, FoldsIntoTheConvAndComputesTheSame) {
  for (int group : {1, 2}) {
    for (bool bias : {true, false}) {
      for (bool relu : {false, true}) {
        const auto text = conv_batch_norm_model(group, bias, relu);
        const auto fused = fuse(text);
        const auto& out = fused.model;
        ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
        EXPECT_EQ(out.graph().node(0).op_type(), relu ? "FusedConv" : "Conv");
        EXPECT_EQ(attribute_text(out.graph().node(0), "group"), std::to_string(group));
        // w' and b' replace w, b and the statistics (an unused b of the model stays, as it was).
        EXPECT_EQ(out.graph().initializer_size(), bias ? 2 : 3);
        expect_same_in_ort(text, fused, {"--dim", "N=2", "--float-range", "-3,3"});
      }
    }
  }
}

TEST(ConvBatchNorm, NearMissesStayAsTheyAre) {
  // The statistics fed at run time.
  std::string text = conv_batch_norm_model(1, true, false);
  text.replace(text.find("float[6] var = "), 15, "float[6] unused = ");
  text.replace(text.find("(float[N, 4, 6, 6] x)"), 21, "(float[N, 4, 6, 6] x, float[6] var)");
  auto fused = fuse(text, std::nullopt, "BatchNormalization");
  EXPECT_FALSE(fused.result.changed());
  EXPECT_NE(fused.explain.find("'var' is not a constant with one value per output channel (6)"), std::string::npos) << fused.explain;
  // The weights shared with another Conv: folding would copy them.
  text = conv_batch_norm_model(1, false, false, ", float[N, 6, 6, 6] z");
  text.replace(text.find("  c = Conv"), 2, "  z = Conv <pads = [1, 1, 1, 1]> (x, w)\n  ");
  fused = fuse(text, std::nullopt, "BatchNormalization");
  EXPECT_FALSE(fused.result.changed());
  EXPECT_NE(fused.explain.find("'w' is also read by another node: folding would copy it"), std::string::npos) << fused.explain;
}

// Gemm <transB = 1, alpha = 0.5> [N, 6] x [5, 6]' (+ c [5]) then the activation.
std::string gemm_model(const ActivationFusion& c, bool bias) {
  return model(c.opset, fmt::format(R"(dense (float[N, 6] a) => (float[N, 5] y) <float[5, 6] w = {}, float[5] c0 = {}> {{
  c = Gemm <transB = 1, alpha = 0.5> (a, w{})
  {}
}})",
                                    numbers(30, 0.0, 0.8), numbers(5, 0.0, 0.5, 3), bias ? ", c0" : "", c.activation));
}

class GemmActivation : public ::testing::TestWithParam<ActivationFusion> {};

TEST_P(GemmActivation, IsFusedGemmAndComputesTheSame) {
  const auto& c = GetParam();
  for (bool bias : {true, false}) {
    const auto text = gemm_model(c, bias);
    const auto fused = fuse(text);
    const auto& out = fused.model;
    ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
    const auto& node = out.graph().node(0);
    EXPECT_EQ(node.op_type(), "FusedGemm");
    EXPECT_EQ(attribute_text(node, "activation"), c.kind);
    EXPECT_EQ(attribute_text(node, "activation_alpha"), c.params);
    EXPECT_EQ(attribute_text(node, "transB"), "1");
    EXPECT_EQ(attribute_text(node, "alpha"), "0.5");
    expect_same_in_ort(text, fused, {"--dim", "N=3", "--float-range", "-3,3"});
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fusion, GemmActivation,
    ::testing::Values(ActivationFusion{"relu", 17, "y = Relu (c)", "Relu", ""},
                      ActivationFusion{"sigmoid", 13, "y = Sigmoid (c)", "Sigmoid", ""},
                      ActivationFusion{"tanh", 17, "y = Tanh (c)", "Tanh", ""},
                      ActivationFusion{"softplus", 17, "y = Softplus (c)", "Softplus", ""},
                      ActivationFusion{"softsign", 17, "y = Softsign (c)", "Softsign", ""},
                      ActivationFusion{"leaky_relu", 17, "y = LeakyRelu <alpha = 0.2> (c)", "LeakyRelu", "0.2"},
                      ActivationFusion{"leaky_relu_default", 17, "y = LeakyRelu (c)", "LeakyRelu", "0.01"},
                      ActivationFusion{"hard_sigmoid", 17, "y = HardSigmoid <alpha = 0.25> (c)", "HardSigmoid", "0.25"},
                      ActivationFusion{"elu", 17, "y = Elu <alpha = 0.5> (c)", "Elu", "0.5"},
                      ActivationFusion{"selu_default", 17, "y = Selu (c)", "Selu", "1.67326"},
                      ActivationFusion{"thresholded_relu", 17, "y = ThresholdedRelu <alpha = 0.3> (c)", "ThresholdedRelu", "0.3"}),
    [](const auto& info) { return info.param.name; });

struct MatMulFusion {
  std::string name;
  std::string signature;  // inputs
  std::string body;       // nodes computing y
  std::string attributes;  // of the FusedMatMul: "alpha transA transB", "" for an absent one
};

class MatMulFolds : public ::testing::TestWithParam<MatMulFusion> {};

TEST_P(MatMulFolds, IsOneFusedMatMulAndComputesTheSame) {
  const auto& c = GetParam();
  const auto text = model(17, fmt::format("scores ({}) => (float[N, 3, 4, 5] y) {{\n{}\n}}", c.signature, c.body));
  const auto fused = fuse(text);
  const auto& out = fused.model;
  ASSERT_EQ(out.graph().node_size(), 1) << canonical_nodes(out, interface_names(out));
  const auto& node = out.graph().node(0);
  EXPECT_EQ(node.op_type(), "FusedMatMul");
  EXPECT_EQ(fmt::format("{} {} {}", attribute_text(node, "alpha"), attribute_text(node, "transA"), attribute_text(node, "transB")),
            c.attributes);
  expect_same_in_ort(text, fused, {"--dim", "N=2", "--float-range", "-2,2"});
}

const char* kQK = "float[N, 3, 4, 8] q, float[N, 3, 8, 5] k";
const char* kQKt = "float[N, 3, 4, 8] q, float[N, 3, 5, 8] k";
const char* kQtK = "float[N, 3, 8, 4] q, float[N, 3, 8, 5] k";

INSTANTIATE_TEST_SUITE_P(
    Fusion, MatMulFolds,
    ::testing::Values(
        MatMulFusion{"mul_output", kQK, "m = MatMul (q, k)\ns = Constant <value = float {0.125}> ()\ny = Mul (s, m)", "0.125  "},
        MatMulFusion{"div_output", kQK, "m = MatMul (q, k)\ns = Constant <value = float[1] {3.0}> ()\ny = Div (m, s)", "0.333333  "},
        MatMulFusion{"mul_a", kQK, "s = Constant <value = float {0.5}> ()\nqs = Mul (q, s)\ny = MatMul (qs, k)", "0.5  "},
        MatMulFusion{"div_b", kQK, "s = Constant <value = float {4.0}> ()\nks = Div (k, s)\ny = MatMul (q, ks)", "0.25  "},
        MatMulFusion{"transpose_b", kQKt, "t = Transpose <perm = [0, 1, 3, 2]> (k)\ny = MatMul (q, t)", "  1"},
        MatMulFusion{"transpose_a", kQtK, "t = Transpose <perm = [0, 1, 3, 2]> (q)\ny = MatMul (t, k)", " 1 "},
        MatMulFusion{"transpose_both", "float[N, 3, 8, 4] q, float[N, 3, 5, 8] k",
                     "ta = Transpose <perm = [0, 1, 3, 2]> (q)\ntb = Transpose <perm = [0, 1, 3, 2]> (k)\ny = MatMul (ta, tb)", " 1 1"},
        // SVTR / ViT attention: q scaled, k transposed, and the product scaled again.
        MatMulFusion{"svtr_attention", kQKt,
                     "s = Constant <value = float {0.5}> ()\nqs = Mul (q, s)\nt = Transpose <perm = [0, 1, 3, 2]> (k)\n"
                     "m = MatMul (qs, t)\nd = Constant <value = float {2.0}> ()\ny = Div (m, d)",
                     "0.25  1"}),
    [](const auto& info) { return info.param.name; });

TEST(MatMulFolds, NearMissesStayAsTheyAre) {
  struct Miss {
    std::string signature, output, body, explain_op, why;
  };
  const Miss misses[] = {
      {"float[N, 3, 4, 8] q, float[N, 8, 3, 5] k", "float[N, 3, 4, 5] y", "t = Transpose <perm = [0, 2, 1, 3]> (k)\ny = MatMul (q, t)",
       "MatMul", "perm [0, 2, 1, 3] does not swap exactly the last two axes"},
      {kQK, "float[N, 3, 4, 5] y", "m = MatMul (q, k)\ns = Constant <value = float[5] {1, 2, 3, 4, 5}> ()\ny = Mul (m, s)", "Mul",
       "is not a constant scalar"},
      {kQK, "float[1, N, 3, 4, 5] y", "m = MatMul (q, k)\ns = Constant <value = float[1, 1, 1, 1, 1] {2}> ()\ny = Mul (m, s)",
       "Mul", "has rank 5, 'q' has rank 4"},
      {kQK, "float[N, 3, 4, 5] y", "m = MatMul (q, k)\ns = Constant <value = float {2}> ()\ny = Div (s, m)", "Div", ""},
  };
  for (const auto& miss : misses) {
    const auto text = model(17, fmt::format("scores ({}) => ({}) {{\n{}\n}}", miss.signature, miss.output, miss.body));
    const auto fused = fuse(text, std::nullopt, miss.explain_op);
    EXPECT_FALSE(fused.result.changed()) << miss.body;
    EXPECT_NE(fused.explain.find(miss.why), std::string::npos) << fused.explain;
  }
}

// ---- Real models: at least what ORT's optimizer fuses (bench/fusion_parity.sh) -----------------

// The real models of the models data set (scripts/fetch-test-data.sh models). Three that cover
// every fusion of these rules: PP-OCRv4 rec (opset 9 LayerNorm, QuickGelu, FusedMatMul, Conv +
// BatchNormalization + activation), the PP-OCR classifier (35 BatchNormalizations) and
// openWakeWord (FusedGemm, an If).
TEST(RealModels, FuseAtLeastWhatOrtExtendedFusesAndComputeTheSame) {
  ASSERT_TEST_DATA(models, "models");
  const std::vector<std::string> names = {"ppocr-v4-rec", "ppocr-mobile-v2-cls", "oww-hey-jarvis"};
  TempDir dir;
  for (const auto& name : names) {
    ASSERT_TRUE(fs::exists(models / name / "model.onnx")) << models / name / "model.onnx";
    fs::create_directories(dir / "models" / name);
    fs::create_symlink(models / name / "model.onnx", dir / "models" / name / "model.onnx");
  }
  const auto run = run_command({"env", "BUILD_DIR=" + build_dir().string(), "OUT_DIR=" + (dir / "out").string(), "bash",
                                (source_dir() / "bench" / "fusion_parity.sh").string(), (dir / "models").string()});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  // | model | nodes | ORT: nodes | ORT: fused | ORT: ops | ours: nodes | ours: fused | ours: ops | verdict |
  int rows = 0;
  std::istringstream table(run.out);
  for (std::string line; std::getline(table, line);) {
    std::vector<std::string> cells;
    std::istringstream row(line);
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    if (cells.size() < 10 || std::find(names.begin(), names.end(), cells[1].substr(1, cells[1].size() - 2)) == names.end()) continue;
    ++rows;
    EXPECT_GE(std::stoi(cells[7]), std::stoi(cells[4])) << line;
    EXPECT_EQ(cells[9].rfind(" same", 0), 0u) << line;
    std::cout << "[ parity   ] " << line << "\n";
  }
  EXPECT_EQ(rows, static_cast<int>(names.size())) << run.out;
}

// ---- BERT-like encoders as torch exports them (bench/gen_bert.cc) ----------------------------

struct Encoder {
  int layers;
  int opset;
  std::string gelu;       // erf | tanh
  std::string layernorm;  // spelled | fused
  bool legacy = false;    // torch's older exporter: position ids from Range, a Gather of them
};

fs::path generate_bert(const Encoder& e, const fs::path& out) {
  std::vector<std::string> command = {(build_dir() / "gen-bert").string(), "--layers", std::to_string(e.layers), "--hidden", "32",
                                      "--heads", "2", "--intermediate", "64", "--vocab", "100", "--max-pos", "64", "--opset",
                                      std::to_string(e.opset), "--gelu", e.gelu, "--layernorm", e.layernorm, "--out", out.string()};
  if (e.legacy) command.push_back("--legacy-export");
  const auto result = run_command(command);
  if (result.exit_code != 0) throw std::runtime_error("gen-bert failed: " + result.err);
  return out;
}

class BertEncoder : public ::testing::TestWithParam<Encoder> {};

TEST_P(BertEncoder, EveryBlockFusesAndOrtComputesTheSame) {
  const Encoder& e = GetParam();
  TempDir dir;
  const auto original = generate_bert(e, dir / "bert.onnx");
  const auto rewritten = dir / "bert.ort.onnx";
  const auto run = run_cli({"rewrite", original.string(), "-o", rewritten.string(), "--target", "ort"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  // The summary says how many of each were fused.
  const std::string gelu_rule = e.gelu == "erf" ? "fuse-bias-gelu" : "fuse-bias-fastgelu";
  EXPECT_NE(run.out.find(fmt::format("rule {}: {} match", gelu_rule, e.layers)), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(fmt::format("rule fuse-skip-layernorm: {} match", 2 * e.layers)), std::string::npos) << run.out;

  Model model = load_model(rewritten);
  const auto& proto = model.proto;
  EXPECT_EQ(count(proto, "com.microsoft", "SkipLayerNormalization"), 2 * e.layers);
  EXPECT_EQ(count(proto, "ai.onnx", "LayerNormalization"), 1);  // the embeddings': its Add broadcasts positions
  EXPECT_EQ(count(proto, "com.microsoft", e.gelu == "erf" ? "BiasGelu" : "FastGelu"), e.layers);
  EXPECT_EQ(count(proto, "com.microsoft", "Attention"), e.layers);  // Q, K, V, Q·Kᵀ / √head_dim, Softmax, ·V (rules/fuse-attention)
  EXPECT_EQ(count(proto, "com.microsoft", "FusedMatMul"), 0);
  for (const char* spelled : {"Erf", "Tanh", "Pow", "ReduceMean", "Sqrt"}) EXPECT_EQ(count(proto, "ai.onnx", spelled), 0) << spelled;
  EXPECT_EQ(opset_import(proto, ""), e.opset);  // ORT's LayerNormalization-1 below 17: no raise

  const auto comparison = ort_compare(original, rewritten,
                                      {"--dim", "batch=2", "--dim", "sequence=7", "--range", "input_ids=0,99", "--range",
                                       "token_type_ids=0,1", "--range", "attention_mask=0,1"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
  std::cout << fmt::format("[ ORT      ] bert {} layers opset {} {} {}: max_abs {:.3g}\n", e.layers, e.opset, e.gelu, e.layernorm,
                           comparison.max_abs);
  const auto check = run_cli({"check", rewritten.string(), "--target", "ort"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

INSTANTIATE_TEST_SUITE_P(Fusion, BertEncoder,
                         ::testing::Values(Encoder{2, 14, "erf", "spelled"}, Encoder{2, 17, "erf", "spelled"},
                                           Encoder{2, 18, "erf", "spelled"}, Encoder{2, 14, "tanh", "spelled"},
                                           Encoder{2, 18, "tanh", "spelled"}, Encoder{2, 17, "erf", "fused"},
                                           Encoder{12, 14, "erf", "spelled"}, Encoder{2, 14, "erf", "spelled", true}),
                         [](const auto& info) {
                           const auto& e = info.param;
                           return fmt::format("layers{}_opset{}_{}_{}{}", e.layers, e.opset, e.gelu, e.layernorm,
                                              e.legacy ? "_legacy" : "");
                         });

}  // namespace
}  // namespace onnx_rewrite
