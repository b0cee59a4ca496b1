// `rewrite --html FILE`: a self-contained page showing what a rewrite did: the op table and,
// per rule, its first matches before and after as pictures (SVG laid out by Graphviz's `dot`).
#pragma once

#include <string>

#include "onnx_rewrite/engine.h"
#include "rules/rule.h"
#include "runtime/verification.h"

namespace onnx_rewrite {

// The matches recorded per rule for the page (RewriteOptions::record_matches).
constexpr int kHtmlMatchesPerRule = 3;

// UsageError unless Graphviz's `dot` is on PATH: checked before any work.
void require_graphviz();

struct HtmlPage {
  std::string input, output, target;
  bool target_met = true;
  const RewriteResult* result = nullptr;
  const RuleSet* rules = nullptr;              // for the rules' descriptions
  const Verification* verification = nullptr;  // --verify
};
std::string html_report(const HtmlPage& page);

}  // namespace onnx_rewrite
