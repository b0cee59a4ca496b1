// `rules`: the rules listed, or the examples of rule files run (`--test`).
#include <algorithm>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/json.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/opset.h"
#include "onnx_rewrite/rule_example.h"

namespace onnx_rewrite {

namespace {

std::string indented(const std::string& lines) {
  std::string text;
  std::istringstream in(lines);
  for (std::string line; std::getline(in, line);) text += "    " + line + "\n";
  return text;
}

}  // namespace

int run_rules(const RuleSources& sources, bool json, std::ostream& out) {
  const RuleSet rules = sources.load();
  auto anchors = [](const Rule& rule) {
    std::set<std::string> names;
    for (const auto& pattern : rule.patterns) names.insert(display_domain(pattern.anchor().domain) + "." + pattern.anchor().op_type);
    return std::vector<std::string>(names.begin(), names.end());
  };
  auto needs = [](const Rule& rule) {
    std::vector<std::string> texts;
    for (const auto& range : rule.requires_opsets) texts.push_back(range.describe());
    return texts;
  };
  if (json) {
    JsonWriter writer;
    writer.begin_array();
    for (const auto& rule : rules.rules) {
      writer.begin_object();
      writer.key("id").value(rule->id);
      writer.key("description").value(rule->description);
      writer.key("targets").strings(rule->targets);
      writer.key("fuses_for").strings(rule->fuse_targets);
      writer.key("priority").value(rule->priority);
      writer.key("matches").strings(anchors(*rule));
      writer.key("requires").strings(needs(*rule));
      writer.key("replacement").value(rule->replacement->describe());
      writer.key("file").value(rule->file);
      writer.end_object();
    }
    writer.end_array();
    out << writer.str();
    return 0;
  }
  for (const auto& rule : rules.rules) {
    std::vector<std::string> serves;
    if (!rule->targets.empty()) serves.push_back(fmt::format("{}", fmt::join(rule->targets, ", ")));
    if (!rule->fuse_targets.empty()) serves.push_back(fmt::format("with --fuse: {}", fmt::join(rule->fuse_targets, ", ")));
    out << fmt::format("{}  [{}]\n    {}\n    matches {}", rule->id, fmt::join(serves, "; "), rule->description,
                       fmt::join(anchors(*rule), ", "));
    const auto required = needs(*rule);
    if (!required.empty()) out << fmt::format("; needs {}", fmt::join(required, ", "));
    out << fmt::format("; {} ({})\n", rule->replacement->describe(), rule->file);
  }
  out << fmt::format("{} rules\n", rules.rules.size());
  return 0;
}

int run_rule_tests(const std::vector<std::string>& paths, const RuleSources& sources, bool json, std::ostream& out) {
  std::vector<std::string> tested;
  for (const auto& path : paths) {
    RuleSet own;
    own.load_path(path);
    if (own.rules.empty()) throw InputError(path, "no rules to test (a .rules file, or a directory holding some)");
    for (const auto& rule : own.rules) tested.push_back(rule->id);
  }
  // The files tested stand in for rules of the same id (a built-in family's file being edited).
  RuleSet rules = sources.load();
  std::erase_if(rules.rules, [&](const auto& rule) { return std::count(tested.begin(), tested.end(), rule->id) > 0; });
  for (const auto& path : paths) rules.load_path(path);
  int failed = 0;
  JsonWriter writer;
  writer.begin_array();
  for (const auto& id : tested) {
    const Rule& rule = *rules.find(id);
    const ExampleOutcome outcome = run_rule_example(rule, rules);
    const std::string where = fmt::format("{}:{}", rule.file, rule.example ? rule.example->line : rule.line);
    failed += outcome.passed() ? 0 : 1;
    if (json) {
      writer.begin_object().key("id").value(rule.id).key("example").value(where).key("passed").value(outcome.passed());
      writer.key("problem").value(outcome.problem).key("expected").value(outcome.expected).key("actual").value(outcome.actual);
      writer.end_object();
    } else if (outcome.passed()) {
      out << fmt::format("PASS {}\n", rule.id);
    } else {
      out << fmt::format("FAIL {} ({}): {}\n", rule.id, where, outcome.problem);
      if (!outcome.expected.empty() || !outcome.actual.empty()) {
        out << "  expected:\n" << indented(outcome.expected) << "  got:\n" << indented(outcome.actual);
      }
    }
  }
  writer.end_array();
  if (json) out << writer.str();
  else out << fmt::format("{} rule{} tested, {} failed\n", tested.size(), tested.size() == 1 ? "" : "s", failed);
  return failed ? static_cast<int>(ExitCode::kTargetNotMet) : 0;
}

// ---- targets -------------------------------------------------------------------------------
}  // namespace onnx_rewrite
