#include "onnx_rewrite/target.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "graph/imports.h"
#include "graph/node_types.h"
#include "graph/walk.h"
#include "rules/embedded.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/verify.h"
#include "verify/opset.h"

namespace onnx_rewrite {
namespace {

// An ATen node's op is in its `operator` attribute: "ATen" alone says nothing.
std::string aten_operator(const onnx::NodeProto& node) {
  if (node.op_type() != "ATen") return {};
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == "operator") return attribute.s();
  }
  return {};
}

struct Tally {
  struct Restricted {
    const Target::Caveat* caveat = nullptr;
    std::string first_place;
    int count = 0;
  };
  std::map<std::tuple<std::string, std::string, std::string, std::string>, Unloadable> entries;
  std::map<std::pair<std::string, std::string>, Restricted> restricted;  // loadable nodes the target has caveats for

  void add(const onnx::NodeProto& node, const std::string& place, const std::string& reason) {
    const std::string op = aten_operator(node);
    auto& entry = entries[{node.domain(), node.op_type(), op, place}];
    if (entry.count == 0) entry = {node.domain(), node.op_type(), op, place, reason, 0};
    ++entry.count;
  }

  void add(const std::string& place, const Target::Caveat& caveat) {
    auto& seen = restricted[{caveat.domain, caveat.op}];
    if (seen.count++ == 0) seen = {&caveat, place, 1};
  }
};

class Checker {
 public:
  Checker(const Model& model, const Target& target) : target_(target) {
    for (const auto& function : model.proto.functions()) local_functions_.insert({normalize_domain(function.domain()), function.name()});
  }

  void check_node(const onnx::NodeProto& node, const ImportMap& imports, const std::string& place) {
    // A verdict depends only on the op and the imports: worked out once per op, not per node (a
    // graph of a million nodes has a few dozen ops).
    auto [verdict, fresh] = verdicts_[&imports].try_emplace(OpView::of(node));
    if (fresh) {
      verdict->second.refusal = refusal(node, imports);
      if (!verdict->second.refusal) verdict->second.caveat = target_.caveat(normalize_domain(node.domain()), node.op_type());
    }
    if (verdict->second.refusal) tally.add(node, place, *verdict->second.refusal);
    else if (verdict->second.caveat) tally.add(place, *verdict->second.caveat);
  }

  Tally tally;

 private:
  // Why the target refuses the node's op, or nullopt if it loads it.
  std::optional<std::string> refusal(const onnx::NodeProto& node, const ImportMap& imports) const {
    const std::string domain = normalize_domain(node.domain());
    if (local_functions_.count({domain, node.op_type()})) {
      if (target_.local_functions) return std::nullopt;
      return "calls a model-local function, which this target does not run";
    }
    auto import = imports.find(domain);
    const bool loadable_domain = std::find(target_.domains.begin(), target_.domains.end(), domain) != target_.domains.end();
    if (loadable_domain && import == imports.end()) {
      return fmt::format("the model does not import domain {}", display_domain(domain));
    }
    return target_.refuses(domain, node.op_type(), import == imports.end() ? 0 : import->second);
  }

  const Target& target_;
  std::set<std::pair<std::string, std::string>> local_functions_;
  struct Verdict {
    std::optional<std::string> refusal;
    const Target::Caveat* caveat = nullptr;  // of a node it loads
  };
  std::map<const ImportMap*, std::unordered_map<OpView, Verdict, OpViewHash>> verdicts_;
};

// Where a node is, for the tally: one line for all subgraphs of the main graph, the function
// for a function's body and everything nested in it.
std::string tally_place(const Place& place) {
  const Place& root = place.root();
  if (place.kind() == Place::Kind::kSubgraph && root.kind() == Place::Kind::kMainGraph) return "subgraph";
  return root.text();
}

// Imports of the target's domains that are newer than our tables: their nodes were checked
// against the newest table, which says nothing of ops or changes that came later.
void note_newer_than_tables(const ImportMap& imports, const Target& target, std::set<std::string>& notes) {
  for (const auto& [domain, version] : imports) {
    const OpTable* table = OpRegistry::builtin().table(domain);
    if (!table || version <= table->highest_version()) continue;
    if (std::find(target.domains.begin(), target.domains.end(), domain) == target.domains.end()) continue;
    notes.insert(
        fmt::format("{0} opset {1} is newer than the tables: nodes were checked against {0} opset {2}, "
                    "and ops added or changed after it are not verified",
                    display_domain(domain), version, table->highest_version()));
  }
}

}  // namespace

// ---- Target files ---------------------------------------------------------------------------

namespace {

// "5", "1..16", ">= 14", "<= 16", as in rule files' `requires`.
std::optional<std::pair<int64_t, int64_t>> parse_versions(std::string text) {
  std::erase_if(text, [](char c) { return c == ' ' || c == '\t'; });
  auto number = [](const std::string& digits) -> std::optional<int64_t> {
    if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
    return std::stoll(digits);
  };
  std::optional<int64_t> low = 1, high = INT64_MAX;
  if (text.starts_with(">=")) {
    low = number(text.substr(2));
  } else if (text.starts_with("<=")) {
    high = number(text.substr(2));
  } else if (auto dots = text.find(".."); dots != std::string::npos) {
    low = number(text.substr(0, dots));
    high = number(text.substr(dots + 2));
  } else {
    low = high = number(text);
  }
  if (!low || !high || *low > *high) return std::nullopt;
  return std::pair{*low, *high};
}

// The rest of a line after its first `words` words, trimmed: free text such as a description.
std::string text_after(const std::string& line, int words) {
  size_t at = 0;
  for (int i = 0; i < words; ++i) {
    at = line.find_first_not_of(" \t", at);
    at = line.find_first_of(" \t", at);
  }
  std::string rest = at == std::string::npos ? "" : line.substr(at);
  rest.erase(0, rest.find_first_not_of(" \t"));
  rest.erase(rest.find_last_not_of(" \t\r") + 1);
  return rest;
}

// One `KEY ARGUMENTS...` line of a .target file, with the checks its keys share.
struct TargetLine {
  const std::string& file;
  int number = 0;
  std::string text;  // without its comment
  std::string key;
  std::vector<std::string> arguments;

  [[noreturn]] void fail(const std::string& what) const { throw InputError(fmt::format("{}:{}", file, number), what); }
  void need(size_t low, size_t high, const char* form) const {
    if (arguments.size() < low || arguments.size() > high) fail(fmt::format("expected '{}'", form));
  }
  bool yes_or_no() const {  // `KEY yes` or `KEY no`
    if (arguments.size() != 1 || (arguments[0] != "yes" && arguments[0] != "no"))
      fail(fmt::format("expected '{} yes' or '{} no'", key, key));
    return arguments[0] == "yes";
  }
  std::string domain_of(const std::string& domain) const {
    const std::string normalized = normalize_domain(domain);
    if (!OpRegistry::builtin().table(normalized)) fail(fmt::format("no op table for domain '{}' (targets/*.ops)", domain));
    return normalized;
  }
};

void inherit(Target& target, const Target& parent) {
  target.domains = parent.domains;
  target.max_opsets = parent.max_opsets;
  target.exceptions = parent.exceptions;
  target.local_functions = parent.local_functions;
  target.simplify = parent.simplify;
  target.description = parent.description;
  target.source = parent.source;  // its tables still apply; load-tested is this file's own word
  target.caveats = parent.caveats;
  target.lineage = parent.lineage;
}

// `op DOMAIN OP VERSIONS` or `no-op DOMAIN OP [VERSIONS]`.
Target::OpException op_exception(const TargetLine& line) {
  const bool loads = line.key == "op";
  line.need(loads ? 3 : 2, 4, loads ? "op DOMAIN OP VERSIONS" : "no-op DOMAIN OP [VERSIONS]");
  // Any domain: a runtime loads ops of domains no table describes (TensorRT's plugins).
  Target::OpException exception{normalize_domain(line.arguments[0]), line.arguments[1], 1, INT64_MAX, loads};
  if (line.arguments.size() > 2) {  // ">= 14" may be written in two words
    const std::string text = fmt::format("{}", fmt::join(line.arguments.begin() + 2, line.arguments.end(), " "));
    auto versions = parse_versions(text);
    if (!versions) line.fail(fmt::format("'{}' is not a version range (5, 1..16, >= 14, <= 16)", text));
    std::tie(exception.min, exception.max) = *versions;
  }
  return exception;
}

void apply_line(Target& target, const TargetLine& line, bool first, const std::function<const Target*(const std::string&)>& lookup) {
  const auto& [file, number, text, key, arguments] = line;
  if (key == "inherits") {
    line.need(1, 1, "inherits TARGET");
    if (!first) line.fail("'inherits' must come first");
    const Target* parent = lookup(arguments[0]);
    if (!parent) line.fail(fmt::format("unknown target '{}' to inherit", arguments[0]));
    inherit(target, *parent);
  } else if (key == "description" || key == "source") {
    if (arguments.empty()) line.fail(fmt::format("expected '{} TEXT'", key));
    (key == "description" ? target.description : target.source) = text_after(text, 1);
  } else if (key == "load-tested") {
    target.load_tested = line.yes_or_no();
  } else if (key == "domain") {
    line.need(1, 1, "domain DOMAIN");
    const std::string domain = line.domain_of(arguments[0]);
    if (std::find(target.domains.begin(), target.domains.end(), domain) == target.domains.end()) target.domains.push_back(domain);
  } else if (key == "no-domain") {
    line.need(1, 1, "no-domain DOMAIN");
    std::erase(target.domains, normalize_domain(arguments[0]));
  } else if (key == "max-opset") {
    line.need(2, 2, "max-opset DOMAIN VERSION");
    auto version = parse_versions(arguments[1]);
    if (!version || version->first != version->second) line.fail(fmt::format("'{}' is not an opset version", arguments[1]));
    target.max_opsets[line.domain_of(arguments[0])] = version->first;
  } else if (key == "op" || key == "no-op") {
    target.exceptions.push_back(op_exception(line));
  } else if (key == "caveat") {
    if (arguments.size() < 3) line.fail("expected 'caveat DOMAIN OP TEXT'");
    target.caveats.push_back({normalize_domain(arguments[0]), arguments[1], text_after(text, 3)});
  } else if (key == "local-functions") {
    target.local_functions = line.yes_or_no();
  } else if (key == "simplify") {
    target.simplify = line.yes_or_no();
  } else {
    line.fail(
        fmt::format("unknown key '{}' (inherits, description, source, load-tested, domain, no-domain, max-opset, op, no-op, "
                    "caveat, local-functions, simplify)",
                    key));
  }
}

}  // namespace

Target parse_target(const std::string& name, const std::string& file, std::string_view text,
                    const std::function<const Target*(const std::string&)>& lookup) {
  Target target;
  target.name = name;
  target.file = file;
  std::istringstream lines{std::string(text)};
  bool first = true;
  for (TargetLine line{file, 0, {}, {}, {}}; std::getline(lines, line.text);) {
    ++line.number;
    line.text = line.text.substr(0, line.text.find('#'));
    std::istringstream words(line.text);
    line.arguments.clear();
    if (!(words >> line.key)) continue;
    for (std::string word; words >> word;) line.arguments.push_back(word);
    apply_line(target, line, first, lookup);
    first = false;
  }
  target.lineage.insert(target.lineage.begin(), target.name);
  if (target.domains.empty()) throw InputError(file, "the target loads no domain");
  return target;
}

bool Target::builds_on(std::string_view other) const { return std::find(lineage.begin(), lineage.end(), other) != lineage.end(); }

std::optional<int> Target::max_onnx_opset() const {
  auto it = max_opsets.find("");
  return it == max_opsets.end() ? std::nullopt : std::optional<int>(static_cast<int>(it->second));
}

const Target::Caveat* Target::caveat(std::string_view domain, std::string_view op) const {
  for (auto it = caveats.rbegin(); it != caveats.rend(); ++it) {
    if (it->domain == domain && it->op == op) return &*it;
  }
  return nullptr;
}

std::optional<std::string> Target::refuses(std::string_view domain, std::string_view op, int64_t version) const {
  for (auto it = exceptions.rbegin(); it != exceptions.rend(); ++it) {
    if (it->domain != domain || it->op != op || version < it->min || version > it->max) continue;
    if (it->loads) return std::nullopt;
    return fmt::format("target {} does not load {} at {} opset {}", name, op, display_domain(domain), version);
  }
  if (std::find(domains.begin(), domains.end(), domain) == domains.end()) {
    return fmt::format("domain {} is not loadable by target {}", display_domain(domain), name);
  }
  const OpTable* table = OpRegistry::builtin().table(domain);
  if (!table) return std::nullopt;
  // An import newer than the tables is checked against the newest one (check_model notes it).
  const int newest = table->highest_version();
  const std::string op_type(op);
  if (table->since_version(op_type, static_cast<int>(std::clamp<int64_t>(version, 0, newest)))) return std::nullopt;
  if (!table->knows(op_type)) {
    if (version > newest) return std::nullopt;  // it may have been added after the tables
    return fmt::format("{} has no op {}", display_domain(domain), op);
  }
  return fmt::format("{} does not exist (or is deprecated) at {} opset {}", op, display_domain(domain), version);
}

namespace {

struct TargetRegistry {
  std::map<std::string, std::unique_ptr<Target>> targets;
  std::vector<const Target*> ordered;
  std::mutex mutex;  // files read on demand (batch threads share the registry)

  const Target* find(const std::string& name) {
    auto it = targets.find(name);
    return it == targets.end() ? nullptr : it->second.get();
  }
  const Target& add(Target target) {
    auto owned = std::make_unique<Target>(std::move(target));
    const Target* added = owned.get();
    targets[added->name] = std::move(owned);
    ordered.push_back(added);
    return *added;
  }
};

TargetRegistry& registry() {
  static TargetRegistry* registry = [] {
    auto* built = new TargetRegistry;  // lives as long as the program
    std::map<std::string, std::string_view> files;
    for (const auto& file : embedded_files()) {
      if (file.path.starts_with("targets/") && file.path.ends_with(".target")) {
        files[std::filesystem::path(file.path).stem().string()] = file.contents;
      }
    }
    std::set<std::string> parsing;  // a chain of `inherits` that comes back is an error
    std::function<const Target*(const std::string&)> load = [&](const std::string& name) -> const Target* {
      if (const Target* done = built->find(name)) return done;
      auto file = files.find(name);
      if (file == files.end() || !parsing.insert(name).second) return nullptr;
      const Target* added = &built->add(parse_target(name, "targets/" + name + ".target", file->second, load));
      parsing.erase(name);
      return added;
    };
    for (const auto& [name, contents] : files) load(name);
    return built;
  }();
  return *registry;
}

}  // namespace

const std::vector<const Target*>& all_targets() { return registry().ordered; }

bool Target::simplifies(const std::set<std::string>& only) const {
  return simplify || std::any_of(only.begin(), only.end(), [](const std::string& id) { return id.starts_with("simplify-"); });
}

const Target& find_target(const std::string& name_or_file) {
  TargetRegistry& targets = registry();
  std::lock_guard lock(targets.mutex);
  if (name_or_file.ends_with(".target")) {
    std::ifstream in(name_or_file, std::ios::binary);
    if (!in) throw InputError(name_or_file, "cannot read the target file");
    std::stringstream text;
    text << in.rdbuf();
    const std::string name = std::filesystem::path(name_or_file).stem().string();
    if (const Target* known = targets.find(name); known && known->file != name_or_file) {
      throw InputError(name_or_file, fmt::format("a target named '{}' already exists ({})", name, known->file));
    }
    if (const Target* known = targets.find(name)) return *known;
    return targets.add(parse_target(name, name_or_file, text.str(), [&](const std::string& parent) { return targets.find(parent); }));
  }
  if (const Target* target = targets.find(name_or_file)) return *target;
  std::vector<std::string> names;
  for (const Target* target : targets.ordered) names.push_back(target->name);
  throw UsageError(fmt::format("unknown target '{}' (known: {}; or the path of a .target file)", name_or_file, fmt::join(names, ", ")));
}

namespace {

// Which ai.onnx nodes keep an import above (or, exact, off) `max_opset`, and why: what `rewrite
// --opset N` would have to lower with a rule (its own rules lower many: rules/opset-down).
// (op, why) -> count, first place.
using OpsetBlockers = std::map<std::pair<std::string, std::string>, std::pair<int, std::string>>;

OpsetBlockers nodes_keeping_the_import(const Model& model, const ImportMap& model_imports, int max_opset, bool exact) {
  const OpTable* table = OpRegistry::builtin().table("");
  const auto types = model_types(model.proto);
  std::unique_ptr<NodeTypes> node_types;                                                            // inferred once a node is in the way
  std::map<const onnx::FunctionProto*, int64_t> imported;                                           // ai.onnx import per owner (0: none)
  std::map<const onnx::FunctionProto*, std::map<std::string, const onnx::TensorProto*>> constants;  // per owner
  OpsetBlockers blocked;
  for_each_node(model.proto, [&](const onnx::NodeProto& node, const Place& place) {
    if (!table || !normalize_domain(node.domain()).empty()) return;
    const onnx::FunctionProto* function = place.function();
    auto known = imported.find(function);
    if (known == imported.end()) {
      const ImportMap imports = function ? import_map(function->opset_import()) : model_imports;
      auto it = imports.find("");
      known = imported.emplace(function, it == imports.end() ? 0 : it->second).first;
    }
    if (known->second == max_opset || (!exact && known->second < max_opset) || known->second > std::numeric_limits<int>::max()) return;
    auto values = constants.find(function);
    if (values == constants.end()) values = constants.emplace(function, constant_values(model.proto, ImportOwner{function})).first;
    const OpTable::ConstantOf constant = [&](const std::string& name) -> const onnx::TensorProto* {
      auto it = values->second.find(name);
      return it == values->second.end() ? nullptr : it->second;
    };
    auto why = table->move_blocker(node, static_cast<int>(known->second), max_opset, types, constant);
    if (why) {  // the node's own types can clear it (a float Relu in a model with int64 shapes)
      if (!node_types) node_types = std::make_unique<NodeTypes>(model);
      if (auto own = node_types->of(node)) why = table->move_blocker(node, static_cast<int>(known->second), max_opset, *own, constant);
    }
    if (why) {
      auto& [count, first] = blocked[{node.op_type(), *why}];
      if (count++ == 0) first = place.text();
    }
  });
  return blocked;
}

// The imports above `max_opset` (or, exact, off it) and the nodes that keep them there.
void check_opset_limit(const Model& model, const ImportMap& model_imports, int max_opset, bool exact, CheckReport& report) {
  auto check_import = [&](const ImportMap& imports, const std::string& owner) {
    auto it = imports.find("");
    if (it != imports.end() && it->second > max_opset) {
      report.opset_problems.push_back(
          fmt::format("{} imports ai.onnx opset {}, above --{}opset {}", owner, it->second, exact ? "to-" : "", max_opset));
    }
    if (exact && it != imports.end() && it->second < max_opset) {
      report.opset_problems.push_back(fmt::format("{} imports ai.onnx opset {}, below --to-opset {}", owner, it->second, max_opset));
    }
  };
  check_import(model_imports, "the model");
  for (const auto& function : model.proto.functions()) {
    check_import(import_map(function.opset_import()), fmt::format("function {}.{}", function.domain(), function.name()));
  }
  const OpsetBlockers blocked = nodes_keeping_the_import(model, model_imports, max_opset, exact);
  for (const auto& [key, entry] : blocked) {
    report.opset_problems.push_back(
        fmt::format("  {} x{} ({}) keeps it there as it is: {}", key.first, entry.first, entry.second, key.second));
  }
  if (!blocked.empty()) {
    report.notes.push_back(exact ? fmt::format("`rewrite --to-opset {}` converts many such nodes with rules (rules/opset-up, "
                                               "rules/opset-down); what it can't is named then",
                                               max_opset)
                                 : fmt::format("`rewrite --opset {}` lowers many such nodes with rules (rules/opset-down); what it "
                                               "can't is named then",
                                               max_opset));
  }
}

}  // namespace

CheckReport check_model(const Model& model, const Target& target, std::optional<int> max_opset, bool exact) {
  Checker checker(model, target);
  std::set<std::string> notes;
  const ImportMap model_imports = import_map(model.proto.opset_import());
  note_newer_than_tables(model_imports, target, notes);
  std::map<const onnx::FunctionProto*, ImportMap> body_imports;
  for (const auto& function : model.proto.functions()) {
    const ImportMap function_imports = import_map(function.opset_import());
    note_newer_than_tables(function_imports, target, notes);
    // ONNX Runtime reads a body at the model's import of each domain both import.
    ImportMap& imports = body_imports[&function] = function_imports;
    for (auto& [domain, version] : imports) {
      if (auto it = model_imports.find(domain); it != model_imports.end()) version = it->second;
    }
  }
  for_each_graph(model.proto, [&](const GraphView<true>& view) {
    const onnx::FunctionProto* function = view.place->function();
    const ImportMap& imports = function ? body_imports.at(function) : model_imports;
    const std::string place = tally_place(*view.place);
    for (const auto& node : *view.nodes) checker.check_node(node, imports, place);
  });
  CheckReport report;
  for (auto& [key, entry] : checker.tally.entries) report.unloadable.push_back(std::move(entry));
  for (const auto& [op, seen] : checker.tally.restricted) {
    notes.insert(fmt::format("{}.{} x{} ({}): target {} restricts it: {} (not checked here)", display_domain(op.first), op.second,
                             seen.count, seen.first_place, target.name, seen.caveat->text));
  }
  report.opset_problems = impossible_opset_imports(model.proto);  // no runtime loads those
  // A runtime refuses a model whose import is above what it loads, whether nodes use it or not.
  auto check_cap = [&](const ImportMap& imports, const std::string& owner) {
    for (const auto& [domain, cap] : target.max_opsets) {
      auto it = imports.find(domain);
      if (it == imports.end() || it->second <= cap) continue;
      report.opset_problems.push_back(
          fmt::format("{} imports {} opset {}; target {} loads up to {}", owner, display_domain(domain), it->second, target.name, cap));
    }
  };
  check_cap(model_imports, "the model");
  for (const auto& function : model.proto.functions()) {
    check_cap(import_map(function.opset_import()), fmt::format("function {}.{}", function.domain(), function.name()));
  }
  report.notes.assign(notes.begin(), notes.end());
  if (max_opset) check_opset_limit(model, model_imports, *max_opset, exact, report);
  return report;
}

}  // namespace onnx_rewrite
