// GraphBuilder: the nodes a replacement builds, and how they take over the graph's names.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "onnx_rewrite/build_context.h"
#include "onnx_rewrite/builder.h"
#include "rules/matcher.h"
#include "rules/rule.h"
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

TEST(GraphBuilder, AConstantWhosePayloadDoesNotFitItsShapeIsABuilderBug) {
  int counter = 0;
  GraphBuilder b = builder(counter);
  onnx::TensorProto tensor = make_tensor(onnx::TensorProto::FLOAT, {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_NO_THROW(b.constant(tensor));
  tensor.mutable_raw_data()->resize(5 * sizeof(float));
  EXPECT_THROW(b.constant(tensor), std::logic_error);
}

// decodes() answers from the dims and the payload's size what decode_tensor finds by reading it.
TEST(Tensors, DecodesTellsWhatDecodeTensorReads) {
  using T = onnx::TensorProto;
  struct Case {
    std::string name;
    T tensor;
    std::vector<double> values;  // what decode_tensor gives; empty: nothing (refused)
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, int32_t type, std::vector<int64_t> dims, std::vector<double> values, auto fill) {
    T tensor;
    tensor.set_data_type(type);
    for (int64_t dim : dims) tensor.add_dims(dim);
    fill(tensor);
    cases.push_back({std::move(name), std::move(tensor), std::move(values)});
  };
  const std::vector<double> refused;
  add("float raw", T::FLOAT, {2}, {0, 0}, [](T& t) { t.set_raw_data(std::string(8, '\0')); });
  add("float raw short", T::FLOAT, {2}, refused, [](T& t) { t.set_raw_data(std::string(7, '\0')); });
  add("float fields", T::FLOAT, {2}, {1, 2}, [](T& t) { t.add_float_data(1), t.add_float_data(2); });
  add("float fields short", T::FLOAT, {3}, refused, [](T& t) { t.add_float_data(1), t.add_float_data(2); });
  add("int64 fields", T::INT64, {2}, {1, 2}, [](T& t) { t.add_int64_data(1), t.add_int64_data(2); });
  add("int64 in float_data", T::INT64, {2}, refused, [](T& t) { t.add_int64_data(1), t.add_float_data(2); });
  add("int32 raw", T::INT32, {3}, {16843009, 16843009, 16843009}, [](T& t) { t.set_raw_data(std::string(12, '\1')); });
  add("int32 raw odd", T::INT32, {3}, refused, [](T& t) { t.set_raw_data(std::string(13, '\1')); });
  add("float16 in int32_data", T::FLOAT16, {1}, {1.0}, [](T& t) { t.add_int32_data(0x3C00); });
  add("int4, low nibble first, sign-extended", 22, {3}, {-7, -1, 2}, [](T& t) { t.set_raw_data("\xF9\x02"); });
  add("int4 a byte short", 22, {3}, refused, [](T& t) { t.set_raw_data("\xF9"); });
  add("scalar", T::DOUBLE, {}, {1.5}, [](T& t) { t.add_double_data(1.5); });
  add("negative dim", T::FLOAT, {-1}, refused, [](T&) {});
  add("complex", T::COMPLEX64, {1}, refused, [](T& t) { t.add_float_data(1), t.add_float_data(2); });
  add("external", T::FLOAT, {1}, refused, [](T& t) { t.set_data_location(T::EXTERNAL); });
  for (const auto& [name, tensor, values] : cases) {
    const auto decoded = decode_tensor(tensor);
    EXPECT_EQ(decodes(tensor), !values.empty()) << name;
    EXPECT_EQ(decoded.has_value(), !values.empty()) << name;
    if (decoded) {
      EXPECT_EQ(decoded->numbers, values) << name;
    }
  }
  // Zero elements, and strings, which have no numbers.
  T empty;
  empty.set_data_type(T::FLOAT);
  empty.add_dims(0);
  EXPECT_TRUE(decodes(empty));
  T strings;
  strings.set_data_type(T::STRING);
  strings.add_dims(2);
  strings.add_string_data("a");
  EXPECT_FALSE(decodes(strings)) << "two strings declared, one given";
  strings.add_string_data("b");
  EXPECT_TRUE(decodes(strings));
  EXPECT_EQ(decode_tensor(strings)->strings, (std::vector<std::string>{"a", "b"}));
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
  onnx::NodeProto node;
  node.set_op_type("Relu");
  *node.add_attribute() = onnx::MakeAttribute("transA", int64_t{1});
  *node.add_attribute() = onnx::MakeAttribute("transB", int64_t{1});
  match.anchor = &node;
  const BuilderSignature signature{
      .values = {"x"}, .optional_values = {"y"}, .optional_attributes = {"eps"}, .node_attributes = {"transA"}};
  const BuildContext context(match, signature);
  EXPECT_EQ(context.value("x").name, "input");
  EXPECT_TRUE(context.has("y"));
  EXPECT_EQ(context.attribute_float("eps", 0), 0.5f);
  EXPECT_EQ(context.anchor().attribute_int("transA", 0), 1);
  EXPECT_THROW(context.value("z"), BuilderContractError);
  EXPECT_THROW(context.has("alpha"), BuilderContractError);
  EXPECT_THROW(context.attribute_float("alpha", 0), BuilderContractError) << "captured, but not declared";
  EXPECT_THROW(context.anchor().attribute_int("transB", 0), BuilderContractError) << "on the node, but not declared";
  EXPECT_EQ(match.attribute_float("alpha", 0), 2.f) << "text replacements and the matcher read the match freely";
}

// A builder says why it declines, or that it built; an empty reason is a bug.
TEST(BuildResult, SaysWhetherItBuiltOrWhyNot) {
  EXPECT_TRUE(built().ok());
  EXPECT_EQ(built().reason(), "");
  const BuildResult declined = decline("the rank of x is unknown");
  EXPECT_FALSE(declined.ok());
  EXPECT_EQ(declined.reason(), "the rank of x is unknown");
  EXPECT_THROW((void)decline(""), std::logic_error);
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
  mine.add("b", {}, [](const BuildContext&, GraphBuilder&) { return built(); });
  EXPECT_THROW(mine.add("b", {}, [](const BuildContext&, GraphBuilder&) { return built(); }), std::logic_error);
}

}  // namespace
}  // namespace onnx_rewrite
