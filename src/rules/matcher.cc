#include "rules/matcher.h"
#include "graph/node_attributes.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <numeric>
#include <set>
#include <span>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <stdexcept>

#include <fmt/format.h>
#include <onnx/defs/schema.h>

#include "verify/opset.h"
#include "graph/walk.h"
#include "graph/work_count.h"

namespace onnx_rewrite {

// ---- Match accessors -------------------------------------------------------------------------

const std::string& Match::value(const std::string& pattern_name) const {
  auto it = values.find(pattern_name);
  if (it == values.end()) throw std::logic_error("rule " + rule->id + " has no value named '" + pattern_name + "'");
  return it->second;
}

bool Match::has_value(const std::string& pattern_name) const {
  auto it = values.find(pattern_name);
  return it != values.end() && !it->second.empty();
}

const onnx::AttributeProto* Match::attribute(const std::string& name) const {
  auto it = attributes.find(name);
  return it == attributes.end() ? nullptr : &it->second;
}

int64_t Match::attribute_int(const std::string& name, int64_t otherwise) const {
  const auto* found = attribute(name);
  if (!found) return otherwise;
  return found->type() == onnx::AttributeProto::FLOAT ? static_cast<int64_t>(found->f()) : found->i();
}

float Match::attribute_float(const std::string& name, float otherwise) const {
  const auto* found = attribute(name);
  if (!found) return otherwise;
  return found->type() == onnx::AttributeProto::INT ? static_cast<float>(found->i()) : found->f();
}

std::vector<int64_t> Match::attribute_ints(const std::string& name, std::vector<int64_t> otherwise) const {
  const auto* found = attribute(name);
  if (!found) return otherwise;
  if (found->type() == onnx::AttributeProto::INT) return {found->i()};  // a one-value list written as an int
  return std::vector<int64_t>(found->ints().begin(), found->ints().end());
}

std::string Match::attribute_string(const std::string& name, std::string otherwise) const {
  const auto* found = attribute(name);
  return found ? found->s() : otherwise;
}

std::optional<TensorValues> Match::constant(const std::string& pattern_name) const {
  const std::string& name = value(pattern_name);
  return name.empty() ? std::nullopt : scope->constant_values(name);
}

int Match::opset(const std::string& domain) const {
  auto it = opsets.find(normalize_domain(domain));
  return it != opsets.end() ? it->second : scope->opset(domain);
}

// ---- Attribute helpers -----------------------------------------------------------------------

// Whether a node's attribute of type `actual` may be captured as `declared`: the same type, or
// one value where a list is declared (mmcv writes `padding = 1` for [1, 1]).
static bool capturable(onnx::AttributeProto::AttributeType actual, onnx::AttributeProto::AttributeType declared) {
  using A = onnx::AttributeProto;
  return declared == A::UNDEFINED || actual == declared || (declared == A::INTS && actual == A::INT) ||
         (declared == A::FLOATS && actual == A::FLOAT);
}

bool same_attribute_value(const onnx::AttributeProto& a, const onnx::AttributeProto& b) {
  auto close = [](double x, double y) { return x == y || std::fabs(x - y) <= 1e-6 * std::max(std::fabs(x), std::fabs(y)); };
  using A = onnx::AttributeProto;
  const bool a_number = a.type() == A::INT || a.type() == A::FLOAT;
  const bool b_number = b.type() == A::INT || b.type() == A::FLOAT;
  if (a_number && b_number) {
    const double x = a.type() == A::INT ? static_cast<double>(a.i()) : a.f();
    const double y = b.type() == A::INT ? static_cast<double>(b.i()) : b.f();
    return close(x, y);
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case A::STRING: return a.s() == b.s();
    case A::INTS: return std::equal(a.ints().begin(), a.ints().end(), b.ints().begin(), b.ints().end());
    case A::FLOATS: return std::equal(a.floats().begin(), a.floats().end(), b.floats().begin(), b.floats().end(), close);
    case A::STRINGS: return std::equal(a.strings().begin(), a.strings().end(), b.strings().begin(), b.strings().end());
    default: return a.SerializeAsString() == b.SerializeAsString();
  }
}

std::string attribute_value_text(const onnx::AttributeProto& attribute) {
  using A = onnx::AttributeProto;
  switch (attribute.type()) {
    case A::INT: return std::to_string(attribute.i());
    case A::FLOAT: return fmt::format("{}", attribute.f());
    case A::STRING: return "\"" + attribute.s() + "\"";
    case A::INTS: return fmt::format("[{}]", fmt::join(attribute.ints(), ", "));
    case A::FLOATS: return fmt::format("[{}]", fmt::join(attribute.floats(), ", "));
    case A::STRINGS: return fmt::format("[\"{}\"]", fmt::join(attribute.strings(), "\", \""));
    default: return "<" + A::AttributeType_Name(attribute.type()) + ">";
  }
}

std::optional<onnx::AttributeProto> schema_default(const std::string& domain, const std::string& op_type, int opset,
                                                   const std::string& attribute) {
  // ONNX 1.12 knows opsets up to 17; defaults of attributes that exist there rarely change later.
  const int known = std::min(opset, 17);
  const auto* schema = onnx::OpSchemaRegistry::Schema(op_type, known, domain.empty() ? "" : domain);
  if (!schema) return std::nullopt;
  auto it = schema->attributes().find(attribute);
  if (it == schema->attributes().end() || !it->second.default_value.has_type()) return std::nullopt;
  return it->second.default_value;
}

// ---- The search ------------------------------------------------------------------------------

namespace {

// How far apart neighbouring numbers near `number` are in a narrow float type (one unit in the
// last place), 0 for the others: a float16 or bfloat16 constant can only hold the number an
// exporter meant to that precision (√2 in float16 is 1.4140625), so `≈` allows that much.
double storage_step(int32_t data_type, double number) {
  int significand_bits = 0, min_exponent = 0;
  if (data_type == onnx::TensorProto::FLOAT16) {
    significand_bits = 11;
    min_exponent = -14;
  } else if (data_type == onnx::TensorProto::BFLOAT16) {
    significand_bits = 8;
    min_exponent = -126;
  } else {
    return 0;
  }
  int exponent = 0;
  std::frexp(number, &exponent);  // number = m · 2^exponent, 0.5 <= |m| < 1
  return std::ldexp(1.0, std::max(exponent - 1, min_exponent) - (significand_bits - 1));
}

// A reason is worked out only when someone asked for it: most attempts fail, and --explain is rare.
template <typename Text>
std::string text_of(Text&& text) {
  if constexpr (std::is_invocable_v<Text>) return text();
  else return std::string(text);
}

std::string_view input_at(const onnx::NodeProto& node, size_t index) {
  return index < static_cast<size_t>(node.input_size()) ? std::string_view(node.input(static_cast<int>(index))) : std::string_view();
}

// Whether the node is of the pattern node's op (in its domain).
bool is_op(const onnx::NodeProto& node, const PatternNode& pattern_node) {
  return node.op_type() == pattern_node.op_type && normalize_domain(node.domain()) == pattern_node.domain;
}

// Whether the pattern lets value `name` be absent (`is optional` or `is absent`).
bool may_be_absent(const Pattern& pattern, std::string_view name) {
  return std::any_of(pattern.constraints.begin(), pattern.constraints.end(), [&](const Constraint& constraint) {
    return !constraint.on_attribute && constraint.subject == name &&
           (constraint.kind == Constraint::Kind::kOptional || constraint.kind == Constraint::Kind::kAbsent);
  });
}

}  // namespace

// Everything a partial match has bound, kept as a trail: backtracking truncates it to a mark, and
// each search empties the last one's (Matcher::trail_), so a failed attempt allocates nothing.
// Names view the pattern; graph values view the nodes' protos, which nothing changes while a
// match is sought.
struct Matcher::Bindings {
  std::vector<std::pair<std::string_view, std::string_view>> values;  // pattern value -> graph value ("" when absent)
  std::vector<std::pair<std::string_view, onnx::AttributeProto>> attributes;
  std::vector<onnx::NodeProto*> nodes;

  struct Mark {
    size_t values, attributes, nodes;
  };
  Mark mark() const { return {values.size(), attributes.size(), nodes.size()}; }
  void clear() { undo({}); }
  void undo(const Mark& to) {
    values.resize(to.values);
    attributes.erase(attributes.begin() + static_cast<std::ptrdiff_t>(to.attributes), attributes.end());
    nodes.resize(to.nodes);
  }
  const std::string_view* value(std::string_view name) const {
    for (const auto& [bound, graph_value] : values) {
      if (bound == name) return &graph_value;
    }
    return nullptr;
  }
  const onnx::AttributeProto* attribute(std::string_view capture) const {
    for (const auto& [bound, attribute] : attributes) {
      if (bound == capture) return &attribute;
    }
    return nullptr;
  }
  bool covers(const onnx::NodeProto* node) const { return std::find(nodes.begin(), nodes.end(), node) != nodes.end(); }
};

// The round's index as the search asks it: producers, readers, whether a value is a constant and
// what a small one holds.
// Every candidate pattern of a node starts from the same few values (the node's inputs and
// outputs, and theirs), so the last answers are kept, found by where the name's characters are:
// the search asks with views of the graph's names, which stay put while a round matches
// (nothing changes before the commit), and this saves hashing and comparing them again.
class Matcher::Lookups {
 public:
  // Up to 256 entries, fewer for a small scope (models can hold thousands of subgraphs).
  Lookups(const Scope& scope, Scope::Reader reader)
      : scope_(scope),
        reader_(reader),
        bits_(std::clamp(static_cast<int>(std::bit_width(static_cast<unsigned>(scope.nodes().size()))), 4, 8)),
        entries_(size_t{1} << bits_) {}

  const Scope::Producer* producer(std::string_view value) {
    return remembered(entry_for(value).producer, [&] { return scope_.producer(value); });
  }
  std::span<const Use> uses(std::string_view value) {
    return remembered(entry_for(value).uses, [&] { return scope_.uses(value); });
  }
  bool is_constant(std::string_view value) {
    return remembered(entry_for(value).constant, [&] { return scope_.is_constant(value); });
  }
  // Scope::constant_values with its default size limit; valid until the next question.
  const std::optional<TensorValues>& constant_values(std::string_view value) {
    return remembered(entry_for(value).values, [&] { return scope_.constant_values(value, Scope::kMaxDecodedElements, reader_); });
  }

 private:
  struct Entry {  // the answers about one name, once asked
    const char* data = nullptr;
    size_t size = 0;
    std::optional<const Scope::Producer*> producer;
    std::optional<std::span<const Use>> uses;
    std::optional<bool> constant;
    std::optional<std::optional<TensorValues>> values;
  };

  template <typename Answer, typename Ask>
  static const Answer& remembered(std::optional<Answer>& answer, Ask&& ask) {
    if (!answer) answer = ask();
    return *answer;
  }

  Entry& entry_for(std::string_view value) {
    const uint64_t spread = reinterpret_cast<uintptr_t>(value.data()) * 0x9E3779B97F4A7C15ull;
    Entry& entry = entries_[spread >> (64 - bits_)];
    if (entry.data != value.data() || entry.size != value.size()) {
      entry = Entry{};
      entry.data = value.data();
      entry.size = value.size();
    }
    return entry;
  }

  const Scope& scope_;
  Scope::Reader reader_;
  int bits_;
  std::vector<Entry> entries_;
};

// Most attempts fail at once, on what computes the anchor's inputs: 25 patterns end in a Mul, and
// a chain of GELU blocks has two Muls in each. Before a search (unless explaining why not), a
// necessary condition is checked, looking upwards from the anchor a few levels: each pattern node
// computing an input of a matched node needs a node of its op among those computing the graph
// node's inputs, in whatever order the inputs bind. For a pattern node of n factors (a tree of
// Muls or Adds), the inputs are those of the nodes of its op a tree of n operands may reach.
// Before that, the scope must import what the pattern is for (the search says why not).
class Matcher::Prefilter {
 public:
  explicit Prefilter(const Scope& scope) : scope_(scope) {}

  bool may_match(const Pattern& pattern, const onnx::NodeProto& node, int position) {
    const Plan& plan = plan_of(pattern);
    if (!plan.imported) return false;
    return plan.any_wanted ? may_be(pattern, plan, pattern.order.front(), node, position, 0) : true;
  }

 private:
  static constexpr int kLevels = 3;  // the anchor and two levels of producers

  struct Plan {
    std::vector<std::vector<size_t>> producers;  // by pattern node: the pattern nodes computing its inputs
    bool any_wanted = false;
    bool imported = true;  // the scope imports versions the pattern is for
  };

  const Plan& plan_of(const Pattern& pattern) {
    auto [it, fresh] = plans_.try_emplace(&pattern);
    Plan& plan = it->second;
    if (!fresh) return plan;
    plan.producers.resize(pattern.nodes.size());
    // A value that may be absent links nothing: both ends then bind "", and the search reaches
    // its producer another way.
    for (size_t i = 0; i < pattern.nodes.size(); ++i) {
      for (const auto& input : pattern.nodes[i].inputs) {
        if (input.empty() || input == "_" || may_be_absent(pattern, input)) continue;
        for (size_t j = 0; j < pattern.nodes.size(); ++j) {
          const auto& outputs = pattern.nodes[j].outputs;
          if (std::find(outputs.begin(), outputs.end(), input) != outputs.end()) plan.producers[i].push_back(j);
        }
      }
    }
    plan.any_wanted = !plan.producers[pattern.order.front()].empty();
    plan.imported = std::all_of(pattern.opsets.begin(), pattern.opsets.end(),
                                [&](const VersionRange& range) { return range.contains(scope_.opset(range.domain)); });
    return plan;
  }

  // Whether `node` (of the op of pattern node `index`) may be where that pattern node matches.
  bool may_be(const Pattern& pattern, const Plan& plan, size_t index, const onnx::NodeProto& node, int position, int level) {
    const auto& wanted = plan.producers[index];
    if (wanted.empty() || level + 1 == kLevels) return true;
    const PatternNode& here = pattern.nodes[index];
    const auto& computing = here.associative ? tree_inputs(position, here, level) : computing_inputs(node, position, level);
    return std::all_of(wanted.begin(), wanted.end(), [&](size_t producer) {
      return std::any_of(computing.begin(), computing.end(), [&](const Scope::Producer* candidate) {
        return is_op(*candidate->node, pattern.nodes[producer]) &&
               may_be(pattern, plan, producer, *candidate->node, candidate->position, level + 1);
      });
    });
  }

  // The nodes computing what `node` (at `position` in the index) reads, found by value id: its
  // inputs, and what its subgraphs read (which only makes the check let more through). The
  // anchor's are kept while the next patterns are tried.
  const std::vector<const Scope::Producer*>& computing_inputs(const onnx::NodeProto& node, int position, int level) {
    if (level == 0 && &node == anchor_) return by_level_[0];
    if (level == 0) anchor_ = &node;
    auto& computing = by_level_[static_cast<size_t>(level)];
    computing.clear();
    for (const Scope::ValueId value : scope_.reads_at(position)) {
      if (const auto* produced = scope_.producer(value)) computing.push_back(produced);
    }
    return computing;
  }

  // The nodes computing the operands a tree of `here`'s op rooted at `position` may have: what the
  // nodes of that op it may reach read. A tree of n operands has n - 1 nodes, so a node of it is
  // at most n - 2 producers of the op away from the root.
  const std::vector<const Scope::Producer*>& tree_inputs(int position, const PatternNode& here, int level) {
    auto& reached = reached_[static_cast<size_t>(level)];
    reached.assign(1, position);
    for (size_t depth = 0, from = 0; depth + 2 < here.inputs.size(); ++depth) {
      const size_t to = reached.size();
      for (; from < to; ++from) {
        for (const Scope::ValueId value : scope_.reads_at(reached[from])) {
          const auto* produced = scope_.producer(value);
          if (produced && is_op(*produced->node, here) && std::find(reached.begin(), reached.end(), produced->position) == reached.end()) {
            reached.push_back(produced->position);
          }
        }
      }
    }
    auto& computing = trees_[static_cast<size_t>(level)];
    computing.clear();
    for (const int at : reached) {
      for (const Scope::ValueId value : scope_.reads_at(at)) {
        if (const auto* produced = scope_.producer(value)) computing.push_back(produced);
      }
    }
    return computing;
  }

  const Scope& scope_;
  std::unordered_map<const Pattern*, Plan> plans_;
  const onnx::NodeProto* anchor_ = nullptr;
  std::array<std::vector<const Scope::Producer*>, kLevels> by_level_;
  std::array<std::vector<int>, kLevels> reached_;                   // tree_inputs' nodes, by position
  std::array<std::vector<const Scope::Producer*>, kLevels> trees_;  // and what computes their inputs
};

namespace {

class Search {
 public:
  Search(const Scope& scope, Scope::Reader reader, Matcher::Lookups& lookups, Matcher::Bindings& trail, const Rule& rule,
         const Pattern& pattern, const NodeSet& claimed, bool explaining)
      : scope_(scope),
        reader_(reader),
        lookups_(lookups),
        rule_(rule),
        pattern_(pattern),
        claimed_(claimed),
        explaining_(explaining),
        state_(trail) {
    state_.clear();
  }

  std::optional<Match> run(onnx::NodeProto* anchor) {
    for (const auto& range : pattern_.opsets) {
      const int version = scope_.opset(range.domain);
      if (!range.contains(version)) {
        fail(0, [&] {
          return fmt::format("the model imports {} {}, the pattern is for {}", display_domain(range.domain), version, range.describe());
        });
        return std::nullopt;
      }
    }
    if (!try_node(pattern_.order.front(), anchor, 0)) return std::nullopt;
    Match match;
    match.scope = &scope_;
    match.rule = &rule_;
    match.pattern = &pattern_;
    match.anchor = anchor;
    match.nodes = found_.nodes;
    for (const auto& [name, graph_value] : found_.values) match.values.emplace(name, graph_value);
    for (auto& [capture, attribute] : found_.attributes) match.attributes.emplace(capture, std::move(attribute));
    return match;
  }

  const std::string& reason() const { return best_reason_; }
  bool rejected_on_facts() const { return rejected_on_facts_; }

 private:
  // Keeps the reason of the attempt that got furthest.
  template <typename Text>
  void fail(size_t depth, Text&& reason) {
    if (explaining_ && (best_reason_.empty() || depth > best_depth_)) {
      best_depth_ = depth;
      best_reason_ = text_of(std::forward<Text>(reason));
    }
  }

  std::string node_text(const onnx::NodeProto& node) const { return "'" + describe_node(node) + "'"; }

  // Binds a pattern value to a graph value, checking consistency and the value's constraints.
  bool bind(std::string_view name, std::string_view graph_value, size_t depth) {
    if (name.empty() || name == "_") return true;
    if (const auto* bound = state_.value(name)) {
      if (*bound == graph_value) return true;
      fail(depth, [&] { return fmt::format("'{}' would be both '{}' and '{}'", name, *bound, graph_value); });
      return false;
    }
    state_.values.emplace_back(name, graph_value);
    for (const auto& constraint : pattern_.constraints) {
      if (!constraint.on_attribute && constraint.subject == name && !check(constraint, graph_value, depth)) return false;
    }
    if (graph_value.empty() && !may_be_absent(pattern_, name)) {
      fail(depth, [&] { return fmt::format("'{}' is absent", name); });
      return false;
    }
    return true;
  }

  bool check(const Constraint& constraint, std::string_view value, size_t depth) {
    using K = Constraint::Kind;
    auto reject = [&](auto&& why) {
      fail(depth, [&] { return fmt::format("'{}' ({}) {}", constraint.subject, value.empty() ? "absent" : value, text_of(why)); });
      return false;
    };
    switch (constraint.kind) {
      case K::kOptional:
      case K::kVariadic: return true;  // about the node, decided by its pattern node
      case K::kAbsent: return value.empty() ? true : reject("is present, the rule needs it absent");
      case K::kPresent: return value.empty() ? reject("is absent, the rule needs it") : true;
      default: break;
    }
    if (value.empty()) return true;  // an absent optional input satisfies constraints on its contents
    // A type or rank the shape facts don't know yet, and may in a later round (a rewrite keeps
    // what they know).
    auto reject_on_facts = [&](auto&& why) {
      rejected_on_facts_ = true;
      return reject(why);
    };
    switch (constraint.kind) {
      case K::kConstant: return lookups_.is_constant(value) ? true : reject("is not a constant");
      case K::kScalar: {
        auto values = scope_.constant_values(value, 1, reader_);
        return values && values->numbers.size() == 1 ? true : reject("is not a constant scalar");
      }
      case K::kApprox: {
        const auto& values = lookups_.constant_values(value);
        if (!values || values->numbers.empty()) return reject("is not a small numeric constant");
        const double tolerance = std::max(constraint.tolerance, storage_step(values->data_type, constraint.number));
        for (double number : values->numbers) {
          if (std::fabs(number - constraint.number) > tolerance) {
            return reject([&] { return fmt::format("holds {}, not {}", number, constraint.describe()); });
          }
        }
        return true;
      }
      case K::kEquals:
      case K::kIn: {
        // Every element of a small constant (numbers or strings) is one of the values.
        const auto& values = lookups_.constant_values(value);
        if (!values || (values->numbers.empty() && values->strings.empty())) return reject("is not a small constant");
        auto allowed = [&](const onnx::AttributeProto& actual) {
          return std::any_of(constraint.values.begin(), constraint.values.end(),
                             [&](const onnx::AttributeProto& wanted) { return same_attribute_value(actual, wanted); });
        };
        for (double number : values->numbers) {
          onnx::AttributeProto actual;
          actual.set_type(onnx::AttributeProto::FLOAT);
          actual.set_f(static_cast<float>(number));
          if (!allowed(actual)) return reject([&] { return fmt::format("holds {}, not {}", number, constraint.describe()); });
        }
        for (const auto& text : values->strings) {
          onnx::AttributeProto actual;
          actual.set_type(onnx::AttributeProto::STRING);
          actual.set_s(text);
          if (!allowed(actual)) return reject([&] { return fmt::format("holds \"{}\", not {}", text, constraint.describe()); });
        }
        return true;
      }
      case K::kDtype: {
        const int32_t type = scope_.facts(value, reader_).elem_type;
        if (type == 0) return reject_on_facts("has an unknown element type");
        if (std::find(constraint.dtypes.begin(), constraint.dtypes.end(), type) == constraint.dtypes.end()) {
          return reject([&] { return "has element type " + data_type_name(type); });
        }
        return true;
      }
      case K::kRank: {
        auto rank = scope_.facts(value, reader_).rank();
        if (!rank) return reject_on_facts("has an unknown rank");
        if (static_cast<int>(*rank) < constraint.min_rank || static_cast<int>(*rank) > constraint.max_rank) {
          return reject([&] { return fmt::format("has rank {}", *rank); });
        }
        return true;
      }
      default: return reject("has a constraint that only applies to attributes");
    }
  }

  bool check_attribute(const Constraint& constraint, const onnx::AttributeProto* value, bool present, size_t depth) {
    using K = Constraint::Kind;
    auto reject = [&](auto&& why) {
      fail(depth, [&] { return fmt::format("attribute '{}' {}", constraint.subject, text_of(why)); });
      return false;
    };
    auto not_allowed = [&] { return "= " + attribute_value_text(*value) + ", not " + constraint.describe(); };
    switch (constraint.kind) {
      case K::kPresent: return present ? true : reject("is absent");
      case K::kAbsent: return present ? reject("is set, the rule needs it absent") : true;
      case K::kEquals:
      case K::kIn:
        if (!value) return reject("is absent and has no default");
        for (const auto& allowed : constraint.values) {
          if (same_attribute_value(*value, allowed)) return true;
        }
        return reject(not_allowed);
      case K::kApprox: {
        if (!value) return reject("is absent and has no default");
        std::vector<double> numbers;
        switch (value->type()) {
          case onnx::AttributeProto::FLOAT: numbers = {value->f()}; break;
          case onnx::AttributeProto::INT: numbers = {static_cast<double>(value->i())}; break;
          case onnx::AttributeProto::FLOATS: numbers.assign(value->floats().begin(), value->floats().end()); break;
          case onnx::AttributeProto::INTS: numbers.assign(value->ints().begin(), value->ints().end()); break;
          default: return reject([&] { return "= " + attribute_value_text(*value) + ", not a number"; });
        }
        for (double number : numbers) {
          if (std::fabs(number - constraint.number) > constraint.tolerance) return reject(not_allowed);
        }
        return true;
      }
      default: return true;  // the parser admits no other constraint on an attribute
    }
  }

  // Checks op, attributes and outputs of `node` against pattern node `index`, then its inputs
  // in every order the op allows, recursing into the rest of the pattern.
  bool try_node(size_t index, onnx::NodeProto* node, size_t depth) {
    const PatternNode& pattern_node = pattern_.nodes[index];
    if (!is_op(*node, pattern_node)) {
      fail(depth, [&] {
        return fmt::format("node {} is {}.{}, the pattern wants {}.{}", node_text(*node), display_domain(node->domain()), node->op_type(),
                           display_domain(pattern_node.domain), pattern_node.op_type);
      });
      return false;
    }
    if (claimed_.contains(node) || state_.covers(node)) {
      fail(depth, [&] { return fmt::format("node {} is already part of a rewrite", node_text(*node)); });
      return false;
    }
    for (const auto& attribute : node->attribute()) {
      if (!attribute.ref_attr_name().empty()) {  // inside a function body: the value comes with each call
        fail(depth, [&] {
          return fmt::format("node {}: attribute {} refers to the function's attribute @{}, known only at each call", node_text(*node),
                             attribute.name(), attribute.ref_attr_name());
        });
        return false;
      }
    }
    const auto saved = state_.mark();
    if (!match_attributes(pattern_node, *node, depth) || !match_outputs(pattern_node, *node, depth)) {
      state_.undo(saved);
      return false;
    }
    state_.nodes.push_back(node);
    const bool matched = pattern_node.associative ? match_tree_inputs(pattern_node, node, depth) : match_inputs(pattern_node, *node, depth);
    if (!matched) state_.undo(saved);
    return matched;
  }

  bool match_attributes(const PatternNode& pattern_node, const onnx::NodeProto& node, size_t depth) {
    for (const auto& wanted : pattern_node.attributes) {
      const onnx::AttributeProto* actual = nullptr;
      for (const auto& attribute : node.attribute()) {
        if (attribute.name() == wanted.name) actual = &attribute;
      }
      std::optional<onnx::AttributeProto> fallback;
      if (!actual) {
        if (auto it = pattern_.defaults.find(wanted.capture); !wanted.capture.empty() && it != pattern_.defaults.end()) {
          fallback = it->second;
        } else {
          fallback = schema_default(pattern_node.domain, pattern_node.op_type, scope_.opset(pattern_node.domain), wanted.name);
        }
      }
      const onnx::AttributeProto* value = actual ? actual : (fallback ? &*fallback : nullptr);
      if (wanted.literal) {
        if (!value) {
          fail(depth, [&] { return fmt::format("node {}: attribute '{}' is absent", node_text(node), wanted.name); });
          return false;
        }
        if (!same_attribute_value(*value, *wanted.literal)) {
          fail(depth, [&] {
            return fmt::format("node {}: attribute {} = {}, the pattern wants {}", node_text(node), wanted.name,
                               attribute_value_text(*value), attribute_value_text(*wanted.literal));
          });
          return false;
        }
        continue;
      }
      if (actual && !capturable(actual->type(), wanted.capture_type)) {
        fail(depth, [&] {
          return fmt::format("node {}: attribute '{}' is {}, the op takes {} (an invalid node)", node_text(node), wanted.name,
                             onnx::AttributeProto::AttributeType_Name(actual->type()),
                             onnx::AttributeProto::AttributeType_Name(wanted.capture_type));
        });
        return false;
      }
      if (value) {
        if (const auto* captured = state_.attribute(wanted.capture)) {
          if (!same_attribute_value(*captured, *value)) {
            fail(depth, [&] { return fmt::format("attribute capture '{}' differs between nodes", wanted.capture); });
            return false;
          }
        } else {
          state_.attributes.emplace_back(wanted.capture, *value);
        }
      }
      for (const auto& constraint : pattern_.constraints) {
        if (constraint.on_attribute && constraint.subject == wanted.capture &&
            !check_attribute(constraint, value, actual != nullptr, depth)) {
          return false;
        }
      }
    }
    return true;
  }

  bool match_outputs(const PatternNode& pattern_node, const onnx::NodeProto& node, size_t depth) {
    for (size_t i = 0; i < pattern_node.outputs.size(); ++i) {
      const std::string& name = pattern_node.outputs[i];
      if (name.empty() || name == "_") continue;
      std::string_view graph_value =
          i < static_cast<size_t>(node.output_size()) ? std::string_view(node.output(static_cast<int>(i))) : std::string_view();
      if (may_be_absent(pattern_, name) && lookups_.uses(graph_value).empty() && !scope_.is_output(graph_value)) {
        graph_value = {};  // an optional output nothing reads is as good as absent
      }
      if (graph_value.empty() && !may_be_absent(pattern_, name)) {
        fail(depth, [&] { return fmt::format("node {} does not produce output {}", node_text(node), i); });
        return false;
      }
      if (!bind(name, graph_value, depth)) return false;  // an optional output that is absent binds ""
    }
    return true;
  }

  // Tries the inputs as written and, for commutative ops, in every other order.
  bool match_inputs(const PatternNode& pattern_node, const onnx::NodeProto& node, size_t depth) {
    for (size_t i = pattern_node.inputs.size(); !pattern_node.variadic && i < static_cast<size_t>(node.input_size()); ++i) {
      if (!node.input(static_cast<int>(i)).empty()) {
        fail(depth, [&] { return fmt::format("node {} has input {}, which the pattern does not expect", node_text(node), i); });
        return false;
      }
    }
    std::vector<size_t> order(pattern_node.inputs.size());
    std::iota(order.begin(), order.end(), 0);
    do {
      const auto saved = state_.mark();
      bool bound = true;
      for (size_t i = 0; i < order.size() && bound; ++i) {
        const std::string& name = pattern_node.inputs[order[i]];
        const std::string_view graph_value = input_at(node, i);
        if (name.empty()) {
          bound = graph_value.empty();
          if (!bound) fail(depth, [&] { return fmt::format("node {} has input {}, the pattern wants it absent", node_text(node), i); });
        } else {
          bound = bind(name, graph_value, depth);
        }
      }
      if (bound && step(depth + 1)) return true;
      state_.undo(saved);
    } while (pattern_node.commutative && order.size() <= 4 && std::next_permutation(order.begin(), order.end()));
    return false;
  }

  // A tree of the same binary op (x·a·b in any association) whose interior values are used
  // nowhere else, cut into exactly `leaves` leaves.
  struct Tree {
    std::vector<std::string_view> leaves;
    std::vector<onnx::NodeProto*> interior;
  };

  bool expandable(const onnx::NodeProto& node, const PatternNode& pattern_node, const Tree& tree) const {
    if (!is_op(node, pattern_node)) return false;
    if (node.input_size() != 2 || node.output_size() != 1 || node.attribute_size() != 0) return false;
    if (claimed_.contains(&node) || state_.covers(&node)) return false;
    if (std::find(tree.interior.begin(), tree.interior.end(), &node) != tree.interior.end()) return false;
    const std::string& value = node.output(0);
    return lookups_.uses(value).size() == 1 && !scope_.is_output(value);
  }

  void grow(const Tree& tree, size_t from, const PatternNode& pattern_node, std::vector<Tree>& trees) const {
    if (tree.leaves.size() == pattern_node.inputs.size()) {
      trees.push_back(tree);
      return;
    }
    for (size_t i = from; i < tree.leaves.size(); ++i) {
      const auto* produced = lookups_.producer(tree.leaves[i]);
      if (!produced || !expandable(*produced->node, pattern_node, tree)) continue;
      Tree bigger = tree;
      bigger.leaves[i] = produced->node->input(0);
      bigger.leaves.insert(bigger.leaves.begin() + static_cast<std::ptrdiff_t>(i) + 1, produced->node->input(1));
      bigger.interior.push_back(produced->node);
      grow(bigger, i, pattern_node, trees);
    }
  }

  bool match_tree_inputs(const PatternNode& pattern_node, onnx::NodeProto* root, size_t depth) {
    if (root->input_size() != 2 || root->input(0).empty() || root->input(1).empty()) {
      fail(depth, [&] { return fmt::format("node {} is not a binary {}", node_text(*root), pattern_node.op_type); });
      return false;
    }
    std::vector<Tree> trees;
    grow(Tree{{root->input(0), root->input(1)}, {}}, 0, pattern_node, trees);
    if (trees.empty()) {
      fail(depth, [&] {
        return fmt::format("node {} is not a chain of {} {} operands", node_text(*root), pattern_node.inputs.size(), pattern_node.op_type);
      });
      return false;
    }
    for (const auto& tree : trees) {
      std::vector<size_t> order(tree.leaves.size());
      std::iota(order.begin(), order.end(), 0);
      do {
        const auto saved = state_.mark();
        state_.nodes.insert(state_.nodes.end(), tree.interior.begin(), tree.interior.end());
        bool bound = true;
        for (size_t i = 0; i < order.size() && bound; ++i) bound = bind(pattern_node.inputs[order[i]], tree.leaves[i], depth);
        if (bound && step(depth + 1)) return true;
        state_.undo(saved);
      } while (std::next_permutation(order.begin(), order.end()));
    }
    return false;
  }

  // Matches the next pattern node in order: the producer of a bound value, or else a consumer.
  bool step(size_t depth) {
    if (depth == pattern_.order.size()) return finish(depth);
    const size_t index = pattern_.order[depth];
    const PatternNode& pattern_node = pattern_.nodes[index];
    for (const auto& output : pattern_node.outputs) {
      const auto* bound = state_.value(output);
      if (!bound) continue;
      const auto* produced = lookups_.producer(*bound);
      if (!produced) {
        fail(depth, [&] { return fmt::format("'{}' is not computed by a node (the pattern wants {})", *bound, pattern_node.op_type); });
        return false;
      }
      return try_node(index, produced->node, depth);
    }
    for (const auto& input : pattern_node.inputs) {
      const auto* bound = state_.value(input);
      if (!bound || bound->empty()) continue;
      const std::string_view value = *bound;  // trying a node binds more, which may move `bound`
      // A node reading the value twice is tried once. A node's uses are next to each other
      // (Scope::uses), so the last node tried is the only one to compare with: a value with
      // 100,000 readers costs 100,000 comparisons, not 5 billion.
      const std::span<const Use> uses = lookups_.uses(value);
      count_work(uses.size());
      const onnx::NodeProto* tried = nullptr;
      for (const Use& use : uses) {
        if (use.input < 0 || use.node == tried) continue;
        tried = use.node;
        if (try_node(index, use.node, depth)) return true;
      }
      fail(depth, [&] { return fmt::format("no {} uses '{}'", pattern_node.op_type, value); });
      return false;
    }
    throw std::logic_error("rule " + rule_.id + ": pattern order reaches a node with nothing bound");
  }

  // A value computed inside the match may only leave it as a pattern output.
  bool finish(size_t depth) {
    // A pattern input must come from outside: the replacement reads it after the match is gone.
    for (const auto& name : pattern_.inputs) {
      const auto* bound = state_.value(name);
      if (!bound || bound->empty()) continue;
      const auto* produced = lookups_.producer(*bound);
      if (produced && state_.covers(produced->node)) {
        fail(depth, [&] { return fmt::format("input '{}' would be '{}', which the match itself computes", name, *bound); });
        return false;
      }
    }
    auto is_pattern_output = [&](std::string_view value) {
      return std::any_of(pattern_.outputs.begin(), pattern_.outputs.end(), [&](const std::string& name) {
        const auto* bound = state_.value(name);
        return bound && *bound == value;
      });
    };
    for (const auto* node : state_.nodes) {
      for (const auto& value : node->output()) {
        if (value.empty() || is_pattern_output(value)) continue;
        if (scope_.is_output(value)) {
          fail(depth, [&] { return fmt::format("'{}', computed inside the match, is an output of the {}", value, scope_.where()); });
          return false;
        }
        for (const auto& use : lookups_.uses(value)) {
          if (!state_.covers(use.node)) {
            fail(depth, [&] {
              return fmt::format("'{}', computed inside the match, is also used by node {}{}", value, node_text(*use.node),
                                 use.input < 0 ? " (in a subgraph)" : "");
            });
            return false;
          }
        }
      }
    }
    found_ = state_;
    return true;
  }

  const Scope& scope_;
  const Scope::Reader reader_;
  Matcher::Lookups& lookups_;
  const Rule& rule_;
  const Pattern& pattern_;
  const NodeSet& claimed_;
  const bool explaining_;
  Matcher::Bindings& state_;
  Matcher::Bindings found_;
  std::string best_reason_;
  bool rejected_on_facts_ = false;
  size_t best_depth_ = 0;
};

}  // namespace

Matcher::Matcher(const Scope& scope, const NodeSet& claimed, Scope::Reader reader)
    : scope_(scope),
      claimed_(claimed),
      reader_(reader),
      lookups_(std::make_unique<Lookups>(scope, reader)),
      trail_(std::make_unique<Bindings>()),
      prefilter_(std::make_unique<Prefilter>(scope)) {}

Matcher::~Matcher() = default;

std::optional<Match> Matcher::match(const Rule& rule, const Pattern& pattern, onnx::NodeProto* node, int position, std::string* why_not,
                                    bool* on_facts) const {
  if (!why_not && !prefilter_->may_match(pattern, *node, position)) {
    if (on_facts) *on_facts = false;
    return std::nullopt;
  }
  Search search(scope_, reader_, *lookups_, *trail_, rule, pattern, claimed_, why_not != nullptr);
  auto match = search.run(node);
  if (!match && why_not) *why_not = search.reason();
  if (on_facts) *on_facts = !match && search.rejected_on_facts();
  return match;
}

}  // namespace onnx_rewrite
