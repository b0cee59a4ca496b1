#include "onnx_rewrite/target.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "graph/imports.h"
#include "graph/walk.h"
#include "rules/embedded.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/verify.h"
#include "onnx_rewrite/opset.h"

namespace onnx_rewrite {
namespace {

// targets/NAME.target: "description TEXT", "domain NAME" lines, "local-functions yes|no".
Target parse_target(std::string_view path, std::string_view text) {
  Target target;
  target.name = std::string(path.substr(8, path.size() - 8 - 7));
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string key;
    if (!(words >> key)) continue;
    std::string rest;
    std::getline(words >> std::ws, rest);
    if (key == "description") target.description = rest;
    else if (key == "domain") target.domains.push_back(normalize_domain(rest));
    else if (key == "local-functions") target.local_functions = rest == "yes";
    else throw std::logic_error(fmt::format("{}: unknown key '{}'", path, key));
  }
  return target;
}

// An ATen node's op is in its `operator` attribute: "ATen" alone says nothing.
std::string aten_operator(const onnx::NodeProto& node) {
  if (node.op_type() != "ATen") return {};
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == "operator") return attribute.s();
  }
  return {};
}

struct Tally {
  std::map<std::tuple<std::string, std::string, std::string, std::string>, Unloadable> entries;

  void add(const onnx::NodeProto& node, const std::string& place, const std::string& reason) {
    const std::string op = aten_operator(node);
    auto& entry = entries[{node.domain(), node.op_type(), op, place}];
    if (entry.count == 0) entry = {node.domain(), node.op_type(), op, place, reason, 0};
    ++entry.count;
  }
};

class Checker {
 public:
  Checker(const Model& model, const Target& target) : target_(target) {
    for (const auto& function : model.proto.functions()) local_functions_.insert({normalize_domain(function.domain()), function.name()});
  }

  void check_node(const onnx::NodeProto& node, const ImportMap& imports, const std::string& place) {
    const std::string domain = normalize_domain(node.domain());
    if (local_functions_.count({domain, node.op_type()})) {
      if (!target_.local_functions) tally.add(node, place, "calls a model-local function, which this target does not run");
      return;
    }
    if (std::find(target_.domains.begin(), target_.domains.end(), domain) == target_.domains.end()) {
      tally.add(node, place, fmt::format("domain {} is not loadable by target {}", display_domain(domain), target_.name));
      return;
    }
    const OpTable* table = OpRegistry::builtin().table(domain);
    auto import = imports.find(domain);
    if (import == imports.end()) {
      tally.add(node, place, fmt::format("the model does not import domain {}", display_domain(domain)));
      return;
    }
    const int64_t version = import->second;
    if (!table) return;
    // An import newer than the tables is checked against the newest one (note_newer_than_tables).
    const int newest = table->highest_version();
    if (table->since_version(node.op_type(), static_cast<int>(std::clamp<int64_t>(version, 0, newest)))) return;
    if (!table->knows(node.op_type())) {
      if (version > newest) return;  // it may have been added after the tables
      tally.add(node, place, fmt::format("{} has no op {}", display_domain(domain), node.op_type()));
    } else {
      tally.add(node, place, fmt::format("{} does not exist (or is deprecated) at {} opset {}", node.op_type(),
                                         display_domain(domain), version));
    }
  }

  Tally tally;

 private:
  const Target& target_;
  std::set<std::pair<std::string, std::string>> local_functions_;
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
    notes.insert(fmt::format("{0} opset {1} is newer than the tables: nodes were checked against {0} opset {2}, "
                             "and ops added or changed after it are not verified",
                             display_domain(domain), version, table->highest_version()));
  }
}

}  // namespace

const std::vector<Target>& all_targets() {
  static const std::vector<Target> targets = [] {
    std::vector<Target> parsed;
    for (const auto& file : embedded_files()) {
      if (file.path.starts_with("targets/") && file.path.ends_with(".target")) parsed.push_back(parse_target(file.path, file.contents));
    }
    return parsed;
  }();
  return targets;
}

const Target& find_target(const std::string& name) {
  for (const auto& target : all_targets()) {
    if (target.name == name) return target;
  }
  std::vector<std::string> names;
  for (const auto& target : all_targets()) names.push_back(target.name);
  throw UsageError(fmt::format("unknown target '{}' (known: {})", name, fmt::join(names, ", ")));
}

CheckReport check_model(const Model& model, const Target& target, std::optional<int> max_opset) {
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
  report.opset_problems = impossible_opset_imports(model.proto);  // no runtime loads those
  report.notes.assign(notes.begin(), notes.end());
  if (max_opset) {
    auto check_import = [&](const ImportMap& imports, const std::string& owner) {
      auto it = imports.find("");
      if (it != imports.end() && it->second > *max_opset) {
        report.opset_problems.push_back(fmt::format("{} imports ai.onnx opset {}, above --opset {}", owner, it->second, *max_opset));
      }
    };
    check_import(model_imports, "the model");
    for (const auto& function : model.proto.functions()) {
      check_import(import_map(function.opset_import()), fmt::format("function {}.{}", function.domain(), function.name()));
    }
  }
  return report;
}

}  // namespace onnx_rewrite
