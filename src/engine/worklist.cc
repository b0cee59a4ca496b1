#include "engine/worklist.h"

#include <algorithm>
#include <utility>

namespace onnx_rewrite {
namespace {

// How many nodes a match of the pattern covers at most: one per pattern node, and a tree of
// binary ops for a pattern node written with n factors covers n - 1.
size_t span(const Pattern& pattern) {
  size_t nodes = 0;
  for (const auto& node : pattern.nodes) nodes += node.associative && node.inputs.size() > 2 ? node.inputs.size() - 1 : 1;
  return nodes;
}

}  // namespace

Worklist::Worklist(const std::vector<const Rule*>& rules) {
  for (const Rule* rule : rules) {
    for (const auto& pattern : rule->patterns) reach_ = std::max(reach_, span(pattern) - 1);
  }
}

std::optional<NodeSet> Worklist::nodes_to_visit(const Scope& main, const NodeSet& touched, const NodeSet& retried) {
  if (std::exchange(all_, false)) return std::nullopt;
  // What lies within reach of half the graph is about all of it, and searching costs about what
  // visiting does: a search stops once it would find half if each hop to come found as many new
  // nodes as the last (touched nodes spread along a long chain reach all of it).
  const size_t nodes = static_cast<size_t>(main.nodes().size());
  NodeSet near;
  std::vector<const onnx::NodeProto*> frontier;
  for (const auto* node : touched) {
    if (main.holds(node) && near.insert(node)) frontier.push_back(node);
  }
  for (size_t hop = 0;; ++hop) {
    const size_t hops_left = frontier.empty() ? 0 : reach_ - hop;
    if ((near.size() + frontier.size() * hops_left) * 2 >= nodes) return std::nullopt;
    if (hops_left == 0) break;
    std::vector<const onnx::NodeProto*> next;
    auto add = [&](const onnx::NodeProto* node) {
      if (near.insert(node)) next.push_back(node);
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
  for (const auto* node : retried) {
    if (main.holds(node)) near.insert(node);
  }
  return near;
}

}  // namespace onnx_rewrite
