// Every rule in rules/ (and bench/rules/) parses and its example rewrites exactly as the rule
// documents.
#include <algorithm>
#include <filesystem>

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

// The check `onnx-rewrite rules --test` runs: fires on its example, gives exactly the documented
// nodes, finds nothing more in its own output.
TEST_P(RuleExample, RewritesAsDocumented) {
  const Rule& rule = *example_rules().find(GetParam());
  const ExampleOutcome outcome = run_rule_example(rule, example_rules());
  EXPECT_TRUE(outcome.passed()) << rule.id << " " << outcome.problem << " (" << rule.file << ":"
                                << (rule.example ? rule.example->line : rule.line) << ")";
  EXPECT_EQ(outcome.actual, outcome.expected);
}

std::vector<std::string> rule_ids() {
  std::vector<std::string> ids;
  for (const auto& rule : example_rules().rules) ids.push_back(rule->id);
  return ids;
}

// The built-in files are parsed on two threads: the rules come out as loading the files one at a
// time, in order, gives them.
TEST(BuiltinRules, AreInTheOrderLoadingTheirFilesOneAfterAnotherGives) {
  std::vector<std::string> files;
  for (const auto& family : std::filesystem::directory_iterator(source_dir() / "rules")) {
    if (!family.is_directory()) continue;
    for (const auto& file : std::filesystem::directory_iterator(family.path())) {
      if (file.path().extension() == ".rules") files.push_back(std::filesystem::relative(file.path(), source_dir()).string());
    }
  }
  std::sort(files.begin(), files.end());
  RuleSet one_by_one;
  for (const auto& file : files) one_by_one.load_path((source_dir() / file).string());
  RuleSet builtin;
  builtin.load_builtin();
  auto ids_and_files = [](const RuleSet& rules) {
    std::vector<std::string> ids;
    for (const auto& rule : rules.rules) ids.push_back(rule->id + " " + std::filesystem::path(rule->file).filename().string());
    return ids;
  };
  ASSERT_GT(one_by_one.rules.size(), 60u);
  EXPECT_EQ(ids_and_files(builtin), ids_and_files(one_by_one));
}

INSTANTIATE_TEST_SUITE_P(Builtin, RuleExample, ::testing::ValuesIn(rule_ids()),
                         [](const auto& info) { return test_name(info.param); });

}  // namespace
}  // namespace onnx_rewrite
