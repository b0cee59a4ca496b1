// The rewrite and clean-up stages: the one API through which rules change a model. Replacements
// are recorded while matching goes on (so iteration never sees a half-changed graph) and applied
// in one sweep per round.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "graph/flat_map.h"
#include "onnx_rewrite/builder.h"
#include "rules/matcher.h"
#include "onnx_rewrite/model.h"
#include "graph/node_set.h"
#include "graph/scope.h"

namespace onnx_rewrite {

// Every value and node name of a model, at any depth; hands out names nobody uses. The model's
// names are collected on first use (a run where no rule fires never pays for it) as hashes in one
// open-addressing set, which the names handed out join: asking whether a name is taken reads
// about one cache line. A hash collision only makes a free name look taken (or a hint's suffixes
// start higher).
class NameRegistry {
 public:
  explicit NameRegistry(onnx::ModelProto& model) : model_(model) {}
  ~NameRegistry() { finish_collecting(); }
  NameRegistry(const NameRegistry&) = delete;
  NameRegistry& operator=(const NameRegistry&) = delete;
  // `hint` itself if free, else `hint_1`, `hint_2`, ...
  std::string fresh(const std::string& hint);
  // Collects the names on a second thread meanwhile (a big graph's take a tenth of a second),
  // for the first fresh(), which waits for it: nothing may change the model until
  // finish_collecting(). Without a thread to be had, they are collected on first use.
  void start_collecting();
  void finish_collecting();
  // The model changed: names collected before any was handed out are collected again on first
  // use, as they would have been (what went is not taken any more).
  void model_changed();
  // Says that every value a node of the main graph, its subgraphs or a function reads is defined
  // there (structural_problem found nothing): the names they read are then among those collected
  // anyway, and are not collected again (half the names to hash on a big graph).
  void reads_are_defined() { reads_defined_ = true; }

 private:
  void collect();
  void forget();                  // what collect() found: collected again on first use
  bool taken(size_t hash) const;  // of a name
  void add(size_t hash);          // grows the set to keep it at most three quarters full

  onnx::ModelProto& model_;
  bool reads_defined_ = false;
  bool collected_ = false;
  bool handed_out_ = false;
  std::thread collecting_;
  bool collect_failed_ = false;  // on that thread
  std::vector<size_t> slots_;    // hashes, kEmptySlot where none; a size that is a power of two
  size_t count_ = 0;
  FlatMap<size_t, int> next_suffix_;  // by the hint's hash: the last suffix tried
};

class Rewriter {
 public:
  explicit Rewriter(Model& model) : model_(model) {}

  // Records that `builder`'s nodes replace the nodes of `match`. They will stand where the last
  // node the match covers stands now; the graph values the match's outputs had keep their names.
  void replace(const Match& match, GraphBuilder&& builder);

  // Applies every recorded replacement, scope by scope (children before parents): matched nodes
  // go, new nodes come in, producers and initializers nobody uses any more because of a removal
  // go too (with their value_info), and node order is repaired where rewrites broke it.
  void commit(const std::vector<std::unique_ptr<Scope>>& scopes);

  // Removes the nodes of the standard domains that `which` picks whose outputs nothing reads (no
  // node, subgraph or graph output), and what only they read: dead code the model came with,
  // which would block a fusion by reading a value inside it, or what a round's replacements left
  // unread (a folded constant the next fold took). Returns how many nodes went.
  size_t remove_unused(const std::vector<std::unique_ptr<Scope>>& scopes, const std::function<bool(const onnx::NodeProto&)>& which);

  // Removes the Identity nodes `which` picks whose output is not a graph output nor read inside a
  // subgraph: their readers read the Identity's input instead. Returns how many went.
  size_t bypass_identities(const std::vector<std::unique_ptr<Scope>>& scopes, const std::function<bool(const onnx::NodeProto&)>& which);

  // Nodes created by rules since this rewriter was made (valid after commit).
  const NodeSet& created() const { return created_; }
  // The nodes the replacements recorded in `scope` so far cover (the set grows with them).
  const NodeSet& replaced_in(const Scope& scope) { return pending_[&scope].removed; }
  // Whether every recorded replacement is in `scope`.
  bool pending_only_in(const Scope& scope) const {
    return std::all_of(pending_.begin(), pending_.end(),
                       [&](const auto& entry) { return entry.first == &scope || entry.second.removed.empty(); });
  }
  // Marks a node where a later round should try the rules again: one matched there but was
  // declined, or a type or rank condition failed (the plans and facts may differ next round).
  void retry(const onnx::NodeProto* node) { retried_.insert(node); }
  // The nodes committed changes created, rewired or left with fewer readers, since the last call
  // (deleted ones are left out).
  NodeSet take_touched() { return std::exchange(touched_, {}); }
  // The nodes marked for retry since the last call (deleted ones are left out).
  NodeSet take_retried() { return std::exchange(retried_, {}); }
  size_t nodes_removed() const { return nodes_removed_; }
  // Whether every scope's nodes are in topological order (the engine checked): then a commit
  // checks only the places its changes can break the order, not every node.
  void set_ordered(bool ordered) { ordered_ = ordered; }

  // New nodes standing before a node of the round's index (at commit).
  struct Insertion {
    int before;  // the index position of the node they stand before (the match's last)
    std::vector<onnx::NodeProto> nodes;
  };

 private:
  struct Pending {
    NodeSet removed;                  // every change removes a node: empty, nothing was recorded
    std::vector<Insertion> inserted;  // sorted by `before` at commit
    std::vector<onnx::TensorProto> initializers;
    std::vector<std::vector<FileRange>> raw_data_ranges;  // per initializer: assembled from these, or empty
    // Indexes into `initializers` by the hash of each one's serialization without its name: a
    // constant equal to one made earlier is not made again.
    std::unordered_multimap<size_t, size_t> initializers_by_hash;
    std::unordered_set<std::string> read_anew;  // values nodes read now that the round's index doesn't know
    struct Rewire {
      onnx::NodeProto* node;
      int input;
      std::string source;
    };
    std::vector<Rewire> rewired;  // inputs changed at commit (bypassed Identities)
  };

  // The nodes a commit removes, by their place in the round's index.
  struct Removals {
    explicit Removals(const Scope& scope) : gone_at(static_cast<size_t>(scope.nodes().size()), 0) {}
    void remove(int position) {
      gone_at[static_cast<size_t>(position)] = 1;
      gone.push_back(position);
    }
    bool is_gone(int position) const { return gone_at[static_cast<size_t>(position)] != 0; }
    std::vector<int> gone;
    std::vector<char> gone_at;
  };

  void commit_scope(const Scope& scope, Pending& pending);
  std::unordered_set<std::string> sweep_unused(const Scope& scope, const Pending& pending, const std::vector<char>& read_by_new,
                                               Removals& removals);
  void rebuild_nodes(const Scope& scope, Pending& pending, const Removals& removals);
  bool breaks_order(const Scope& scope, const Pending& pending, const std::vector<std::optional<Scope::ValueId>>& read_ids,
                    const std::vector<char>& gone_at) const;

  Model& model_;
  std::map<const Scope*, Pending> pending_;
  NodeSet created_;
  NodeSet touched_;
  NodeSet retried_;
  size_t nodes_removed_ = 0;
  bool ordered_ = false;
};

}  // namespace onnx_rewrite
