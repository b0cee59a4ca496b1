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
#include <thread>

#include <fmt/format.h>

#include "onnx_rewrite/error.h"
#include "cli/json.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/opset.h"
#include "onnx_rewrite/rule_example.h"
#include "onnx_rewrite/target.h"
#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/verify.h"

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

// ---- Errors as JSON ------------------------------------------------------------------------

// What an error is about, for the JSON error object (docs/cli.md, "Errors in JSON"): the file it
// names (none for usage errors), the message, and the exit code main.cc gives it.
struct ErrorInfo {
  std::string file;
  std::string message;
  ExitCode exit_code = ExitCode::kBadInput;
};

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

// {"file", "message", "exit_code"}
void write_error_json(JsonWriter& json, const ErrorInfo& error) {
  json.begin_object();
  json.key("file");
  if (error.file.empty()) json.null();
  else json.value(error.file);
  json.key("message").value(error.message);
  json.key("exit_code").value(static_cast<int>(error.exit_code));
  json.end_object();
}

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

struct ModelOutcome {
  std::string input;
  std::string output;
  std::string status;  // rewritten, unchanged, target-not-met, failed
  std::optional<ErrorInfo> error;
  RewriteResult result;
  CheckReport check;
};

// A failed model's error for a line that already names the model: the file only when it is another.
std::string error_text(const ModelOutcome& outcome) {
  if (!outcome.error) return "";
  const ErrorInfo& error = *outcome.error;
  return error.file.empty() || error.file == outcome.input ? error.message : error.file + ": " + error.message;
}

void write_outcome_json(JsonWriter& json, const ModelOutcome& outcome, const std::string& target) {
  json.begin_object();
  json.key("model").value(outcome.input);
  json.key("output").value(outcome.output);
  json.key("target").value(target);
  json.key("status").value(outcome.status);
  if (outcome.error) {
    json.key("error");
    write_error_json(json, *outcome.error);
    json.end_object();
    return;
  }
  json.key("changed").value(outcome.result.changed());
  json.key("rounds").value(outcome.result.rounds);
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
  json.key("notes").strings(outcome.result.notes);
  json.key("check");
  write_check_json(json, outcome.check);
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
  }
  for (const auto& note : result.notes) out << "  note: " << note << "\n";
  for (const auto& note : outcome.check.notes) out << "  note: " << note << "\n";
  out << fmt::format("  target {}: {}\n", target, outcome.check.ok() ? "met" : "NOT met (see stderr)");
}

// Checked before any work, so that a mistyped path costs nothing and leaves nothing half done.
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


// One model loaded, rewritten and checked, its output prepared (unless dry) but not yet in place.
struct Processed {
  ModelOutcome outcome;
  std::unique_ptr<PendingModel> output;
};

Processed process(const std::string& input, const std::string& output, const RuleSet& rules, const RewriteOptions& options,
                  const Target& target, bool dry_run, const WriteOptions& write, bool in_batch) {
  Processed processed;
  ModelOutcome& outcome = processed.outcome;
  outcome.input = input;
  outcome.output = output;
  LoadedModel loaded(input, !in_batch);
  Model& model = *loaded;
  const InputCheck checked = refuse_invalid(model);
  if (const auto opsets = impossible_opset_imports(model.proto); !opsets.empty()) throw InputError(input, opsets.front());
  outcome.result = rewrite_model(model, rules, options, &checked);
  outcome.check = check_model(model, target, options.max_opset);
  if (!dry_run) processed.output = std::make_unique<PendingModel>(model, output, write);
  outcome.status = !outcome.check.ok() ? "target-not-met" : outcome.result.changed() ? "rewritten" : "unchanged";
  return processed;
}

// What the target implies where the command line is silent: inlining for runtimes that don't run
// model-local functions, and its highest opset.
RewriteOptions effective_options(RewriteOptions options, std::optional<bool> inline_functions) {
  const Target& target = find_target(options.target);
  options.inline_functions = inline_functions.value_or(!target.local_functions);
  if (auto cap = target.max_onnx_opset()) options.max_opset = std::min(options.max_opset.value_or(*cap), *cap);
  return options;
}

int rewrite_one(const RewriteCommand& command, PendingFile* report, std::ostream& out, std::ostream& err) {
  if (command.in_place && !command.output.empty()) throw UsageError("--in-place and -o exclude each other");
  if (!command.in_place && !command.dry_run && command.output.empty()) throw UsageError("rewrite needs -o OUT.onnx (or --in-place, --dry-run)");
  const Target& target = find_target(command.options.target);
  const RuleSet rules = command.rules.load();
  const RewriteOptions options = effective_options(command.options, command.inline_functions);
  active_rules(rules, options);  // unknown --only/--skip ids are usage errors, before any work
  const std::string output = command.in_place ? command.input : command.output;
  if (!command.dry_run) require_directory_of(output, "output");
  WriteOptions write;
  write.allow_overwrite_input = command.in_place;
  Processed processed = process(command.input, output, rules, options, target, command.dry_run, write, false);
  const ModelOutcome& outcome = processed.outcome;
  // Everything is prepared: the model, its data files and the report appear together.
  if (report) {
    JsonWriter json;
    write_outcome_json(json, outcome, target.name);
    report->set_contents(json.str());
  }
  if (processed.output) processed.output->commit();
  if (report) report->commit();
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
  const auto report = reserve_report(command.report);
  try {
    return rewrite_one(command, report.get(), out, err);
  } catch (...) {
    report_failure(report.get(), std::current_exception(), [&](JsonWriter& json) {
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
              const RuleSources& sources, bool json, std::ostream& out) {
  const Target& target = find_target(target_name);
  const RuleSet rules = sources.load();
  const Coverage coverage{rules, target};
  LoadedModel loaded(input, true, kGraphOnly);
  const Model& model = *loaded;
  refuse_invalid(model);
  CheckReport report = check_model(model, target, max_opset);
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
              const RuleSources& rules, bool json, std::ostream& out, std::ostream& err) {
  (void)err;
  try {
    return check_one(input, target_name, max_opset, rules, json, out);
  } catch (...) {
    if (json) print_json_failure(input, std::current_exception(), out);
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

}  // namespace

namespace {

int inspect_one(const std::string& input, const RuleSources& sources, bool json, std::ostream& out) {
  const RuleSet rules = sources.load();
  LoadedModel loaded(input, true, kGraphOnly);
  const Model& model = *loaded;
  const onnx::ModelProto& proto = model.proto;
  const OpCounts ops = count_ops(proto);
  const InitializerStats initializers = initializer_stats(model);
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
    out << fmt::format("{}  [{}]\n    {}\n    matches {}", rule->id, fmt::join(rule->targets, ", "), rule->description,
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
  }
  return 0;
}

// ---- batch ---------------------------------------------------------------------------------

namespace {

struct BatchItem {
  std::string input;
  std::string output;
  std::string error;  // the entry could not even be read (a directory, a dangling or looping link, ...)
};

using FileId = std::pair<dev_t, ino_t>;

// Walks one input directory. Paths are built from the names met on the way, never from where a
// symbolic link leads, so every output lies under OUT_DIR at the entry's own relative path.
// Symbolic links to directories are followed, except one leading to a directory the walk is
// already inside (a loop), which is a failed item like a directory that can't be listed.
class BatchWalk {
 public:
  BatchWalk(std::optional<FileId> out_dir, std::vector<std::pair<fs::path, fs::path>>& found, std::vector<BatchItem>& unreadable)
      : out_dir_(out_dir), found_(found), unreadable_(unreadable) {}

  void walk(const fs::path& directory, const fs::path& relative, FileId id) {
    ancestors_.push_back({id, directory});
    DIR* listing = ::opendir(directory.c_str());
    if (!listing) {
      unreadable_.push_back({directory.string(), {}, std::string("cannot read the directory: ") + std::strerror(errno)});
      ancestors_.pop_back();
      return;
    }
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* entry = ::readdir(listing)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
      errno = 0;
    }
    const int listing_error = errno;
    ::closedir(listing);
    if (listing_error) {
      unreadable_.push_back({directory.string(), {}, std::string("cannot read the directory: ") + std::strerror(listing_error)});
    }
    std::sort(names.begin(), names.end());
    for (const auto& name : names) visit(directory / name, relative / name);
    ancestors_.pop_back();
  }

 private:
  void visit(const fs::path& path, const fs::path& relative) {
    const bool model_name = path.extension() == ".onnx";
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      // A symbolic link that loops or leads nowhere (or an entry gone meanwhile).
      if (model_name) unreadable_.push_back({path.string(), {}, std::string("cannot read: ") + std::strerror(errno)});
      return;
    }
    if (S_ISDIR(st.st_mode)) {
      const FileId id{st.st_dev, st.st_ino};
      if (out_dir_ && id == *out_dir_) return;  // never read our own outputs
      for (const auto& [ancestor, ancestor_path] : ancestors_) {
        if (ancestor == id) {
          unreadable_.push_back({path.string(), {}, "leads to '" + ancestor_path.string() +
                                                        "', a directory it is in: not followed (a loop)"});
          return;
        }
      }
      walk(path, relative, id);
    } else if (model_name) {
      if (S_ISREG(st.st_mode)) found_.emplace_back(path, relative);
      else unreadable_.push_back({path.string(), {}, "not a regular file"});
    }
  }

  std::optional<FileId> out_dir_;
  std::vector<std::pair<fs::path, fs::path>>& found_;
  std::vector<BatchItem>& unreadable_;
  std::vector<std::pair<FileId, fs::path>> ancestors_;
};

std::vector<BatchItem> collect_batch(const BatchCommand& command) {
  std::vector<BatchItem> items;
  std::vector<BatchItem> unreadable;
  std::set<std::string> outputs;
  std::optional<FileId> out_dir;
  struct stat st {};
  if (::stat(command.output_dir.c_str(), &st) == 0) out_dir = FileId{st.st_dev, st.st_ino};
  for (const auto& input : command.inputs) {
    if (::stat(input.c_str(), &st) != 0) {
      if (errno == ENOENT) throw InputError(input, "no such file or directory");
      throw InputError(input, std::string("cannot read: ") + std::strerror(errno));
    }
    std::vector<std::pair<fs::path, fs::path>> found;  // file, path relative to the input
    if (S_ISDIR(st.st_mode)) {
      BatchWalk(out_dir, found, unreadable).walk(input, {}, FileId{st.st_dev, st.st_ino});
    } else {
      found.emplace_back(input, fs::path(input).filename());
    }
    for (const auto& [file, relative] : found) {
      BatchItem item{file.string(), (fs::path(command.output_dir) / relative).string(), {}};
      if (!outputs.insert(item.output).second) {
        throw UsageError("two inputs would both be written to " + item.output);
      }
      items.push_back(std::move(item));
    }
  }
  items.insert(items.end(), unreadable.begin(), unreadable.end());
  return items;
}

int batch_all(const BatchCommand& command, PendingFile* report, std::ostream& out, std::ostream& err) {
  const Target& target = find_target(command.options.target);
  const RuleSet rules = command.rules.load();
  const RewriteOptions options = effective_options(command.options, command.inline_functions);
  active_rules(rules, options);
  const auto items = collect_batch(command);
  std::error_code ec;
  fs::create_directories(command.output_dir, ec);
  if (!fs::is_directory(command.output_dir)) {
    throw UsageError(command.output_dir + ": cannot create the output directory" + (ec ? ": " + ec.message() : ""));
  }
  WriteOptions write;
  write.inside = command.output_dir;

  std::vector<ModelOutcome> outcomes(items.size());
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex print;
  auto work = [&] {
    for (size_t i = next++; i < items.size(); i = next++) {
      ModelOutcome& outcome = outcomes[i];
      try {
        if (!items[i].error.empty()) throw InputError(items[i].input, items[i].error);
        Processed processed = process(items[i].input, items[i].output, rules, options, target, false, write, true);
        processed.output->commit();
        outcome = std::move(processed.outcome);
      } catch (...) {
        outcome = ModelOutcome{};
        outcome.input = items[i].input;
        outcome.output = items[i].output;
        outcome.status = "failed";
        outcome.error = describe_error(std::current_exception());
      }
      std::lock_guard lock(print);
      const size_t finished = ++done;
      if (command.progress_line) {
        err << fmt::format("\r\033[K[{}/{}] {}", finished, items.size(), items[i].input) << std::flush;
      } else {
        err << fmt::format("[{}/{}] {} {}{}\n", finished, items.size(), outcome.status, items[i].input,
                           outcome.error ? ": " + error_text(outcome) : "");
      }
    }
  };
  const int jobs = command.jobs > 0 ? command.jobs : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (int t = 0; t < std::min<int>(jobs, static_cast<int>(std::max<size_t>(items.size(), 1))); ++t) threads.emplace_back(work);
  for (auto& thread : threads) thread.join();
  if (command.progress_line && !items.empty()) err << "\n";

  std::map<std::string, int> counts;
  for (const auto& outcome : outcomes) ++counts[outcome.status];
  out << fmt::format("batch: {} model(s): {} rewritten, {} unchanged, {} target not met, {} failed\n", items.size(),
                     counts["rewritten"], counts["unchanged"], counts["target-not-met"], counts["failed"]);
  for (const auto& outcome : outcomes) {
    if (outcome.status == "failed") out << fmt::format("  failed: {}: {}\n", outcome.input, error_text(outcome));
  }
  for (const auto& outcome : outcomes) {
    if (outcome.status != "target-not-met") continue;
    std::vector<std::string> kinds;
    for (const auto& entry : outcome.check.unloadable) kinds.push_back(op_text(entry));
    kinds.insert(kinds.end(), outcome.check.opset_problems.begin(), outcome.check.opset_problems.end());
    out << fmt::format("  target {} not met: {}: {}\n", target.name, outcome.input, fmt::join(kinds, ", "));
  }
  if (report) {
    JsonWriter json;
    json.begin_object();
    json.key("target").value(target.name);
    json.key("summary").begin_object();
    json.key("models").value(static_cast<int64_t>(items.size()));
    for (const char* status : {"rewritten", "unchanged", "target-not-met", "failed"}) json.key(status).value(counts[status]);
    json.end_object();
    json.key("models").begin_array();
    for (const auto& outcome : outcomes) write_outcome_json(json, outcome, target.name);
    json.end_array();
    json.end_object();
    report->set_contents(json.str());
    report->commit();
  }
  return counts["failed"] + counts["target-not-met"] > 0 ? static_cast<int>(ExitCode::kTargetNotMet) : 0;
}

}  // namespace

int run_batch(const BatchCommand& command, std::ostream& out, std::ostream& err) {
  if (command.output_dir.empty()) throw UsageError("batch needs -o OUT_DIR");
  const auto report = reserve_report(command.report);
  try {
    return batch_all(command, report.get(), out, err);
  } catch (...) {
    report_failure(report.get(), std::current_exception(), [&](JsonWriter& json) { json.key("target").value(command.options.target); });
    throw;
  }
}

}  // namespace onnx_rewrite
