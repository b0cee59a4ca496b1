// structural_problem: the check run after each round of rewrites. Each broken graph must be
// caught (a rule bug becomes an error, not a model that no runtime loads) and named.
// input_problem: the same for input models, in any node order, plus cycles; the CLI refuses them.
#include <gtest/gtest.h>

#include "onnx_rewrite/verify.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

const char* kValid = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x, bool c) => (float[2] y, float[2] z) <float[2] w = {1, 2}> {
  a = Add (x, w)
  y = Relu (a)
  z = If (c) <then_branch = t () => (float[2] r) { r = Neg (a) }, else_branch = e () => (float[2] q) { q = Abs (y) }>
})";

TEST(Verify, AValidModelWithSubgraphsReadingOuterValuesPasses) {
  EXPECT_EQ(structural_problem(parse_model_text(kValid)), std::nullopt);
}

TEST(Verify, UseBeforeDefinitionIsNamed) {
  onnx::ModelProto model = parse_model_text(kValid);
  model.mutable_graph()->mutable_node()->SwapElements(0, 1);  // Relu now reads a before Add
  const auto problem = structural_problem(model);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("reads 'a' before anything computes it"), std::string::npos) << *problem;
}

TEST(Verify, AValueComputedTwiceIsNamed) {
  onnx::ModelProto model = parse_model_text(kValid);
  model.mutable_graph()->mutable_node(1)->set_output(0, "a");
  const auto problem = structural_problem(model);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("'a' is computed twice"), std::string::npos) << *problem;
}

TEST(Verify, AnOutputNothingComputesIsNamed) {
  onnx::ModelProto model = parse_model_text(kValid);
  model.mutable_graph()->mutable_output(0)->set_name("lost");
  const auto problem = structural_problem(model);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("output 'lost' is computed by nothing"), std::string::npos) << *problem;
}

TEST(Verify, ASubgraphReadingAValueDefinedAfterItsNodeIsNamed) {
  onnx::ModelProto model = parse_model_text(kValid);
  // The else branch reads y; compute y after the If instead of before.
  auto* nodes = model.mutable_graph()->mutable_node();
  nodes->SwapElements(1, 2);
  const auto problem = structural_problem(model);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("subgraph 'else_branch'"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("reads 'y'"), std::string::npos) << *problem;
}

TEST(InputProblem, NodesInAnyOrderAreFine) {
  onnx::ModelProto model = parse_model_text(kValid);
  auto* nodes = model.mutable_graph()->mutable_node();
  nodes->SwapElements(0, 2);  // If, Relu, Add: every value is still computed exactly once
  EXPECT_EQ(input_problem(model), std::nullopt);
  EXPECT_TRUE(structural_problem(model).has_value());  // what the engine writes must be ordered
}

TEST(InputProblem, EachBrokenGraphIsNamed) {
  struct Case {
    std::string name;
    std::function<void(onnx::ModelProto&)> breakage;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"cycle", [](auto& m) { m.mutable_graph()->mutable_node(0)->set_input(0, "y"); },
       "the nodes form a cycle (node 'Add -> a' depends on its own output)"},
      {"self loop", [](auto& m) { m.mutable_graph()->mutable_node(1)->set_input(0, "y"); }, "the nodes form a cycle"},
      {"cycle through a subgraph", [](auto& m) { m.mutable_graph()->mutable_node(0)->set_input(0, "z"); },
       "the nodes form a cycle"},
      {"computed twice", [](auto& m) { m.mutable_graph()->mutable_node(1)->set_output(0, "a"); }, "'a' is computed twice"},
      {"an initializer overwritten", [](auto& m) { m.mutable_graph()->mutable_node(1)->set_output(0, "w"); },
       "'w' is computed twice"},
      {"read from nowhere", [](auto& m) { m.mutable_graph()->mutable_node(1)->set_input(0, "nope"); },
       "node 'Relu -> y' reads 'nope', which nothing computes"},
      {"output from nowhere", [](auto& m) { m.mutable_graph()->mutable_output(1)->set_name("lost"); },
       "output 'lost' is computed by nothing"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    onnx::ModelProto model = parse_model_text(kValid);
    c.breakage(model);
    const auto problem = input_problem(model);
    ASSERT_TRUE(problem.has_value());
    EXPECT_NE(problem->find(c.expected), std::string::npos) << *problem;
  }
}

TEST(InputProblem, ARecursiveFunctionIsNamedWithItsCycle) {
  const auto problem = input_problem(parse_model_text(R"(<ir_version: 8, opset_import: ["": 17, "local": 1]>
g (float[4] x) => (float[4] y) {
  y = local.F (x)
}
<domain: "local", opset_import: ["": 17, "local": 1]>
F (X) => (Y) {
  Y = local.G (X)
}
<domain: "local", opset_import: ["": 17, "local": 1]>
G (X) => (Y) {
  Y = local.F (X)
})"));
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(*problem, "model-local function local.F calls itself (local.F -> local.G -> local.F)");
}

TEST(InputProblem, RewriteAndCheckRefuseTheModelAndWriteNothing) {
  // Two contrib ops feeding each other: rules would otherwise chase the cycle.
  TempDir dir;
  onnx::ModelProto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft": 1]>
g (float[2] x) => (float[2] y) {
  a = com.microsoft.QuickGelu (x)
  y = com.microsoft.QuickGelu (a)
})");
  model.mutable_graph()->mutable_node(0)->set_input(0, "y");
  const auto input = dir / "cycle.onnx";
  write_file(input, model.SerializeAsString());
  const auto output = dir / "out.onnx";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"rewrite", input.string(), "-o", output.string(), "--target", "onnx"},
        std::vector<std::string>{"check", input.string()}}) {
    const auto result = run_cli(args);
    EXPECT_EQ(result.exit_code, 3) << result.out << result.err;
    EXPECT_EQ(result.err, "onnx-rewrite: error: " + input.string() +
                              ": main graph: the nodes form a cycle (node 'QuickGelu -> a' depends on its own output)\n");
  }
  EXPECT_FALSE(fs::exists(output));
}

}  // namespace
}  // namespace onnx_rewrite
