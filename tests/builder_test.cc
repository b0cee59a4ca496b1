// GraphBuilder: the nodes a replacement builds, and how they take over the graph's names.
#include <gtest/gtest.h>

#include <cstdint>

#include "onnx_rewrite/builder.h"
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

}  // namespace
}  // namespace onnx_rewrite
