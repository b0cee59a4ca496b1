#include "engine/opset_policy.h"

#include <algorithm>

#include <fmt/format.h>

#include "graph/work_count.h"
#include "verify/opset.h"

namespace onnx_rewrite {
namespace {

constexpr int kDefaultOpset = 17;

}  // namespace

OpsetPolicy::OpsetPolicy(Model& model, std::optional<int> max_opset, bool lower, bool exact)
    : model_(model), max_opset_(max_opset), exact_(exact && lower) {
  for (const auto& import : model.proto.opset_import()) {
    original_[{Owner{}, normalize_domain(import.domain())}] = static_cast<int>(import.version());
  }
  for (const auto& function : model.proto.functions()) {
    for (const auto& import : function.opset_import()) {
      original_[{Owner{&function}, normalize_domain(import.domain())}] = static_cast<int>(import.version());
    }
  }
  decided_ = original_;
  if (max_opset_ && lower) {
    for (auto& [key, version] : decided_) {
      if (key.second.empty() && (version > *max_opset_ || exact)) version = *max_opset_;
    }
  }
  model_types_ = model_types(model.proto);
}

OpsetPolicy::Owner OpsetPolicy::owner_of(const Scope& scope) {
  const Scope* root = &scope;
  while (root->parent()) root = root->parent();
  return Owner{root->function()};
}

int OpsetPolicy::effective(Owner owner, const std::string& domain) const { return effective({owner, domain}); }

int OpsetPolicy::effective(const std::pair<Owner, std::string>& key) const {
  auto it = decided_.find(key);
  return it == decided_.end() ? 0 : it->second;
}

std::optional<std::string> OpsetPolicy::move_blocker(Owner owner, const std::string& domain, int from, int to) const {
  auto [it, fresh] = move_blockers_.try_emplace({owner, domain, from, to});
  if (fresh) it->second = import_move_blocker(model_.proto, owner, domain, from, to, model_types_, {}, {}, [this] { return node_types(); });
  return it->second;
}

const NodeTypes* OpsetPolicy::node_types() const {
  if (!node_types_) node_types_ = std::make_unique<NodeTypes>(model_);
  return node_types_.get();
}

std::vector<OpsetPolicy::Owner> OpsetPolicy::owners_importing(const std::string& domain) const {
  std::vector<Owner> owners;
  if (effective(Owner{}, domain)) owners.push_back(Owner{});
  for (const auto& function : model_.proto.functions()) {
    if (effective(Owner{&function}, domain)) owners.push_back(Owner{&function});
  }
  return owners;
}

std::variant<int, std::string> OpsetPolicy::current_version(Owner owner, const std::string& domain) const {
  const int own = effective(owner, domain);
  if (owner.is_model()) return own;
  // Runtimes read a function's body at the model's import (ONNX Runtime inlines it there; ONNX's
  // checker wants the two to agree), so a function follows the model wherever both import a domain.
  // A body importing another version than the model's is rewritten (and its import moved to the
  // model's) only if none of its nodes means something else at the model's version.
  const int model = effective(Owner{}, domain);
  if (own && model && own != model) {
    if (auto blocker = move_blocker(owner, domain, own, model)) {
      return fmt::format("the function imports {0} {1} and the model {0} {2}, and its body would mean something else at {2}: {3}",
                         display_domain(domain), own, model, *blocker);
    }
  }
  return model ? model : own;
}

std::optional<std::string> OpsetPolicy::model_wide_raise_blocker(const std::string& domain, int to) const {
  for (Owner owner : owners_importing(domain)) {
    const int from = effective(owner, domain);
    if (from >= to) continue;
    if (rewritten_owners_.count(owner)) return fmt::format("needs {} raised to {}; retried next round", display_domain(domain), to);
    if (auto blocker = move_blocker(owner, domain, from, to)) {
      return fmt::format("needs {} {}, and raising it from {} would change the model: {}", display_domain(domain), to, from, *blocker);
    }
  }
  return std::nullopt;
}

std::variant<OpsetPolicy::Plan, std::string> OpsetPolicy::plan(const Scope& scope, const std::vector<VersionRange>& requires_opsets,
                                                               Raise raise) const {
  const Owner owner = owner_of(scope);
  Plan plan;
  auto onnx_version = current_version(owner, "");
  if (auto* reason = std::get_if<std::string>(&onnx_version)) return *reason;
  // A model without an ai.onnx import gets one at a widely loadable version if a rule needs it.
  const int onnx_current = std::get<int>(onnx_version);
  plan.versions[""] = onnx_current ? onnx_current : std::min(max_opset_.value_or(kDefaultOpset), kDefaultOpset);
  for (const auto& range : requires_opsets) {
    auto version = current_version(owner, range.domain);
    if (auto* reason = std::get_if<std::string>(&version)) return *reason;
    const int current = std::get<int>(version);
    const std::string name = display_domain(range.domain);
    if (current != 0 && range.contains(current)) {
      plan.versions[range.domain] = current;
      continue;
    }
    if (auto blocker = lasting_blocker(range, current)) return *blocker;
    const int wanted = range.min;
    if (current != 0) {  // adding an import is free; raising one must not change any node
      if (raise == Raise::kNever) {
        return fmt::format("needs {} {} (the model uses {}), tried only when no other rule fits", name, wanted, current);
      }
      if (raise == Raise::kIfSafe) {
        if (auto blocker = model_wide_raise_blocker(range.domain, wanted)) return *blocker;
      }
      plan.raises = true;
    }
    plan.versions[range.domain] = wanted;
  }
  return plan;
}

std::optional<std::string> OpsetPolicy::lasting_blocker(const VersionRange& range, int current) const {
  if (current != 0 && range.contains(current)) return std::nullopt;
  if (current > range.max) return fmt::format("needs {}, the model uses {} {}", range.describe(), display_domain(range.domain), current);
  if (range.domain.empty() && max_opset_ && range.min > *max_opset_) {
    return fmt::format("needs {}, --opset allows {}", range.describe(), *max_opset_);
  }
  return std::nullopt;
}

bool OpsetPolicy::ruled_out(Owner owner, const std::vector<VersionRange>& requires_opsets) const {
  return std::any_of(requires_opsets.begin(), requires_opsets.end(), [&](const VersionRange& range) {
    if (!owner.is_model() && effective(Owner{}, range.domain) == 0) return false;
    const auto version = current_version(owner, range.domain);
    const int* current = std::get_if<int>(&version);  // an ambiguous version may be settled later
    return current && lasting_blocker(range, *current).has_value();
  });
}

bool OpsetPolicy::keeps_meaning(const Scope& scope, const onnx::NodeProto& node) const {
  const std::pair<Owner, std::string> key{owner_of(scope), normalize_domain(node.domain())};
  auto original = original_.find(key);
  const int decided = effective(key);
  if (original == original_.end() || decided == 0 || decided == original->second) return true;
  const OpTable* table = OpRegistry::builtin().table(key.second);
  if (!table) return false;
  const OpTable::ConstantOf constant = [&](const std::string& name) { return scope.constant_tensor(name); };
  return !table->move_blocker(node, original->second, decided, model_types_, constant);
}

int OpsetPolicy::built_version(const Scope& scope, const std::string& domain) const {
  const auto version = current_version(owner_of(scope), normalize_domain(domain));
  const int* known = std::get_if<int>(&version);
  return known && *known ? *known : scope.opset(domain);
}

void OpsetPolicy::commit(const Scope& scope, const Plan& plan) {
  const Owner owner = owner_of(scope);
  for (const auto& [domain, version] : plan.versions) {
    if (version == 0) continue;
    const int model = effective(Owner{}, domain);
    if (model && version > model) {
      // A raise of the model's import moves every import of the domain along (function bodies are
      // read at the model's); plan() checked the nodes of them all.
      for (Owner importer : owners_importing(domain)) {
        int& decided = decided_[{importer, domain}];
        if (decided < version) decided = version;
      }
    }
    decided_[{owner, domain}] = version;
  }
  rewritten_owners_.insert(owner);
}

std::optional<std::string> OpsetPolicy::apply(const NodeSet& created,
                                              const std::set<std::pair<ImportOwner, std::string>>& domains_used_before) {
  // Lowering (--opset) must leave every node that was already there meaning the same, and so must
  // the raise --to-opset asks for (a rule's raise was checked when planned). The element types
  // are inferred again: the last round built nodes whose types the earlier inference lacks.
  node_types_.reset();
  for (const auto& [key, version] : decided_) {
    auto original = original_.find(key);
    if (original == original_.end() || version == original->second) continue;
    if (version > original->second && !(key.second.empty() && exact_)) continue;
    const auto blocker = import_move_blocker(
        model_.proto, key.first, key.second, original->second, version, model_types_, {},
        [&](const onnx::NodeProto& node) { return created.contains(&node); }, [this] { return node_types(); });
    if (blocker) {
      return fmt::format("{} opset {} can't be {} to {}: {}", display_domain(key.second), original->second,
                         version < original->second ? "lowered" : "raised", version, *blocker);
    }
  }

  const auto in_use = domains_in_use(model_.proto);
  auto update = [&](Owner owner, Imports& imports) {
    std::set<std::string> present;
    for (const auto& import : imports) present.insert(normalize_domain(import.domain()));
    for (int i = imports.size() - 1; i >= 0; --i) {
      const std::pair<Owner, std::string> key{owner, normalize_domain(imports.Get(i).domain())};
      const bool was_used = domains_used_before.count(key) != 0;
      if (!key.second.empty() && was_used && !in_use.count(key)) {
        imports.DeleteSubrange(i, 1);  // a custom domain the rewrite made unused
        continue;
      }
      const int version = effective(key);
      if (version != 0 && version != imports.Get(i).version()) imports.Mutable(i)->set_version(version);
    }
    // The owner's own entries only (keys sort by owner first): a walk over all of them per
    // function would be quadratic in the number of functions.
    for (auto it = decided_.lower_bound({owner, ""}); it != decided_.end() && it->first.first == owner; ++it) {
      count_work(1);
      const auto& [key, version] = *it;
      if (present.count(key.second) || !in_use.count({owner, key.second})) continue;
      auto* import = imports.Add();
      import->set_domain(key.second);
      import->set_version(version);
    }
  };
  update(Owner{}, *model_.proto.mutable_opset_import());
  for (auto& function : *model_.proto.mutable_functions()) update(Owner{&function}, *function.mutable_opset_import());
  // An import this rewrite raised may need a newer IR than the model declares.
  for (const auto& [key, version] : decided_) {
    auto original = original_.find(key);
    const bool raised = key.second.empty() && (original == original_.end() || version > original->second);
    if (raised && model_.proto.ir_version() < minimum_ir_version(version)) model_.proto.set_ir_version(minimum_ir_version(version));
  }
  return std::nullopt;
}

}  // namespace onnx_rewrite
