// structural_problem: the check run after each round of rewrites. Each broken graph must be
// caught (a rule bug becomes an error, not a model that no runtime loads) and named.
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

}  // namespace
}  // namespace onnx_rewrite
