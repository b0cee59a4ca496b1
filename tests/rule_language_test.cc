// The rule language and the engine: parsing and its errors, every kind of constraint, the
// matching machinery (commutative, associative, alternatives, values used outside), where rules
// fire (subgraphs, functions), names, clean-up, opsets, fixed point and determinism.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/tensor.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// A GELU fusion written once, exercising n-ary Mul, alternatives and approximate constants.
const char* kGeluRule = R"(
rule gelu
  description: GELU, erf form
  targets: ort
  requires: com.microsoft 1
  pattern (x) => (y) {
    h = Div (x, k_sqrt2)
    e = Erf (h)
    a = Add (e, k_one)
    y = Mul (x, a, k_half)
  }
  where {
    k_sqrt2 ≈ 1.41421356 ± 1e-4
    k_one ≈ 1.0
    k_half ≈ 0.5
  }
  pattern (x) => (y) {
    h = Mul (x, k_rsqrt2)
    e = Erf (h)
    a = Add (e, k_one)
    y = Mul (x, a, k_half)
  }
  where {
    k_rsqrt2 ~= 0.70710678 +- 1e-4
    k_one ~= 1.0
    k_half ~= 0.5
  }
  replace (x) => (y) {
    y = com.microsoft.Gelu (x)
  }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) <float s = {1.41421356}, float one = {1.0}, float half = {0.5}> {
      h = Div (x, s)
      e = Erf (h)
      a = Add (e, one)
      m = Mul (x, a)
      y = Mul (m, half)
    }
  }
  expect {
    y = com.microsoft.Gelu (x)
  }
end
)";

RewriteOptions ort() {
  RewriteOptions options;
  options.target = "ort";
  return options;
}

// Main-graph nodes of an op in a domain (ai.onnx by default).
int count(const onnx::ModelProto& model, const std::string& op_type, const std::string& domain = "") {
  int n = 0;
  for (const auto& node : model.graph().node()) n += node.op_type() == op_type && node.domain() == domain;
  return n;
}

std::string gelu_model(const std::string& body, const std::string& initializers = "") {
  return R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y) <float s = {1.41421356}, float r = {0.70710678}, float one = {1.0}, float half = {0.5})" +
         initializers + R"(> {
)" + body + "\n}";
}

// ---- Matching the math, not one spelling ----------------------------------------------------

class GeluSpelling : public ::testing::TestWithParam<std::string> {};

TEST_P(GeluSpelling, FusesEveryAssociationAndOrder) {
  const auto rewritten = rewrite_text(gelu_model(GetParam()), rules_from_text(kGeluRule), ort());
  EXPECT_EQ(count(rewritten.model, "Gelu", "com.microsoft"), 1) << GetParam();
  EXPECT_EQ(rewritten.model.graph().node_size(), 1) << "every spelled-out node goes";
  // Constants only the pattern used go with it; the one this spelling never used stays.
  ASSERT_EQ(rewritten.model.graph().initializer_size(), 1);
  const std::string& left = rewritten.model.graph().initializer(0).name();
  EXPECT_EQ(GetParam().find(left + ")"), std::string::npos) << left << " was used, so it should have gone";
}

INSTANTIATE_TEST_SUITE_P(
    Spellings, GeluSpelling,
    ::testing::Values(
        "h = Div (x, s)\n e = Erf (h)\n a = Add (e, one)\n m = Mul (x, a)\n y = Mul (m, half)",
        "h = Div (x, s)\n e = Erf (h)\n a = Add (one, e)\n m = Mul (half, x)\n y = Mul (a, m)",
        "h = Div (x, s)\n e = Erf (h)\n a = Add (e, one)\n m = Mul (a, half)\n y = Mul (x, m)",
        "h = Mul (r, x)\n e = Erf (h)\n a = Add (e, one)\n m = Mul (x, half)\n y = Mul (m, a)",
        "h = Mul (x, r)\n e = Erf (h)\n a = Add (one, e)\n m = Mul (half, a)\n y = Mul (m, x)"));

TEST(Matching, ConstantOutsideToleranceDoesNotFuseAndExplainSaysWhy) {
  const std::string model = gelu_model("h = Div (x, s2)\n e = Erf (h)\n a = Add (e, one)\n m = Mul (x, a)\n y = Mul (m, half)",
                                       ", float s2 = {1.5}");
  RewriteOptions options = ort();
  options.explain = "Mul";
  const auto rewritten = rewrite_text(model, rules_from_text(kGeluRule), options);
  EXPECT_EQ(count(rewritten.model, "Gelu", "com.microsoft"), 0);
  EXPECT_NE(rewritten.explain.find("'k_sqrt2' (s2) holds 1.5, not ≈ 1.41421356 ± 0.0001"), std::string::npos) << rewritten.explain;
}

TEST(Matching, ValueUsedOutsideTheMatchBlocksIt) {
  // The Erf result also feeds another output: fusing would lose it.
  const std::string model = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y, float[2] leak) <float s = {1.41421356}, float one = {1.0}, float half = {0.5}> {
  h = Div (x, s)
  e = Erf (h)
  a = Add (e, one)
  m = Mul (x, a)
  y = Mul (m, half)
  leak = Neg (e)
})";
  RewriteOptions options = ort();
  options.explain = "Mul";
  const auto rewritten = rewrite_text(model, rules_from_text(kGeluRule), options);
  EXPECT_EQ(count(rewritten.model, "Gelu", "com.microsoft"), 0);
  EXPECT_NE(rewritten.explain.find("'e', computed inside the match, is also used by node"), std::string::npos) << rewritten.explain;
}

TEST(Matching, ValueThatIsAGraphOutputBlocksIt) {
  const std::string model = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y, float[2] h) <float s = {1.41421356}, float one = {1.0}, float half = {0.5}> {
  h = Div (x, s)
  e = Erf (h)
  a = Add (e, one)
  m = Mul (x, a)
  y = Mul (m, half)
})";
  const auto rewritten = rewrite_text(model, rules_from_text(kGeluRule), ort());
  EXPECT_EQ(count(rewritten.model, "Gelu", "com.microsoft"), 0);
}

TEST(Matching, ValueReadBySubgraphBlocksIt) {
  const std::string model = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x, bool c) => (float[2] y, float[2] z) <float s = {1.41421356}, float one = {1.0}, float half = {0.5}> {
  h = Div (x, s)
  e = Erf (h)
  a = Add (e, one)
  m = Mul (x, a)
  y = Mul (m, half)
  z = If (c) <then_branch = t () => (float[2] r) { r = Neg (a) }, else_branch = f () => (float[2] q) { q = Neg (x) }>
})";
  const auto rewritten = rewrite_text(model, rules_from_text(kGeluRule), ort());
  EXPECT_EQ(count(rewritten.model, "Gelu", "com.microsoft"), 0);
}

// A pattern node of n factors is a tree of n - 1 binary nodes: an operand may lie n - 2 nodes
// below the root, and what computes it is looked for there before any search.
TEST(Matching, AFactorAsDeepAsATreeReachesIsFound) {
  const std::string rule = R"(
rule relu-product
  description: test
  targets: onnx
  pattern (x, a, b, c) => (y) {
    r = Relu (x)
    y = Mul (r, a, b, c)
  }
  replace (x, a, b, c) => (y) { y = Sum (x, a, b, c) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x, float[2] a, float[2] b, float[2] c) => (float[2] y) { r = Relu (x)  y = Mul (r, a, b, c) }
  }
  expect { y = Sum (x, a, b, c) }
end
)";
  for (const std::string body : {"t = Mul (r, a)  u = Mul (t, b)  y = Mul (u, c)", "t = Mul (a, r)  u = Mul (b, t)  y = Mul (c, u)",
                                 "t = Mul (b, c)  u = Mul (a, t)  y = Mul (u, r)"}) {
    const std::string model = "<ir_version: 8, opset_import: [\"\": 17]>\n"
                              "g (float[2] x, float[2] a, float[2] b, float[2] c) => (float[2] y) { r = Relu (x)  " + body + " }";
    const auto rewritten = rewrite_text(model, rules_from_text(rule));
    EXPECT_EQ(count(rewritten.model, "Sum", ""), 1) << body;
    EXPECT_EQ(count(rewritten.model, "Mul", ""), 0) << body;
  }
}

TEST(Matching, NonConstantFactorDoesNotMatchAConstantConstraint) {
  const std::string model = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x, float[1] s) => (float[2] y) <float one = {1.0}, float half = {0.5}> {
  h = Div (x, s)
  e = Erf (h)
  a = Add (e, one)
  m = Mul (x, a)
  y = Mul (m, half)
})";
  const auto rewritten = rewrite_text(model, rules_from_text(kGeluRule), ort());
  EXPECT_EQ(count(rewritten.model, "Gelu", "com.microsoft"), 0);
}

TEST(Matching, InitializerThatIsAlsoAGraphInputIsNotConstant) {
  // IR >= 4: such an initializer is only a default; the caller may feed another value.
  const std::string model = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x, float s = {1.41421356}) => (float[2] y) <float one = {1.0}, float half = {0.5}> {
  h = Div (x, s)
  e = Erf (h)
  a = Add (e, one)
  m = Mul (x, a)
  y = Mul (m, half)
})";
  const auto rewritten = rewrite_text(model, rules_from_text(kGeluRule), ort());
  EXPECT_EQ(count(rewritten.model, "Gelu", "com.microsoft"), 0);
}

TEST(Matching, ConstantNodesCountAsConstants) {
  const std::string model = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y) {
  s = Constant <value = float {1.41421356}> ()
  one = Constant <value_float = 1.0> ()
  half = Constant <value_floats = [0.5]> ()
  h = Div (x, s)
  e = Erf (h)
  a = Add (e, one)
  m = Mul (x, a)
  y = Mul (m, half)
})";
  const auto rewritten = rewrite_text(model, rules_from_text(kGeluRule), ort());
  EXPECT_EQ(count(rewritten.model, "Gelu", "com.microsoft"), 1);
  EXPECT_EQ(count(rewritten.model, "Constant"), 0) << "Constant nodes left without a use are removed";
}

// ---- Attributes, constraints, lets ------------------------------------------------------------

const char* kScaledTanhRule = R"(
rule scaled-tanh
  description: mydomain::ScaledTanh(x) = alpha * tanh(beta * x), as standard ops
  targets: onnx, ort
  pattern (x) => (y) {
    y = mydomain.ScaledTanh <alpha: float = @alpha, beta: float = @beta> (x)
  }
  where {
    alpha default 1.0
    beta default 1.0
  }
  replace (x) => (y) {
    a = Constant <value_float: float = @alpha> ()
    b = Constant <value_float: float = @beta> ()
    bx = Mul (b, x)
    t = Tanh (bx)
    y = Mul (a, t)
  }
  example {
    <ir_version: 8, opset_import: ["": 17, "mydomain": 1]>
    g (float[2, 3] x) => (float[2, 3] y) {
      y = mydomain.ScaledTanh <alpha = 2.0, beta = 0.5> (x)
    }
  }
  expect {
    b = Constant <value = float {0.5}> ()
    bx = Mul (b, x)
    t = Tanh (bx)
    a = Constant <value = float {2.0}> ()
    y = Mul (a, t)
  }
end
)";

TEST(RuleLanguage, TheDocumentedExampleRuleRewritesAsDocumented) {
  const RuleSet rules = rules_from_text(kScaledTanhRule);
  const Rule& rule = *rules.find("scaled-tanh");
  const auto before = parse_model_text(rule.example->model_text);
  const auto rewritten = rewrite_text(rule.example->model_text, rules);
  const auto kept = interface_names(before);
  EXPECT_EQ(canonical_nodes(rewritten.model, kept), canonical_nodes_text(rule.example->expected_nodes_text, before, kept));
  EXPECT_EQ(rewritten.model.opset_import_size(), 1) << "mydomain is no longer used, so its import goes";
}

TEST(RuleLanguage, GoldenComparisonNoticesADifferentReplacement) {
  const RuleSet rules = rules_from_text(kScaledTanhRule);
  const Rule& rule = *rules.find("scaled-tanh");
  const auto before = parse_model_text(rule.example->model_text);
  const auto rewritten = rewrite_text(rule.example->model_text, rules);
  const auto kept = interface_names(before);
  EXPECT_NE(canonical_nodes(rewritten.model, kept),
            canonical_nodes_text("{ b = Constant <value = float {0.25}> ()\n bx = Mul (b, x)\n t = Tanh (bx)\n"
                                 " a = Constant <value = float {2.0}> ()\n y = Mul (a, t) }",
                                 before, kept));
}

TEST(RuleLanguage, DefaultsApplyToAbsentAttributes) {
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "mydomain": 1]>
g (float[2] x) => (float[2] y) { y = mydomain.ScaledTanh (x) })",
                                      rules_from_text(kScaledTanhRule));
  ASSERT_EQ(rewritten.model.graph().initializer_size(), 1) << "alpha and beta are both 1.0: one shared constant";
  EXPECT_EQ(decode_tensor(rewritten.model.graph().initializer(0))->numbers, std::vector<double>{1.0});
}

TEST(RuleLanguage, EqualConstantsOfSeveralMatchesAreOneInitializer) {
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "mydomain": 1]>
g (float[2] x) => (float[2] y, float[2] z) {
  y = mydomain.ScaledTanh <alpha = 2.0, beta = 0.5> (x)
  z = mydomain.ScaledTanh <alpha = 2.0, beta = 3.0> (x)
})",
                                      rules_from_text(kScaledTanhRule));
  const auto& graph = rewritten.model.graph();
  std::map<std::string, double> initializers;
  for (const auto& tensor : graph.initializer()) initializers[tensor.name()] = decode_tensor(tensor)->numbers.at(0);
  ASSERT_EQ(initializers.size(), 3u) << "2.0 twice, 0.5 and 3.0: three constants";
  std::multiset<double> read;  // the constants the Muls read, by value
  std::set<std::string> alphas;
  for (const auto& node : graph.node()) {
    ASSERT_EQ(node.op_type() == "Mul" ? 2 : 1, node.input_size());
    if (node.op_type() != "Mul") continue;
    const double factor = initializers.at(node.input(0));
    read.insert(factor);
    if (factor == 2.0) alphas.insert(node.input(0));
  }
  EXPECT_EQ(read, (std::multiset<double>{0.5, 2.0, 2.0, 3.0}));
  EXPECT_EQ(alphas.size(), 1u) << "both Muls by 2.0 read the one initializer";
}

TEST(RuleLanguage, AttributeLiteralsAndSetsConstrainTheMatch) {
  const RuleSet rules = rules_from_text(R"(
rule softmax-last
  description: test
  targets: onnx
  pattern (x) => (y) {
    y = my.Softmax <axis: int = @axis, mode = "fast"> (x)
  }
  where {
    axis in [-1, 3]
  }
  replace (x) => (y) {
    y = Softmax <axis: int = @axis> (x)
  }
  example {
    <ir_version: 8, opset_import: ["": 17, "my": 1]>
    g (float[1, 2, 3, 4] x) => (float[1, 2, 3, 4] y) { y = my.Softmax <axis = 3, mode = "fast"> (x) }
  }
  expect { y = Softmax <axis = 3> (x) }
end
)");
  auto fired = [&](const std::string& attributes) {
    const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g (float[1, 2, 3, 4] x) => (float[1, 2, 3, 4] y) { y = my.Softmax <)" + attributes + R"(> (x) })",
                                        rules);
    return count(rewritten.model, "Softmax") == 1;
  };
  EXPECT_TRUE(fired("axis = -1, mode = \"fast\""));
  EXPECT_TRUE(fired("axis = 3, mode = \"fast\""));
  EXPECT_FALSE(fired("axis = 1, mode = \"fast\"")) << "axis not in the set";
  EXPECT_FALSE(fired("axis = -1, mode = \"slow\"")) << "literal attribute differs";
  EXPECT_FALSE(fired("mode = \"fast\"")) << "captured attribute absent, no default: the set can't hold";
}

// A tolerance on a captured attribute holds the match to it: HardSigmoid(alpha = 0.2) * x is
// not HardSwish (alpha = 1/6), and fusing it changed numbers by 0.0176 before.
TEST(RuleLanguage, ToleranceOnACapturedAttributeIsEnforced) {
  const RuleSet rules = rules_from_text(R"(
rule hard-swish
  description: test
  targets: onnx
  requires: ai.onnx >= 14
  pattern (x) => (y) {
    h = HardSigmoid <alpha: float = @alpha, beta: float = @beta> (x)
    y = Mul (x, h)
  }
  where {
    alpha ≈ 0.16666667 ± 1e-6
    beta ~= 0.5
  }
  replace (x) => (y) { y = HardSwish (x) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) { h = HardSigmoid <alpha = 0.16666667, beta = 0.5> (x)
      y = Mul (x, h) }
  }
  expect { y = HardSwish (x) }
end
)");
  auto fired = [&](const std::string& attributes) {
    const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y) { h = HardSigmoid <)" + attributes + R"(> (x)
  y = Mul (x, h) })",
                                        rules);
    return count(rewritten.model, "HardSwish") == 1;
  };
  EXPECT_TRUE(fired("alpha = 0.16666667, beta = 0.5"));
  EXPECT_FALSE(fired("alpha = 0.2, beta = 0.5")) << "alpha outside the tolerance";
  EXPECT_FALSE(fired("alpha = 0.16666667, beta = 0.6")) << "beta outside the default tolerance";
  EXPECT_FALSE(fired("beta = 0.5")) << "alpha's schema default is 0.2";
}

TEST(RuleLanguage, LetsComputeAttributesFromConstantsAndCaptures) {
  const RuleSet rules = rules_from_text(R"(
rule padded
  description: test
  targets: onnx
  pattern (x, n) => (y) {
    y = my.PadTo <ph: int = @ph, pw: int = @pw> (x, n)
  }
  where {
    n is scalar
    opset ai.onnx 2..10
  }
  let {
    pads = [0, 0, ph, pw, 0, 0, ph + int(n), pw * 2]
  }
  replace (x) => (y) {
    y = Pad <pads: ints = @pads> (x)
  }
  example {
    <ir_version: 8, opset_import: ["": 10, "my": 1]>
    g (float[1, 1, 2, 2] x) => (float[1, 1, 5, 6] y) <float n = {2.0}> { y = my.PadTo <ph = 1, pw = 2> (x, n) }
  }
  expect { y = Pad <pads = [0, 0, 1, 2, 0, 0, 3, 4]> (x) }
end
)");
  const Rule& rule = *rules.find("padded");
  const auto before = parse_model_text(rule.example->model_text);
  const auto rewritten = rewrite_text(rule.example->model_text, rules);
  const auto kept = interface_names(before);
  EXPECT_EQ(canonical_nodes(rewritten.model, kept), canonical_nodes_text(rule.example->expected_nodes_text, before, kept));
  EXPECT_EQ(rewritten.model.graph().initializer_size(), 0) << "n lost its only use";
}

TEST(RuleLanguage, LetThatCannotBeComputedDeclinesWithAReason) {
  const RuleSet rules = rules_from_text(R"(
rule needs-constant
  description: test
  targets: onnx
  pattern (x, n) => (y) { y = my.Repeat (x, n) }
  let { times = int(n) }
  replace (x) => (y) { y = Identity (x) }
  example {
    <ir_version: 8, opset_import: ["": 17, "my": 1]>
    g (float[2] x) => (float[2] y) <int64 n = {1}> { y = my.Repeat (x, n) }
  }
  expect { y = Identity (x) }
end
)");
  RewriteOptions options;
  options.explain = "Repeat";
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g (float[2] x, int64 n) => (float[2] y) { y = my.Repeat (x, n) })",
                                      rules, options);
  EXPECT_EQ(count(rewritten.model, "Repeat", "my"), 1);
  EXPECT_NE(rewritten.explain.find("let times (line 6): 'n' is not a readable constant"), std::string::npos) << rewritten.explain;
}

TEST(RuleLanguage, OptionalInputsBindPresentOrAbsent) {
  const RuleSet rules = rules_from_text(R"(
rule affine
  description: test
  targets: onnx
  pattern (x, w, b) => (y) { y = my.Affine (x, w, b) }
  where { b is optional }
  replace (x, w, b) => (y) { y = Gemm (x, w, b) }
  example {
    <ir_version: 8, opset_import: ["": 17, "my": 1]>
    g (float[2, 3] x, float[3, 4] w) => (float[2, 4] y) { y = my.Affine (x, w, ) }
  }
  expect { y = Gemm (x, w) }
end
)");
  const auto with_bias = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g (float[2, 3] x, float[3, 4] w, float[4] b) => (float[2, 4] y) { y = my.Affine (x, w, b) })",
                                      rules);
  ASSERT_EQ(count(with_bias.model, "Gemm"), 1);
  EXPECT_EQ(with_bias.model.graph().node(0).input_size(), 3);
  const auto without = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g (float[2, 3] x, float[3, 4] w) => (float[2, 4] y) { y = my.Affine (x, w) })",
                                    rules);
  ASSERT_EQ(count(without.model, "Gemm"), 1);
  EXPECT_EQ(without.model.graph().node(0).input_size(), 2) << "an absent optional input is left out";
}

TEST(RuleLanguage, OptionalOutputsBindOnlyWhenSomethingReadsThem) {
  const RuleSet rules = rules_from_text(R"(
rule split-stats
  description: test
  targets: onnx
  pattern (x) => (y, stat) { y, stat = my.Norm (x) }
  where { stat is optional }
  replace (x) => (y, stat) {
    stat = ReduceMean (x)
    y = Sub (x, stat)
  }
  example {
    <ir_version: 8, opset_import: ["": 17, "my": 1]>
    g (float[2, 3] x) => (float[2, 3] y) { y = my.Norm (x) }
  }
  expect {
    m = ReduceMean (x)
    y = Sub (x, m)
  }
end
)");
  auto ops = [&](const std::string& body, const std::string& outputs) {
    const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g (float[2, 3] x) => ()" + outputs + R"() {
)" + body + "\n}",
                                        rules);
    return op_types(rewritten.model.graph());
  };
  EXPECT_EQ(ops("y = my.Norm (x)", "y"), (std::vector<std::string>{"ReduceMean", "Sub"})) << "absent";
  EXPECT_EQ(ops("y, s = my.Norm (x)", "y"), (std::vector<std::string>{"ReduceMean", "Sub"})) << "unused";
  EXPECT_EQ(ops("y, s = my.Norm (x)\n z = Neg (s)", "y, z"), (std::vector<std::string>{"ReduceMean", "Sub", "Neg"}))
      << "used: the replacement computes it under its name";
}

TEST(RuleLanguage, ReplacementNodesForAnAbsentOptionalOutputAreNotBuilt) {
  const RuleSet rules = rules_from_text(R"(
rule extra
  description: test
  targets: onnx
  pattern (x) => (y, extra) { y, extra = my.Two (x) }
  where { extra is optional }
  replace (x) => (y, extra) {
    y = Relu (x)
    extra = Neg (x)
  }
  example {
    <ir_version: 8, opset_import: ["": 17, "my": 1]>
    g (float[2] x) => (float[2] y, float[2] extra) { y, extra = my.Two (x) }
  }
  expect {
    y = Relu (x)
    extra = Neg (x)
  }
end
)");
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g (float[2] x) => (float[2] y) { y = my.Two (x) })",
                                      rules);
  ASSERT_EQ(rewritten.model.graph().node_size(), 1) << "Neg would compute a value nobody reads";
  EXPECT_EQ(rewritten.model.graph().node(0).op_type(), "Relu");
}

TEST(RuleLanguage, RankAndDtypeConstraintsUseKnownTypesAndDeclineUnknownOnes) {
  const RuleSet rules = rules_from_text(R"(
rule rank4
  description: test
  targets: onnx
  pattern (x) => (y) { y = my.Op (x) }
  where {
    x rank == 4
    x dtype in [float, float16]
  }
  replace (x) => (y) { y = Identity (x) }
  example {
    <ir_version: 8, opset_import: ["": 17, "my": 1]>
    g (float[1, 2, 3, 4] x) => (float[1, 2, 3, 4] y) { y = my.Op (x) }
  }
  expect { y = Identity (x) }
end
)");
  auto fired = [&](const std::string& input) {
    const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g ()" + input + R"() => (y) { y = my.Op (x) })",
                                        rules);
    return count(rewritten.model, "Identity") == 1;
  };
  EXPECT_TRUE(fired("float[1, 2, 3, 4] x"));
  EXPECT_TRUE(fired("float16[N, 2, H, W] x"));
  EXPECT_FALSE(fired("float[2, 3] x"));
  EXPECT_FALSE(fired("int32[1, 2, 3, 4] x"));
  EXPECT_FALSE(fired("float x")) << "a scalar has rank 0";
}

// ---- Where rules fire -------------------------------------------------------------------------

TEST(Engine, FiresInsideNestedIfAndLoopBodies) {
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
g (float[2] x, bool c, int64 n) => (float[2] z, float[2] w) {
  z = If (c) <then_branch = t () => (float[2] r) {
        r = Loop (n, , x) <body = b (int64 i, bool cond, float[2] acc) => (bool cond_out, float[2] acc_out) {
              cond_out = Identity (cond)
              acc_out = test.customop.CustomOpOne (acc, x)
            }>
      }, else_branch = f () => (float[2] q) { q = test.customop.CustomOpOne (x, x) }>
  w = test.customop.CustomOpOne (x, x)
})",
                                      rules_from_text(kOneToAdd));
  EXPECT_EQ(rewritten.result.rules.at("one").matches, 3);
  EXPECT_EQ(rewritten.result.after.count({"test.customop", "CustomOpOne"}), 0u);
  EXPECT_EQ(rewritten.result.after.at({"", "Add"}), 3);
  EXPECT_EQ(rewritten.model.opset_import_size(), 1) << "test.customop is no longer used anywhere";
}

TEST(Engine, FiresInsideModelLocalFunctionsWhenTheyAreKept) {
  const std::string model = R"(<ir_version: 8, opset_import: ["": 17, "local": 1]>
g (float[2] x) => (float[2] z) { z = local.Twice (x) }
<domain: "local", opset_import: ["": 17, "test.customop": 1]>
Twice (a) => (b) { b = test.customop.CustomOpOne (a, a) })";
  RewriteOptions options;
  options.target = "ort";  // ort runs local functions: they are kept, and rules fire inside
  const auto rewritten = rewrite_text(model, rules_from_text(kOneToAdd), options);
  ASSERT_EQ(rewritten.model.functions_size(), 1);
  const auto& function = rewritten.model.functions(0);
  ASSERT_EQ(function.node_size(), 1);
  EXPECT_EQ(function.node(0).op_type(), "Add");
  ASSERT_EQ(function.opset_import_size(), 1) << "the function's own custom import goes";
  EXPECT_EQ(function.opset_import(0).domain(), "");
}

TEST(Engine, KeepsOutputNamesAndMakesFreshNamesThatCollideWithNothing) {
  const RuleSet rules = rules_from_text(R"(
rule split-op
  description: test
  targets: onnx
  pattern (x) => (y) { y = my.Double (x) }
  replace (x) => (y) {
    t = Add (x, x)
    y = Identity (t)
  }
  example {
    <ir_version: 8, opset_import: ["": 17, "my": 1]>
    g (float[2] x) => (float[2] y) { y = my.Double (x) }
  }
  expect {
    t = Add (x, x)
    y = Identity (t)
  }
end
)");
  // "y/t" is the readable name the rule would pick: a subgraph already uses it, so another is used.
  Model model = model_from_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g (float[2] x, bool c) => (float[2] y, float[2] k) {
  y = my.Double (x)
  k = If (c) <then_branch = t () => (float[2] r) { taken = Neg (y)
                                                     r = Neg (taken) },
              else_branch = f () => (float[2] q) { q = Identity (x) }>
})");
  auto& then_branch = *model.proto.mutable_graph()->mutable_node(1)->mutable_attribute(0)->mutable_g();
  then_branch.mutable_node(0)->set_output(0, "y/t");
  then_branch.mutable_node(1)->set_input(0, "y/t");
  Rewritten rewritten;
  rewritten.result = rewrite_model(model, rules, {});
  rewritten.model = model.proto;
  const auto& add = rewritten.model.graph().node(0);
  ASSERT_EQ(add.op_type(), "Add");
  EXPECT_NE(add.output(0), "y/t");
  EXPECT_EQ(add.output(0), "y/t_1");
  EXPECT_EQ(rewritten.model.graph().node(1).output(0), "y") << "the graph output keeps its name";
}

// Replaces two nodes whose pattern outputs are both read outside the match.
const char* kFirstSecondPair = R"(
rule pair
  description: test
  targets: onnx
  pattern (a) => (u, v) {
    u = my.First (a)
    v = my.Second (u)
  }
  replace (a) => (u, v) {
    u = Neg (a)
    v = Abs (u)
  }
  example {
    <ir_version: 8, opset_import: ["": 17, "my": 1]>
    g (float[2] a) => (float[2] v) { u = my.First (a)
      v = my.Second (u) }
  }
  expect {
    u = Neg (a)
    v = Abs (u)
  }
end
)";

TEST(Engine, RepairsNodeOrderWhenAnOutputIsUsedBeforeTheLastMatchedNode) {
  // Pattern outputs u (from the first node) and v (from the last); `w` uses u before v exists.
  const RuleSet rules = rules_from_text(kFirstSecondPair);
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g (float[2] a) => (float[2] v, float[2] w) {
  u = my.First (a)
  w = Relu (u)
  v = my.Second (u)
})",
                                      rules);
  EXPECT_EQ(op_types(rewritten.model.graph()), (std::vector<std::string>{"Neg", "Relu", "Abs"})) << "Relu moves after Neg, which now computes u";
}

TEST(Engine, RepairsNodeOrderWhenASubgraphReadsAnOutputBeforeTheLastMatchedNode) {
  // As above, but what reads u before v exists is a branch of an If: a read the node's inputs
  // don't show.
  const RuleSet rules = rules_from_text(kFirstSecondPair);
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g (float[2] a, bool c) => (float[2] v, float[2] w) {
  u = my.First (a)
  w = If (c) <then_branch = then_g () => (float[2] t) { t = Relu (u) },
              else_branch = else_g () => (float[2] e) { e = Sigmoid (u) }>
  v = my.Second (u)
})",
                                      rules);
  EXPECT_EQ(op_types(rewritten.model.graph()), (std::vector<std::string>{"Neg", "If", "Abs"})) << "the If moves after Neg, which now computes u";
}

TEST(Engine, AValueASubgraphReadsIsFoundAfterTheSubgraphsNodesWereReplaced) {
  // Both rules fire in one round: the branch's Relu (which reads u from the outer graph) is
  // replaced first, then the outer pair; the outer graph's commit still asks who reads u.
  const RuleSet rules = rules_from_text(std::string(kFirstSecondPair) + R"(
rule relu-as-max
  description: test
  targets: onnx
  pattern (x) => (y) { y = Relu (x) }
  replace (x) => (y) {
    zero = Constant <value = float {0}> ()
    y = Max (x, zero)
  }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) { y = Relu (x) }
  }
  expect {
    zero = Constant <value = float {0}> ()
    y = Max (x, zero)
  }
end
)");
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g (float[2] a, bool c) => (float[2] v, float[2] w) {
  u = my.First (a)
  w = If (c) <then_branch = then_g () => (float[2] t) { t = Relu (u) },
              else_branch = else_g () => (float[2] e) { e = Relu (u) }>
  v = my.Second (u)
})",
                                      rules);
  EXPECT_EQ(rewritten.result.rules.at("relu-as-max").matches, 2);
  EXPECT_EQ(op_types(rewritten.model.graph()), (std::vector<std::string>{"Neg", "If", "Abs"})) << "the If still moves after Neg, which computes u";
  const auto& branch = rewritten.model.graph().node(1).attribute(0).g();
  ASSERT_EQ(branch.node_size(), 2);
  EXPECT_EQ(branch.node(1).op_type(), "Max");
  EXPECT_EQ(branch.node(1).input(0), "u");
}

TEST(Engine, ANodeListInAnyOrderComesOutInOrderWhereARuleFired) {
  // ONNX Runtime loads nodes in any order, so such input is accepted; a round that fires sorts
  // the whole list (stably), since its own changes can't be told from the order it came in.
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[4] x) => (float[4] a, float[4] r) {
  a = Neg (s)
  s = Sigmoid (x)
  r = Relu (x)
})",
                                      rules_from_text(kNegToSub));
  EXPECT_EQ(op_types(rewritten.model.graph()), (std::vector<std::string>{"Sigmoid", "Sub", "Relu"}));
}

TEST(Engine, RepairsOrderAcrossReplacementsThatEachMoveAValue) {
  // Two rules fire in one round: a reads v (computed by the first match) before w, whose
  // replacement now computes v. Each replacement alone is fine; together they need a re-sort.
  const RuleSet rules = rules_from_text(R"(
rule two-out
  description: test
  targets: onnx
  pattern (x) => (w, v) {
    v = Relu (x)
    w = Sigmoid (v)
  }
  replace (x) => (w, v) {
    zero = Constant <value = float {0}> ()
    v = Max (x, zero)
    w = Sigmoid (v)
  }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] w, float[2] v) {
      v = Relu (x)
      w = Sigmoid (v)
    }
  }
  expect {
    zero = Constant <value = float {0}> ()
    v = Max (x, zero)
    w = Sigmoid (v)
  }
end
)" + std::string(kNegToSub));
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[4] x) => (float[4] a, float[4] w) {
  v = Relu (x)
  a = Neg (v)
  w = Sigmoid (v)
})",
                                      rules);
  EXPECT_EQ(rewritten.result.rules.at("two-out").matches, 1);
  EXPECT_EQ(rewritten.result.rules.at("neg-to-sub").matches, 1);
  std::set<std::string> defined;
  for (const auto& init : rewritten.model.graph().initializer()) defined.insert(init.name());
  for (const auto& input : rewritten.model.graph().input()) defined.insert(input.name());
  for (const auto& node : rewritten.model.graph().node()) {
    for (const auto& input : node.input()) EXPECT_TRUE(defined.count(input)) << node.op_type() << " reads " << input << " first";
    for (const auto& output : node.output()) defined.insert(output);
  }
}

TEST(Engine, ModelsBeforeIr4GetNewConstantsAsNodes) {
  // Before IR 4 every initializer had to be a graph input too; a Constant node needs neither.
  const auto rewritten = rewrite_text(R"(<ir_version: 3, opset_import: ["": 7]>
g (float[4] v) => (float[4] a) { a = Neg (v) })",
                                      rules_from_text(kNegToSub));
  EXPECT_EQ(rewritten.model.graph().initializer_size(), 0);
  EXPECT_EQ(count(rewritten.model, "Constant"), 1);
  EXPECT_EQ(count(rewritten.model, "Sub"), 1);
  EXPECT_EQ(rewritten.model.ir_version(), 3);
}

TEST(Matching, APatternInputCannotBeAValueTheMatchComputes) {
  // RMSNorm whose "gamma" is the normalized value itself (y = n * n): not a fusable RMSNorm.
  const std::string spelled = R"(<ir_version: 10, opset_import: ["": 23]>
g (float[2, 8] x, float[8] gamma) => (float[2, 8] y) {
  k_two = Constant <value = float {2.0}> ()
  sq = Pow (x, k_two)
  axes = Constant <value = int64[1] {-1}> ()
  var = ReduceMean (sq, axes)
  eps = Constant <value = float {1e-6}> ()
  ve = Add (var, eps)
  s = Sqrt (ve)
  n = Div (x, s)
  y = Mul (n, FACTOR)
})";
  auto with_factor = [&](const std::string& factor) {
    return std::regex_replace(spelled, std::regex("FACTOR"), factor);
  };
  RewriteOptions options = ort();
  const auto fused = rewrite_text(with_factor("gamma"), builtin_rules(), options);
  EXPECT_EQ(count(fused.model, "RMSNormalization"), 1) << "the control: a real gamma fuses";
  options.explain = "Mul";
  const auto squared = rewrite_text(with_factor("n"), builtin_rules(), options);
  EXPECT_EQ(count(squared.model, "RMSNormalization"), 0);
  EXPECT_NE(squared.explain.find("input 'gamma' would be 'n', which the match itself computes"), std::string::npos)
      << squared.explain;
}

TEST(Matching, FunctionBodyAttributesKnownOnlyPerCallDeclineWithAReason) {
  // Kept function (target ort): alpha is @a, a different value at each call; the rule can't
  // bake one in. Inlined, each call's value is known and the rule fires.
  const std::string model = R"(<ir_version: 8, opset_import: ["": 17, "local": 1]>
g (float[2, 8] x) => (float[2, 8] y) { y = local.Act <a = 2.0> (x) }
<domain: "local", opset_import: ["": 17, "mydomain": 1]>
Act <a> (x) => (y) { y = mydomain.ScaledTanh <alpha: float = @a, beta = 0.5> (x) })";
  RewriteOptions options;
  options.target = "ort";
  options.explain = "ScaledTanh";
  const auto kept = rewrite_text(model, rules_from_text(kScaledTanhRule), options);
  EXPECT_EQ(kept.result.rules.count("scaled-tanh") ? kept.result.rules.at("scaled-tanh").matches : 0, 0);
  EXPECT_EQ(kept.model.functions(0).node(0).op_type(), "ScaledTanh");
  EXPECT_NE(kept.explain.find("attribute alpha refers to the function's attribute @a, known only at each call"),
            std::string::npos)
      << kept.explain;
  options.inline_functions = true;
  options.explain.clear();
  const auto inlined = rewrite_text(model, rules_from_text(kScaledTanhRule), options);
  EXPECT_EQ(inlined.result.rules.at("scaled-tanh").matches, 1);
  EXPECT_EQ(count(inlined.model, "Tanh"), 1);
}

// ---- Opsets -----------------------------------------------------------------------------------

TEST(Opsets, RequirementAboveTheModelsImportRaisesItOnlyWhenSafe) {
  const RuleSet rules = rules_from_text(R"(
rule round
  description: test
  targets: onnx
  requires: ai.onnx >= 11
  pattern (x) => (y) { y = my.Round (x) }
  replace (x) => (y) { y = Round (x) }
  example {
    <ir_version: 8, opset_import: ["": 11, "my": 1]>
    g (float[2] x) => (float[2] y) { y = my.Round (x) }
  }
  expect { y = Round (x) }
end
)");
  // Relu is the same op from 6 to 13: raising 9 -> 11 is safe.
  const auto safe = rewrite_text(R"(<ir_version: 8, opset_import: ["": 9, "my": 1]>
g (float[2] x) => (float[2] y) { r = Relu (x)
  y = my.Round (r) })",
                                 rules);
  EXPECT_EQ(count(safe.model, "Round"), 1);
  EXPECT_EQ(safe.model.opset_import(0).version(), 11);
  // Upsample changed meaning at 10 (and is gone at 10): the import must stay, the node too.
  const auto unsafe = rewrite_text(R"(<ir_version: 8, opset_import: ["": 9, "my": 1]>
g (float[1, 1, 2, 2] x, float[4] s) => (y) { r = Upsample (x, s)
  y = my.Round (r) })",
                                   rules);
  EXPECT_EQ(count(unsafe.model, "Round"), 0);
  EXPECT_EQ(unsafe.model.opset_import(0).version(), 9);
}

TEST(Opsets, RaisingTheImportRaisesTheIrVersionItNeeds) {
  // Opset 19 came with IR 9: a model raised to it from IR 8 must say IR 9, or loaders refuse it.
  const RuleSet rules = rules_from_text(R"(
rule to-19
  description: test
  targets: onnx
  requires: ai.onnx >= 19
  pattern (x) => (y) { y = my.Ident (x) }
  replace (x) => (y) { y = Identity (x) }
  example {
    <ir_version: 9, opset_import: ["": 19, "my": 1]>
    g (float[2] x) => (float[2] y) { y = my.Ident (x) }
  }
  expect { y = Identity (x) }
end
)");
  const auto raised = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17, "my": 1]>
g (float[2] x) => (float[2] y) { r = Relu (x)
  y = my.Ident (r) })",
                                   rules);
  EXPECT_EQ(raised.model.opset_import(0).version(), 19);
  EXPECT_EQ(raised.model.ir_version(), 9);
  const auto already = rewrite_text(R"(<ir_version: 10, opset_import: ["": 17, "my": 1]>
g (float[2] x) => (float[2] y) { r = Relu (x)
  y = my.Ident (r) })",
                                    rules);
  EXPECT_EQ(already.model.ir_version(), 10) << "never lowered";
}

TEST(Opsets, MaxOpsetBelowTheImportLowersItWhenEveryNodeAllows) {
  const RuleSet rules = rules_from_text(R"(
rule lower-op
  description: test
  targets: onnx
  requires: ai.onnx <= 20
  pattern (x) => (y) { y = Gelu (x) }
  replace (x) => (y) { y = Identity (x) }
  example {
    <ir_version: 8, opset_import: ["": 20]>
    g (float[2] x) => (float[2] y) { y = Gelu (x) }
  }
  expect { y = Identity (x) }
end
)");
  RewriteOptions options;
  options.max_opset = 17;
  const auto lowered = rewrite_text(R"(<ir_version: 8, opset_import: ["": 21]>
g (float[2] x) => (float[2] y) { r = Relu (x)
  y = Gelu (r) })",
                                    rules, options);
  EXPECT_EQ(count(lowered.model, "Gelu"), 0);
  EXPECT_EQ(lowered.model.opset_import(0).version(), 17);
  EXPECT_EQ(lowered.result.opset_changes.at(""), std::make_pair(21, 17));

  // Reshape-21 is not Reshape-17 for every model... a node set to a value a newer version
  // added (allowzero = 1 came at 14) blocks lowering below that version: the import stays.
  options.max_opset = 13;
  const auto kept = rewrite_text(R"(<ir_version: 8, opset_import: ["": 21]>
g (float[2] x, int64[1] s) => (float[2] y) { r = Reshape <allowzero = 1> (x, s)
  y = Gelu (r) })",
                                 rules, options);
  EXPECT_EQ(kept.model.opset_import(0).version(), 21);
  ASSERT_FALSE(kept.result.notes.empty());
  EXPECT_NE(kept.result.notes.front().find("can't be lowered to 13"), std::string::npos) << kept.result.notes.front();
  EXPECT_EQ(count(kept.model, "Gelu"), 1) << "rewritten at the model's own opset, where Gelu-20 is loadable";
}

// Lowering must leave nodes valid at the lower version, not only meaning the same: an attribute
// the older schema lacks, written even to its default, and an input slot it lacks, even empty,
// make ONNX Runtime refuse the model (DepthToSpace <mode = "DCR">, Clip (x, "", "") at 10).
// Steps marked as changes of meaning that leave a node's meaning alone let it move.
TEST(Opsets, LoweringRefusesWhatTheOlderSchemaCantHoldAndMovesWhatMeansTheSame) {
  RewriteOptions options;
  options.max_opset = 10;
  const RuleSet none;
  for (const char* node : {R"(y = DepthToSpace <blocksize = 2, mode = "DCR"> (x))", R"(y = Clip (x, , ))"}) {
    SCOPED_TRACE(node);
    const auto kept = rewrite_text(fmt::format(R"(<ir_version: 7, opset_import: ["": 13]>
g (float[1, 4, 2, 2] x) => (float[1, 1, 4, 4] y) {{ {} }})", node), none, options);
    EXPECT_EQ(kept.model.opset_import(0).version(), 13);
    ASSERT_FALSE(kept.result.notes.empty());
    EXPECT_NE(kept.result.notes.front().find("can't be lowered to 10"), std::string::npos) << kept.result.notes.front();
  }
  options.max_opset = 11;
  for (const char* node : {"y = Softmax <axis = -1> (x)", "y = ReduceMean <keepdims = 1> (x)", "y = Clip (x)"}) {
    SCOPED_TRACE(node);
    const auto moved = rewrite_text(fmt::format(R"(<ir_version: 8, opset_import: ["": 18]>
g (float[2, 3] x) => (float[2, 3] y) {{ {} }})", node), none, options);
    EXPECT_EQ(moved.model.opset_import(0).version(), 11);
  }
  // Absent, Softmax's axis is -1 from 13 but 1 before: that node does not move by itself.
  const auto softmax = rewrite_text(R"(<ir_version: 8, opset_import: ["": 13]>
g (float[2, 3, 4] x) => (float[2, 3, 4] y) { y = Softmax (x) })", none, options);
  EXPECT_EQ(softmax.model.opset_import(0).version(), 13);
}

// ---- Fixed point and determinism --------------------------------------------------------------

TEST(Engine, RulesThatUndoEachOtherFailAtTheCapNamingThem) {
  const RuleSet rules = rules_from_text(R"(
rule neg-to-abs
  description: test
  targets: onnx
  pattern (x) => (y) { y = Neg (x) }
  replace (x) => (y) { y = Abs (x) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) { y = Neg (x) }
  }
  expect { y = Abs (x) }
end
rule abs-to-neg
  description: test
  targets: onnx
  pattern (x) => (y) { y = Abs (x) }
  replace (x) => (y) { y = Neg (x) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) { y = Abs (x) }
  }
  expect { y = Neg (x) }
end
)");
  Model model = model_from_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y) { y = Neg (x) })");
  RewriteOptions options;
  options.max_rounds = 5;
  try {
    rewrite_model(model, rules, options);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("after 5 rounds"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("abs-to-neg"), std::string::npos) << e.what();
  }
}

TEST(Engine, OutputIsByteIdenticalRunAfterRun) {
  const std::string model = gelu_model("h = Div (x, s)\n e = Erf (h)\n a = Add (e, one)\n m = Mul (x, a)\n y = Mul (m, half)");
  const RuleSet rules = rules_from_text(kGeluRule);
  std::string first;
  for (int run = 0; run < 3; ++run) {
    Model loaded = model_from_text(model);
    rewrite_model(loaded, rules, ort());
    const std::string bytes = serialize_model(loaded);
    if (run == 0) first = bytes;
    EXPECT_EQ(bytes, first) << "run " << run;
  }
}

TEST(Engine, AModelNoRuleTouchesIsLeftAsItWas) {
  Model model = model_from_text(gelu_model("y = Relu (x)"));
  const std::string before = serialize_model(model);
  const auto result = rewrite_model(model, rules_from_text(kGeluRule), ort());
  EXPECT_FALSE(result.changed());
  EXPECT_FALSE(model.changed);
  EXPECT_EQ(serialize_model(model), before);
}

// ---- Rule file errors -------------------------------------------------------------------------

std::string load_error(const std::string& text) {
  try {
    rules_from_text(text);
  } catch (const InputError& e) {
    return e.file() + ": " + e.what();
  }
  return "";
}

// What only a value can satisfy is refused on an attribute at load, not silently true.
TEST(RuleFiles, ValueOnlyConstraintsOnAnAttributeAreRefused) {
  auto rule = [](const std::string& constraint) {
    return R"(rule r
  description: test
  targets: onnx
  pattern (x) => (y) { y = my.Op <alpha: float = @alpha> (x) }
  where {
    )" + constraint + R"(
  }
  replace (x) => (y) { y = Relu (x) }
end
)";
  };
  EXPECT_EQ(load_error(rule("alpha is constant")),
            "test.rules:6:5: rule r (pattern at line 4): 'alpha' is an attribute; 'alpha is constant' applies to values "
            "(attributes take ==, in, ≈, is present, is absent)");
  EXPECT_NE(load_error(rule("alpha is scalar")).find("test.rules:6:5: "), std::string::npos);
  EXPECT_NE(load_error(rule("alpha dtype in [float]")).find("'alpha' is an attribute"), std::string::npos);
  EXPECT_NE(load_error(rule("alpha rank == 0")).find("'alpha' is an attribute"), std::string::npos);
  EXPECT_NE(load_error(rule("alpha is optional")).find("which may always be absent"), std::string::npos);
  EXPECT_NE(load_error(rule("alpha ≈ 0.5")).find("has no example"), std::string::npos) << "≈ is allowed on attributes";
}

// Rule files are checked against the op tables, the rule's targets and ONNX's schemas when they
// load: each mistake below was accepted before, and gave a rule that never fired or a model no
// runtime loads.
TEST(RuleFiles, OpsAttributesAndDomainsAreCheckedAtLoad) {
  auto rule = [](const std::string& pattern, const std::string& replacement, const std::string& clauses = "") {
    return "rule r\n  description: test\n  targets: onnx\n" + clauses + "  pattern (x) => (y) {\n" + pattern +
           "\n  }\n  replace (x) => (y) {\n" + replacement + "\n  }\nend\n";
  };
  const std::string relu = "    y = Relu (x)";
  const std::string custom = "    y = my.Op (x)";
  // A typo in a replacement op: no target loads it.
  EXPECT_EQ(load_error(rule(custom, "    y = Reluu (x)")),
            "test.rules:8:9: rule r: no target of the rule (onnx) loads ai.onnx.Reluu (did you mean Relu?)");
  // A replacement op newer than the models the pattern matches, without `requires:`.
  EXPECT_EQ(load_error(rule(custom, "    y = Gelu (x)")),
            "test.rules:8:9: rule r: ai.onnx.Gelu is not loadable at ai.onnx opset 1 (the lowest a model this pattern "
            "matches has) by onnx: add `requires: ai.onnx >= 20` (or a `where { opset ... }` the pattern needs)");
  EXPECT_NE(load_error(rule(custom, "    y = Gelu (x)", "  requires: ai.onnx >= 20\n")).find("has no example"), std::string::npos);
  // Attributes: unknown names, wrong types, required ones missing; input counts.
  EXPECT_EQ(load_error(rule(custom, "    y = Softmax <axs = 1> (x)")),
            "test.rules:8:9: rule r: Softmax-1 has no attribute 'axs' (it has axis)");
  EXPECT_EQ(load_error(rule(custom, "    y = Softmax <axis = 1.5> (x)")),
            "test.rules:8:9: rule r: Softmax-1's attribute 'axis' is INT, not FLOAT");
  EXPECT_EQ(load_error(rule(custom, "    y = Cast (x)")), "test.rules:8:9: rule r: Cast-1 needs attribute 'to'");
  EXPECT_EQ(load_error(rule(custom, "    y = Relu (x, x)")), "test.rules:8:9: rule r: Relu-1 takes 1..1 inputs, not 2");
  // An attribute valid at the lowest import but gone later: Squeeze's axes became an input at 13.
  EXPECT_EQ(load_error(rule(custom, "    y = Squeeze <axes = [0]> (x)")),
            "test.rules:8:9: rule r: Squeeze-13 has no attribute 'axes' (it has none)");
  EXPECT_NE(load_error(rule("    y = my.Op (x)\n  }\n  where {\n    opset ai.onnx 1..12", "    y = Squeeze <axes = [0]> (x)"))
                .find("has no example"),
            std::string::npos)
      << "valid for every import the pattern admits";
  // A misspelled domain in `requires:`.
  EXPECT_EQ(load_error(rule(custom, relu, "  requires: ai.onnx.mll >= 2\n")),
            "test.rules:4:3: rule r: requires: 'ai.onnx.mll' is no domain the op tables know (ai.onnx, ai.onnx.ml, "
            "com.microsoft, com.microsoft.nchwc), nor one the rule's nodes use");
  // A typo in a pattern op (one letter from a standard op); a plugin op in the default domain is fine.
  EXPECT_EQ(load_error(rule("    y = Sigmod (x)", relu)), "test.rules:5:9: rule r: the pattern's Sigmod is no ai.onnx op (did you mean Sigmoid?)");
  EXPECT_NE(load_error(rule("    y = EfficientNMS_TRT (x)", relu)).find("has no example"), std::string::npos);
  EXPECT_EQ(load_error(rule("    y = LeakyRelu <alpah: float = @a> (x)", relu)),
            "test.rules:5:9: rule r: ai.onnx.LeakyRelu has no attribute 'alpah' (it has alpha, consumed_inputs)");
  // A pattern node whose output nothing uses.
  EXPECT_EQ(load_error(rule("    t = Neg (x)\n    y = my.Op (x)", relu)),
            "test.rules:5:9: rule r: the pattern's Neg computes nothing the pattern reads or outputs");
}

// Found by fuzz/parse_rules: ONNX's parser throws std::out_of_range from std::stoll on a number
// too big for its type; it ended the process.
TEST(RuleFiles, ANumberTheOnnxParserCantReadIsAnError) {
  const std::string error = load_error("rule r\n  description: d\n  targets: onnx\n  pattern (x) => (y) {\n"
                                       "    y = my.Op <axis = 99999999999999999999999> (x)\n  }\nend\n");
  EXPECT_NE(error.find("test.rules:5:"), std::string::npos) << error;
  EXPECT_NE(error.find("the pattern is not valid ONNX text: a number it can't read"), std::string::npos) << error;
}

// Also found by fuzz/parse_rules: our own numbers (where, let) out of range ended the process,
// and a let nested without bound could exhaust the stack.
TEST(RuleFiles, NumbersOutOfRangeAndDeepExpressionsAreErrors) {
  auto rule = [](const std::string& block) {
    return "rule r\n  description: d\n  targets: onnx\n  pattern (x) => (y) {\n    y = my.Op <a: int = @a> (x)\n  }\n" +
           block + "\nend\n";
  };
  EXPECT_EQ(load_error(rule("  where {\n    a == 99999999999999999999999\n  }")),
            "test.rules:8:5: the number 99999999999999999999999 is out of range");
  EXPECT_EQ(load_error(rule("  let {\n    b = a + 1e999999\n  }")), "test.rules:8:5: the number 1e999999 is out of range");
  const std::string deep = std::string(100000, '(') + "a" + std::string(100000, ')');
  EXPECT_EQ(load_error(rule("  let {\n    b = " + deep + "\n  }")), "test.rules:8:5: expression nested deeper than 200 levels");
}

// Found by fuzz/parse_rules: a pattern without outputs (`=> ()`) passed the checks, and working
// out the match order then read the first of none (undefined behaviour; a crash at best).
TEST(RuleFiles, APatternWithoutOutputsIsAnError) {
  EXPECT_EQ(load_error("rule s\ntargets:ort\npattern()=>(){}replace with i\nend"),
            "test.rules:3:14: a pattern needs an output: matching starts from the node that computes the first");
  EXPECT_EQ(load_error("rule r\n  description: d\n  targets: onnx\n  pattern (a, b) => () {\n    y = Mul (a, b)\n  }\nend\n"),
            "test.rules:4:23: a pattern needs an output: matching starts from the node that computes the first");
}

TEST(RuleFiles, ErrorsNameFileLineAndColumn) {
  EXPECT_EQ(load_error("rule x\n  descripton: hi\nend\n"),
            "test.rules:2:3: unknown clause 'descripton' (description, targets, fuses for, priority, requires, where, pattern, let, "
            "replace, example, expect, end)");
  const std::string bad_onnx = load_error(R"(rule x
  targets: onnx
  pattern (a) => (b) {
    b = Relu (a
  }
end
)");
  EXPECT_EQ(bad_onnx.rfind("test.rules:5:3: the pattern is not valid ONNX text", 0), 0u) << bad_onnx;
  EXPECT_NE(load_error("rule x\n  targets: onnx\n  where {\n    k is wobbly\n  }\nend\n").find("test.rules:4:5:"), std::string::npos);
  EXPECT_NE(load_error(std::string(kOneToAdd) + kOneToAdd).find("rule id 'one' is already used at test.rules:2"), std::string::npos);
  EXPECT_NE(load_error(R"(rule x
  targets: onnx
  pattern (a) => (b) { b = Relu (a) }
  replace (a) => (b) { b = Neg (c) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] a) => (float[2] b) { b = Relu (a) }
  }
  expect { b = Neg (a) }
end
)")
                .find("'c' is neither a replacement input nor computed before its use"),
            std::string::npos);
  EXPECT_NE(load_error(R"(rule x
  targets: onnx
  pattern (a) => (b) { b = Relu (a) }
  replace with no_such_builder
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] a) => (float[2] b) { b = Relu (a) }
  }
  expect { b = Neg (a) }
end
)")
                .find("unknown builder 'no_such_builder'"),
            std::string::npos);
}

// A rule naming a builder must bind what the builder declares it reads: a misspelled value is an
// error when the file loads, at the `replace with` clause, not a rule that silently never fires.
TEST(RuleFiles, ABuilderNeedsWhatItDeclaresFromEveryPattern) {
  const std::string misspelled = load_error(R"(rule x
  targets: onnx
  pattern (input, weight, offsets) => (y) {
    y = custom.deform_conv2d (input, weight, offsets)
  }
  replace with deform_conv_gather
  example {
    <ir_version: 8, opset_import: ["": 17, "custom": 1]>
    g (float[1, 1, 4, 4] a, float[1, 1, 2, 2] w, float[1, 8, 3, 3] o) => (float[1, 1, 3, 3] b) { b = custom.deform_conv2d (a, w, o) }
  }
  expect { b = Neg (a) }
end
)");
  EXPECT_EQ(misspelled, "test.rules:6:3: rule x: builder deform_conv_gather reads pattern value 'offset', which the pattern at line 3 "
                        "does not bind");
  const std::string undefined = load_error(R"(rule x
  targets: onnx
  pattern (x, num_groups, scale, bias) => (y) {
    y = mydomain.mygroupnorm (x, num_groups, scale, bias)
  }
  replace with group_norm_per_channel
  example {
    <ir_version: 8, opset_import: ["": 17, "mydomain": 1]>
    g (float[1, 2, 3] x, float[1] n, float[2] s, float[2] b) => (float[1, 2, 3] y) { y = mydomain.mygroupnorm (x, n, s, b) }
  }
  expect { y = Neg (x) }
end
)");
  EXPECT_EQ(undefined.rfind("test.rules:6:3: rule x: builder group_norm_per_channel reads 'eps', which the pattern at line 3 neither "
                            "captures nor defaults", 0), 0u) << undefined;
}

// `is variadic`: a node with more inputs than the pattern lists matches (without it, the extra
// inputs must be absent); the pattern binds the leading ones.
TEST(RuleLanguage, AVariadicNodeTakesFurtherInputs) {
  auto first_of_sum = [](const std::string& where) {
    return fmt::format(R"(
rule first-of-sum
  targets: onnx
  pattern (a) => (y) {{ y = Sum (a) }}
  {}
  replace (a) => (y) {{ y = Identity (a) }}
  example {{
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] a, float[2] b) => (float[2] y) {{ y = Sum (a, b) }}
  }}
  expect {{ y = Identity (a) }}
end
)", where);
  };
  const char* sum_of_three = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] a, float[2] b, float[2] c) => (float[2] y) { y = Sum (a, b, c) })";
  const auto variadic = rewrite_text(sum_of_three, rules_from_text(first_of_sum("where { y is variadic }")));
  EXPECT_EQ(variadic.result.rules.count("first-of-sum"), 1u);
  RewriteOptions explain;
  explain.explain = "Sum";
  const auto fixed = rewrite_text(sum_of_three, rules_from_text(first_of_sum("")), explain);
  EXPECT_TRUE(fixed.result.rules.empty());
  EXPECT_NE(fixed.explain.find("has input 1, which the pattern does not expect"), std::string::npos) << fixed.explain;
  EXPECT_NE(load_error(R"(rule x
  targets: onnx
  pattern (a) => (y) { y = Sum (a) }
  where { a is variadic }
  replace (a) => (y) { y = Identity (a) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] a) => (float[2] y) { y = Sum (a) }
  }
  expect { y = Identity (a) }
end
)").find("'a' is variadic, but no pattern node (of fixed operands) computes it"),
            std::string::npos);
}

// A value that may be absent links two pattern nodes only when present: absent, both ends bind
// it as "", and the node that would compute it is found through another of its outputs. (The
// matcher's prefilter, which looks for the ops computing a node's inputs before searching, once
// required that producer there: the match was found only under --explain.)
TEST(RuleLanguage, AnOptionalValueBetweenTwoPatternNodesMayBeAbsent) {
  const char* rule = R"(
rule absent-link
  description: test
  targets: onnx
  where {
    b is optional
  }
  pattern (x) => (y) {
    c = mydomain.Neg (a)
    a, b = mydomain.Two (x)
    y = mydomain.Add2 (c, b)
  }
  replace (x) => (y) { y = Relu (x) }
  example {
    <ir_version: 8, opset_import: ["": 17, "mydomain": 1]>
    g (float[4] x) => (float[4] y) {
      a, b = mydomain.Two (x)
      c = mydomain.Neg (a)
      y = mydomain.Add2 (c, b)
    }
  }
  expect { y = Relu (x) }
end
)";
  const char* absent = R"(<ir_version: 8, opset_import: ["": 17, "mydomain": 1]>
g (float[4] x) => (float[4] y) {
  t = mydomain.Two (x)
  c = mydomain.Neg (t)
  y = mydomain.Add2 (c)
})";
  RewriteOptions explain;
  explain.explain = "Add2";
  for (const auto& options : {RewriteOptions{}, explain}) {
    const auto rewritten = rewrite_text(absent, rules_from_text(rule), options);
    ASSERT_EQ(rewritten.result.rules.count("absent-link"), 1u) << options.explain;
    EXPECT_EQ(rewritten.result.rules.at("absent-link").matches, 1) << options.explain;
    EXPECT_EQ(op_count(rewritten.result.after, {"", "Relu"}), 1) << options.explain;
  }
}

// `targets:` names target files that exist (compiled in, or read on this run).
// The custom op as Neg then Add: the replacement names a value of its own.
const char* kNegThenAdd = R"(
rule neg-then-add
  description: test
  targets: onnx
  pattern (x, y) => (z) { z = test.customop.CustomOpOne (x, y) }
  replace (x, y) => (z) { t = Neg (x)  z = Add (t, y) }
  example {
    <ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
    g (float[2] x, float[2] y) => (float[2] z) { z = test.customop.CustomOpOne (x, y) }
  }
  expect { t = Neg (x)  z = Add (t, y) }
end
)";

TEST(RuleLanguage, ANewValueIsNotNamedLikeOneAnInvalidModelOnlyReads) {
  const auto rules = rules_from_text(kNegThenAdd);
  const char* model = R"(<ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
g (float[2] x, float[2] y) => (float[2] z, float[2] w) {
  z = test.customop.CustomOpOne (x, y)
  w = Relu (x)
})";
  auto new_value = [](const onnx::ModelProto& rewritten) {
    for (const auto& node : rewritten.graph().node()) {
      if (node.op_type() == "Neg") return node.output(0);
    }
    return std::string();
  };
  const std::string fresh = new_value(rewrite_text(model, rules).model);
  ASSERT_FALSE(fresh.empty());
  // The same model, except that the Relu reads a value of that name which nothing computes: a
  // valid model's reads name only values it defines, an invalid one's need not.
  auto invalid = parse_model_text(model);
  invalid.mutable_graph()->mutable_node(1)->set_input(0, fresh);
  const auto rewritten = rewrite_proto(invalid, rules);
  EXPECT_EQ(rewritten.result.rules.at("neg-then-add").matches, 1);
  EXPECT_NE(new_value(rewritten.model), fresh);
  EXPECT_FALSE(new_value(rewritten.model).empty());
}

TEST(RuleFiles, TargetsMustExist) {
  const std::string error = load_error(R"(rule x
  targets: onnx, trt
  pattern (a) => (b) { b = Relu (a) }
  replace (a) => (b) { b = Neg (a) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] a) => (float[2] b) { b = Relu (a) }
  }
  expect { b = Neg (a) }
end
)");
  EXPECT_EQ(error.rfind("test.rules:2:3: rule x: unknown target 'trt' (known: onnx, onnx-opset13, openvino, ort, tensorrt", 0), 0u) << error;
  const std::string fused = load_error(R"(rule y
  fuses for: onnx, trt
  pattern (a) => (b) { b = Relu (a) }
  replace (a) => (b) { b = Neg (a) }
end
)");
  EXPECT_EQ(fused.rfind("test.rules:2:3: rule y: unknown target 'trt' (known: onnx, onnx-opset13, openvino, ort, tensorrt", 0), 0u) << fused;
  EXPECT_EQ(load_error("rule z\n  pattern (a) => (b) { b = Relu (a) }\n  replace (a) => (b) { b = Neg (a) }\nend\n"),
            "test.rules:4:4: rule z names no targets");
}

// Goldens several rules share are written once: `expect like RULE`.
TEST(RuleFiles, ExpectLikeUsesAnotherRulesGolden) {
  const RuleSet rules = rules_from_text(std::string(kOneToAdd) + R"(
rule two
  targets: onnx
  pattern (x, y) => (z) { z = test.customop.CustomOpTwoArgs (x, y) }
  replace (x, y) => (z) { z = Add (x, y) }
  example {
    <ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
    g (float[2] x, float[2] y) => (float[2] z) { z = test.customop.CustomOpTwoArgs (x, y) }
  }
  expect like one
end
rule three
  targets: onnx
  pattern (x, y) => (z) { z = test.customop.CustomOpThree (x, y) }
  replace (x, y) => (z) { z = Add (x, y) }
  example {
    <ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
    g (float[2] x, float[2] y) => (float[2] z) { z = test.customop.CustomOpThree (x, y) }
  }
  expect like nobody
end
)");
  EXPECT_EQ(rules.expected_nodes(*rules.find("two")), rules.find("one")->example->expected_nodes_text);
  try {
    rules.expected_nodes(*rules.find("three"));
    ADD_FAILURE() << "a golden of a rule that is not loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'expect like nobody' names no loaded rule"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace onnx_rewrite
