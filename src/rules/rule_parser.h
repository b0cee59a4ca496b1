// The rule-file reader (docs/rules.md): ONNX text for patterns, replacements and examples, read by
// ONNX's own parser, inside our clauses. Errors are InputError("file:line:col", what).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rules/rule.h"

namespace onnx_rewrite {

std::vector<std::shared_ptr<const Rule>> parse_rule_file(const std::string& text, const std::string& name);

}  // namespace onnx_rewrite
