// A rule's documented example, run: the rewrite it documents is the rewrite it makes. Used by
// `onnx-rewrite rules --test` (a user's rule checked without our test suite) and by our tests.
#pragma once

#include <set>
#include <string>

#include <onnx/onnx_pb.h>

#include "rules/rule.h"

namespace onnx_rewrite {

struct ExampleOutcome {
  std::string problem;           // empty when the example rewrites exactly as the rule's expect says
  std::string expected, actual;  // the canonical node lists, when they differ
  bool passed() const { return problem.empty(); }
};

// Rewrites the rule's example with only that rule, for its first target (and the example's
// `opset`), and compares the main graph's nodes with its `expect`; the rule must fire, and must
// not fire again on its own output. `rules` resolves `expect like` and is what the rule loaded with.
ExampleOutcome run_rule_example(const Rule& rule, const RuleSet& rules);

// The main graph's nodes as ONNX text with every name not in `kept` (graph inputs, outputs and
// the original initializers) renamed in order of appearance, node names dropped, and
// initializers not in `kept` shown as Constant nodes right before their first use: a rewrite's
// result compared with what a rule documents, whatever fresh names it chose.
std::string canonical_nodes(const onnx::ModelProto& model, const std::set<std::string>& kept);
// The same for a node list written in ONNX text (`{ ... }`), in the context of `model`.
std::string canonical_nodes_text(const std::string& nodes_text, const onnx::ModelProto& model, const std::set<std::string>& kept);
// Graph inputs, outputs and initializers: the names a rewrite keeps.
std::set<std::string> interface_names(const onnx::ModelProto& model);

}  // namespace onnx_rewrite
