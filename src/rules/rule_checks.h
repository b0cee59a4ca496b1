// Checks a parsed rule against the op tables (targets/*.ops), the targets it serves and ONNX's
// schemas, so that a typo in a rule file is an error when it loads instead of a rule that never
// fires or a model no runtime loads.
#pragma once

#include <optional>
#include <string>

#include <onnx/defs/parser.h>

#include "rules/rule.h"

namespace onnx_rewrite {

// What is wrong, and which part of the rule says it (the parser turns that into file:line:col).
struct RuleProblem {
  enum class Place { kPatternNode, kReplacementNode, kRequires };
  Place place;
  size_t pattern = 0;  // kPatternNode: which pattern
  size_t index = 0;    // the node (kPatternNode, kReplacementNode) or the requires entry
  std::string message;
};

// The first problem of `rule`, whose replacement is `replacement` when written in ONNX text
// (null for a C++ builder, whose nodes are known only when it runs).
std::optional<RuleProblem> check_rule_ops(const Rule& rule, const onnx::NodeList* replacement);

}  // namespace onnx_rewrite
