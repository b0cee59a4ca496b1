// Which nodes of the main graph a round after the first visits: those a match could now cover,
// near what the previous round changed (MLIR's greedy driver keeps such a worklist). A rule
// matches within `reach` hops of its anchor, so a match that could not be found before covers a
// node that changed, or one whose readers changed, and its anchor is at most that far away.
// Shape facts are different: a change can make types and shapes known far downstream. Only
// type and rank conditions and builders read them, and where those refused, the engine marks the
// anchor to be tried again. What a change can reach otherwise (the opset a raise decided, a
// subgraph's reads) makes the next round visit everything again.
#pragma once

#include <optional>
#include <vector>

#include <onnx/onnx_pb.h>

#include "graph/node_set.h"
#include "rules/rule.h"
#include "graph/scope.h"

namespace onnx_rewrite {

class Worklist {
 public:
  explicit Worklist(const std::vector<const Rule*>& rules);

  // The next round visits every node (why: a raise, a change outside the main graph, --explain).
  void visit_all() { all_ = true; }

  // For a new round's main graph: the nodes to visit, or nullopt for all of them (also when
  // what lies near `touched` looks to be half the graph or more: that is about everything).
  // `touched`: the nodes the last round created, rewired or left with fewer readers
  // (Rewriter::take_touched), visited with what lies within reach; `retried`: anchors to try
  // again as they are (Rewriter::take_retried).
  std::optional<NodeSet> nodes_to_visit(const Scope& main, const NodeSet& touched, const NodeSet& retried);

 private:
  size_t reach_ = 0;
  bool all_ = true;  // the first round visits everything
};

}  // namespace onnx_rewrite
