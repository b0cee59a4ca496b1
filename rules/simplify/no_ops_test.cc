// rules/simplify/no-ops.rules: each no-op as exporters write it goes (--simplify), and the model
// computes bit for bit what it did in ONNX Runtime; what only looks like a no-op stays, with the
// reason.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

struct NoOpCase {
  std::string name;
  std::string signature;  // (inputs) => (outputs)
  std::string body;
  std::string rule;       // the rule that must fire ("" for a near miss)
  std::string declined;   // for a near miss: the reason --explain gives
};

std::string model_text(const NoOpCase& c) {
  return fmt::format("<ir_version: 8, opset_import: [\"\": 17]>\ng {} {{\n{}\n}}", c.signature, c.body);
}

class NoOp : public ::testing::TestWithParam<NoOpCase> {};

TEST_P(NoOp, GoesAndTheNumbersStayBitForBit) {
  const NoOpCase& c = GetParam();
  RewriteOptions options;
  options.simplify = true;
  const auto original = parse_model_text(model_text(c));
  const auto rewritten = rewrite_proto(original, builtin_rules(), options);
  if (c.rule.empty()) {
    for (const char* id : {"simplify-no-op-cast", "simplify-inference-dropout", "simplify-neutral-operand"}) {
      EXPECT_FALSE(rewritten.result.rules.count(id)) << id << " fired on a near miss";
    }
    const size_t op_at = c.body.find("y_op = ") + 7;
    options.explain = c.body.substr(op_at, c.body.find(' ', op_at) - op_at);  // the near miss's op
    const auto explained = rewrite_proto(original, builtin_rules(), options);
    EXPECT_NE(explained.explain.find(c.declined), std::string::npos) << explained.explain;
    return;
  }
  ASSERT_TRUE(rewritten.result.rules.count(c.rule)) << rewritten.explain;
  TempDir dir;
  write_file(dir / "original.onnx", serialize(original));
  write_file(dir / "simplified.onnx", rewritten.bytes);
  const auto comparison = ort_compare(dir / "original.onnx", dir / "simplified.onnx", {"--rtol", "0", "--atol", "0", "--trials", "2"});
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

INSTANTIATE_TEST_SUITE_P(
    Simplify, NoOp,
    ::testing::Values(
        NoOpCase{"cast_int64_to_int64", "(int64[3] a, int64[3] b) => (int64[3] y)",
                 "q = Div (a, b)\n c = Cast <to = 7> (q)\n y = Neg (c)", "simplify-no-op-cast", ""},
        NoOpCase{"cast_float_to_float", "(float[2, 3] x) => (float[2, 3] y)", "c = Cast <to = 1> (x)\n y = Relu (c)",
                 "simplify-no-op-cast", ""},
        NoOpCase{"dropout_without_training", "(float[2, 3] x) => (float[2, 3] y)", "d = Dropout (x)\n y = Relu (d)",
                 "simplify-inference-dropout", ""},
        NoOpCase{"dropout_training_false", "(float[2, 3] x) => (float[2, 3] y)",
                 "r = Constant <value = float {0.5}> ()\n t = Constant <value = bool {0}> ()\n d = Dropout (x, r, t)\n y = Relu (d)",
                 "simplify-inference-dropout", ""},
        NoOpCase{"dropout_ratio_zero_training", "(float[2, 3] x) => (float[2, 3] y)",
                 "r = Constant <value = float {0.0}> ()\n t = Constant <value = bool {1}> ()\n d = Dropout (x, r, t)\n y = Relu (d)",
                 "simplify-inference-dropout", ""},
        NoOpCase{"mul_by_one", "(float[2, 3] x) => (float[2, 3] y)", "k = Constant <value = float[1] {1.0}> ()\n m = Mul (k, x)\n y = Relu (m)",
                 "simplify-neutral-operand", ""},
        NoOpCase{"div_by_one", "(float[2, 3] x) => (float[2, 3] y)", "k = Constant <value = float {1.0}> ()\n m = Div (x, k)\n y = Relu (m)",
                 "simplify-neutral-operand", ""},
        NoOpCase{"sub_zero", "(float[2, 3] x) => (float[2, 3] y)", "k = Constant <value = float {0.0}> ()\n m = Sub (x, k)\n y = Relu (m)",
                 "simplify-neutral-operand", ""},
        NoOpCase{"int_add_zero", "(int64[2, 3] x) => (int64[2, 3] y)", "k = Constant <value = int64 {0}> ()\n m = Add (x, k)\n y = Neg (m)",
                 "simplify-neutral-operand", ""},
        // Near misses: they change something.
        NoOpCase{"cast_changes_type", "(int64[3] x) => (float[3] y)", "y_op = Cast <to = 1> (x)\n y = Relu (y_op)", "",
                 "the Cast changes the element type"},
        NoOpCase{"dropout_that_drops", "(float[2, 3] x) => (float[2, 3] y)",
                 "r = Constant <value = float {0.5}> ()\n t = Constant <value = bool {1}> ()\n y_op = Dropout (x, r, t)\n y = Relu (y_op)", "",
                 "elements may be dropped"},
        NoOpCase{"float_add_zero", "(float[2, 3] x) => (float[2, 3] y)",
                 "k = Constant <value = float {0.0}> ()\n y_op = Add (x, k)\n y = Relu (y_op)", "", "is not x when x is -0"},
        NoOpCase{"mul_by_one_broadcasting", "(float[3] x) => (float[2, 3] y)",
                 "k = Constant <value = float[2, 1] {1.0, 1.0}> ()\n y_op = Mul (x, k)\n y = Relu (y_op)", "",
                 "more than one element"},
        NoOpCase{"one_over_x", "(float[3] x) => (float[3] y)",
                 "k = Constant <value = float {1.0}> ()\n y_op = Div (k, x)\n y = Relu (y_op)", "", "(x) is not a constant"},
        NoOpCase{"mul_by_two", "(float[3] x) => (float[3] y)",
                 "k = Constant <value = float {2.0}> ()\n y_op = Mul (x, k)\n y = Relu (y_op)", "", "not the operation's neutral element"}),
    [](const ::testing::TestParamInfo<NoOpCase>& info) { return info.param.name; });

// A Dropout whose mask is read keeps computing it.
TEST(InferenceDropout, StaysWhenItsMaskIsRead) {
  RewriteOptions options;
  options.simplify = true;
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y, bool[2, 3] mask) {
  d, mask = Dropout (x)
  y = Relu (d)
})", builtin_rules(), options);
  EXPECT_EQ(op_types(rewritten.model.graph()), (std::vector<std::string>{"Dropout", "Relu"}));
}

}  // namespace
}  // namespace onnx_rewrite
