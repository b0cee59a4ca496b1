// onnx_rewrite._core: the library for Python (pybind11). It binds what the umbrella header
// <onnx_rewrite/onnx_rewrite.h> offers a program embedding the library — load, rewrite, check,
// write, rule sets, targets, errors — and, for `python3 -m onnx_rewrite`, the command line
// itself (src/cli/main.cc is compiled into the module). The package's Python half
// (onnx_rewrite/__init__.py) turns what these functions return (plain dicts, lists and tuples)
// into its documented types; python/README.md says why the work is split so.
//
// Every call that loads, rewrites, checks, serializes or writes a model runs without the GIL: a
// rewrite of a big graph takes seconds, and other Python threads go on meanwhile.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <onnx_rewrite/onnx_rewrite.h>

#include "cli/commands.h"  // run_command_line: the tool's main
#include "engine/active_rules.h"  // unknown --only/--skip ids refused before any work, as the CLI does

namespace py = pybind11;

namespace onnx_rewrite {
namespace {

// A model the library holds: loaded from a file (its weights stay there, read when written) or
// parsed from bytes. One lock per model: a rewrite changes it, and Python threads may share it.
class HeldModel {
 public:
  explicit HeldModel(Model model) : model_(std::move(model)) {}
  Model& model() { return model_; }
  std::mutex& lock() { return lock_; }

 private:
  Model model_;
  std::mutex lock_;
};

// Rules, shared and never changed once made: a rewrite reads them without the GIL.
struct HeldRules {
  std::shared_ptr<const RuleSet> rules;
};

// Text from the library as Python str: names in a model or on disk need not be UTF-8, and
// undecodable bytes come through as os.fsdecode gives them (surrogate escapes) instead of failing.
py::str text(const std::string& bytes) {
  PyObject* decoded = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "surrogateescape");
  if (!decoded) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(decoded);
}

py::list texts(const std::vector<std::string>& strings) {
  py::list list;
  for (const auto& string : strings) list.append(text(string));
  return list;
}

// ---- Errors --------------------------------------------------------------------------------

// The package's exception types live in onnx_rewrite/_errors.py (documented Python classes);
// the library's errors become them with the CLI's message, file and exit code.
void raise_python_error(const char* type, const py::object& file, const std::string& message) {
  py::object error_type = py::module_::import("onnx_rewrite._errors").attr(type);
  py::object error = error_type(text(message), file);
  PyErr_SetObject(error_type.ptr(), error.ptr());
}

void translate_errors(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const InputError& e) {
    raise_python_error("InputError", text(e.file()), e.what());
  } catch (const UsageError& e) {
    raise_python_error("UsageError", py::none(), e.what());
  }
  // Anything else keeps pybind11's own translation (MemoryError for bad_alloc, RuntimeError, ...).
}

// ---- Rules and targets ---------------------------------------------------------------------

py::list rule_list(const RuleSet& rules) {
  py::list list;
  for (const auto& rule : rules.rules) {
    std::set<std::pair<std::string, std::string>> anchors;
    for (const auto& pattern : rule->patterns) anchors.insert({pattern.anchor().domain, pattern.anchor().op_type});
    py::list matches;
    for (const auto& [domain, op_type] : anchors) matches.append(py::make_tuple(text(domain), text(op_type)));
    py::dict item;
    item["id"] = text(rule->id);
    item["description"] = text(rule->description);
    item["targets"] = texts(rule->targets);
    item["fuse_targets"] = texts(rule->fuse_targets);
    item["priority"] = rule->priority;
    item["matches"] = matches;
    item["file"] = text(rule->file);
    item["line"] = rule->line;
    list.append(item);
  }
  return list;
}

HeldRules builtin_rules() {
  // Parsed once per process (every rule file compiled in), then shared by every rewrite. With the
  // GIL held: a thread waiting for this initialization while holding it would never let go.
  static const std::shared_ptr<const RuleSet> builtin = [] {
    auto rules = std::make_shared<RuleSet>();
    rules->load_builtin();
    return rules;
  }();
  return {builtin};
}

HeldRules rules_from_path(const std::string& path) {
  auto rules = std::make_shared<RuleSet>();
  py::gil_scoped_release release;
  rules->load_path(path);
  return {rules};
}

HeldRules rules_from_text(const std::string& rule_text, const std::string& name) {
  auto rules = std::make_shared<RuleSet>();
  py::gil_scoped_release release;
  rules->load_text(rule_text, name);
  return {rules};
}

// One set holding the rules of several; a rule id used twice is an InputError, as with --rules.
HeldRules combine_rules(const std::vector<HeldRules>& sets) {
  auto rules = std::make_shared<RuleSet>();
  for (const auto& set : sets) rules->add(set.rules->rules);
  return {rules};
}

py::dict target_dict(const Target& target) {
  py::dict caps;
  for (const auto& [domain, version] : target.max_opsets) caps[text(domain)] = version;
  py::dict item;
  item["name"] = text(target.name);
  item["description"] = text(target.description);
  item["builds_on"] = texts(std::vector<std::string>(target.lineage.begin() + std::min<size_t>(1, target.lineage.size()), target.lineage.end()));
  item["domains"] = texts(target.domains);
  item["max_opsets"] = caps;
  item["local_functions"] = target.local_functions;
  item["source"] = text(target.source);
  item["load_tested"] = target.load_tested;
  item["file"] = text(target.file);
  return item;
}

py::list target_list() {
  py::list list;
  for (const Target* target : all_targets()) list.append(target_dict(*target));
  return list;
}

// Throws UsageError for an unknown name, InputError for a bad .target file.
py::dict describe_target(const std::string& name_or_file) {
  const Target* target = nullptr;
  {
    py::gil_scoped_release release;
    target = &find_target(name_or_file);
  }
  return target_dict(*target);
}

// ---- Models --------------------------------------------------------------------------------

// Where a model comes from: a path (as bytes, os.fsencode's) or serialized bytes, with the name
// errors give it.
struct Source {
  std::string bytes;
  bool is_path = false;
  std::string name;
};

Source source_of(const py::bytes& data, bool is_path, const std::string& name) {
  // Copied while the GIL is held: the work on it goes on without.
  return Source{std::string(data), is_path, name};
}

// Loaded as the CLI loads it: from a file, weights left there (graph_only: their files may be
// missing, as for `check`), or parsed from bytes (external data refused: it needs a directory).
std::shared_ptr<HeldModel> open_model(const Source& source, bool graph_only) {
  if (!source.is_path) return std::make_shared<HeldModel>(parse_model(source.bytes, source.name));
  LoadOptions options;
  options.allow_missing_external_data = graph_only;
  return std::make_shared<HeldModel>(load_model(source.bytes, options));
}

py::bytes serialize(HeldModel& held) {
  std::string bytes;
  {
    py::gil_scoped_release release;
    std::lock_guard lock(held.lock());
    bytes = serialize_model(held.model());
  }
  return py::bytes(bytes);
}

void write_held(HeldModel& held, const std::string& path) {
  py::gil_scoped_release release;
  std::lock_guard lock(held.lock());
  write_model(held.model(), path);
}

py::str model_path(HeldModel& held) { return text(held.model().path.string()); }

// ---- Check ---------------------------------------------------------------------------------

py::dict check_dict(const CheckReport& report) {
  py::list unloadable;
  for (const auto& entry : report.unloadable) {
    py::dict item;
    item["domain"] = text(entry.domain);
    item["op_type"] = text(entry.op_type);
    item["aten_operator"] = text(entry.aten_operator);
    item["where"] = text(entry.place);
    item["reason"] = text(entry.reason);
    item["count"] = entry.count;
    unloadable.append(item);
  }
  py::dict result;
  result["ok"] = report.ok();
  result["unloadable"] = unloadable;
  result["opset_problems"] = texts(report.opset_problems);
  result["notes"] = texts(report.notes);
  return result;
}

// A model a runtime would refuse (a cycle, a value computed twice or by nothing) is bad input, as
// for the CLI: rewriting or checking it would only hide that.
InputCheck refuse_invalid(const Model& model) {
  InputCheck input = check_input(model.proto);
  if (input.problem) throw InputError(model.path.string(), *input.problem);
  return input;
}

// The note `check` gives a model whose weights' files are not there (src/cli/outcome.cc says the
// same; python/tests/test_cli_parity.py compares the two).
std::string missing_data_note(const Model& model) {
  std::string names;
  for (const auto& location : model.missing_external_data) names += (names.empty() ? "'" : ", '") + printable(location) + "'";
  const bool one = model.missing_external_data.size() == 1;
  return std::string("the external-data file") + (one ? " " : "s ") + names + (one ? " is" : " are") +
         " missing: the weights were not needed here, but the model can't run (or be rewritten) without them";
}

// `onnx-rewrite check`: what the target can't load, in the CLI's order (the target first, then
// the model, loaded without its weights, whose files may be missing).
py::dict check(const py::bytes& data, bool is_path, const std::string& name, const std::string& target_name,
               std::optional<int> max_opset, bool exact) {
  const Source source = source_of(data, is_path, name);
  CheckReport report;
  {
    py::gil_scoped_release release;
    const Target& target = find_target(target_name);
    const auto held = open_model(source, true);
    const Model& model = held->model();
    refuse_invalid(model);
    report = check_model(model, target, max_opset, exact);
    if (!model.missing_external_data.empty()) report.notes.push_back(missing_data_note(model));
  }
  return check_dict(report);
}

// ---- Rewrite -------------------------------------------------------------------------------

py::list op_counts(const OpCounts& counts) {
  py::list list;
  for (const auto& [key, count] : counts) list.append(py::make_tuple(text(key.first), text(key.second), count));
  return list;
}

// The CLI's check before any work (src/cli/outcome.cc: require_directory_of), in its words.
void require_output_directory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!std::filesystem::is_directory(parent.empty() ? std::filesystem::path(".") : parent, ec)) {
    throw UsageError(path + ": output directory '" + parent.string() + "' does not exist");
  }
}

// `onnx-rewrite rewrite` (src/cli/rewrite.cc and process() in src/cli/outcome.cc), step by step
// in the same order: the target, what it implies where the caller is silent (inlining for
// runtimes that don't run model-local functions, its highest opset), the rule ids, the output's
// directory, the model, its validity, the rewrite, the check, provenance, the output written
// atomically (external data beside it). Returns the model as rewritten and what happened.
py::tuple rewrite(const py::bytes& data, bool is_path, const std::string& name, const HeldRules& rules,
                  const std::string& target_name, std::optional<int> max_opset, bool exact_opset,
                  const std::set<std::string>& only, const std::set<std::string>& skip, std::optional<bool> inline_functions,
                  bool fuse, bool canonicalize, std::optional<bool> simplify, int max_rounds, std::optional<int64_t> ir_version, const std::string& explain,
                  bool provenance, const InputShapes& input_shapes, std::optional<std::string> output) {
  const Source source = source_of(data, is_path, name);
  RewriteOptions options;
  options.input_shapes = input_shapes;
  options.target = target_name;
  options.max_opset = max_opset;
  options.exact_opset = exact_opset;
  options.only = only;
  options.skip = skip;
  options.fuse = fuse;
  options.canonicalize = canonicalize;
  options.max_rounds = max_rounds;
  options.ir_version = ir_version;
  options.explain = explain;
  std::ostringstream explanation;
  if (!explain.empty()) options.explain_out = &explanation;
  std::shared_ptr<HeldModel> held;
  RewriteResult result;
  CheckReport report;
  {
    py::gil_scoped_release release;
    const Target& target = find_target(options.target);
    options.inline_functions = inline_functions.value_or(!target.local_functions);
    options.simplify = simplify.value_or(target.simplifies(options.only));
    if (auto cap = target.max_onnx_opset()) options.max_opset = std::min(options.max_opset.value_or(*cap), *cap);
    active_rules(*rules.rules, options);  // unknown only/skip ids are usage errors, before any work
    if (output) require_output_directory(*output);
    held = open_model(source, false);
    Model& model = held->model();
    const InputCheck checked = refuse_invalid(model);
    if (const auto opsets = impossible_opset_imports(model.proto); !opsets.empty()) throw InputError(model.path.string(), opsets.front());
    result = rewrite_model(model, *rules.rules, options, &checked);
    report = check_model(model, target, options.max_opset, options.exact_opset);
    if (result.ir_version_problem) report.opset_problems.push_back(*result.ir_version_problem);
    if (provenance && result.changed()) record_provenance(model, result, options);
    if (output) write_model(model, *output);
  }
  py::dict rules_fired;
  for (const auto& [id, stats] : result.rules) rules_fired[text(id)] = py::make_tuple(stats.matches, stats.nodes_removed, stats.nodes_added);
  py::dict opset_changes;
  for (const auto& [domain, change] : result.opset_changes) opset_changes[text(domain)] = py::make_tuple(change.first, change.second);
  py::dict out;
  out["rules"] = rules_fired;
  out["ops_before"] = op_counts(result.before);
  out["ops_after"] = op_counts(result.after);
  out["rounds"] = result.rounds;
  out["nodes_tried"] = result.nodes_tried;
  out["functions_inlined"] = result.functions_inlined;
  out["opset_changes"] = opset_changes;
  out["ir_version_change"] = result.ir_change ? py::object(py::make_tuple(result.ir_change->first, result.ir_change->second)) : py::none();
  out["notes"] = texts(result.notes);
  out["changed"] = result.changed();
  out["check"] = check_dict(report);
  out["status"] = !report.ok() ? "target-not-met" : result.changed() ? "rewritten" : "unchanged";
  out["explanation"] = text(explanation.str());
  return py::make_tuple(held, out);
}

// `verify ORIGINAL REWRITTEN --json` in this process: the report's JSON text, and the message of
// the VerifyError the CLI exits 4 with ("" when the rewrite holds).
py::tuple verify(const std::string& original, const std::string& rewritten, const InputShapes& input_shapes,
                 uint64_t seed, std::optional<double> rtol, std::optional<double> atol, const std::string& runtime,
                 const std::map<std::string, std::string>& inputs) {
  VerifyCommand command;
  command.original = original;
  command.rewritten = rewritten;
  command.input_shapes = input_shapes;
  command.options.runtime = runtime;
  command.options.seed = seed;
  command.options.tolerance = {rtol, atol};
  for (const auto& [input, file] : inputs) command.options.input_files[input] = file;
  command.json = true;
  std::ostringstream report;
  std::string failure;
  {
    py::gil_scoped_release release;
    try {
      run_verify(command, report);
    } catch (const VerifyError& e) {
      failure = e.what();
    }
  }
  return py::make_tuple(text(report.str()), text(failure));
}

// ---- The command line ----------------------------------------------------------------------

// `python3 -m onnx_rewrite ARGS...`: the tool's own main, in this process (argv[0] first).
int run_cli(const std::vector<std::string>& arguments) {
  std::vector<std::string> copies = arguments;
  std::vector<char*> argv;
  for (auto& argument : copies) argv.push_back(argument.data());
  argv.push_back(nullptr);
  py::gil_scoped_release release;
  const int code = run_command_line(static_cast<int>(copies.size()), argv.data());
  std::cout.flush();
  std::cerr.flush();
  return code;
}

}  // namespace
}  // namespace onnx_rewrite

PYBIND11_MODULE(_core, m) {
  using namespace onnx_rewrite;
  m.doc() = "The onnx-rewrite library bound for the onnx_rewrite package, whose API this is not: use onnx_rewrite.";
  m.attr("__version__") = ONNX_REWRITE_VERSION;
  py::register_exception_translator(&translate_errors);

  py::class_<HeldModel, std::shared_ptr<HeldModel>>(m, "Model", "A model held by the library.")
      .def_property_readonly("path", &model_path, "The path it was loaded from, or the name it was parsed under.");
  py::class_<HeldRules>(m, "Rules", "A set of rules held by the library.")
      .def("__len__", [](const HeldRules& held) { return held.rules->rules.size(); })
      .def("describe", [](const HeldRules& held) { return rule_list(*held.rules); }, "The rules as dicts.");

  m.def("builtin_rules", &builtin_rules, "The rules compiled into the library.");
  m.def("rules_from_path", &rules_from_path, py::arg("path"), "Rules from a .rules file or a directory of them.");
  m.def("rules_from_text", &rules_from_text, py::arg("text"), py::arg("name"), "Rules from text; `name` appears in errors.");
  m.def("combine_rules", &combine_rules, py::arg("sets"), "One set holding the rules of several.");
  m.def("targets", &target_list, "The targets compiled in, and those read from files so far.");
  m.def("find_target", &describe_target, py::arg("name_or_file"), "A target by name or .target file.");
  m.def("serialize", &serialize, py::arg("model"), "The model's bytes, as write would write them.");
  m.def("write", &write_held, py::arg("model"), py::arg("path"), "Write atomically, external data beside it.");
  m.def("check", &check, py::arg("source"), py::arg("is_path"), py::arg("name"), py::arg("target"), py::arg("max_opset"),
        py::arg("exact"), "What the target can't load.");
  m.def("rewrite", &rewrite, py::arg("source"), py::arg("is_path"), py::arg("name"), py::arg("rules"), py::arg("target"),
        py::arg("max_opset"), py::arg("exact_opset"), py::arg("only"), py::arg("skip"), py::arg("inline_functions"),
        py::arg("fuse"), py::arg("canonicalize"), py::arg("simplify"), py::arg("max_rounds"), py::arg("ir_version"), py::arg("explain"),
        py::arg("provenance"), py::arg("input_shapes"), py::arg("output"), "Rewrite for the target, check, and write if asked.");
  m.def("verify", &verify, py::arg("original"), py::arg("rewritten"), py::arg("input_shapes"), py::arg("seed"), py::arg("rtol"),
        py::arg("atol"), py::arg("runtime"), py::arg("inputs"), "Run both models in ONNX Runtime and compare: (JSON report, failure).");
  m.def("run_cli", &run_cli, py::arg("argv"), "Run the onnx-rewrite command line in this process; returns its exit code.");
}
