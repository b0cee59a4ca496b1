// Which opset version each replacement is built for, and what the model imports afterwards
// (it edits the model's and the functions' imports, and its IR version when a raise needs it).
// The model's own import is kept unless `--opset` caps it lower (then we aim for the cap) or a
// rule can only work at a higher version and raising is safe for every node already there.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "graph/imports.h"
#include "graph/node_types.h"
#include "onnx_rewrite/model.h"
#include "graph/node_set.h"
#include "rules/rule.h"
#include "graph/scope.h"

namespace onnx_rewrite {

class OpsetPolicy {
 public:
  // `lower`: aim for max_opset even where the model imports a higher version; `exact`: where it
  // imports a lower one too (--to-opset).
  OpsetPolicy(Model& model, std::optional<int> max_opset, bool lower, bool exact);

  struct Plan {
    std::map<std::string, int> versions;  // domain -> version to build for
    bool raises = false;
  };
  enum class Raise {
    kNever,
    kIfSafe,
    kAssumeSafe,  // what a replacement would be built for if the raise were safe (to say why not)
  };
  // The versions a replacement in `scope` needing `requires_opsets` is built for, or why it can't be.
  std::variant<Plan, std::string> plan(const Scope& scope, const std::vector<VersionRange>& requires_opsets, Raise raise) const;
  void commit(const Scope& scope, const Plan& plan);
  // Whether plan() refuses such a replacement in the graphs whose imports `owner` holds for the
  // rest of the run (a rule lowering the opset, run without --opset): the versions replacements
  // are built for only rise during a run, and --opset stays. A function's follows the model's
  // once the model imports the domain, which may be lower: until then its own decides nothing.
  bool ruled_out(ImportOwner owner, const std::vector<VersionRange>& requires_opsets) const;
  // Whose imports apply in `scope`.
  static ImportOwner owner_of(const Scope& scope);
  // The version of `domain` replacements in `scope` are built for now: what a node an earlier
  // replacement built there is, whatever the import still says (it is written at the end).
  int built_version(const Scope& scope, const std::string& domain) const;
  // Call at the start of a round: raising is only checked against nodes already in the graph.
  void new_round() {
    rewritten_owners_.clear();
    move_blockers_.clear();
    node_types_.reset();
  }
  // Call when node lists changed outside a round (the types it inferred point into them).
  void nodes_changed() { node_types_.reset(); }
  // Whether a raise in `scope` waits for the next round (its graph or function changed in this one).
  bool deferred(const Scope& scope) const { return rewritten_owners_.count(owner_of(scope)) != 0; }

  // Whether `node` of `scope` means the same at the import version decided for its domain as at
  // the original one (so a lowering rule that left it stops nothing).
  bool keeps_meaning(const Scope& scope, const onnx::NodeProto& node) const;

  // Writes the decided versions into the imports and drops imports of custom domains that no
  // node uses any more. Returns why a lowering is impossible (then nothing was written).
  std::optional<std::string> apply(const NodeSet& created, const std::set<std::pair<ImportOwner, std::string>>& domains_used_before);

 private:
  using Owner = ImportOwner;
  int effective(Owner owner, const std::string& domain) const;
  int effective(const std::pair<Owner, std::string>& key) const;
  std::optional<std::string> move_blocker(Owner owner, const std::string& domain, int from, int to) const;
  std::vector<Owner> owners_importing(const std::string& domain) const;
  // The version a replacement in `owner` is built for now, or why that is ambiguous.
  std::variant<int, std::string> current_version(Owner owner, const std::string& domain) const;
  // Why a replacement needing `range` can't be built while the domain is at `current` (0: not
  // imported), whatever a later raise does.
  std::optional<std::string> lasting_blocker(const VersionRange& range, int current) const;
  // Why raising `domain` to `to` in the model and every function importing it is unsafe, if it is.
  std::optional<std::string> model_wide_raise_blocker(const std::string& domain, int to) const;

  Model& model_;
  std::optional<int> max_opset_;
  bool exact_ = false;
  std::map<std::pair<Owner, std::string>, int> original_;
  std::map<std::pair<Owner, std::string>, int> decided_;
  std::set<int32_t> model_types_;
  std::set<Owner> rewritten_owners_;
  // move_blocker() by (owner, domain, from, to): the nodes it reads don't change within a round,
  // and without this every match needing a raise would walk the whole model.
  mutable std::map<std::tuple<Owner, std::string, int, int>, std::optional<std::string>> move_blockers_;
  // Element types per node, inferred the first time a step that added types is in the way (per round).
  mutable std::unique_ptr<NodeTypes> node_types_;
  const NodeTypes* node_types() const;
};

// Raises a model-local function's ai.onnx import that is lower than an op of its body needs
// (CastLike under 14), where no other node of it changes meaning; notes each function raised or
// left. Returns how many were raised (function_imports.cc).
int raise_wrong_function_imports(Model& model, std::vector<std::string>& notes);

}  // namespace onnx_rewrite
