#include "rules/rule_checks.h"

#include <algorithm>
#include <climits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <onnx/defs/schema.h>

#include "verify/opset.h"
#include "onnx_rewrite/target.h"

namespace onnx_rewrite {
namespace {

// The newest opset of each domain ONNX 1.12's schemas describe; newer op versions are checked
// against the op tables only.
int newest_schema_opset(const std::string& domain) { return domain == "ai.onnx.ml" ? 3 : 17; }

const OpTable* table_of(const std::string& domain) { return OpRegistry::builtin().table(domain); }

std::optional<int> first_version(const OpTable& table, const std::string& op) {
  for (int version = 1; version <= table.highest_version(); ++version) {
    if (table.since_version(op, version)) return version;
  }
  return std::nullopt;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// A known op one or two letters from `op` (case aside): the op the author meant.
std::optional<std::string> near_miss(const OpTable& table, const std::string& op) {
  std::optional<std::string> best;
  size_t best_distance = 3;
  for (const auto& known : table.op_types()) {
    // The distance is at least the difference in length: most ops are ruled out without it (a
    // plugin op in a pattern is compared with every op of its domain).
    if (std::max(op.size(), known.size()) - std::min(op.size(), known.size()) >= best_distance) continue;
    const size_t distance = edit_distance(op, known);
    if (distance < best_distance) {
      best_distance = distance;
      best = known;
    }
  }
  return best;
}

// The schema ONNX 1.12 has for the version of `op` in effect at `opset`, if that is the version
// the op tables say is in effect (newer versions are unknown to the schemas).
const onnx::OpSchema* schema_at(const std::string& domain, const std::string& op, int opset) {
  const OpTable* table = table_of(domain);
  if (!table || (!domain.empty() && domain != "ai.onnx.ml")) return nullptr;
  const auto since = table->since_version(op, opset);
  if (!since || *since > newest_schema_opset(domain)) return nullptr;
  const auto* schema = onnx::OpSchemaRegistry::Schema(op, *since, domain);
  return schema && schema->SinceVersion() == *since ? schema : nullptr;
}

// Every attribute name any version of the op has had; empty when the op has versions newer than
// ONNX 1.12's schemas (ReduceMean-18's noop_with_empty_axes), which only the op tables know.
std::set<std::string> attribute_names_ever(const std::string& domain, const std::string& op) {
  std::set<std::string> names;
  const OpTable* table = table_of(domain);
  if (!table) return names;
  const auto newest = table->since_version(op, table->highest_version());
  if (!newest || *newest > newest_schema_opset(domain)) return names;
  for (int version = 1; version <= newest_schema_opset(domain); ++version) {
    if (const auto* schema = onnx::OpSchemaRegistry::Schema(op, version, domain)) {
      for (const auto& [name, attribute] : schema->attributes()) names.insert(name);
    }
  }
  return names;
}

std::string op_name(const std::string& domain, const std::string& op) { return display_domain(domain) + "." + op; }

class RuleChecker {
 public:
  RuleChecker(const Rule& rule, const onnx::NodeList* replacement) : rule_(rule), replacement_(replacement) {
    for (const auto& name : rule.targets) targets_.push_back(&find_target(name));
    for (const auto& name : rule.fuse_targets) targets_.push_back(&find_target(name));
  }

  std::optional<RuleProblem> run() {
    for (size_t p = 0; p < rule_.patterns.size(); ++p) {
      const Pattern& pattern = rule_.patterns[p];
      for (size_t n = 0; n < pattern.nodes.size(); ++n) {
        if (auto message = pattern_node_problem(pattern, pattern.nodes[n]))
          return RuleProblem{RuleProblem::Place::kPatternNode, p, n, *message};
      }
    }
    for (size_t r = 0; r < rule_.requires_opsets.size(); ++r) {
      if (auto message = requires_problem(rule_.requires_opsets[r])) return RuleProblem{RuleProblem::Place::kRequires, 0, r, *message};
    }
    if (!replacement_) return std::nullopt;
    for (size_t n = 0; n < static_cast<size_t>(replacement_->size()); ++n) {
      for (const auto& pattern : rule_.patterns) {
        if (auto message = replacement_node_problem(pattern, (*replacement_)[n])) {
          return RuleProblem{RuleProblem::Place::kReplacementNode, 0, n, *message};
        }
      }
    }
    return std::nullopt;
  }

 private:
  std::optional<std::string> pattern_node_problem(const Pattern& pattern, const PatternNode& node) const {
    if (const OpTable* table = table_of(node.domain); table && !table->knows(node.op_type)) {
      // An op the table lacks may be a plugin exported into the domain (EfficientNMS_TRT); one
      // a letter or two from a known op is a typo.
      if (auto meant = near_miss(*table, node.op_type)) {
        return fmt::format("the pattern's {} is no {} op (did you mean {}?)", node.op_type, display_domain(node.domain), *meant);
      }
    }
    if (node.domain.empty() || node.domain == "ai.onnx.ml") {
      const auto names = attribute_names_ever(node.domain, node.op_type);
      for (const auto& attribute : node.attributes) {
        if (!names.empty() && !names.count(attribute.name)) {
          return fmt::format("{} has no attribute '{}' (it has {})", op_name(node.domain, node.op_type), attribute.name,
                             fmt::join(names, ", "));
        }
      }
    }
    // Every pattern node computes something the pattern reads or gives out: a node nothing
    // reads would be required to exist, but never tied to the match.
    bool used = false;
    for (const auto& output : node.outputs) {
      if (output.empty() || output == "_") continue;
      used = used || std::count(pattern.outputs.begin(), pattern.outputs.end(), output) > 0;
      for (const auto& other : pattern.nodes) {
        used = used || std::count(other.inputs.begin(), other.inputs.end(), output) > 0;
      }
    }
    if (!used) return fmt::format("the pattern's {} computes nothing the pattern reads or outputs", node.op_type);
    return std::nullopt;
  }

  std::optional<std::string> requires_problem(const VersionRange& range) const {
    if (table_of(range.domain)) return std::nullopt;
    auto named = [&](const std::string& domain) { return domain == range.domain; };
    for (const auto& pattern : rule_.patterns) {
      for (const auto& node : pattern.nodes) {
        if (named(node.domain)) return std::nullopt;
      }
    }
    if (replacement_) {
      for (const auto& node : *replacement_) {
        if (named(normalize_domain(node.domain()))) return std::nullopt;
      }
    }
    return fmt::format(
        "requires: '{}' is no domain the op tables know (ai.onnx, ai.onnx.ml, com.microsoft, "
        "com.microsoft.nchwc), nor one the rule's nodes use",
        display_domain(range.domain));
  }

  // The lowest import of `domain` a model this pattern matches can have, after `requires:`
  // raises it: the pattern's own ops and opset constraints say what the model has.
  int lowest_import(const Pattern& pattern, const std::string& domain) const {
    int lowest = 1;
    for (const auto& range : rule_.requires_opsets) {
      if (range.domain == domain) lowest = std::max(lowest, range.min);
    }
    for (const auto& range : pattern.opsets) {
      if (range.domain == domain) lowest = std::max(lowest, range.min);
    }
    if (const OpTable* table = table_of(domain)) {
      for (const auto& node : pattern.nodes) {
        if (node.domain != domain) continue;
        if (auto first = first_version(*table, node.op_type)) lowest = std::max(lowest, *first);
      }
    }
    return lowest;
  }

  bool some_target_loads(const std::string& domain, const std::string& op, int version) const {
    return std::any_of(targets_.begin(), targets_.end(), [&](const Target* target) { return !target->refuses(domain, op, version); });
  }

  std::optional<std::string> replacement_node_problem(const Pattern& pattern, const onnx::NodeProto& node) const {
    const std::string domain = normalize_domain(node.domain());
    const std::string& op = node.op_type();
    const int lowest = lowest_import(pattern, domain);
    if (!some_target_loads(domain, op, lowest)) {
      const OpTable* table = table_of(domain);
      std::optional<int> loaded_from;
      for (int version = lowest + 1; table && version <= table->highest_version() && !loaded_from; ++version) {
        if (some_target_loads(domain, op, version)) loaded_from = version;
      }
      if (loaded_from) {
        return fmt::format(
            "{} is not loadable at {} opset {} (the lowest a model this pattern matches has) by {}: add "
            "`requires: {} >= {}` (or a `where {{ opset ... }}` the pattern needs)",
            op_name(domain, op), display_domain(domain), lowest, fmt::join(rule_.targets, ", "), display_domain(domain), *loaded_from);
      }
      std::string text = fmt::format("no target of the rule ({}) loads {}", fmt::join(rule_.targets, ", "), op_name(domain, op));
      if (table && !table->knows(op)) {
        if (auto meant = near_miss(*table, op)) text += fmt::format(" (did you mean {}?)", *meant);
      }
      return text;
    }
    // The node is written once, but built at every import from the lowest up: it must be valid
    // under each version of the op in that range that ONNX's schemas describe.
    const int highest = std::min(highest_import(pattern, domain), newest_schema_opset(domain));
    const onnx::OpSchema* checked = nullptr;
    // A Constant becomes a constant of the builder (an initializer, or a Constant node spelled
    // for the import), whatever form it is written in: its newest schema says which forms exist.
    const int from = domain.empty() && op == "Constant" ? highest : lowest;
    for (int version = from; version <= highest; ++version) {
      const onnx::OpSchema* schema = schema_at(domain, op, version);
      if (!schema || schema == checked) continue;
      checked = schema;
      if (auto problem = schema_problem(*schema, node)) return *problem;
    }
    return std::nullopt;
  }

  int highest_import(const Pattern& pattern, const std::string& domain) const {
    int highest = INT_MAX;
    for (const auto& range : rule_.requires_opsets) {
      if (range.domain == domain) highest = std::min(highest, range.max);
    }
    for (const auto& range : pattern.opsets) {
      if (range.domain == domain) highest = std::min(highest, range.max);
    }
    return highest;
  }

  static std::optional<std::string> schema_problem(const onnx::OpSchema& schema, const onnx::NodeProto& node) {
    const std::string at = fmt::format("{}-{}", node.op_type(), schema.SinceVersion());
    std::set<std::string> given;
    for (const auto& attribute : node.attribute()) {
      given.insert(attribute.name());
      auto known = schema.attributes().find(attribute.name());
      if (known == schema.attributes().end()) {
        std::vector<std::string> names;
        for (const auto& [name, spec] : schema.attributes()) names.push_back(name);
        return fmt::format("{} has no attribute '{}' (it has {})", at, attribute.name(),
                           names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")));
      }
      if (attribute.type() != onnx::AttributeProto::UNDEFINED && attribute.type() != known->second.type) {
        return fmt::format("{}'s attribute '{}' is {}, not {}", at, attribute.name(),
                           onnx::AttributeProto::AttributeType_Name(known->second.type),
                           onnx::AttributeProto::AttributeType_Name(attribute.type()));
      }
    }
    for (const auto& [name, spec] : schema.attributes()) {
      if (spec.required && !given.count(name)) return fmt::format("{} needs attribute '{}'", at, name);
    }
    const int inputs = node.input_size(), outputs = node.output_size();
    if (inputs < schema.min_input() || inputs > schema.max_input()) {
      return fmt::format("{} takes {}..{} inputs, not {}", at, schema.min_input(), schema.max_input(), inputs);
    }
    if (outputs < schema.min_output() || outputs > schema.max_output()) {
      return fmt::format("{} gives {}..{} outputs, not {}", at, schema.min_output(), schema.max_output(), outputs);
    }
    return std::nullopt;
  }

  const Rule& rule_;
  const onnx::NodeList* replacement_;
  std::vector<const Target*> targets_;
};

}  // namespace

std::optional<RuleProblem> check_rule_ops(const Rule& rule, const onnx::NodeList* replacement) {
  return RuleChecker(rule, replacement).run();
}

}  // namespace onnx_rewrite
