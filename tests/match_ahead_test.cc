// A big graph is matched on a second thread too, ahead of the round's walk (engine/match_ahead.h),
// its names are collected on one while the first round indexes it, and a round's result is
// checked on one while the next round starts: the rewrite must be the one a single thread makes,
// byte for byte. Here every model gets the second thread (RewriteOptions::second_thread_from = 0),
// whatever its size.
#include <gtest/gtest.h>

#include "onnx_rewrite/engine.h"
#include "rules/rule_example.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

RewriteOptions on_two_threads(RewriteOptions options) {
  options.second_thread_from = 0;
  return options;
}

// Rewrites on one thread and on two; both must give the same bytes and the same figures.
Rewritten expect_the_same_rewrite(const onnx::ModelProto& model, const RuleSet& rules, const RewriteOptions& options,
                                  const std::string& what) {
  const Rewritten alone = rewrite_proto(model, rules, options);
  const Rewritten ahead = rewrite_proto(model, rules, on_two_threads(options));
  EXPECT_EQ(ahead.bytes, alone.bytes) << what;
  EXPECT_EQ(ahead.result.rounds, alone.result.rounds) << what;
  EXPECT_EQ(ahead.result.nodes_tried, alone.result.nodes_tried) << what;
  EXPECT_EQ(ahead.result.notes, alone.result.notes) << what;
  EXPECT_EQ(ahead.result.rules.size(), alone.result.rules.size()) << what;
  for (const auto& [id, stats] : alone.result.rules) {
    const auto found = ahead.result.rules.find(id);
    EXPECT_TRUE(found != ahead.result.rules.end() && found->second.matches == stats.matches) << what << ": " << id;
  }
  return ahead;
}

// Mul (Mul (x, a), b) as one node (a Sum, for the test): in a chain of Muls, the match at the second Mul claims the
// first two, so the third can't pair with the second. Matched ahead, the third's match (the
// second and third Mul) is found before the second's is claimed: the walk must search again.
const std::string kPairRule = R"(
rule mul-pair
  description: test
  targets: onnx
  pattern (x, a, b) => (z) { t = Mul (x, a)  z = Mul (t, b) }
  replace (x, a, b) => (z) { z = Sum (x, a, b) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x, float[2] a, float[2] b) => (float[2] z) { t = Mul (x, a)  z = Mul (t, b) }
  }
  expect { z = Sum (x, a, b) }
end
)";

std::string mul_chain(int length) {
  std::string body;
  std::string last = "x";
  for (int i = 0; i < length; ++i) {
    const std::string out = i + 1 == length ? "z" : "m" + std::to_string(i);
    body += "  " + out + " = Mul (" + last + ", w)\n";
    last = out;
  }
  return "<ir_version: 8, opset_import: [\"\": 17]>\ng (float[2] x, float[2] w) => (float[2] z) {\n" + body + "}";
}

TEST(MatchAhead, AMatchCoveringANodeTheRoundClaimedIsSearchedAgain) {
  const auto rewritten = expect_the_same_rewrite(parse_model_text(mul_chain(9)), rules_from_text(kPairRule), {}, "a chain of 9 Muls");
  // Pairs in order, (1 2) (3 4) (5 6) (7 8), and the ninth alone: never a Mul in two matches.
  EXPECT_EQ(rewritten.result.rules.at("mul-pair").matches, 4);
  EXPECT_EQ(op_count(rewritten.result.after, {"", "Mul"}), 1);
  EXPECT_EQ(op_count(rewritten.result.after, {"", "Sum"}), 4);
}

// A condition on types the facts don't know in the first round: nothing declares what the custom
// op computes until the rule replacing it has run, nor anything after it. The Relu at the far end
// of a chain of Negs fails its condition on the facts, and only being marked for another try brings
// it into the next round.
const std::string kTypedRules = std::string(kOneToAdd) + R"(
rule float-relu
  description: test
  targets: onnx
  where { x dtype in [float] }
  pattern (x) => (y) { y = Relu (x) }
  replace (x) => (y) { y = LeakyRelu <alpha = 0.0> (x) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) { y = Relu (x) }
  }
  expect { y = LeakyRelu <alpha = 0.0> (x) }
end
)";

TEST(MatchAhead, ASearchThatFailedOnTheFactsIsLeftToTheWalk) {
  std::string body = "  n0 = test.customop.CustomOpOne (x, y)\n";
  for (int i = 1; i <= 50; ++i) body += "  n" + std::to_string(i) + " = Neg (n" + std::to_string(i - 1) + ")\n";
  const std::string model = "<ir_version: 8, opset_import: [\"\": 17, \"test.customop\": 1]>\n"
                            "g (float[2] x, float[2] y) => (float[2] z) {\n" + body + "  z = Relu (n50)\n}";
  const auto rewritten = expect_the_same_rewrite(parse_model_text(model), rules_from_text(kTypedRules), {}, "custom op, Negs, Relu");
  EXPECT_EQ(rewritten.result.rules.at("float-relu").matches, 1);
  EXPECT_EQ(rewritten.result.rounds, 2);
}

// GELU blocks as torch spells them, a Relu after each, sharing their constants: what the scale
// benchmark rewrites, small.
std::string gelu_chain(int blocks) {
  std::string body;
  std::string last = "x";
  for (int i = 0; i < blocks; ++i) {
    const std::string n = std::to_string(i);
    body += "  d" + n + " = Div (" + last + ", sqrt2)\n  e" + n + " = Erf (d" + n + ")\n  a" + n + " = Add (e" + n +
            ", one)\n  m" + n + " = Mul (" + last + ", a" + n + ")\n  h" + n + " = Mul (m" + n + ", half)\n";
    const std::string out = i + 1 == blocks ? "z" : "r" + n;
    body += "  " + out + " = Relu (h" + n + ")\n";
    last = out;
  }
  return "<ir_version: 8, opset_import: [\"\": 17]>\ng (float[N, 4] x) => (float[N, 4] z)\n"
         "<float sqrt2 = {1.4142135}, float one = {1.0}, float half = {0.5}> {\n" +
         body + "}";
}

TEST(MatchAhead, AChainOfGeluBlocksRewritesTheSameForEveryTarget) {
  const auto model = parse_model_text(gelu_chain(300));
  for (const std::string target : {"onnx", "ort"}) {
    RewriteOptions options;
    options.target = target;
    const auto rewritten = expect_the_same_rewrite(model, builtin_rules(), options, target);
    if (target == "ort") {
      EXPECT_EQ(rewritten.result.rules.at("fuse-gelu-erf").matches, 300);
    }
  }
}

// Every rule's example, with that rule alone and with all of them: every kind of pattern (trees
// of binary ops, commutative inputs, optional values, constraints on constants and types).
TEST(MatchAhead, EveryRuleExampleRewritesTheSame) {
  int compared = 0;
  for (const auto& rule : builtin_rules().rules) {
    if (!rule->example) continue;
    onnx::ModelProto model;
    ASSERT_NO_THROW(model = parse_model_text(rule->example->model_text)) << rule->id;
    RewriteOptions options;
    options.target = rule->targets.empty() ? rule->fuse_targets.front() : rule->targets.front();
    options.fuse = rule->targets.empty();
    options.max_opset = rule->example->max_opset;
    options.exact_opset = rule->example->exact_opset;
    expect_the_same_rewrite(model, builtin_rules(), options, rule->id + ", all rules");
    options.only = {rule->id};
    expect_the_same_rewrite(model, builtin_rules(), options, rule->id);
    ++compared;
  }
  EXPECT_GT(compared, 100);
}

}  // namespace
}  // namespace onnx_rewrite
