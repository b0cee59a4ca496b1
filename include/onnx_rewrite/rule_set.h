// Rule sets: the rules a rewrite applies, from the files compiled in (rules/*/*.rules), from rule
// files or directories of them, or from text (docs/rules.md is the language).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace onnx_rewrite {

struct Rule;  // one parsed rule (internal)

struct RuleSet {
  std::vector<std::shared_ptr<const Rule>> rules;

  // Adds rules from a file or a directory of *.rules files; throws InputError("file:line:col: what").
  void load_path(const std::string& path);
  // Adds rules from text; `name` is used in errors.
  void load_text(const std::string& text, const std::string& name);
  // The rules compiled into the binary (rules/ at build time).
  void load_builtin();
  // Adds parsed rules; throws InputError naming a rule whose id is already used.
  void add(std::vector<std::shared_ptr<const Rule>> parsed);
  const Rule* find(const std::string& id) const;
  // The nodes a rule's example is expected to become (following `expect like RULE`); throws
  // InputError naming the rule when the rule it refers to is not loaded.
  const std::string& expected_nodes(const Rule& rule) const;
};

}  // namespace onnx_rewrite
