// Matching a big scope on a second core, a bounded distance ahead of the round's walk. The walk
// matches, then builds and records each replacement; on a big graph the matching is about half
// of that. The thread here tries the candidate patterns at each node, up to the first that
// matches, as if the round had claimed nothing yet, and the walk takes its answers where claims
// can't change them: a claim only rules bindings out, so no match stays no match, and a match
// covering no claimed node is the one the walk's own search would find first (the search tries
// the same bindings in the same order, and those before it failed without claims). Where claims
// may change the answer (the match covers a claimed node) or the search failed on the shape
// facts (whether it did depends on how far it got), the walk searches again itself. Matching
// here changes nothing: the thread reads the round's index and protos, and its own facts and
// decoded constants (Scope::Reader).
#pragma once

#include <atomic>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rules/matcher.h"
#include "graph/node_set.h"
#include "verify/opset.h"
#include "rules/rule.h"
#include "graph/scope.h"

namespace onnx_rewrite {

// A rule's pattern, tried at the nodes of its anchor's op.
struct Candidate {
  const Rule* rule;
  const Pattern* pattern;
  size_t rank;  // its place among its op's candidates, best first
};
// By the (domain, op_type) of the anchors.
using CandidateIndex = std::unordered_map<OpView, std::vector<Candidate>, OpViewHash>;

class MatchAhead {
 public:
  // What the thread found for one pattern at a node.
  struct Found {
    const Pattern* pattern;
    std::optional<Match> match;  // nullopt: no match, and the search failed on the facts
  };
  // What it found at a node: the candidates of the node's op are searched best first, up to the
  // first that matches (the walk rarely needs another). Patterns it found nothing for (no match,
  // not on the facts) are left out.
  struct Answers {
    std::vector<Found> found;
    size_t searched = 0;  // the candidates searched: those of a lower rank
  };

  // Starts matching the nodes of `scope` (those in `only`, if given) against the candidates of
  // their op. Everything given must stay unchanged until this is destroyed.
  MatchAhead(const Scope& scope, const NodeSet* only, const CandidateIndex& candidates);
  ~MatchAhead();  // stops the thread
  MatchAhead(const MatchAhead&) = delete;
  MatchAhead& operator=(const MatchAhead&) = delete;

  // What the thread found at `position`, once it has got there; null if it stopped before (a
  // search threw: the walk's own search will meet the same). Positions are asked in increasing
  // order; what was found at the ones before `position` may be dropped.
  Answers* at(int position);

 private:
  // Positions are handed over in batches; the thread stays at most kLead positions ahead (what
  // it found waits in a ring of that many slots).
  static constexpr int kBatch = 256;
  static constexpr int kLead = 64 * kBatch;

  void run();
  void search(int position, Matcher& matcher);  // fills the slot of `position`
  void release_below(int position);             // the walk is done with the positions below

  const Scope& scope_;
  const NodeSet* only_;
  const CandidateIndex& candidates_;
  const int count_;
  std::vector<Answers> slots_;          // by position modulo kLead
  std::atomic<int> matched_below_{0};   // the thread has filled the slots of every position below
  std::atomic<int> released_below_{0};  // the walk is done with every position below
  std::atomic<int> failed_from_{-1};    // the first position the thread could not match, if any
  int released_ = 0;                    // what the walk last told released_below_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace onnx_rewrite
