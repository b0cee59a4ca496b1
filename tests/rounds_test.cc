// Rounds after the first try the rules only near what the round before changed (a worklist), and
// again where a condition on types failed: the rewrite must be the one full rounds give.
#include <gtest/gtest.h>

#include "onnx_rewrite/engine.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// Round 1 turns CustomOpOne into Add (kOneToAdd); only then can round 2 fuse that Add with the
// Relu after it.
const std::string kTwoStepRules = std::string(kOneToAdd) + R"(
rule add-relu
  description: test
  targets: onnx
  pattern (a, b) => (z) { s = Add (a, b)  z = Relu (s) }
  replace (a, b) => (z) { s = Sum (a, b)  z = Relu (s) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] a, float[2] b) => (float[2] z) { s = Add (a, b)  z = Relu (s) }
  }
  expect { s = Sum (a, b)  z = Relu (s) }
end
)";

// A chain of `length` Neg nodes, the custom op, a Relu, and another chain; `value_info`: what the
// graph declares of the custom op's output, if anything.
std::string chain_model(int length, const std::string& value_info) {
  std::string body;
  std::string last = "x";
  for (int i = 0; i < length; ++i) {
    body += "  a" + std::to_string(i) + " = Neg (" + last + ")\n";
    last = "a" + std::to_string(i);
  }
  body += "  c = test.customop.CustomOpOne (" + last + ", y)\n  r = Relu (c)\n";
  last = "r";
  for (int i = 0; i < length; ++i) {
    body += "  b" + std::to_string(i) + " = Neg (" + last + ")\n";
    last = "b" + std::to_string(i);
  }
  body += "  z = Identity (" + last + ")\n";
  return "<ir_version: 8, opset_import: [\"\": 17, \"test.customop\": 1]>\ng (float[2] x, float[2] y) => (float[2] z) " +
         value_info + " {\n" + body + "}";
}

TEST(Rounds, LaterRoundsTryOnlyTheNodesNearWhatChanged) {
  const auto rewritten = rewrite_text(chain_model(200, "<float[2] c>"), rules_from_text(kTwoStepRules));
  EXPECT_EQ(rewritten.result.rules.at("one").matches, 1);
  EXPECT_EQ(rewritten.result.rules.at("add-relu").matches, 1);  // found in round 2, next to round 1's Add
  EXPECT_EQ(op_count(rewritten.result.after, {"", "Sum"}), 1);
  ASSERT_EQ(rewritten.result.nodes_tried.size(), 3u);
  EXPECT_EQ(rewritten.result.nodes_tried[0], 403);
  // The largest pattern spans 2 nodes: what changed, the nodes beside it and theirs, a few each time.
  EXPECT_LE(rewritten.result.nodes_tried[1], 8);
  EXPECT_GE(rewritten.result.nodes_tried[1], 2);
  EXPECT_LE(rewritten.result.nodes_tried[2], 8);
}

// A float Identity is a Cast to float: a rule whose condition reads the type the shape facts infer.
const std::string kTypedRule = R"(
rule float-identity
  description: test
  targets: onnx
  where {
    opset ai.onnx >= 13
    x dtype in [float]
  }
  pattern (x) => (y) { y = Identity (x) }
  replace (x) => (y) { y = Cast <to = 1> (x) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) { y = Identity (x) }
  }
  expect { y = Cast <to = 1> (x) }
end
)";

TEST(Rounds, AConditionOnTypesThatFailedIsTriedAgainWhereverItIs) {
  // Nothing declares c: the custom op's output has no known type, so neither has anything after
  // it, and the Identity at the far end fails its condition in round 1. Once the Add replaced the
  // custom op, the facts know the type all the way down: round 2 tries that Identity again, and
  // only it and the nodes near the Add.
  const auto rewritten = rewrite_text(chain_model(200, ""), rules_from_text(kTwoStepRules + kTypedRule));
  EXPECT_EQ(rewritten.result.rules.at("add-relu").matches, 1);
  EXPECT_EQ(rewritten.result.rules.at("float-identity").matches, 1);
  EXPECT_EQ(op_count(rewritten.result.after, {"", "Cast"}), 1);
  ASSERT_EQ(rewritten.result.nodes_tried.size(), 3u);
  EXPECT_LE(rewritten.result.nodes_tried[1], 9);
  // Full rounds (--explain tries every node) rewrite the same.
  RewriteOptions everything;
  everything.explain = {"Relu"};
  const auto full = rewrite_text(chain_model(200, ""), rules_from_text(kTwoStepRules + kTypedRule), everything);
  EXPECT_EQ(full.result.nodes_tried[1], 403);
  EXPECT_EQ(full.bytes, rewritten.bytes);
}

// A lowering for runtimes below opset 14 whose condition reads the type the shape facts infer:
// at the chain model's opset 17 without --opset, no replacement of it can ever be built.
const std::string kNegLowering = R"(
rule neg-lowering
  description: test
  targets: onnx
  requires: ai.onnx 7..13
  where { x dtype in [int8] }
  pattern (x) => (y) { y = Neg (x) }
  replace (x) => (y) { w = Cast <to = 6> (x)  n = Neg (w)  y = Cast <to = 3> (n) }
  example opset 13 {
    <ir_version: 8, opset_import: ["": 14]>
    g (int8[2] x) => (int8[2] y) { y = Neg (x) }
  }
  expect { w = Cast <to = 6> (x)  n = Neg (w)  y = Cast <to = 3> (n) }
end
)";

TEST(Rounds, ARuleTheOpsetCanNeverAllowIsNotTried) {
  // Without --opset the lowering would match nothing here anyway (a float chain), but trying it
  // would fail on the types of the Negs after the custom op, which no fact knows yet: they would
  // all be tried again in round 2.
  const auto rewritten = rewrite_text(chain_model(200, ""), rules_from_text(kTwoStepRules + kNegLowering));
  EXPECT_EQ(rewritten.result.rules.at("add-relu").matches, 1);
  EXPECT_FALSE(rewritten.result.rules.count("neg-lowering"));
  ASSERT_EQ(rewritten.result.nodes_tried.size(), 3u);
  EXPECT_LE(rewritten.result.nodes_tried[1], 9);
  // --explain tries it, to say why it does not fire.
  RewriteOptions explained;
  explained.explain = "Neg";
  const auto shown = rewrite_text(chain_model(2, ""), rules_from_text(kTwoStepRules + kNegLowering), explained);
  EXPECT_NE(shown.explain.find("neg-lowering ("), std::string::npos) << shown.explain;
}

TEST(Rounds, ARoundWithNothingLeftToMatchIsNotRun) {
  // Once the custom op is an Add, no node is one a rule is anchored at: the round that confirms
  // the fixed point needs no index and tries no node.
  const auto rewritten = rewrite_text(chain_model(200, ""), rules_from_text(kOneToAdd));
  EXPECT_EQ(rewritten.result.rules.at("one").matches, 1);
  EXPECT_EQ(rewritten.result.nodes_tried, (std::vector<int>{403, 0}));
  // Nor is the first, when only rules the opset rules out are anchored anywhere.
  const auto untouched = rewrite_text(chain_model(20, ""), rules_from_text(kNegLowering));
  EXPECT_EQ(untouched.result.nodes_tried, (std::vector<int>{0}));
  EXPECT_TRUE(untouched.result.rules.empty());
  // With --opset 13 the same rule is tried, in every round.
  RewriteOptions lowered;
  lowered.max_opset = 13;
  const auto tried = rewrite_text(chain_model(20, ""), rules_from_text(kNegLowering), lowered);
  EXPECT_EQ(tried.result.nodes_tried.front(), 43);
}

// A canonicalization, so that the clean-ups run (dead nodes go before the first round).
const std::string kCanonicalizeSumOfOne = R"(
rule canonicalize-sum-of-one
  description: test
  targets: onnx
  pattern (x) => (y) { y = Sum (x) }
  replace (x) => (y) { y = Identity (x) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) { y = Sum (x) }
  }
  expect { y = Identity (x) }
end
)";

TEST(Rounds, CanonicalizationRunsBeforeARoundWithNothingLeftToMatch) {
  // Only a rule the opset rules out is anchored in the model, yet the dead Relu goes before round
  // 1 (which is then not run), as it always went: --opset 15 changes the import, so the clean-up
  // is kept, not undone as canonicalization alone would be.
  const auto rules = rules_from_text(kNegLowering + kCanonicalizeSumOfOne);
  RewriteOptions options;
  options.max_opset = 15;
  const auto rewritten = rewrite_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y) {
  y = Neg (x)
  d = Relu (x)
})",
                                      rules, options);
  EXPECT_EQ(rewritten.result.rules.at("canonicalize-unused-nodes").matches, 1);
  EXPECT_EQ(op_types(rewritten.model.graph()), (std::vector<std::string>{"Neg"}));
  EXPECT_EQ(rewritten.model.opset_import(0).version(), 15);
}

// Names are collected while the first round indexes the graph, before the dead nodes go: a
// name only a dead node had is free again for the replacement, as when names were collected
// after the clean-up.
TEST(Rounds, ANameOnlyADeadNodeHadIsFreeForTheReplacement) {
  const auto rules = rules_from_text(kOneToAdd + kCanonicalizeSumOfOne);
  auto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
g (float[2] x, float[2] y) => (float[2] z) {
  d = Relu (x)
  z = test.customop.CustomOpOne (x, y)
})");
  model.mutable_graph()->mutable_node(0)->set_name("z/one/Add");  // the name rule one's Add asks for
  const auto rewritten = rewrite_proto(model, rules);
  EXPECT_EQ(rewritten.result.rules.at("canonicalize-unused-nodes").matches, 1);
  ASSERT_EQ(rewritten.model.graph().node_size(), 1);
  EXPECT_EQ(rewritten.model.graph().node(0).name(), "z/one/Add");
}

// For models importing test.other only.
const std::string kDoubleNegation = R"(
rule double-negation
  description: test
  targets: onnx
  where { opset test.other >= 1 }
  pattern (x) => (y) { t = Neg (x)  y = Neg (t) }
  replace (x) => (y) { y = Identity (x) }
  example {
    <ir_version: 8, opset_import: ["": 17, "test.other": 1]>
    g (float[2] x) => (float[2] y) { t = Neg (x)  y = Neg (t) }
  }
  expect { y = Identity (x) }
end
)";

TEST(Rounds, ARuleForAnImportTheModelLacksIsNotTried) {
  const auto rules = rules_from_text(kDoubleNegation);
  const std::string model = chain_model(20, "<float[2] c>");
  const auto untouched = rewrite_text(model, rules);
  EXPECT_EQ(untouched.result.nodes_tried, (std::vector<int>{0}));
  EXPECT_TRUE(untouched.result.rules.empty());
  // --explain tries it, to say why it does not fire.
  RewriteOptions explained;
  explained.explain = "Neg";
  const auto shown = rewrite_text(model, rules, explained);
  EXPECT_NE(shown.explain.find("the model imports test.other 0"), std::string::npos) << shown.explain;
  // Where the model imports the domain, it fires.
  std::string importing = model;
  const std::string custom = "\"test.customop\": 1";
  importing.replace(importing.find(custom), custom.size(), custom + ", \"test.other\": 1");
  const auto rewritten = rewrite_text(importing, rules);
  EXPECT_GT(rewritten.result.rules.at("double-negation").matches, 0);
}

TEST(Rounds, ARoundThatChangedHalfTheGraphIsFollowedByAFullOne) {
  // 300 Negs, then 100 Relus: round 1 makes every Neg a Sub, and round 2 (add-relu, anchored at
  // Relu, keeps it going) tries every node, the Relus far down included, instead of searching
  // near what changed (which would reach only the Subs and the first two Relus).
  std::string body;
  std::string last = "x";
  for (int i = 0; i < 400; ++i) {
    const std::string next = "v" + std::to_string(i);
    body += "  " + next + (i < 300 ? " = Neg (" : " = Relu (") + last + ")\n";
    last = next;
  }
  const std::string model = "<ir_version: 8, opset_import: [\"\": 17]>\ng (float[2] x) => (float[2] " + last + ") {\n" + body + "}";
  const auto rewritten = rewrite_text(model, rules_from_text(std::string(kNegToSub) + kTwoStepRules));
  EXPECT_EQ(rewritten.result.rules.at("neg-to-sub").matches, 300);
  EXPECT_EQ(rewritten.result.nodes_tried, (std::vector<int>{400, 400}));
}

TEST(Rounds, ASearchThatReachesHalfTheGraphStopsAndVisitsAll) {
  // 25 custom ops, one every 8 nodes, and a Relu at the end (add-relu has an anchor): round 1
  // touches 75 of the 200 nodes (each new Add, the Neg before it and the one after), and what
  // lies within add-relu's reach of them is 125.
  std::string body;
  std::string last = "x";
  for (int i = 0; i < 200; ++i) {
    const std::string next = "v" + std::to_string(i);
    const std::string op = i % 8 == 4 ? "test.customop.CustomOpOne (" + last + ", y)" : (i == 199 ? "Relu (" : "Neg (") + last + ")";
    body += "  " + next + " = " + op + "\n";
    last = next;
  }
  const std::string model = "<ir_version: 8, opset_import: [\"\": 17, \"test.customop\": 1]>\ng (float[2] x, float[2] y) => (float[2] " +
                            last + ") {\n" + body + "}";
  const auto rewritten = rewrite_text(model, rules_from_text(kTwoStepRules));
  EXPECT_EQ(rewritten.result.rules.at("one").matches, 25);
  EXPECT_EQ(rewritten.result.nodes_tried, (std::vector<int>{200, 200}));
}

TEST(Rounds, ExplainTriesEveryNodeInEveryRound) {
  RewriteOptions options;
  options.explain = {"Relu"};
  const auto rewritten = rewrite_text(chain_model(20, "<float[2] c>"), rules_from_text(kTwoStepRules), options);
  EXPECT_EQ(rewritten.result.nodes_tried, (std::vector<int>{43, 43, 43}));
}

TEST(Rounds, TheReportGivesTheNodesTriedPerRound) {
  TempDir dir;
  const auto model = write_model_text(chain_model(10, "<float[2] c>"), dir / "chain.onnx");
  write_file(dir / "two.rules", kTwoStepRules);
  const auto run = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--no-builtin-rules", "--rules",
                            (dir / "two.rules").string(), "--report", (dir / "report.json").string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto report = parse_json(read_file(dir / "report.json"));
  const auto& tried = report.struct_value().fields().at("nodes_tried").list_value();
  ASSERT_EQ(tried.values_size(), 3);
  EXPECT_EQ(tried.values(0).number_value(), 23);
  EXPECT_LT(tried.values(1).number_value(), 23);
}

}  // namespace
}  // namespace onnx_rewrite
