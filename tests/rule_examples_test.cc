// Every rule in families/ (and bench/rules/) parses and its example rewrites exactly as the rule
// documents.
#include <gtest/gtest.h>

#include "onnx_rewrite/model_io.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

class RuleExample : public ::testing::TestWithParam<std::string> {};

const RuleSet& example_rules() {
  static const RuleSet rules = [] {
    RuleSet loaded;
    loaded.load_builtin();
    loaded.load_path((source_dir() / "bench" / "rules").string());
    return loaded;
  }();
  return rules;
}

TEST_P(RuleExample, RewritesAsDocumented) {
  const Rule& rule = *example_rules().find(GetParam());
  ASSERT_TRUE(rule.example) << rule.id;
  RewriteOptions options;
  options.target = rule.targets.front();
  options.only = {rule.id};
  options.max_opset = rule.example->max_opset;
  const auto before = parse_model_text(rule.example->model_text);
  const auto rewritten = rewrite_text(rule.example->model_text, example_rules(), options);
  ASSERT_TRUE(rewritten.result.rules.count(rule.id)) << rule.id << " did not fire on its own example";
  for (const auto& note : rewritten.result.notes) EXPECT_EQ(note.find("internal error"), std::string::npos) << note;
  const auto kept = interface_names(before);
  EXPECT_EQ(canonical_nodes(rewritten.model, kept), canonical_nodes_text(example_rules().expected_nodes(rule), before, kept))
      << rule.file << ":" << rule.example->line;

  // Idempotent: the rule finds nothing more in its own output.
  Model again = parse_model(serialize(rewritten.model), "again.onnx");
  const auto second = rewrite_model(again, example_rules(), options);
  EXPECT_FALSE(second.rules.count(rule.id)) << rule.id << " fires again on its own output";
}

std::vector<std::string> rule_ids() {
  std::vector<std::string> ids;
  for (const auto& rule : example_rules().rules) ids.push_back(rule->id);
  return ids;
}

INSTANTIATE_TEST_SUITE_P(Builtin, RuleExample, ::testing::ValuesIn(rule_ids()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace onnx_rewrite
