#include "engine/worklist.h"

#include <algorithm>

namespace onnx_rewrite {
namespace {

// How many nodes a match of the pattern covers at most: one per pattern node, and a tree of
// binary ops for a pattern node written with n factors covers n - 1.
size_t span(const Pattern& pattern) {
  size_t nodes = 0;
  for (const auto& node : pattern.nodes) nodes += node.associative && node.inputs.size() > 2 ? node.inputs.size() - 1 : 1;
  return nodes;
}

bool same_dims(const std::optional<Dims>& a, const std::optional<Dims>& b) {
  if (a.has_value() != b.has_value()) return false;
  if (!a) return true;
  return std::equal(a->begin(), a->end(), b->begin(), b->end(),
                    [](const Dim& x, const Dim& y) { return x.number == y.number && x.symbol == y.symbol; });
}

bool same_facts(const ShapeFacts& a, const ShapeFacts& b) {
  return a.elem_type == b.elem_type && same_dims(a.shape, b.shape) && same_dims(a.values, b.values);
}

}  // namespace

Worklist::Worklist(const std::vector<const Rule*>& rules) {
  for (const Rule* rule : rules) {
    for (const auto& pattern : rule->patterns) reach_ = std::max(reach_, span(pattern) - 1);
  }
}

void Worklist::replaced(const Scope& scope, const std::string& value) {
  if (all_ || scope.kind() != Scope::Kind::kMainGraph) return;
  replaced_facts_.emplace_back(value, scope.facts(value));
}

std::optional<NodeSet> Worklist::nodes_to_visit(const Scope& main, const NodeSet& touched) {
  const bool all = all_ || std::any_of(replaced_facts_.begin(), replaced_facts_.end(), [&](const auto& replaced) {
                     return !same_facts(main.facts(replaced.first), replaced.second);
                   });
  replaced_facts_.clear();
  all_ = false;
  if (all) return std::nullopt;

  NodeSet near;
  std::vector<const onnx::NodeProto*> frontier;
  for (const auto* node : touched) {
    if (main.holds(node) && near.insert(node).second) frontier.push_back(node);
  }
  for (size_t hop = 0; hop < reach_ && !frontier.empty(); ++hop) {
    std::vector<const onnx::NodeProto*> next;
    auto add = [&](const onnx::NodeProto* node) {
      if (near.insert(node).second) next.push_back(node);
    };
    for (const auto* node : frontier) {
      for (const auto& input : node->input()) {
        if (const auto* produced = main.producer(input)) add(produced->node);
      }
      for (const auto& output : node->output()) {
        for (const auto& use : main.uses(output)) add(use.node);
      }
    }
    frontier = std::move(next);
  }
  return near;
}

}  // namespace onnx_rewrite
