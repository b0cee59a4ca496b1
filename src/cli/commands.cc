#include "cli/commands.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "onnx_rewrite/error.h"
#include "cli/json.h"
#include "cli/html.h"
#include "cli/junit.h"
#include "cli/outcome.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/opset.h"
#include "onnx_rewrite/rule_example.h"
#include "onnx_rewrite/scope.h"
#include "onnx_rewrite/target.h"
#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/verify.h"
#include "graph/walk.h"

#if defined(__SANITIZE_ADDRESS__)  // GCC; clang: __has_feature(address_sanitizer)
#define ONNX_REWRITE_LEAK_CHECKED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ONNX_REWRITE_LEAK_CHECKED 1
#endif
#endif
#ifdef ONNX_REWRITE_LEAK_CHECKED
#include <sanitizer/lsan_interface.h>
#endif

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

bool g_leave_models_to_exit = false;

// A loaded model that lives until the command ends. When the process exits right after (the
// CLI), it is left to the operating system: freeing millions of protobuf objects one by one
// costs seconds on huge graphs and buys nothing.
class LoadedModel {
 public:
  explicit LoadedModel(const std::string& path, bool may_leave = true, const LoadOptions& options = {})
      : model_(std::make_unique<Model>(load_model(path, options))), leave_(may_leave && g_leave_models_to_exit) {}
  ~LoadedModel() {
    if (!leave_) return;
    [[maybe_unused]] Model* left = model_.release();
#ifdef ONNX_REWRITE_LEAK_CHECKED
    __lsan_ignore_object(left);  // left on purpose (and all it holds): not a leak to report
#endif
  }
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  Model& operator*() { return *model_; }

 private:
  std::unique_ptr<Model> model_;
  bool leave_;
};

}  // namespace

void leave_models_to_process_exit() { g_leave_models_to_exit = true; }

RuleSet RuleSources::load() const {
  RuleSet rules;
  if (builtin) rules.load_builtin();
  for (const auto& path : paths) rules.load_path(path);
  return rules;
}

namespace {

std::string op_name(const OpKey& key) { return display_domain(key.first) + "." + key.second; }

}  // namespace

// ---- Errors as JSON ------------------------------------------------------------------------

ErrorInfo describe_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const InputError& e) {
    return {e.file(), e.what(), ExitCode::kBadInput};
  } catch (const UsageError& e) {
    return {"", e.what(), ExitCode::kUsage};
  } catch (const std::bad_alloc&) {
    return {"", "out of memory", ExitCode::kBadInput};
  } catch (const std::exception& e) {
    return {"", std::string("internal error: ") + e.what(), ExitCode::kBadInput};
  } catch (...) {
    return {"", "internal error", ExitCode::kBadInput};
  }
}

void write_error_json(JsonWriter& json, const ErrorInfo& error) {
  json.begin_object();
  json.key("file");
  if (error.file.empty()) json.null();
  else json.value(error.file);
  json.key("message").value(error.message);
  json.key("exit_code").value(static_cast<int>(error.exit_code));
  json.end_object();
}

namespace {

// ---- Reports -------------------------------------------------------------------------------

// Rules anchored at an op a target can't load (for ATen, at the same operator): what `rewrite`
// would use, or where to go when only other targets' rules cover it.
std::vector<const Rule*> rules_covering(const RuleSet& rules, const Unloadable& entry) {
  std::vector<const Rule*> covering;
  for (const auto& rule : rules.rules) {
    for (const auto& pattern : rule->patterns) {
      const auto& anchor = pattern.anchor();
      if (anchor.domain != normalize_domain(entry.domain) || anchor.op_type != entry.op_type) continue;
      bool other_operator = false;
      for (const auto& attribute : anchor.attributes) {
        if (attribute.name == "operator" && attribute.literal) other_operator = attribute.literal->s() != entry.aten_operator;
      }
      if (other_operator) continue;
      covering.push_back(rule.get());
      break;
    }
  }
  return covering;
}

std::vector<std::string> rules_for_other_targets(const RuleSet& rules, const Unloadable& entry, const Target& target) {
  std::vector<std::string> hints;
  for (const Rule* rule : rules_covering(rules, entry)) {
    if (!rule->serves(target)) hints.push_back(fmt::format("{} (--target {})", rule->id, fmt::join(rule->targets, "|")));
  }
  return hints;
}

// "; rewrite covers it with RULE" / "; no built-in rule covers it": check's answer to "and now?".
std::string coverage_text(const RuleSet& rules, const Unloadable& entry, const Target& target) {
  std::vector<std::string> own;
  for (const Rule* rule : rules_covering(rules, entry)) {
    if (rule->serves(target)) own.push_back(rule->id);
  }
  if (!own.empty()) return fmt::format("; `rewrite --target {}` covers it: {}", target.name, fmt::join(own, ", "));
  const auto others = rules_for_other_targets(rules, entry, target);
  if (!others.empty()) return fmt::format("; only rules for another target cover it: {}", fmt::join(others, ", "));
  return "; no rule covers it";
}

// The rules covering what a target can't load, where the caller has them (check does; a rewrite's
// report says what the rules it ran left).
struct Coverage {
  const RuleSet& rules;
  const Target& target;
};

void write_check_json(JsonWriter& json, const CheckReport& report, const Coverage* coverage = nullptr) {
  json.begin_object();
  json.key("ok").value(report.ok());
  json.key("unloadable").begin_array();
  for (const auto& entry : report.unloadable) {
    json.begin_object();
    json.key("domain").value(display_domain(entry.domain));
    json.key("op_type").value(entry.op_type);
    if (!entry.aten_operator.empty()) json.key("aten_operator").value(entry.aten_operator);
    json.key("count").value(entry.count);
    json.key("where").value(entry.place);
    json.key("reason").value(entry.reason);
    if (coverage) {
      json.key("rules").begin_array();
      for (const Rule* rule : rules_covering(coverage->rules, entry)) {
        json.begin_object().key("id").value(rule->id).key("targets").strings(rule->targets);
        json.key("serves_target").value(rule->serves(coverage->target)).end_object();
      }
      json.end_array();
    }
    json.end_object();
  }
  json.end_array();
  json.key("opset_problems").strings(report.opset_problems);
  json.key("notes").strings(report.notes);
  json.end_object();
}

std::string op_text(const Unloadable& entry) {
  std::string text = display_domain(entry.domain) + "." + entry.op_type;
  if (!entry.aten_operator.empty()) text += " (operator " + entry.aten_operator + ")";
  return text;
}

void print_unmet(const Target& target, const CheckReport& report, const RuleSet& rules, std::ostream& err) {
  int kinds = static_cast<int>(report.unloadable.size());
  err << fmt::format("onnx-rewrite: target {} not met", target.name);
  if (kinds) err << fmt::format(": {} kind{} of node it can't load", kinds, kinds == 1 ? "" : "s");
  err << "\n";
  for (const auto& entry : report.unloadable) {
    err << fmt::format("  {} x{} ({}): {}", op_text(entry), entry.count, entry.place, entry.reason);
    const auto hints = rules_for_other_targets(rules, entry, target);
    if (!hints.empty()) err << fmt::format("; rules for this op serve another target: {}", fmt::join(hints, ", "));
    err << "\n";
  }
  for (const auto& problem : report.opset_problems) err << "  " << problem << "\n";
}

}  // namespace

// A failed model's error for a line that already names the model: the file only when it is another.
std::string error_text(const ModelOutcome& outcome) {
  if (!outcome.error) return "";
  const ErrorInfo& error = *outcome.error;
  return error.file.empty() || error.file == outcome.input ? error.message : error.file + ": " + error.message;
}

int64_t node_total(const OpCounts& counts) {
  int64_t total = 0;
  for (const auto& [key, count] : counts) total += count;
  return total;
}

void write_options_json(JsonWriter& json, const RewriteOptions& options, const RuleSources& rules, bool provenance) {
  json.begin_object();
  json.key("target").value(options.target);
  json.key("opset");
  if (options.max_opset) json.value(*options.max_opset);
  else json.null();
  json.key("exact_opset").value(options.exact_opset);
  json.key("only").strings({options.only.begin(), options.only.end()});
  json.key("skip").strings({options.skip.begin(), options.skip.end()});
  json.key("builtin_rules").value(rules.builtin);
  json.key("rules").strings(rules.paths);
  json.key("fuse").value(options.fuse);
  json.key("ir_version");
  if (options.ir_version) json.value(*options.ir_version);
  else json.null();
  json.key("canonicalize").value(options.canonicalize);
  json.key("max_rounds").value(options.max_rounds);
  json.key("provenance").value(provenance);
  json.end_object();
}

void write_run_json(JsonWriter& json, const RewriteOptions& options, const RuleSources& rules, bool provenance, bool dry_run) {
  json.key("tool").begin_object().key("name").value("onnx-rewrite").key("version").value(ONNX_REWRITE_VERSION).end_object();
  json.key("options");
  write_options_json(json, options, rules, provenance);
  json.key("dry_run").value(dry_run);
}

namespace {

void write_outcome_fields(JsonWriter& json, const ModelOutcome& outcome, const std::string& target) {
  json.key("model").value(outcome.input);
  json.key("output").value(outcome.output);
  json.key("target").value(target);
  json.key("status").value(outcome.status);
  if (outcome.error) {
    json.key("error");
    write_error_json(json, *outcome.error);
    return;
  }
  json.key("timing").begin_object();
  json.key("load_seconds").value(outcome.timing.load);
  json.key("rewrite_seconds").value(outcome.timing.rewrite);
  json.key("write_seconds").value(outcome.timing.write);
  json.key("total_seconds").value(outcome.timing.total());
  json.end_object();
  json.key("nodes").begin_object();
  json.key("before").value(node_total(outcome.result.before));
  json.key("after").value(node_total(outcome.result.after));
  json.end_object();
  json.key("changed").value(outcome.result.changed());
  json.key("rounds").value(outcome.result.rounds);
  json.key("nodes_tried").begin_array();
  for (int count : outcome.result.nodes_tried) json.value(count);
  json.end_array();
  json.key("functions_inlined").value(outcome.result.functions_inlined);
  json.key("rules").begin_array();
  for (const auto& [id, stats] : outcome.result.rules) {
    json.begin_object();
    json.key("id").value(id);
    json.key("matches").value(stats.matches);
    json.key("nodes_removed").value(stats.nodes_removed);
    json.key("nodes_added").value(stats.nodes_added);
    json.end_object();
  }
  json.end_array();
  json.key("ops").begin_array();
  std::set<OpKey> keys;
  for (const auto& [key, count] : outcome.result.before) keys.insert(key);
  for (const auto& [key, count] : outcome.result.after) keys.insert(key);
  for (const auto& key : keys) {
    auto before = outcome.result.before.find(key);
    auto after = outcome.result.after.find(key);
    json.begin_object();
    json.key("domain").value(display_domain(key.first));
    json.key("op_type").value(key.second);
    json.key("before").value(before == outcome.result.before.end() ? 0 : before->second);
    json.key("after").value(after == outcome.result.after.end() ? 0 : after->second);
    json.end_object();
  }
  json.end_array();
  json.key("opset_changes").begin_array();
  for (const auto& [domain, change] : outcome.result.opset_changes) {
    json.begin_object();
    json.key("domain").value(display_domain(domain));
    json.key("before").value(change.first);
    json.key("after").value(change.second);
    json.end_object();
  }
  json.end_array();
  if (outcome.result.ir_change) {
    json.key("ir_version").begin_object().key("before").value(outcome.result.ir_change->first);
    json.key("after").value(outcome.result.ir_change->second).end_object();
  }
  json.key("notes").strings(outcome.result.notes);
  json.key("check");
  write_check_json(json, outcome.check);
}

}  // namespace

void write_outcome_json(JsonWriter& json, const ModelOutcome& outcome, const std::string& target) {
  json.begin_object();
  write_outcome_fields(json, outcome, target);
  json.end_object();
}

void print_summary(const ModelOutcome& outcome, const std::string& target, bool dry_run, std::ostream& out) {
  const RewriteResult& result = outcome.result;
  const std::string destination = dry_run ? "(dry run, nothing written)" : outcome.output;
  if (!result.changed()) {
    out << fmt::format("{} -> {}: no rule applies; the output is an exact copy\n", outcome.input, destination);
  } else {
    out << fmt::format("{} -> {}\n", outcome.input, destination);
    if (result.functions_inlined) out << fmt::format("  inlined {} call(s) to model-local functions\n", result.functions_inlined);
    for (const auto& [id, stats] : result.rules) {
      out << fmt::format("  rule {}: {} match{} ({} node{} replaced by {})\n", id, stats.matches, stats.matches == 1 ? "" : "es",
                         stats.nodes_removed, stats.nodes_removed == 1 ? "" : "s", stats.nodes_added);
    }
    std::vector<std::string> lines;
    std::set<OpKey> keys;
    for (const auto& [key, count] : result.before) keys.insert(key);
    for (const auto& [key, count] : result.after) keys.insert(key);
    size_t width = 0;
    for (const auto& key : keys) width = std::max(width, op_name(key).size());
    for (const auto& key : keys) {
      auto before = result.before.find(key);
      auto after = result.after.find(key);
      const int b = before == result.before.end() ? 0 : before->second;
      const int a = after == result.after.end() ? 0 : after->second;
      if (a != b) lines.push_back(fmt::format("    {:<{}}  {:>5} -> {}", op_name(key), width, b, a));
    }
    if (!lines.empty()) out << "  ops (before -> after):\n" << fmt::format("{}\n", fmt::join(lines, "\n"));
    for (const auto& [domain, change] : result.opset_changes) {
      const auto text = [](int version) { return version ? std::to_string(version) : std::string("(none)"); };
      out << fmt::format("  opset import {}: {} -> {}\n", display_domain(domain), text(change.first), text(change.second));
    }
    if (result.ir_change) out << fmt::format("  IR version: {} -> {}\n", result.ir_change->first, result.ir_change->second);
  }
  for (const auto& note : result.notes) out << "  note: " << note << "\n";
  for (const auto& note : outcome.check.notes) out << "  note: " << note << "\n";
  out << fmt::format("  target {}: {}\n", target, outcome.check.ok() ? "met" : "NOT met (see stderr)");
}

void require_directory_of(const std::string& path, const std::string& what) {
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent.empty() ? fs::path(".") : parent, ec)) {
    throw UsageError(path + ": " + what + " directory '" + parent.string() + "' does not exist");
  }
}

// The report's temporary file, made before any work: a report that can't be written stops the
// command before anything is done, and the report commits with the outputs (or alone, holding
// the error, when the command fails).
std::unique_ptr<PendingFile> reserve_report(const std::string& path) {
  if (path.empty()) return nullptr;
  require_directory_of(path, "report");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UsageError(path + ": the report is a directory");
  return std::make_unique<PendingFile>(path);
}

// On a failed command: the report holds `prefix`'s fields and the error object, and is committed
// alone. The error itself is what matters, so a report that fails now is left unwritten.
void report_failure(PendingFile* report, const std::exception_ptr& error,
                    const std::function<void(JsonWriter&)>& prefix) {
  if (!report) return;
  try {
    JsonWriter json;
    json.begin_object();
    prefix(json);
    json.key("error");
    write_error_json(json, describe_error(error));
    json.end_object();
    report->set_contents(json.str());
    report->commit();
  } catch (...) {
  }
}

// A graph ONNX Runtime would refuse (a cycle, a value computed twice or by nothing) is bad input:
// rewriting or checking it would only hide that.
InputCheck refuse_invalid(const Model& model) {
  InputCheck input = check_input(model.proto);
  if (input.problem) throw InputError(model.path.string(), *input.problem);
  return input;
}


namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Processed process(const std::string& input, const std::string& output, const RuleSet& rules, const RewriteOptions& options,
                  const Target& target, const ProcessOptions& how) {
  Processed processed;
  ModelOutcome& outcome = processed.outcome;
  outcome.input = input;
  outcome.output = output;
  auto start = std::chrono::steady_clock::now();
  LoadedModel loaded(input, !how.in_batch);
  Model& model = *loaded;
  outcome.timing.load = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const InputCheck checked = refuse_invalid(model);
  if (const auto opsets = impossible_opset_imports(model.proto); !opsets.empty()) throw InputError(input, opsets.front());
  outcome.result = rewrite_model(model, rules, options, &checked);
  outcome.check = check_model(model, target, options.max_opset, options.exact_opset);
  if (outcome.result.ir_version_problem) outcome.check.opset_problems.push_back(*outcome.result.ir_version_problem);
  if (how.provenance && outcome.result.changed()) record_provenance(model, outcome.result, options);
  outcome.timing.rewrite = seconds_since(start);
  start = std::chrono::steady_clock::now();
  if (!how.dry_run) processed.output = std::make_unique<PendingModel>(model, output, how.write);
  outcome.timing.write = seconds_since(start);
  outcome.status = !outcome.check.ok() ? "target-not-met" : outcome.result.changed() ? "rewritten" : "unchanged";
  return processed;
}

RewriteOptions effective_options(RewriteOptions options, std::optional<bool> inline_functions) {
  const Target& target = find_target(options.target);
  options.inline_functions = inline_functions.value_or(!target.local_functions);
  if (auto cap = target.max_onnx_opset()) options.max_opset = std::min(options.max_opset.value_or(*cap), *cap);
  return options;
}

namespace {

int rewrite_one(const RewriteCommand& command, PendingFile* report, PendingFile* html, std::ostream& out, std::ostream& err) {
  if (command.in_place && !command.output.empty()) throw UsageError("--in-place and -o exclude each other");
  if (!command.in_place && !command.dry_run && command.output.empty()) throw UsageError("rewrite needs -o OUT.onnx (or --in-place, --dry-run)");
  const Target& target = find_target(command.options.target);
  const RuleSet rules = command.rules.load();
  RewriteOptions options = effective_options(command.options, command.inline_functions);
  active_rules(rules, options);  // unknown --only/--skip ids are usage errors, before any work
  if (html) options.record_matches = kHtmlMatchesPerRule;
  const std::string output = command.in_place ? command.input : command.output;
  if (!command.dry_run) require_directory_of(output, "output");
  ProcessOptions how;
  how.dry_run = command.dry_run;
  how.provenance = command.provenance;
  how.write.allow_overwrite_input = command.in_place;
  Processed processed = process(command.input, output, rules, options, target, how);
  ModelOutcome& outcome = processed.outcome;
  // The page first: a picture that can't be drawn leaves nothing written.
  if (html) {
    html->set_contents(html_report({command.input, command.dry_run ? "(dry run, nothing written)" : output, target.name,
                                    outcome.check.ok(), &outcome.result, &rules}));
  }
  // Everything is prepared: the model, its data files and the reports appear together.
  if (processed.output) {
    const auto start = std::chrono::steady_clock::now();
    processed.output->commit();
    outcome.timing.write += seconds_since(start);
  }
  if (report) {
    JsonWriter json;
    json.begin_object();
    write_run_json(json, command.options, command.rules, command.provenance, command.dry_run);
    write_outcome_fields(json, outcome, target.name);
    json.end_object();
    report->set_contents(json.str());
  }
  if (report) report->commit();
  if (html) html->commit();
  print_summary(outcome, target.name, command.dry_run, out);
  if (!outcome.check.ok()) {
    print_unmet(target, outcome.check, rules, err);
    return static_cast<int>(ExitCode::kTargetNotMet);
  }
  return 0;
}

}  // namespace

int run_rewrite(const RewriteCommand& command, std::ostream& out, std::ostream& err) {
  std::error_code ec;
  for (const auto& model : {command.input, command.output}) {
    if (!command.report.empty() && !model.empty() && fs::equivalent(command.report, model, ec)) {
      throw UsageError(command.report + ": the report would replace the model " + model);
    }
  }
  if (!command.html.empty()) require_graphviz();
  const auto report = reserve_report(command.report);
  const auto html = reserve_report(command.html);
  try {
    return rewrite_one(command, report.get(), html.get(), out, err);
  } catch (...) {
    report_failure(report.get(), std::current_exception(), [&](JsonWriter& json) {
      write_run_json(json, command.options, command.rules, command.provenance, command.dry_run);
      json.key("model").value(command.input);
      json.key("output").value(command.in_place ? command.input : command.output);
      json.key("target").value(command.options.target);
      json.key("status").value("failed");
    });
    throw;
  }
}

namespace {

// A note for a model whose weights' files are not there (a graph-only download).
std::string missing_data_note(const Model& model) {
  const auto& missing = model.missing_external_data;
  std::vector<std::string> names;
  for (const auto& location : missing) names.push_back("'" + printable(location) + "'");
  return fmt::format("the external-data file{} {} {} missing: the weights were not needed here, but the model can't run "
                     "(or be rewritten) without them",
                     missing.size() == 1 ? "" : "s", fmt::join(names, ", "), missing.size() == 1 ? "is" : "are");
}

const LoadOptions kGraphOnly{.allow_missing_external_data = true};

int check_one(const std::string& input, const std::string& target_name, std::optional<int> max_opset,
              const RuleSources& sources, bool json, std::ostream& out, CheckReport& report) {
  const Target& target = find_target(target_name);
  const RuleSet rules = sources.load();
  const Coverage coverage{rules, target};
  LoadedModel loaded(input, true, kGraphOnly);
  const Model& model = *loaded;
  refuse_invalid(model);
  report = check_model(model, target, max_opset);
  if (!model.missing_external_data.empty()) report.notes.push_back(missing_data_note(model));
  if (json) {
    JsonWriter writer;
    writer.begin_object();
    writer.key("model").value(input);
    writer.key("target").value(target.name);
    writer.key("max_opset");
    if (max_opset) writer.value(*max_opset);
    else writer.null();
    writer.key("result");
    write_check_json(writer, report, &coverage);
    writer.end_object();
    out << writer.str();
  } else if (report.ok()) {
    out << fmt::format("{}: target {}: every node is loadable\n", input, target.name);
  } else {
    out << fmt::format("{}: target {}: NOT loadable\n", input, target.name);
    for (const auto& entry : report.unloadable) {
      out << fmt::format("  {} x{} ({}): {}{}\n", op_text(entry), entry.count, entry.place, entry.reason,
                         coverage_text(rules, entry, target));
    }
    for (const auto& problem : report.opset_problems) out << "  " << problem << "\n";
  }
  if (!json) {
    for (const auto& note : report.notes) out << "  note: " << note << "\n";
  }
  return report.ok() ? 0 : static_cast<int>(ExitCode::kTargetNotMet);
}

// --json on a failure: the model and the error object on stdout, as CI reads it; the one-line
// error still goes to stderr.
void print_json_failure(const std::string& input, const std::exception_ptr& error, std::ostream& out) {
  JsonWriter writer;
  writer.begin_object();
  writer.key("model").value(input);
  writer.key("error");
  write_error_json(writer, describe_error(error));
  writer.end_object();
  out << writer.str();
}

}  // namespace

int run_check(const std::string& input, const std::string& target_name, std::optional<int> max_opset,
              const RuleSources& rules, bool json, std::ostream& out, std::ostream& err, const std::string& junit) {
  (void)err;
  const auto junit_file = reserve_report(junit);
  const auto start = std::chrono::steady_clock::now();
  // The model as JUnit sees it: the fields of a batch report's model object that it reads.
  const auto commit_junit = [&](const std::function<void(JsonWriter&)>& fields) {
    if (!junit_file) return;
    JsonWriter model(true);
    model.begin_object();
    model.key("model").value(input);
    model.key("target").value(target_name);
    model.key("timing").begin_object().key("total_seconds").value(seconds_since(start)).end_object();
    fields(model);
    model.end_object();
    const JunitCase test = junit_case(*parse_json(model.str()), "check");
    junit_file->set_contents(junit_xml("onnx-rewrite check --target " + target_name, {test}));
    junit_file->commit();
  };
  try {
    CheckReport report;
    const int code = check_one(input, target_name, max_opset, rules, json, out, report);
    commit_junit([&](JsonWriter& model) {
      model.key("status").value(report.ok() ? "met" : "target-not-met");
      model.key("check");
      write_check_json(model, report);
    });
    return code;
  } catch (...) {
    const auto error = std::current_exception();
    if (json) print_json_failure(input, error, out);
    try {
      commit_junit([&](JsonWriter& model) {
        model.key("status").value("failed");
        model.key("error");
        write_error_json(model, describe_error(error));
      });
    } catch (...) {  // the check's own error is what matters
    }
    throw;
  }
}

namespace {

struct InitializerStats {
  int64_t count = 0;
  uint64_t inline_bytes = 0;
  uint64_t external_bytes = 0;
  std::map<std::string, std::optional<uint64_t>> external_files;  // nullopt: missing
};

InitializerStats initializer_stats(const Model& model) {
  InitializerStats stats;
  for (const auto& tensor : model.proto.graph().initializer()) {
    ++stats.count;
    if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
      std::string location;
      uint64_t length = 0;
      for (const auto& entry : tensor.external_data()) {
        if (entry.key() == "location") location = entry.value();
        if (entry.key() == "length") length = std::strtoull(entry.value().c_str(), nullptr, 10);
      }
      if (!stats.external_files.count(location)) {
        std::error_code ec;
        const uintmax_t size = fs::file_size(model.directory() / location, ec);
        stats.external_files[location] = ec ? std::nullopt : std::optional<uint64_t>(size);
      }
      stats.external_bytes += length;
    } else if (const FileRange* range = model.deferred_field(tensor)) {
      stats.inline_bytes += range->size();
    } else {
      stats.inline_bytes += tensor.ByteSizeLong();
    }
  }
  return stats;
}

std::string bytes_text(uint64_t bytes) {
  if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1ull << 20));
  if (bytes >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / (1ull << 10));
  return fmt::format("{} B", bytes);
}

bool is_standard_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx.ml"; }

// Not a standard op: a custom domain, or an op type the standard domain's table doesn't know
// (TensorRT plugins exported by onnx-graphsurgeon sit in the default domain: EfficientNMS_TRT).
bool is_custom_op(const OpKey& key) {
  if (!is_standard_domain(key.first)) return true;
  const OpTable* table = OpRegistry::builtin().table(key.first);
  return table && !table->knows(key.second);
}

// Rules with a pattern node of this op, per target.
std::vector<std::string> covering_rules(const RuleSet& rules, const OpKey& key) {
  std::vector<std::string> ids;
  for (const auto& rule : rules.rules) {
    bool covers = false;
    for (const auto& pattern : rule->patterns) {
      for (const auto& node : pattern.nodes) covers = covers || (node.domain == key.first && node.op_type == key.second);
    }
    if (covers) ids.push_back(fmt::format("{} [{}]", rule->id, fmt::join(rule->targets, ", ")));
  }
  return ids;
}

// "float", "seq(float)", "map(int64,float)", "optional(float)", "sparse float"; "?" when unset.
std::string type_text(const onnx::TypeProto& type) {
  switch (type.value_case()) {
    case onnx::TypeProto::kTensorType: return data_type_name(type.tensor_type().elem_type());
    case onnx::TypeProto::kSparseTensorType: return "sparse " + data_type_name(type.sparse_tensor_type().elem_type());
    case onnx::TypeProto::kSequenceType: return "seq(" + type_text(type.sequence_type().elem_type()) + ")";
    case onnx::TypeProto::kOptionalType: return "optional(" + type_text(type.optional_type().elem_type()) + ")";
    case onnx::TypeProto::kMapType:
      return "map(" + data_type_name(type.map_type().key_type()) + "," + type_text(type.map_type().value_type()) + ")";
    default: return "?";
  }
}

const onnx::TensorShapeProto* shape_of(const onnx::TypeProto& type) {
  if (type.has_tensor_type() && type.tensor_type().has_shape()) return &type.tensor_type().shape();
  if (type.has_sparse_tensor_type() && type.sparse_tensor_type().has_shape()) return &type.sparse_tensor_type().shape();
  return nullptr;
}

// "[1, 3, height, ?]"; "(rank unknown)" without a shape.
std::string shape_text(const onnx::TypeProto& type) {
  const auto* shape = shape_of(type);
  if (!shape) return type.has_tensor_type() || type.has_sparse_tensor_type() ? "(rank unknown)" : "";
  std::vector<std::string> dims;
  for (const auto& dim : shape->dim()) {
    dims.push_back(dim.has_dim_value() ? std::to_string(dim.dim_value()) : dim.has_dim_param() ? printable(dim.dim_param()) : "?");
  }
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// {"name", "type", "shape": [numbers, names, null for unknown] or null}
void write_value_json(JsonWriter& json, const onnx::ValueInfoProto& value) {
  json.begin_object().key("name").value(value.name()).key("type").value(type_text(value.type())).key("shape");
  if (const auto* shape = shape_of(value.type())) {
    json.begin_array();
    for (const auto& dim : shape->dim()) {
      if (dim.has_dim_value()) json.value(static_cast<int64_t>(dim.dim_value()));
      else if (dim.has_dim_param()) json.value(dim.dim_param());
      else json.null();
    }
    json.end_array();
  } else {
    json.null();
  }
  json.end_object();
}

// The graph's inputs that are not initializers (IR < 4 lists weights as inputs too).
std::vector<const onnx::ValueInfoProto*> real_inputs(const onnx::GraphProto& graph) {
  std::set<std::string_view> weights;
  for (const auto& tensor : graph.initializer()) weights.insert(tensor.name());
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& input : graph.input()) {
    if (!weights.count(input.name())) inputs.push_back(&input);
  }
  return inputs;
}

// Nodes by where they sit; weights held outside initializers.
struct ModelTotals {
  int64_t main_graph = 0, subgraphs = 0, functions = 0, training = 0;
  int64_t constants = 0;  // Constant nodes holding a tensor
  uint64_t constant_bytes = 0;
  int64_t sparse_initializers = 0;
  uint64_t sparse_bytes = 0;
  int64_t total() const { return main_graph + subgraphs + functions + training; }
};

ModelTotals model_totals(const onnx::ModelProto& proto) {
  ModelTotals totals;
  for_each_graph(proto, [&](const auto& view) {
    const int64_t count = view.nodes->size();
    switch (view.place->kind()) {
      case Place::Kind::kMainGraph: totals.main_graph += count; break;
      case Place::Kind::kFunction: totals.functions += count; break;
      case Place::Kind::kTrainingInitialization:
      case Place::Kind::kTrainingAlgorithm: totals.training += count; break;
      case Place::Kind::kSubgraph: totals.subgraphs += count; break;
    }
    for (const auto& node : *view.nodes) {
      if (!is_constant_node(node)) continue;
      for (const auto& attribute : node.attribute()) {
        if (attribute.name() == "value" || attribute.name() == "sparse_value") {
          ++totals.constants;
          totals.constant_bytes += attribute.name() == "value" ? attribute.t().ByteSizeLong() : attribute.sparse_tensor().ByteSizeLong();
        }
      }
    }
    if (view.graph) {
      totals.sparse_initializers += view.graph->sparse_initializer_size();
      for (const auto& sparse : view.graph->sparse_initializer()) totals.sparse_bytes += sparse.ByteSizeLong();
    }
  });
  return totals;
}

}  // namespace

namespace {

int inspect_one(const std::string& input, const RuleSources& sources, bool json, std::ostream& out) {
  const RuleSet rules = sources.load();
  LoadedModel loaded(input, true, kGraphOnly);
  const Model& model = *loaded;
  const onnx::ModelProto& proto = model.proto;
  const OpCounts ops = count_ops(proto);
  const InitializerStats initializers = initializer_stats(model);
  const ModelTotals totals = model_totals(proto);
  const auto inputs = real_inputs(proto.graph());
  std::set<std::pair<std::string, std::string>> functions;
  for (const auto& function : proto.functions()) functions.insert({normalize_domain(function.domain()), function.name()});

  if (json) {
    JsonWriter writer;
    writer.begin_object();
    writer.key("model").value(input);
    writer.key("ir_version").value(static_cast<int64_t>(proto.ir_version()));
    writer.key("producer_name").value(proto.producer_name());
    writer.key("producer_version").value(proto.producer_version());
    writer.key("opset_imports").begin_array();
    for (const auto& import : proto.opset_import()) {
      writer.begin_object().key("domain").value(display_domain(normalize_domain(import.domain())));
      writer.key("version").value(static_cast<int64_t>(import.version())).end_object();
    }
    writer.end_array();
    writer.key("inputs").begin_array();
    for (const auto* input : inputs) write_value_json(writer, *input);
    writer.end_array();
    writer.key("outputs").begin_array();
    for (const auto& output : proto.graph().output()) write_value_json(writer, output);
    writer.end_array();
    writer.key("nodes").begin_object();
    writer.key("total").value(totals.total());
    writer.key("main_graph").value(totals.main_graph);
    writer.key("subgraphs").value(totals.subgraphs);
    writer.key("functions").value(totals.functions);
    writer.key("training").value(totals.training);
    writer.end_object();
    writer.key("ops").begin_array();
    for (const auto& [key, count] : ops) {
      writer.begin_object().key("domain").value(display_domain(key.first)).key("op_type").value(key.second);
      writer.key("count").value(count);
      const bool custom = is_custom_op(key);
      writer.key("custom").value(custom);
      writer.key("local_function").value(functions.count(key) != 0);
      if (custom) writer.key("rules").strings(covering_rules(rules, key));
      writer.end_object();
    }
    writer.end_array();
    writer.key("functions").begin_array();
    for (const auto& [domain, name] : functions) writer.value(display_domain(domain) + "." + name);
    writer.end_array();
    writer.key("initializers").begin_object();
    writer.key("count").value(initializers.count);
    writer.key("inline_bytes").value(initializers.inline_bytes);
    writer.key("external_bytes").value(initializers.external_bytes);
    writer.key("external_files").begin_array();
    for (const auto& [file, size] : initializers.external_files) {
      writer.begin_object().key("location").value(file).key("bytes");
      if (size) writer.value(*size);
      else writer.null();
      writer.key("missing").value(!size).end_object();
    }
    writer.end_array().end_object();
    writer.key("metadata_props").begin_object();
    for (const auto& entry : proto.metadata_props()) writer.key(entry.key()).value(entry.value());
    writer.end_object();
    writer.key("constant_nodes").begin_object().key("count").value(totals.constants).key("bytes").value(totals.constant_bytes).end_object();
    writer.key("sparse_initializers").begin_object();
    writer.key("count").value(totals.sparse_initializers).key("bytes").value(totals.sparse_bytes).end_object();
    writer.key("training_info").begin_array();
    for (const auto& info : proto.training_info()) {
      writer.begin_object();
      writer.key("initialization_nodes").value(info.initialization().node_size());
      writer.key("algorithm_nodes").value(info.algorithm().node_size());
      writer.key("initialization_bindings").value(info.initialization_binding_size());
      writer.key("update_bindings").value(info.update_binding_size());
      writer.end_object();
    }
    writer.end_array();
    writer.key("notes").begin_array();
    if (!model.missing_external_data.empty()) writer.value(missing_data_note(model));
    writer.end_array();
    writer.end_object();
    out << writer.str();
    return 0;
  }

  out << fmt::format("{}\n", input);
  out << fmt::format("  IR version {}, producer {} {}\n", proto.ir_version(),
                     proto.producer_name().empty() ? "(none)" : proto.producer_name(), proto.producer_version());
  std::vector<std::string> imports;
  for (const auto& import : proto.opset_import()) imports.push_back(fmt::format("{} {}", display_domain(normalize_domain(import.domain())), import.version()));
  out << fmt::format("  opset imports: {}\n", fmt::join(imports, ", "));
  const auto print_values = [&](const char* title, const std::vector<const onnx::ValueInfoProto*>& values) {
    out << fmt::format("  {} ({}):\n", title, values.size());
    for (const auto* value : values) {
      out << fmt::format("    {}: {} {}\n", printable(value->name()), type_text(value->type()), shape_text(value->type()));
    }
  };
  print_values("inputs", inputs);
  std::vector<const onnx::ValueInfoProto*> outputs;
  for (const auto& output : proto.graph().output()) outputs.push_back(&output);
  print_values("outputs", outputs);
  out << fmt::format("  nodes: {} (main graph {}, subgraphs {}, functions {}, training {})\n", totals.total(), totals.main_graph,
                     totals.subgraphs, totals.functions, totals.training);
  size_t width = 0;
  for (const auto& [key, count] : ops) width = std::max(width, op_name(key).size());
  out << "  nodes per op (graphs, subgraphs and functions):\n";
  for (const auto& [key, count] : ops) out << fmt::format("    {:<{}}  {}\n", op_name(key), width, count);
  std::vector<std::string> custom;
  for (const auto& [key, count] : ops) {
    if (!is_custom_op(key)) continue;
    const auto covering = covering_rules(rules, key);
    custom.push_back(fmt::format("    {} x{}{}: {}", op_name(key), count, functions.count(key) ? " (model-local function)" : "",
                                 covering.empty() ? "no rule" : fmt::format("{}", fmt::join(covering, ", "))));
  }
  if (!custom.empty()) out << "  custom ops and the rules that cover them:\n" << fmt::format("{}\n", fmt::join(custom, "\n"));
  if (!functions.empty()) {
    std::vector<std::string> names;
    for (const auto& [domain, name] : functions) names.push_back(display_domain(domain) + "." + name);
    out << fmt::format("  model-local functions: {}\n", fmt::join(names, ", "));
  }
  out << fmt::format("  initializers: {}, {} inline, {} external\n", initializers.count, bytes_text(initializers.inline_bytes),
                     bytes_text(initializers.external_bytes));
  for (const auto& [file, size] : initializers.external_files) {
    out << fmt::format("  external data: {} ({})\n", file, size ? bytes_text(*size) : "missing");
  }
  if (totals.constants) out << fmt::format("  weights in Constant nodes: {}, {}\n", totals.constants, bytes_text(totals.constant_bytes));
  if (totals.sparse_initializers) {
    out << fmt::format("  sparse initializers: {}, {}\n", totals.sparse_initializers, bytes_text(totals.sparse_bytes));
  }
  for (int i = 0; i < proto.training_info_size(); ++i) {
    const auto& info = proto.training_info(i);
    out << fmt::format("  training_info[{}]: initialization {} node(s), algorithm {} node(s), {} update binding(s)\n", i,
                       info.initialization().node_size(), info.algorithm().node_size(), info.update_binding_size());
  }
  for (const auto& entry : proto.metadata_props()) out << fmt::format("  metadata: {} = {}\n", printable(entry.key()), printable(entry.value()));
  if (!model.missing_external_data.empty()) out << "  note: " << missing_data_note(model) << "\n";
  return 0;
}

}  // namespace

int run_inspect(const std::string& input, const RuleSources& sources, bool json, std::ostream& out) {
  try {
    return inspect_one(input, sources, json, out);
  } catch (...) {
    if (json) print_json_failure(input, std::current_exception(), out);
    throw;
  }
}

namespace {

std::string indented(const std::string& lines) {
  std::string text;
  std::istringstream in(lines);
  for (std::string line; std::getline(in, line);) text += "    " + line + "\n";
  return text;
}

}  // namespace

int run_rules(const RuleSources& sources, bool json, std::ostream& out) {
  const RuleSet rules = sources.load();
  auto anchors = [](const Rule& rule) {
    std::set<std::string> names;
    for (const auto& pattern : rule.patterns) names.insert(display_domain(pattern.anchor().domain) + "." + pattern.anchor().op_type);
    return std::vector<std::string>(names.begin(), names.end());
  };
  auto needs = [](const Rule& rule) {
    std::vector<std::string> texts;
    for (const auto& range : rule.requires_opsets) texts.push_back(range.describe());
    return texts;
  };
  if (json) {
    JsonWriter writer;
    writer.begin_array();
    for (const auto& rule : rules.rules) {
      writer.begin_object();
      writer.key("id").value(rule->id);
      writer.key("description").value(rule->description);
      writer.key("targets").strings(rule->targets);
      writer.key("fuses_for").strings(rule->fuse_targets);
      writer.key("priority").value(rule->priority);
      writer.key("matches").strings(anchors(*rule));
      writer.key("requires").strings(needs(*rule));
      writer.key("replacement").value(rule->replacement->describe());
      writer.key("file").value(rule->file);
      writer.end_object();
    }
    writer.end_array();
    out << writer.str();
    return 0;
  }
  for (const auto& rule : rules.rules) {
    std::vector<std::string> serves;
    if (!rule->targets.empty()) serves.push_back(fmt::format("{}", fmt::join(rule->targets, ", ")));
    if (!rule->fuse_targets.empty()) serves.push_back(fmt::format("with --fuse: {}", fmt::join(rule->fuse_targets, ", ")));
    out << fmt::format("{}  [{}]\n    {}\n    matches {}", rule->id, fmt::join(serves, "; "), rule->description,
                       fmt::join(anchors(*rule), ", "));
    const auto required = needs(*rule);
    if (!required.empty()) out << fmt::format("; needs {}", fmt::join(required, ", "));
    out << fmt::format("; {} ({})\n", rule->replacement->describe(), rule->file);
  }
  out << fmt::format("{} rules\n", rules.rules.size());
  return 0;
}

int run_rule_tests(const std::vector<std::string>& paths, const RuleSources& sources, bool json, std::ostream& out) {
  std::vector<std::string> tested;
  for (const auto& path : paths) {
    RuleSet own;
    own.load_path(path);
    if (own.rules.empty()) throw InputError(path, "no rules to test (a .rules file, or a directory holding some)");
    for (const auto& rule : own.rules) tested.push_back(rule->id);
  }
  // The files tested stand in for rules of the same id (a built-in family's file being edited).
  RuleSet rules = sources.load();
  std::erase_if(rules.rules, [&](const auto& rule) { return std::count(tested.begin(), tested.end(), rule->id) > 0; });
  for (const auto& path : paths) rules.load_path(path);
  int failed = 0;
  JsonWriter writer;
  writer.begin_array();
  for (const auto& id : tested) {
    const Rule& rule = *rules.find(id);
    const ExampleOutcome outcome = run_rule_example(rule, rules);
    const std::string where = fmt::format("{}:{}", rule.file, rule.example ? rule.example->line : rule.line);
    failed += outcome.passed() ? 0 : 1;
    if (json) {
      writer.begin_object().key("id").value(rule.id).key("example").value(where).key("passed").value(outcome.passed());
      writer.key("problem").value(outcome.problem).key("expected").value(outcome.expected).key("actual").value(outcome.actual);
      writer.end_object();
    } else if (outcome.passed()) {
      out << fmt::format("PASS {}\n", rule.id);
    } else {
      out << fmt::format("FAIL {} ({}): {}\n", rule.id, where, outcome.problem);
      if (!outcome.expected.empty() || !outcome.actual.empty()) {
        out << "  expected:\n" << indented(outcome.expected) << "  got:\n" << indented(outcome.actual);
      }
    }
  }
  writer.end_array();
  if (json) out << writer.str();
  else out << fmt::format("{} rule{} tested, {} failed\n", tested.size(), tested.size() == 1 ? "" : "s", failed);
  return failed ? static_cast<int>(ExitCode::kTargetNotMet) : 0;
}

// ---- targets -------------------------------------------------------------------------------

int run_targets(bool json, std::ostream& out) {
  auto caps = [](const Target& target) {
    std::vector<std::string> texts;
    for (const auto& [domain, version] : target.max_opsets) texts.push_back(fmt::format("{} <= {}", display_domain(domain), version));
    return texts;
  };
  auto domains = [](const Target& target) {
    std::vector<std::string> names;
    for (const auto& domain : target.domains) names.push_back(display_domain(domain));
    return names;
  };
  if (json) {
    JsonWriter writer;
    writer.begin_array();
    for (const Target* target : all_targets()) {
      writer.begin_object();
      writer.key("name").value(target->name);
      writer.key("description").value(target->description);
      writer.key("builds_on").strings(std::vector<std::string>(target->lineage.begin() + 1, target->lineage.end()));
      writer.key("domains").strings(domains(*target));
      writer.key("max_opsets").strings(caps(*target));
      writer.key("local_functions").value(target->local_functions);
      writer.key("source").value(target->source);
      writer.key("load_tested").value(target->load_tested);
      writer.key("file").value(target->file);
      writer.end_object();
    }
    writer.end_array();
    out << writer.str();
    return 0;
  }
  for (const Target* target : all_targets()) {
    out << fmt::format("{}\n    {}\n    domains {}", target->name, target->description, fmt::join(domains(*target), ", "));
    if (target->lineage.size() > 1) out << fmt::format("; builds on {}", fmt::join(target->lineage.begin() + 1, target->lineage.end(), ", "));
    if (!target->max_opsets.empty()) out << fmt::format("; imports {}", fmt::join(caps(*target), ", "));
    out << fmt::format("; model-local functions {} ({})\n", target->local_functions ? "run" : "inlined first", target->file);
    if (!target->source.empty()) out << fmt::format("    source: {}\n", target->source);
    out << (target->load_tested ? "    load-tested: the test suite loads models in the runtime to check it\n"
                                : "    not load-tested here: what it says comes from its tables alone\n");
  }
  return 0;
}

}  // namespace onnx_rewrite
