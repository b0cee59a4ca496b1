// structural_problem: the check run after each round of rewrites. Each broken graph must be
// caught (a rule bug becomes an error, not a model that no runtime loads) and named.
// input_problem: the same for input models, in any node order, plus cycles; the CLI refuses them.
#include <gtest/gtest.h>

#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/target.h"
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

// The engine takes check_input's `ordered` for structural_problem's verdict: they must agree.
TEST(InputProblem, CheckInputSaysWhetherTheNodesAreInOrder) {
  const InputCheck in_order = check_input(parse_model_text(kValid));
  EXPECT_EQ(in_order.problem, std::nullopt);
  EXPECT_TRUE(in_order.ordered);
  onnx::ModelProto model = parse_model_text(kValid);
  model.mutable_graph()->mutable_node()->SwapElements(0, 2);
  const InputCheck any_order = check_input(model);
  EXPECT_EQ(any_order.problem, std::nullopt);
  EXPECT_FALSE(any_order.ordered);
  model.mutable_graph()->mutable_node(1)->set_input(0, "nope");
  const InputCheck broken = check_input(model);
  ASSERT_TRUE(broken.problem.has_value());
  EXPECT_NE(broken.problem->find("reads 'nope', which nothing computes"), std::string::npos) << *broken.problem;
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

// Graphs nested 10,000 deep (Ifs in then-branches, a custom op at the bottom), built in memory:
// every walk is iterative, so checking, verifying and rewriting them can't exhaust the stack.
TEST(Nesting, TenThousandNestedSubgraphsAreWalkedWithoutRecursion) {
  onnx::ModelProto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17, "custom": 1]>
g (bool c, float[2] x) => (float[2] y) { y = Identity (x) })");
  onnx::NodeProto* node = model.mutable_graph()->mutable_node(0);
  for (int depth = 0; depth < 10000; ++depth) {
    const std::string out = node->output(0);
    node->Clear();
    node->set_op_type("If");
    node->add_input("c");
    node->add_output(out);
    auto* then_branch = node->add_attribute();
    then_branch->set_name("then_branch");
    then_branch->set_type(onnx::AttributeProto::GRAPH);
    auto* else_branch = node->add_attribute();
    else_branch->set_name("else_branch");
    else_branch->set_type(onnx::AttributeProto::GRAPH);
    auto* else_graph = else_branch->mutable_g();
    else_graph->set_name("e" + std::to_string(depth));
    *else_graph->add_output() = model.graph().output(0);
    else_graph->mutable_output(0)->set_name("e" + std::to_string(depth));
    auto* copy = else_graph->add_node();
    copy->set_op_type("Identity");
    copy->add_input("x");
    copy->add_output("e" + std::to_string(depth));
    auto* graph = then_branch->mutable_g();
    graph->set_name("t" + std::to_string(depth));
    *graph->add_output() = model.graph().output(0);
    graph->mutable_output(0)->set_name("t" + std::to_string(depth));
    node = graph->add_node();
    node->set_op_type("Identity");
    node->add_input("x");
    node->add_output("t" + std::to_string(depth));
  }
  node->set_op_type("Frobnicate");
  node->set_domain("custom");

  EXPECT_EQ(input_problem(model), std::nullopt);
  EXPECT_EQ(structural_problem(model), std::nullopt);
  // In memory: protobuf itself parses no file nested this deep (the loader says so).
  auto in_memory = [&] {
    Model loaded;
    loaded.proto = model;
    loaded.path = "nested.onnx";
    return loaded;
  };
  const CheckReport report = check_model(in_memory(), find_target("onnx"), std::nullopt);
  ASSERT_EQ(report.unloadable.size(), 1u);
  EXPECT_EQ(report.unloadable[0].op_type, "Frobnicate");
  EXPECT_EQ(report.unloadable[0].place, "subgraph");

  // A rule firing at the bottom: rounds, the sweep and the final check all walk the nesting.
  const RuleSet rules = rules_from_text(R"(
rule frob
  description: test
  targets: onnx
  pattern (x) => (y) { y = custom.Frobnicate (x) }
  replace (x) => (y) { y = Neg (x) }
  example {
    <ir_version: 8, opset_import: ["": 17, "custom": 1]>
    g (float[2] x) => (float[2] y) { y = custom.Frobnicate (x) }
  }
  expect { y = Neg (x) }
end
)");
  Model rewritten = in_memory();
  const auto result = rewrite_model(rewritten, rules, RewriteOptions{});
  EXPECT_EQ(result.rules.at("frob").matches, 1);
  EXPECT_EQ(output_problem(rewritten.proto), std::nullopt);
}

// training_info graphs are part of the model: checked like the main graph, and what they use
// stays (an import dropped under them gave "target met" on a model ONNX Runtime refuses).
TEST(TrainingInfo, IsCheckedAndKeepsTheImportsItUses) {
  onnx::ModelProto proto = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17, "acme": 1]>
g (float[2] x) => (float[2] y) { y = acme.Frobnicate (x) })");
  onnx::GraphProto& algorithm = *proto.add_training_info()->mutable_algorithm();
  algorithm.set_name("step");
  onnx::NodeProto& step = *algorithm.add_node();
  step.set_op_type("Frobnicate");
  step.set_domain("acme");
  step.add_input("y");
  step.add_output("z");
  *algorithm.add_output() = proto.graph().output(0);
  algorithm.mutable_output(0)->set_name("z");
  auto load = [&] {
    Model model;
    model.proto = proto;
    model.path = "trained.onnx";
    return model;
  };
  const CheckReport report = check_model(load(), find_target("onnx"), std::nullopt);
  ASSERT_EQ(report.unloadable.size(), 2u);
  EXPECT_EQ(report.unloadable[1].place, "training algorithm");

  const RuleSet rules = rules_from_text(R"(
rule frob
  description: test
  targets: onnx
  pattern (x) => (y) { y = acme.Frobnicate (x) }
  replace (x) => (y) { y = Neg (x) }
  example {
    <ir_version: 8, opset_import: ["": 17, "acme": 1]>
    g (float[2] x) => (float[2] y) { y = acme.Frobnicate (x) }
  }
  expect { y = Neg (x) }
end
)");
  Model rewritten = load();
  const auto result = rewrite_model(rewritten, rules, RewriteOptions{});
  int acme = 0;
  for (const auto& import : rewritten.proto.opset_import()) acme += import.domain() == "acme" ? 1 : 0;
  const CheckReport after = check_model(rewritten, find_target("onnx"), std::nullopt);
  const int in_training = static_cast<int>(std::count_if(after.unloadable.begin(), after.unloadable.end(), [](const Unloadable& entry) {
    return entry.place == "training algorithm";
  }));
  EXPECT_EQ(acme, 1) << "the training graph still uses acme";
  EXPECT_EQ(in_training, 1) << "rules leave training graphs alone; check says what they hold";
  EXPECT_EQ(output_problem(rewritten.proto), std::nullopt);
  EXPECT_EQ(result.rules.count("frob"), 1u);
}

// Found by fuzz/rewrite: a function body in any order (valid input, as ONNX Runtime takes it) and
// a rule firing in the main graph. The engine keeps the order of what it doesn't touch, so its
// last check holds the output to the input's order: this rewrite is not an internal error.
TEST(OutputProblem, AnUntouchedBodyInAnyOrderIsNotAnInternalError) {
  const RuleSet rules = rules_from_text(R"(
rule frob
  description: test
  targets: onnx
  pattern (x) => (y) { y = custom.Frobnicate (x) }
  replace (x) => (y) { y = Neg (x) }
  example {
    <ir_version: 8, opset_import: ["": 17, "custom": 1]>
    g (float[2] x) => (float[2] y) { y = custom.Frobnicate (x) }
  }
  expect { y = Neg (x) }
end
)");
  Model model = model_from_text(R"(<ir_version: 8, opset_import: ["": 17, "custom": 1, "local": 1]>
g (float[2] x) => (float[2] y) {
  a = custom.Frobnicate (x)
  y = local.Twice (a)
}
<domain: "local", opset_import: ["": 17]>
Twice (p) => (q) {
  q = Add (r, r)
  r = Identity (p)
})");
  ASSERT_EQ(input_problem(model.proto), std::nullopt);
  ASSERT_TRUE(structural_problem(model.proto).has_value());
  RewriteOptions options;
  options.inline_functions = false;
  const auto result = rewrite_model(model, rules, options);
  EXPECT_EQ(result.rules.at("frob").matches, 1);
  EXPECT_EQ(output_problem(model.proto, false), std::nullopt);
}

}  // namespace
}  // namespace onnx_rewrite
