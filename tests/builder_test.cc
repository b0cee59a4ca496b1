// GraphBuilder: the nodes a replacement builds, and how they take over the graph's names.
#include <gtest/gtest.h>

#include <cstdint>

#include "onnx_rewrite/builder.h"
#include "onnx_rewrite/matcher.h"
#include "onnx_rewrite/rule.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {
namespace {

GraphBuilder builder(int& counter) {
  return GraphBuilder("base", "rule", {{"", 17}}, [&counter](const std::string& hint) {
    return hint + "_" + std::to_string(counter++);
  });
}

TEST(GraphBuilder, OneValueForTwoOutputsRenamesOnceAndCopiesOnce) {
  // y1 and y2 are the same value: the node computing it becomes y1, an Identity gives y2.
  int counter = 0;
  GraphBuilder b = builder(counter);
  Value r = b.op("Relu", {Value{"x"}});
  b.output("y1", r);
  b.output("y2", r);
  ASSERT_EQ(b.nodes().size(), 2u);
  EXPECT_EQ(b.nodes()[0].op_type(), "Relu");
  EXPECT_EQ(b.nodes()[0].output(0), "y1");
  EXPECT_EQ(b.nodes()[1].op_type(), "Identity");
  EXPECT_EQ(b.nodes()[1].input(0), "y1") << "reads the name the value has now, not the one renamed away";
  EXPECT_EQ(b.nodes()[1].output(0), "y2");
}

TEST(GraphBuilder, AValueFromOutsideTheReplacementIsCopiedUnderTheOutputsName) {
  int counter = 0;
  GraphBuilder b = builder(counter);
  b.output("y", Value{"x"});
  ASSERT_EQ(b.nodes().size(), 1u);
  EXPECT_EQ(b.nodes()[0].op_type(), "Identity");
  EXPECT_EQ(b.nodes()[0].input(0), "x");
  EXPECT_EQ(b.nodes()[0].output(0), "y");
}

TEST(GraphBuilder, Int64ConstantsKeepEveryBit) {
  // Through a double, 2^63 - 1 would become 2^63 and wrap to INT64_MIN.
  int counter = 0;
  GraphBuilder b = builder(counter);
  b.ints({INT64_MAX, INT64_MIN, 9007199254740993});
  ASSERT_EQ(b.constants().size(), 1u);
  const auto values = decode_tensor(b.constants()[0].second);
  ASSERT_TRUE(values.has_value());
  EXPECT_EQ(values->integers, (std::vector<int64_t>{INT64_MAX, INT64_MIN, 9007199254740993}));
}

// What a builder reads is what it declared: anything else is a bug in the builder, thrown as
// BuilderContractError (the engine reports it as an internal error of the rule), never read.
TEST(BuilderSignature, ReadingAnUndeclaredNameIsABuilderBug) {
  Rule rule;
  rule.id = "r";
  Match match;
  match.rule = &rule;
  match.values = {{"x", "input"}, {"y", "output"}};
  match.attributes["eps"] = onnx::MakeAttribute("eps", 0.5f);
  match.attributes["alpha"] = onnx::MakeAttribute("alpha", 2.f);
  const BuilderSignature signature{.values = {"x"}, .optional_values = {"y"}, .optional_attributes = {"eps"}};
  match.signature = &signature;
  EXPECT_EQ(match.value("x"), "input");
  EXPECT_TRUE(match.has_value("y"));
  EXPECT_EQ(match.attribute_float("eps", 0), 0.5f);
  EXPECT_THROW(match.value("z"), BuilderContractError);
  EXPECT_THROW(match.has_value("alpha"), BuilderContractError);
  EXPECT_THROW(match.attribute_float("alpha", 0), BuilderContractError) << "captured, but not declared";
  match.signature = nullptr;  // text replacements and the matcher read freely
  EXPECT_EQ(match.attribute_float("alpha", 0), 2.f);
}

// Every builder a family registers is found by name, with its signature.
TEST(BuilderRegistry, FamiliesRegisterTheirBuilders) {
  const BuilderRegistry& registry = BuilderRegistry::builtin();
  const Builder* gather = registry.find("deform_conv_gather");
  ASSERT_NE(gather, nullptr);
  EXPECT_EQ(gather->signature.values, (std::vector<std::string>{"input", "weight", "offset", "y"}));
  EXPECT_NE(registry.find("group_norm_per_channel"), nullptr);
  EXPECT_NE(registry.find("nchwc_to_nchw"), nullptr);
  EXPECT_EQ(registry.find("no_such_builder"), nullptr);
  BuilderRegistry mine;
  mine.add("b", {}, [](const Match&, GraphBuilder&) { return std::string(); });
  EXPECT_THROW(mine.add("b", {}, [](const Match&, GraphBuilder&) { return std::string(); }), std::logic_error);
}

}  // namespace
}  // namespace onnx_rewrite
