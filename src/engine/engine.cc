#include "onnx_rewrite/engine.h"
#include "engine/active_rules.h"
#include "graph/node_attributes.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <iterator>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "onnx_rewrite/error.h"
#include "engine/inline.h"
#include "rules/matcher.h"
#include "onnx_rewrite/model_io.h"
#include "verify/opset.h"
#include "engine/match_ahead.h"
#include "engine/rewriter.h"
#include "engine/simplify.h"
#include "engine/worklist.h"
#include "graph/scope.h"
#include "onnx_rewrite/target.h"
#include "onnx_rewrite/verify.h"
#include "graph/imports.h"
#include "graph/walk.h"
#include "engine/opset_policy.h"
#include "rules/text_replacement.h"

namespace onnx_rewrite {

OpCounts count_ops(const onnx::ModelProto& model) {
  std::unordered_map<OpView, int, OpViewHash> seen;
  for_each_node(model, [&](const onnx::NodeProto& node, const Place&) { ++seen[OpView::of(node)]; });
  // In key order, each appended at the end of the map: 100,000 functions are as many op types.
  std::vector<std::pair<OpView, int>> sorted(seen.begin(), seen.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return std::pair(a.first.domain, a.first.op_type) < std::pair(b.first.domain, b.first.op_type);
  });
  OpCounts counts;
  for (const auto& [key, count] : sorted) counts.emplace_hint(counts.end(), OpKey(key.domain, key.op_type), count);
  return counts;
}

bool is_canonicalization(const std::string& rule_id) { return rule_id.starts_with("canonicalize-"); }
bool is_canonicalization(const Rule& rule) { return is_canonicalization(rule.id); }
bool is_simplification(const Rule& rule) { return rule.id.starts_with("simplify-"); }
// Not rules: the dead nodes and the Identity nodes a model came with, removed where
// canonicalization runs.
constexpr const char* kUnusedNodes = "canonicalize-unused-nodes";
constexpr const char* kIdentities = "canonicalize-identities";

// Whether --only and --skip leave the rule in.
static bool chosen(const Rule& rule, const RewriteOptions& options) {
  return (options.only.empty() || options.only.count(rule.id)) && !options.skip.count(rule.id);
}

std::vector<const Rule*> active_rules(const RuleSet& rules, const RewriteOptions& options) {
  for (const auto& id : options.only) {
    if (!rules.find(id)) throw UsageError("--only " + id + ": no rule has that id");
  }
  for (const auto& id : options.skip) {
    if (!rules.find(id)) throw UsageError("--skip " + id + ": no rule has that id");
  }
  const Target& target = find_target(options.target);
  std::vector<const Rule*> active;
  for (const auto& rule : rules.rules) {
    if (!rule->serves(target, options.fuse) || is_simplification(*rule)) continue;
    if (!options.canonicalize && is_canonicalization(*rule)) continue;
    if (chosen(*rule, options)) active.push_back(rule.get());
  }
  return active;
}

std::vector<const Rule*> simplification_rules(const RuleSet& rules, const RewriteOptions& options) {
  std::vector<const Rule*> active;
  for (const auto& rule : rules.rules) {
    if (!is_simplification(*rule) && !(options.canonicalize && is_canonicalization(*rule))) continue;
    if (chosen(*rule, options)) active.push_back(rule.get());
  }
  return active;
}

namespace {

// Rules by the (domain, op_type) of their anchors, best first: priority, then id. Keys view
// the rules' own strings.
CandidateIndex index_by_anchor(const std::vector<const Rule*>& rules) {
  std::vector<const Rule*> sorted = rules;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Rule* a, const Rule* b) { return a->priority != b->priority ? a->priority > b->priority : a->id < b->id; });
  CandidateIndex index;
  for (const Rule* rule : sorted) {
    for (const auto& pattern : rule->patterns) {
      auto& candidates = index[{pattern.anchor().domain, pattern.anchor().op_type}];
      candidates.push_back({rule, &pattern, candidates.size()});
    }
  }
  return index;
}

// The lowest ai.onnx version a rule's replacement needs (0: none stated).
int required_opset(const Rule& rule) {
  for (const auto& range : rule.requires_opsets) {
    if (range.domain.empty()) return range.min;
  }
  return 0;
}

bool explains(const RewriteOptions& options, const onnx::NodeProto& node) {
  if (options.explain.empty() || !options.explain_out) return false;
  return options.explain == node.op_type() || options.explain == node.name() || options.explain == node.domain() + "." + node.op_type();
}

using Raise = OpsetPolicy::Raise;

// One line on a terminal, rewritten in place once a run has taken more than a second, and
// cleared when the run ends: a big model shows it is getting on.
class ProgressLine {
 public:
  explicit ProgressLine(std::ostream* out) : out_(out), start_(Clock::now()) {}
  ~ProgressLine() {
    if (shown_) *out_ << "\r\033[K" << std::flush;
  }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Called per node: the clock is read once in 1024 calls.
  void update(int round, int matches) {
    if (!out_ || ++calls_ % 1024 != 0) return;
    const auto now = Clock::now();
    if (now - start_ < std::chrono::seconds(1) || now < next_) return;
    next_ = now + std::chrono::milliseconds(250);
    shown_ = true;
    *out_ << fmt::format("\r\033[Kround {}: {} matches", round, matches) << std::flush;
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::ostream* out_;
  Clock::time_point start_;
  Clock::time_point next_;
  uint64_t calls_ = 0;
  bool shown_ = false;
};

// The structural check of what a round committed, on a second thread while the next round
// indexes and matches (which only read the model, as the check does). Whoever changes the model
// next waits for it first.
class RoundCheck {
 public:
  RoundCheck() = default;
  RoundCheck(const RoundCheck&) = delete;
  RoundCheck& operator=(const RoundCheck&) = delete;
  ~RoundCheck() {
    if (thread_.joinable()) thread_.join();
  }

  // `rules`: those that fired in the round, named if the check finds a problem. `meanwhile`:
  // on a second thread (else checked here).
  void start(const onnx::ModelProto& model, std::set<std::string> rules, bool meanwhile) {
    rules_ = std::move(rules);
    started_ = true;
    if (!meanwhile) {
      problem_ = structural_problem(model);
      return;
    }
    try {
      thread_ = std::thread([this, &model] {
        try {
          problem_ = structural_problem(model);
        } catch (...) {
          failure_ = std::current_exception();
        }
      });
    } catch (const std::system_error&) {  // no thread to be had: checked here
      problem_ = structural_problem(model);
    }
  }

  // Whether a check was started since the last call (and found nothing: else this throws).
  bool finish() {
    if (thread_.joinable()) thread_.join();
    if (!std::exchange(started_, false)) return false;
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
    if (problem_) throw std::logic_error(fmt::format("rules {} left an invalid graph: {}", fmt::join(rules_, ", "), *problem_));
    return true;
  }

 private:
  std::thread thread_;
  bool started_ = false;
  std::set<std::string> rules_;
  std::optional<std::string> problem_;
  std::exception_ptr failure_;  // what the check threw
};

class Run {
 public:
  // `ordered`: whether structural_problem finds nothing in the model as it is now, if known.
  Run(Model& model, const std::vector<const Rule*>& rules, const RewriteOptions& options, bool lower,
      const std::set<std::pair<ImportOwner, std::string>>& domains_before, RewriteResult& result, std::optional<bool> ordered)
      : model_(model),
        options_(options),
        target_(find_target(options.target)),
        domains_before_(domains_before),
        candidates_(index_by_anchor(rules)),
        local_functions_(local_functions(model.proto)),
        policy_(model, options.max_opset, lower, options.exact_opset),
        names_(model.proto),
        rewriter_(model),
        worklist_(rules),
        result_(result),
        ordered_(ordered),
        progress_(options.progress_out),
        canonicalizing_(options.simplify ||
                        std::any_of(rules.begin(), rules.end(), [](const Rule* rule) { return is_canonicalization(*rule); })) {
    // (options.simplify: the simplification run, which cleans up even where no rule matches.)
    for (const Rule* rule : rules) {
      if (const Target* through = served_through(*rule)) inherited_.emplace(rule, through);
    }
  }

  // Returns why the requested opset can't be reached, if it can't.
  std::optional<std::string> execute() {
    // With nothing to match the model stays as it is, unless it is to be cleaned up anyway.
    if (!options_.simplify && !any_anchor()) return policy_.apply(rewriter_.created(), domains_before_);
    // The names fresh ones must differ from are collected while the graph is indexed (a
    // check that found the input in order leaves out what nodes read: it is defined anyway).
    const bool collecting_early = ordered_.value_or(false) && big();
    if (collecting_early) {
      names_.reads_are_defined();
      names_.start_collecting();
    }
    if (canonicalizing_) remove_unused_nodes();
    // A model that was already inconsistent can't tell our mistakes from its own.
    verify_ = ordered_ ? *ordered_ : !structural_problem(model_.proto);
    rewriter_.set_ordered(verify_);
    if (verify_ && !collecting_early) names_.reads_are_defined();  // nothing collected yet
    try {
      rounds();
    } catch (...) {
      settle();  // a problem the last round's check found comes first (settle throws it)
      throw;
    }
    settle();
    scopes_.clear();
    bypass_created_identities();
    remove_unused_created();
    return policy_.apply(rewriter_.created(), domains_before_);
  }

  // Whether structural_problem was run after the last change to any node list (the later ones
  // change only imports).
  bool nodes_checked() const { return nodes_checked_; }

  // Why rules that lower the ai.onnx opset left nodes as they were: worth saying when the opset
  // was not reached (a node a rule later rewrote is not listed). One line per rule and reason,
  // with the count and the first nodes: a model has many nodes of one kind.
  std::vector<std::string> lowering_declines() const {
    std::map<std::pair<std::string, std::string>, std::vector<std::string>> nodes_by_reason;
    for (const auto& [node, why] : lowering_declines_) nodes_by_reason[why].push_back(node);
    std::vector<std::string> notes;
    constexpr size_t kNamed = 3;
    for (const auto& [why, nodes] : nodes_by_reason) {
      std::vector<std::string> named;
      for (size_t i = 0; i < std::min(nodes.size(), kNamed); ++i) named.push_back("'" + nodes[i] + "'");
      const std::string more = nodes.size() > kNamed ? fmt::format(", ... ({} more)", nodes.size() - kNamed) : "";
      const std::string which = nodes.size() == 1 ? "node " + named[0] + " as it was"
                                                  : fmt::format("{} nodes ({}{}) as they were", nodes.size(), fmt::join(named, ", "), more);
      notes.push_back(fmt::format("{} left {}: {}", why.first, which, why.second));
    }
    return notes;
  }

 private:
  // Rounds to a fixed point.
  void rounds() {
    std::set<std::string> firing;
    std::map<std::string, int> last_fired;  // rule id -> round
    for (int round = 1;; ++round) {
      if (round > options_.max_rounds) {
        // Rules in a cycle take turns: name every rule that fired in the second half of the rounds.
        std::vector<std::string> cycling;
        for (const auto& [id, last] : last_fired) {
          if (last > options_.max_rounds / 2) cycling.push_back(id);
        }
        throw InputError(model_.path.string(), fmt::format("rules still fire after {} rounds (no fixed point): {}", options_.max_rounds,
                                                           fmt::join(cycling, ", ")));
      }
      firing.clear();
      policy_.new_round();
      viable_.clear();
      if (canonicalizing_) bypass_identities();
      if (!any_candidate()) {
        result_.nodes_tried.push_back(0);
        break;
      }
      auto& scopes = current_scopes();
      const Scope& main = main_graph(scopes);
      const auto nearby = worklist_.nodes_to_visit(main, rewriter_.take_touched(), rewriter_.take_retried());
      result_.nodes_tried.push_back(0);
      for (const auto& scope : scopes) rewrite_scope(*scope, round, firing, scope.get() == &main && nearby ? &*nearby : nullptr);
      if (firing.empty()) break;
      for (const auto& id : firing) last_fired[id] = round;
      if (!options_.explain.empty() || !rewriter_.pending_only_in(main)) worklist_.visit_all();
      for (const auto& scope : scopes) scope->forget_facts();  // the commit's tables take their place
      settle();
      rewriter_.commit(scopes);
      names_.model_changed();
      scopes_.clear();  // the round's indexes and shape facts are stale now: not held through the check
      model_.changed = true;
      result_.rounds = round;
      if (verify_) {
        round_check_.start(model_.proto, firing, big());
        if (!big()) settle();  // checked on this thread: a problem is thrown at once
      }
    }
  }

  // Dead nodes and Identity nodes would block the fusions whose values they read: the dead ones
  // go before the first round, Identities before every round (canonicalization writes some).
  void remove_unused_nodes() {
    auto& scopes = current_scopes();
    settle();
    count_clean_up(kUnusedNodes, rewriter_.remove_unused(scopes, [](const onnx::NodeProto&) { return true; }));
  }
  void bypass_identities() {
    if (!has_identity(model_.proto)) return;
    settle();
    count_clean_up(kIdentities, rewriter_.bypass_identities(current_scopes(), [](const onnx::NodeProto&) { return true; }));
  }
  // Whether the model is big enough for work on a second thread.
  bool big() const { return model_.proto.graph().node_size() >= options_.second_thread_from; }
  // Waits for what reads the model on other threads meanwhile (the name collection, the last
  // round's check, which throws what it found): before anything changes the model, and at the end.
  void settle() {
    names_.finish_collecting();
    if (round_check_.finish()) nodes_checked_ = true;
  }
  // The scopes of the model as it is: indexing a big graph is worth doing once per change.
  std::vector<std::unique_ptr<Scope>>& current_scopes() {
    if (scopes_.empty()) scopes_ = collect_scopes(model_);
    return scopes_;
  }
  void count_clean_up(const char* what, size_t removed) {
    if (removed == 0) return;
    scopes_.clear();  // stale
    names_.model_changed();
    RuleStats& stats = result_.rules[what];
    stats.matches += static_cast<int>(removed);
    stats.nodes_removed += static_cast<int>(removed);
    model_.changed = true;
    nodes_checked_ = false;  // checked again after the next round that fires, or at the end
  }

  // Identities the replacements wrote (a value standing for another: a de-fused layout change)
  // go once the rounds are over; graph outputs keep theirs.
  void bypass_created_identities() {
    const auto& created = rewriter_.created();
    if (std::none_of(created.begin(), created.end(), [](const onnx::NodeProto* node) { return node->op_type() == "Identity"; })) return;
    if (rewriter_.bypass_identities(collect_scopes(model_), [&](const onnx::NodeProto& node) { return created.contains(&node); })) {
      nodes_checked_ = false;   // the node lists changed after the last round's check
      policy_.nodes_changed();  // and after the last round's types, which apply() may read
    }
  }

  // Nodes the replacements wrote that nothing reads once the rounds are over (a fold whose
  // reader was folded in the same round) go, with what only they read: our rewrites leave no
  // dead code behind.
  void remove_unused_created() {
    const auto& created = rewriter_.created();
    if (created.empty()) return;
    if (rewriter_.remove_unused(collect_scopes(model_), [&](const onnx::NodeProto& node) { return created.contains(&node); })) {
      nodes_checked_ = false;
      policy_.nodes_changed();
    }
  }

  static bool has_identity(const onnx::ModelProto& model) {
    bool found = false;
    for_each_node(model, [&](const onnx::NodeProto& node, const Place&) { found = found || node.op_type() == "Identity"; });
    return found;
  }

  // Whether any node anywhere has an op an active rule is anchored at (or is explained): if none
  // has, the model stays as it is (even canonicalization would be undone).
  bool any_anchor() {
    return any_node_with([](ImportOwner, const std::vector<Candidate>&) { return true; });
  }

  // Whether any node anywhere has an op that a rule which may still fire is anchored at (or is
  // explained): if none has, the round can't change anything, and the graph is not worth indexing.
  bool any_candidate() {
    return any_node_with([&](ImportOwner owner, const std::vector<Candidate>& candidates) { return !viable(owner, candidates).empty(); });
  }

  // Whether --explain asks about nodes, or some node's op has candidates `keep` says yes to.
  template <typename Keep>
  bool any_node_with(Keep&& keep) {
    if (!options_.explain.empty()) return true;
    bool found = false;
    for_each_node(std::as_const(model_.proto), [&](const onnx::NodeProto& node, const Place& place) {
      if (found) return;
      auto it = candidates_.find(OpView::of(node));
      found = it != candidates_.end() && keep(ImportOwner::of(place), it->second);
    });
    return found;
  }

  static const Scope& main_graph(const std::vector<std::unique_ptr<Scope>>& scopes) {
    return **std::find_if(scopes.begin(), scopes.end(), [](const auto& scope) { return scope->kind() == Scope::Kind::kMainGraph; });
  }

  // `only`: the nodes to try (the rest can't match anything new), or null for all.
  void rewrite_scope(const Scope& scope, int round, std::set<std::string>& firing, const NodeSet* only) {
    // A node a match of this round covers is not matched again: it is about to go.
    const NodeSet& claimed = rewriter_.replaced_in(scope);
    Matcher matcher(scope, claimed);
    // Not for a graph that may hold a cycle (shape facts would depend on where a walk starts) nor
    // while explaining (the reasons come from the walk's own searches).
    std::optional<MatchAhead> ahead;
    if (verify_ && options_.explain.empty() && scope.nodes().size() >= options_.second_thread_from) ahead.emplace(scope, only, candidates_);
    const ImportOwner owner = OpsetPolicy::owner_of(scope);
    int position = -1;  // the index's
    for (auto& node : scope.nodes()) {
      ++position;
      progress_.update(round, matches_);
      if (claimed.contains(&node) || (only && !only->contains(&node))) continue;
      ++result_.nodes_tried.back();
      const bool explain = explains(options_, node);
      auto found = candidates_.find(OpView::of(node));
      // A call of a model-local function means what the function says, whatever its name.
      const bool local_function = found != candidates_.end() && calls_local_function(node);
      if (explain) {
        *options_.explain_out << fmt::format("node '{}' ({}.{}) in {}, round {}:\n", describe_node(node), display_domain(node.domain()),
                                             node.op_type(), scope.where(), round);
        if (local_function) *options_.explain_out << "  it calls a function the model defines: no rule replaces it\n";
        else if (found == candidates_.end()) *options_.explain_out << "  no active rule matches this op\n";
      }
      if (local_function) continue;
      if (found == candidates_.end()) continue;
      const auto& tried = explain ? found->second : viable(owner, found->second);
      auto* found_ahead = ahead ? ahead->at(position) : nullptr;
      if (const Rule* fired = rewrite_at(scope, matcher, node, position, tried, explain, found_ahead)) firing.insert(fired->id);
    }
  }

  // Of the candidates of an anchor, those that may fire where `owner`'s imports apply: the
  // pattern is for the versions imported there (written only once the rounds are over), and the
  // opset policy may allow the replacement. The others are not worth matching (the conditions
  // of a rule lowering the opset, run without --opset, read the types of the whole graph; a
  // family's rules are tried on every node of their anchor op); --explain still tries them, to
  // say why they don't fire. Worked out once a round: a raise can only rule out more.
  const std::vector<Candidate>& viable(ImportOwner owner, const std::vector<Candidate>& candidates) {
    auto [it, fresh] = viable_.try_emplace({owner, &candidates});
    if (fresh) {
      const ImportMap imports = import_map(imports_of(std::as_const(model_.proto), owner));  // as Scope::opset reads them
      auto imported = [&](const VersionRange& range) {
        auto found = imports.find(range.domain);
        return range.contains(found == imports.end() ? 0 : static_cast<int>(found->second));
      };
      std::copy_if(candidates.begin(), candidates.end(), std::back_inserter(it->second), [&](const Candidate& candidate) {
        const auto& opsets = candidate.pattern->opsets;
        return std::all_of(opsets.begin(), opsets.end(), imported) && !policy_.ruled_out(owner, candidate.rule->requires_opsets);
      });
    }
    return it->second;
  }

  // Tries the rules anchored at this op, best first; those needing a raised opset import only
  // when no other fits. Returns the rule that rewrote the node.
  // `ahead`: what the thread matching ahead found at the node, if one did.
  const Rule* rewrite_at(const Scope& scope, const Matcher& matcher, onnx::NodeProto& node, int position,
                         const std::vector<Candidate>& candidates, bool explain, MatchAhead::Answers* ahead) {
    std::vector<std::pair<Candidate, Match>> need_raise;
    std::vector<std::string> refused_raises;  // notes, if no rule rewrites the node
    const bool built_here = rewriter_.created().contains(&node);
    bool matched = false;
    for (const auto& candidate : candidates) {
      // A node a replacement built is of the version it was built for: a rule lowering Pow-12 to
      // Pow-7 as it is must not find its own Pow at the import's 12 again.
      if (built_here && !fits_built_version(scope, *candidate.pattern)) {
        if (explain) say(candidate, "no: built by a replacement for a version the pattern is not for");
        continue;
      }
      if (auto why = loaded_as_is(scope, node, *candidate.rule)) {
        if (explain) say(candidate, "no: " + *why);
        continue;
      }
      std::string why;
      bool on_facts = false;
      std::optional<Match> match;
      if (!ahead || !take_found_ahead(scope, *ahead, candidate, match)) {
        match = matcher.match(*candidate.rule, *candidate.pattern, &node, position, explain ? &why : nullptr, &on_facts);
      }
      if (!match) {
        if (on_facts) rewriter_.retry(&node);
        if (explain) say(candidate, "no: " + why);
        continue;
      }
      matched = true;
      if (apply(scope, candidate, *match, Raise::kNever, explain)) return candidate.rule;
      const auto& requires_opsets = candidate.rule->requires_opsets;
      if (std::holds_alternative<OpsetPolicy::Plan>(policy_.plan(scope, requires_opsets, Raise::kNever))) continue;  // declined
      auto raise = policy_.plan(scope, requires_opsets, Raise::kIfSafe);
      if (std::holds_alternative<OpsetPolicy::Plan>(raise)) {
        need_raise.emplace_back(candidate, std::move(*match));
      } else if (!policy_.deferred(scope) && builds(candidate, *match, Raise::kAssumeSafe)) {
        // A rewrite the import alone prevents: say what blocks the raise.
        const std::string& reason = std::get<std::string>(raise);
        if (explain) say(candidate, "matched, but " + reason);
        refused_raises.push_back(fmt::format("{}: matched, but {}", candidate.rule->id, reason));
      }
    }
    // Raise as little as possible: the rule needing the lowest ai.onnx version first.
    std::stable_sort(need_raise.begin(), need_raise.end(),
                     [](const auto& a, const auto& b) { return required_opset(*a.first.rule) < required_opset(*b.first.rule); });
    for (auto& [candidate, match] : need_raise) {
      if (apply(scope, candidate, match, Raise::kIfSafe, explain)) return candidate.rule;
    }
    for (const auto& note : refused_raises) add_note(note);
    // What declined the match (the opset plan, the builder, the target) may be otherwise next round.
    if (matched) rewriter_.retry(&node);
    return nullptr;
  }

  // Takes what the thread matching ahead found for `candidate` at the node as the answer (a
  // match, or none), where the round's claims can't have changed it (match_ahead.h). False: the
  // walk searches itself.
  bool take_found_ahead(const Scope& scope, MatchAhead::Answers& ahead, const Candidate& candidate, std::optional<Match>& match) {
    if (candidate.rank >= ahead.searched) return false;
    auto found = std::find_if(ahead.found.begin(), ahead.found.end(),
                              [&](const MatchAhead::Found& entry) { return entry.pattern == candidate.pattern; });
    if (found == ahead.found.end()) return true;  // no match
    if (!found->match) return false;              // the search failed on the facts
    const NodeSet& claimed = rewriter_.replaced_in(scope);
    const auto& covered = found->match->nodes;
    if (std::any_of(covered.begin(), covered.end(), [&](const onnx::NodeProto* node) { return claimed.contains(node); })) return false;
    match = std::exchange(found->match, std::nullopt);
    return true;
  }

  // The nearest target this one builds on that the rule names, when it does not name this one:
  // the rule serves this target through that one.
  const Target* served_through(const Rule& rule) const {
    auto names = [&](const std::string& name) {
      const auto in = [&](const std::vector<std::string>& targets) {
        return std::find(targets.begin(), targets.end(), name) != targets.end();
      };
      return in(rule.targets) || (options_.fuse && in(rule.fuse_targets));
    };
    if (names(target_.name)) return nullptr;
    for (auto it = target_.lineage.begin() + 1; it != target_.lineage.end(); ++it) {
      if (names(*it)) return &find_target(*it);
    }
    return nullptr;
  }

  // A rule serving this target through one it builds on is there to make nodes loadable by that
  // one: it leaves alone an anchor this target loads as it is and that one does not
  // (`--target tensorrt` keeps EfficientNMS_TRT, which rules for onnx spell out in standard ops).
  std::optional<std::string> loaded_as_is(const Scope& scope, const onnx::NodeProto& node, const Rule& rule) const {
    auto through = inherited_.find(&rule);
    if (through == inherited_.end()) return std::nullopt;
    const std::string domain = normalize_domain(node.domain());
    const int version = scope.opset(domain);
    if (target_.refuses(domain, node.op_type(), version) || !through->second->refuses(domain, node.op_type(), version)) return std::nullopt;
    return fmt::format("target {} loads this node as it is (the rule serves it through {}, which does not)", target_.name,
                       through->second->name);
  }

  bool fits_built_version(const Scope& scope, const Pattern& pattern) const {
    return std::all_of(pattern.opsets.begin(), pattern.opsets.end(),
                       [&](const VersionRange& range) { return range.contains(policy_.built_version(scope, range.domain)); });
  }

  bool calls_local_function(const onnx::NodeProto& node) const { return local_functions_.contains(OpView::of(node)); }

  // (domain, name) of every model-local function: a look-up per node, not a walk over them all.
  static std::unordered_set<OpView, OpViewHash> local_functions(const onnx::ModelProto& model) {
    std::unordered_set<OpView, OpViewHash> functions;
    for (const auto& function : model.functions()) functions.insert(OpView::of(function));
    return functions;
  }

  void add_note(const std::string& text) {
    if (std::find(result_.notes.begin(), result_.notes.end(), text) == result_.notes.end()) result_.notes.push_back(text);
  }

  // Builds the replacement for `match` at the versions in match.opsets; returns why it declined.
  // A replacement that throws has a bug: the node stays as it was, and the notes say so.
  std::string build(const Rule& rule, Match& match, GraphBuilder& builder) {
    std::string reason = evaluate_lets(rule, match);
    if (reason.empty()) {
      try {
        reason = rule.replacement->build(match, builder).reason();
      } catch (const std::exception& e) {
        reason = std::string("internal error in the replacement: ") + e.what();
        add_note(fmt::format("{}: internal error at node '{}', left as it was (a bug in the rule): {}", rule.id,
                             describe_node(*match.anchor), e.what()));
      }
    }
    if (reason.empty()) reason = missing_output(match, builder);
    return reason;
  }

  static std::string base_name(const Match& match) { return match.anchor->name().empty() ? match.anchor->output(0) : match.anchor->name(); }

  // Whether the rule would build a replacement under `raise`, changing nothing.
  bool builds(const Candidate& candidate, Match match, Raise raise) {
    auto plan = policy_.plan(*match.scope, candidate.rule->requires_opsets, raise);
    if (!std::holds_alternative<OpsetPolicy::Plan>(plan)) return false;
    match.opsets = std::get<OpsetPolicy::Plan>(plan).versions;
    GraphBuilder trial(base_name(match), candidate.rule->id, match.opsets, [](const std::string& hint) { return hint; });
    return build(*candidate.rule, match, trial).empty();
  }

  // Whether a rule's replacement is only there to lower the scope's ai.onnx import.
  static bool lowers_opset(const Scope& scope, const Rule& rule) {
    return std::any_of(rule.requires_opsets.begin(), rule.requires_opsets.end(),
                       [&](const VersionRange& range) { return range.domain.empty() && range.max < scope.opset(""); });
  }

  bool apply(const Scope& scope, const Candidate& candidate, Match& match, Raise raise, bool explain) {
    const Rule& rule = *candidate.rule;
    auto plan = policy_.plan(scope, rule.requires_opsets, raise);
    if (auto* reason = std::get_if<std::string>(&plan)) {
      if (explain) say(candidate, "matched, but " + *reason);
      return false;
    }
    match.opsets = std::get<OpsetPolicy::Plan>(plan).versions;
    GraphBuilder builder(base_name(match), rule.id, match.opsets, [this](const std::string& hint) { return names_.fresh(hint); });
    const std::string reason = build(rule, match, builder);
    if (!reason.empty()) {
      if (explain) say(candidate, "matched, but declined: " + reason);
      // Only a node that stops the lowering is worth a note (one that means the same below is not).
      if (lowers_opset(scope, rule) && !policy_.keeps_meaning(scope, *match.anchor)) {
        lowering_declines_.try_emplace(describe_node(*match.anchor), rule.id, reason);
      }
      return false;
    }
    builder.prune();
    if (auto refused = refused_by_target(builder)) {
      if (explain) say(candidate, "matched, but declined: " + *refused);
      return false;
    }
    if (explain) say(candidate, "matched: rewritten");
    if (!lowering_declines_.empty()) lowering_declines_.erase(describe_node(*match.anchor));  // most runs lower nothing
    const auto& decided = std::get<OpsetPolicy::Plan>(plan);
    if (decided.raises) worklist_.visit_all();  // rules may now fit where they did not
    policy_.commit(scope, decided);
    RuleStats& stats = result_.rules[rule.id];
    if (stats.matches < options_.record_matches) record(rule, match, builder);
    for (const auto& note : builder.notes()) add_note(rule.id + ": " + note);
    ++stats.matches;
    ++matches_;
    stats.nodes_removed += static_cast<int>(match.nodes.size());
    stats.nodes_added += static_cast<int>(builder.nodes().size());
    rewriter_.replace(match, std::move(builder));
    return true;
  }

  void record(const Rule& rule, const Match& match, const GraphBuilder& builder) {
    RecordedMatch& recorded = result_.recorded.emplace_back();
    recorded.rule = rule.id;
    recorded.place = match.scope->where();
    for (const auto* node : match.nodes) recorded.before.push_back(*node);
    recorded.after.assign(builder.nodes().begin(), builder.nodes().end());
  }

  // A replacement must consist of ops the target loads at the versions it is built for.
  std::optional<std::string> refused_by_target(const GraphBuilder& builder) const {
    for (const auto& node : builder.nodes()) {
      const std::string domain = normalize_domain(node.domain());
      if (auto reason = target_.refuses(domain, node.op_type(), builder.opset(domain))) {
        return fmt::format("the replacement's {}.{} can't be loaded: {}", display_domain(domain), node.op_type(), *reason);
      }
    }
    return std::nullopt;
  }

  // Every output of the pattern that something outside the match reads must be computed by the
  // replacement.
  static std::string missing_output(const Match& match, const GraphBuilder& builder) {
    for (const auto& name : match.pattern->outputs) {
      const std::string& value = match.value(name);
      if (value.empty()) continue;
      const auto uses = match.scope->uses(value);
      const bool read_outside = match.scope->is_output(value) || std::any_of(uses.begin(), uses.end(), [&](const Use& use) {
                                  return std::find(match.nodes.begin(), match.nodes.end(), use.node) == match.nodes.end();
                                });
      if (!read_outside) continue;
      const bool computed = std::any_of(builder.nodes().begin(), builder.nodes().end(), [&](const onnx::NodeProto& node) {
        return std::find(node.output().begin(), node.output().end(), value) != node.output().end();
      });
      if (!computed) return fmt::format("the replacement does not compute '{}' ({})", value, name);
    }
    return {};
  }

  void say(const Candidate& candidate, const std::string& what) {
    *options_.explain_out << fmt::format("  {} ({}:{}): {}\n", candidate.rule->id, candidate.rule->file, candidate.pattern->line, what);
  }

  Model& model_;
  const RewriteOptions& options_;
  const Target& target_;
  const std::set<std::pair<ImportOwner, std::string>>& domains_before_;
  CandidateIndex candidates_;
  std::unordered_map<const Rule*, const Target*> inherited_;      // rules serving the target through one it builds on
  const std::unordered_set<OpView, OpViewHash> local_functions_;  // views of the functions' own strings
  std::map<std::pair<ImportOwner, const std::vector<Candidate>*>, std::vector<Candidate>> viable_;  // this round's
  OpsetPolicy policy_;
  NameRegistry names_;
  Rewriter rewriter_;
  std::vector<std::unique_ptr<Scope>> scopes_;  // of the model as it is now, if indexed
  Worklist worklist_;
  RewriteResult& result_;
  std::map<std::string, std::pair<std::string, std::string>> lowering_declines_;  // node -> (rule, reason)
  std::optional<bool> ordered_;
  bool verify_ = false;
  bool nodes_checked_ = false;
  int matches_ = 0;         // in all rounds, for the progress line
  RoundCheck round_check_;  // of the last round that fired, while the next one starts
  ProgressLine progress_;
  bool canonicalizing_;  // canonicalization rules are active: dead nodes go first
};

std::map<std::string, int> imports(const onnx::ModelProto& model) {
  std::map<std::string, int> versions;
  for (const auto& [domain, version] : import_map(model.opset_import())) versions[domain] = static_cast<int>(version);
  return versions;
}

// Before matching, and again whenever the model is reloaded: the rules see the fixed shapes.
void fix_input_shapes(Model& model, const RewriteOptions& options, RewriteResult& result) {
  if (apply_input_shapes(*model.proto.mutable_graph(), options.input_shapes, model.path.string())) {
    result.input_shapes_fixed = model.changed = true;
  }
}

// --simplify's run, after the rules; whether its rounds checked the node lists as they are now.
bool simplify_after_rules(Model& model, const std::vector<const Rule*>& simplifying, const RewriteOptions& options, RewriteResult& result) {
  const auto domains_before = domains_in_use(model.proto);  // the run holds a reference
  Run run(model, simplifying, options, /*lower=*/false, domains_before, result, std::nullopt);
  run.execute();  // an opset it can't reach was reported by the run above (an Identity needs none)
  if (simplify_main_graph(model, result)) {
    model.changed = true;
    return false;
  }
  return run.nodes_checked();
}

// Whether only canonicalization rules fired, and nothing else changed: their spellings serve the
// rules that follow them, so alone they are undone. (Under --simplify the folds are wanted: they
// would only be made again.)
bool canonicalized_only(const Model& model, const RewriteOptions& options, const std::map<std::string, int>& imports_before,
                        const RewriteResult& result) {
  return !options.simplify && !result.rules.empty() && result.functions_inlined == 0 && result.function_imports_raised == 0 &&
         imports(model.proto) == imports_before && std::all_of(result.rules.begin(), result.rules.end(), [&](const auto& fired) {
           return is_canonicalization(fired.first) && !options.only.count(fired.first);
         });
}

void record_opset_changes(const std::map<std::string, int>& before, const std::map<std::string, int>& after, RewriteResult& result) {
  for (const auto& [domain, version] : before) {
    auto it = after.find(domain);
    const int now = it == after.end() ? 0 : it->second;
    if (now != version) result.opset_changes[domain] = {version, now};
  }
  for (const auto& [domain, version] : after) {
    if (!before.count(domain)) result.opset_changes[domain] = {0, version};
  }
}

// --ir-version N, or else the IR version ONNX released with --opset N (what a runtime that stops
// at that opset reads: ONNX Runtime 1.6 refuses IR 8 at opset 13), lowered only, never raised.
// An explicit version the model can't be written as is a target not met; an implied one stays a note.
void write_ir_version(Model& model, const RewriteOptions& options, RewriteResult& result) {
  const int64_t current = model.proto.ir_version();
  std::optional<int64_t> wanted = options.ir_version;
  const bool implied = !wanted && options.max_opset && minimum_ir_version(*options.max_opset) < current;
  if (implied) {
    if (import_of(model.proto.opset_import(), "") > *options.max_opset) return;  // the opset was not met: said already
    wanted = minimum_ir_version(*options.max_opset);
  }
  if (!wanted || *wanted == current) return;
  if (auto why = ir_version_blocker(model.proto, *wanted)) {
    if (implied) {
      result.notes.push_back(fmt::format("IR version {} kept, although runtimes of opset {} read IR {}: {} (--ir-version insists)", current,
                                         *options.max_opset, *wanted, *why));
    } else {
      result.ir_version_problem = fmt::format("IR version {} can't be written as {}: {}", current, *wanted, *why);
    }
    return;
  }
  result.ir_change = {current, *wanted};
  model.proto.set_ir_version(*wanted);
  model.changed = true;
}

}  // namespace

RewriteResult rewrite_model(Model& model, const RuleSet& rules, const RewriteOptions& options, const InputCheck* checked) {
  // The rules run as they would without --simplify; what is left is simplified after, so that
  // fusions see the spellings they were written for.
  RewriteOptions rewriting = options;
  rewriting.simplify = false;
  const auto active = active_rules(rules, rewriting);
  const auto simplifying = options.simplify ? simplification_rules(rules, options) : std::vector<const Rule*>{};
  // A valid input must give a valid output; an invalid one (the library takes what it is given)
  // can't tell our mistakes from its own.
  const InputCheck input = checked ? *checked : check_input(model.proto);
  const bool input_valid = !input.problem;
  const bool input_ordered = input_valid && input.ordered;
  bool nodes_checked = false;
  RewriteResult result;
  result.before = count_ops(model.proto);
  const auto imports_before = imports(model.proto);
  fix_input_shapes(model, options, result);

  std::vector<std::string> lowering_declines;  // of the attempt that lowered
  auto attempt = [&](bool lower) {
    result.rules.clear();
    result.nodes_tried.clear();
    result.notes.clear();
    result.recorded.clear();
    result.function_imports_raised = raise_wrong_function_imports(model, result.notes);
    const auto domains_before = domains_in_use(model.proto);
    result.functions_inlined = options.inline_functions ? inline_local_functions(model, &result.notes) : 0;
    if (result.functions_inlined > 0) model.changed = true;
    Run run(model, active, rewriting, lower, domains_before, result,
            result.functions_inlined > 0 ? std::nullopt : std::optional<bool>(input.ordered));
    auto problem = run.execute();
    nodes_checked = run.nodes_checked();
    if (problem) lowering_declines = run.lowering_declines();
    return problem;
  };
  if (auto problem = attempt(true)) {
    // The requested opset can't be reached: rewrite again at the model's own opset.
    model = reload_model(model);
    fix_input_shapes(model, options, result);
    const auto declines = lowering_declines;
    auto again = attempt(false);
    result.notes.push_back(*problem);
    result.notes.insert(result.notes.end(), declines.begin(), declines.end());
    if (again) result.notes.push_back(*again);
  }
  if (canonicalized_only(model, options, imports_before, result)) {
    // Nothing matched what canonicalization made: the model stays an exact copy (but for the
    // input shapes asked for).
    model = reload_model(model);
    fix_input_shapes(model, options, result);
    std::string what;
    for (const auto& [id, stats] : result.rules) what += fmt::format("{}{} ({})", what.empty() ? "" : ", ", id, stats.matches);
    result.notes.push_back("canonicalization alone was undone, no other rule fired after it: " + what);
    result.rules.clear();
    result.recorded.clear();
  }

  if (options.simplify) nodes_checked = simplify_after_rules(model, simplifying, options, result) && nodes_checked;

  record_opset_changes(imports_before, imports(model.proto), result);
  if (!result.opset_changes.empty()) model.changed = true;
  write_ir_version(model, options, result);
  if (model.changed && input_valid) {
    // A round's check (always in topological order) covers the node lists as they are now.
    const auto problem = nodes_checked ? model_problem(model.proto) : output_problem(model.proto, input_ordered);
    if (problem) throw std::logic_error("the rewrite left an invalid model: " + *problem);
  }
  // Every change to a node list marks the model changed; an unchanged one is written as a copy.
  result.after = model.changed ? count_ops(model.proto) : result.before;
  return result;
}

}  // namespace onnx_rewrite
