// What the subcommands share (outcome.h): loading, errors as JSON, the coverage of what a target
// can't load, report objects, and one model processed.
#include "cli/outcome.h"

#include <chrono>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "cli/path_guard.h"
#include "io/atomic_file.h"
#include "onnx_rewrite/error.h"
#include "verify/opset.h"

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

}  // namespace

LoadedModel::LoadedModel(const std::string& path, bool may_leave, const LoadOptions& options)
    : model_(std::make_unique<Model>(load_model(path, options))), leave_(may_leave && g_leave_models_to_exit) {}

LoadedModel::~LoadedModel() {
  if (!leave_) return;
  [[maybe_unused]] Model* left = model_.release();
#ifdef ONNX_REWRITE_LEAK_CHECKED
  __lsan_ignore_object(left);  // left on purpose (and all it holds): not a leak to report
#endif
}

void leave_models_to_process_exit() { g_leave_models_to_exit = true; }

RuleSet RuleSources::load() const {
  RuleSet rules;
  if (builtin) rules.load_builtin();
  for (const auto& path : paths) rules.load_path(path);
  return rules;
}

std::string op_name(const OpKey& key) { return display_domain(key.first) + "." + key.second; }

// ---- Errors as JSON ------------------------------------------------------------------------

ErrorInfo describe_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const InputError& e) {
    return {e.file(), e.what(), ExitCode::kBadInput};
  } catch (const UsageError& e) {
    return {"", e.what(), ExitCode::kUsage};
  } catch (const VerifyError& e) {
    return {e.file(), e.what(), ExitCode::kVerifyFailed};
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

// ---- Reports -------------------------------------------------------------------------------

namespace {

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

// The lowest ai.onnx opset the rule's replacement needs, when --opset allows less.
std::optional<int> opset_above_limit(const Rule& rule, std::optional<int> max_opset) {
  if (!max_opset) return std::nullopt;
  for (const auto& range : rule.requires_opsets) {
    if (range.domain.empty() && range.min > *max_opset) return range.min;
  }
  return std::nullopt;
}

// The rules covering an entry, by what stops them: none (own), --opset (above_limit: with the
// opset they need), the target (others: with the targets they serve).
struct CoveringRules {
  std::vector<std::string> own, above_limit, others;
};

CoveringRules covering_rules(const Coverage& coverage, const Unloadable& entry) {
  CoveringRules sorted;
  for (const Rule* rule : rules_covering(coverage.rules, entry)) {
    if (!rule->serves(coverage.target)) {
      sorted.others.push_back(fmt::format("{} (--target {})", rule->id, fmt::join(rule->targets, "|")));
    } else if (auto needs = opset_above_limit(*rule, coverage.max_opset)) {
      sorted.above_limit.push_back(fmt::format("{} (ai.onnx {})", rule->id, *needs));
    } else {
      sorted.own.push_back(rule->id);
    }
  }
  return sorted;
}

}  // namespace

std::string coverage_text(const Coverage& coverage, const Unloadable& entry) {
  const auto [own, above_limit, others] = covering_rules(coverage, entry);
  if (!own.empty()) return fmt::format("; `rewrite --target {}` covers it: {}", coverage.target.name, fmt::join(own, ", "));
  if (!above_limit.empty()) {
    return fmt::format("; only rules needing a higher opset than --opset {} cover it: {}", *coverage.max_opset,
                       fmt::join(above_limit, ", "));
  }
  if (!others.empty()) return fmt::format("; only rules for another target cover it: {}", fmt::join(others, ", "));
  return "; no rule covers it";
}

void write_check_json(JsonWriter& json, const CheckReport& report, const Coverage* coverage) {
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
        json.key("serves_target").value(rule->serves(coverage->target));
        const auto needs = opset_above_limit(*rule, coverage->max_opset);
        json.key("needs_opset");
        if (needs) json.value(*needs);
        else json.null();
        json.end_object();
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

void print_unmet(const Coverage& coverage, const CheckReport& report, std::ostream& err) {
  int kinds = static_cast<int>(report.unloadable.size());
  err << fmt::format("onnx-rewrite: target {} not met", coverage.target.name);
  if (kinds) err << fmt::format(": {} kind{} of node it can't load", kinds, kinds == 1 ? "" : "s");
  err << "\n";
  for (const auto& entry : report.unloadable) {
    err << fmt::format("  {} x{} ({}): {}", op_text(entry), entry.count, entry.place, entry.reason);
    // The rules ran: those serving the target without an opset limit would have rewritten it.
    const auto [own, above_limit, others] = covering_rules(coverage, entry);
    if (!above_limit.empty()) {
      err << fmt::format("; the rules for this op need a higher opset than {}: {}", *coverage.max_opset, fmt::join(above_limit, ", "));
    }
    if (!others.empty()) err << fmt::format("; rules for this op serve another target: {}", fmt::join(others, ", "));
    err << "\n";
  }
  for (const auto& problem : report.opset_problems) err << "  " << problem << "\n";
}

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

void write_options_json(JsonWriter& json, const RewriteOptions& options, const RuleSources& rules, bool provenance,
                        const VerifyOptions* verify) {
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
  json.key("simplify").value(options.simplify);
  json.key("max_rounds").value(options.max_rounds);
  json.key("provenance").value(provenance);
  json.key("input_shapes").begin_object();
  for (const auto& [name, dims] : options.input_shapes) {
    json.key(name).begin_array();
    for (int64_t dim : dims) json.value(dim);
    json.end_array();
  }
  json.end_object();
  json.key("verify");
  if (!verify) {
    json.null();
  } else {
    const auto optional = [&](const char* key, const std::optional<double>& value) {
      json.key(key);
      if (value) json.value(*value);
      else json.null();
    };
    json.begin_object().key("seed").value(verify->seed);
    optional("rtol", verify->tolerance.rtol);
    optional("atol", verify->tolerance.atol);
    json.key("runtime");
    if (verify->runtime.empty()) json.null();
    else json.value(verify->runtime);
    json.key("inputs").begin_object();
    for (const auto& [name, file] : verify->input_files) json.key(name).value(file.string());
    json.end_object().end_object();
  }
  json.end_object();
}

void write_run_json(JsonWriter& json, const RewriteOptions& options, const RuleSources& rules, bool provenance, bool dry_run,
                    const VerifyOptions* verify) {
  json.key("tool").begin_object().key("name").value("onnx-rewrite").key("version").value(ONNX_REWRITE_VERSION).end_object();
  json.key("options");
  write_options_json(json, options, rules, provenance, verify);
  json.key("dry_run").value(dry_run);
}

void write_outcome_fields(JsonWriter& json, const ModelOutcome& outcome, const std::string& target) {
  json.key("model").value(outcome.input);
  json.key("output").value(outcome.output);
  json.key("target").value(target);
  json.key("status").value(outcome.status);
  const auto write_error = [&] {
    json.key("error");
    write_error_json(json, *outcome.error);
  };
  if (outcome.error && !outcome.verification) return write_error();
  json.key("timing").begin_object();
  json.key("load_seconds").value(outcome.timing.load);
  json.key("rewrite_seconds").value(outcome.timing.rewrite);
  json.key("write_seconds").value(outcome.timing.write);
  json.key("verify_seconds").value(outcome.timing.verify);
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
  if (outcome.verification) {
    json.key("verify");
    write_verify_json(json, *outcome.verification);
  }
  if (outcome.error) write_error();  // a verification that failed
}

void write_outcome_json(JsonWriter& json, const ModelOutcome& outcome, const std::string& target) {
  json.begin_object();
  write_outcome_fields(json, outcome, target);
  json.end_object();
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
// alone; not on a collision of paths, where it may be the very file to protect. The error
// itself is what matters, so a report that fails now is left unwritten.
void report_failure(PendingFile* report, const std::exception_ptr& error, const std::function<void(JsonWriter&)>& prefix) {
  if (!report || is_path_collision(error)) return;
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

InputCheck refuse_invalid(const Model& model) {
  InputCheck input = check_input(model.proto);
  if (input.problem) throw InputError(model.path.string(), *input.problem);
  return input;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

namespace {

// The prepared output against its input in ONNX Runtime, unless there is nothing to prove (the
// output is the input) or ONNX Runtime can't load it by its own tables (ops the target allows, or
// left because no rule covers them).
Verification verify_output(const Model& model, const ModelInterface& original, const std::string& input, PendingModel& output,
                           const RewriteResult& result, const ProcessOptions& how) {
  if (!result.changed()) return verification_skipped("identical", "the output is the input, byte for byte", *how.verify);
  const CheckReport ort = check_model(model, find_target("ort"), std::nullopt, false);
  if (!ort.ok()) {
    std::vector<std::string> ops;
    for (const auto& entry : ort.unloadable) ops.push_back(op_text(entry));
    for (const auto& problem : ort.opset_problems) ops.push_back(problem);
    return verification_skipped(
        "not-compared", fmt::format("the rewritten model keeps what ONNX Runtime does not load: {}", fmt::join(ops, ", ")), *how.verify);
  }
  return verify_models(*how.runtime, {input, original}, {output.expose(), interface_of(model.proto.graph())}, *how.verify);
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
  if (how.guard) how.guard->check_model_data(model, how.dry_run ? "" : output);
  const InputCheck checked = refuse_invalid(model);
  if (const auto opsets = impossible_opset_imports(model.proto); !opsets.empty()) throw InputError(input, opsets.front());
  // What the original takes and gives, before the rewrite: the inputs are made from it.
  const ModelInterface original =
      how.runtime ? with_input_shapes(interface_of(model.proto.graph()), options.input_shapes, input) : ModelInterface{};
  outcome.result = rewrite_model(model, rules, options, &checked);
  outcome.check = check_model(model, target, options.max_opset, options.exact_opset);
  if (outcome.result.ir_version_problem) outcome.check.opset_problems.push_back(*outcome.result.ir_version_problem);
  if (how.provenance && outcome.result.changed()) record_provenance(model, outcome.result, options);
  outcome.timing.rewrite = seconds_since(start);
  start = std::chrono::steady_clock::now();
  // A dry run verifies a copy written to a private temporary directory.
  std::unique_ptr<TemporaryDirectory> scratch;
  if (how.dry_run && how.runtime) {
    scratch = std::make_unique<TemporaryDirectory>(fs::temp_directory_path(), "onnx-rewrite-dry-run-");
    processed.output = std::make_unique<PendingModel>(model, scratch->path() / fs::path(input).filename(), how.write);
  } else if (!how.dry_run) {
    processed.output = std::make_unique<PendingModel>(model, output, how.write);
  }
  outcome.timing.write = seconds_since(start);
  outcome.status = !outcome.check.ok() ? "target-not-met" : outcome.result.changed() ? "rewritten" : "unchanged";
  if (how.runtime) {
    start = std::chrono::steady_clock::now();
    outcome.verification = verify_output(model, original, input, *processed.output, outcome.result, how);
    outcome.timing.verify = seconds_since(start);
    if (outcome.verification->failed()) {
      outcome.status = "verify-failed";
      outcome.error = describe_error(std::make_exception_ptr(verify_error(*outcome.verification, output, false)));
    }
  }
  if (scratch) processed.output.reset();  // before its directory goes
  return processed;
}

RewriteOptions reported_options(RewriteOptions options, const TargetDefaultOverrides& overrides) {
  options.simplify = overrides.simplify.value_or(find_target(options.target).simplifies(options.only));
  return options;
}

RewriteOptions effective_options(RewriteOptions options, const TargetDefaultOverrides& overrides) {
  const Target& target = find_target(options.target);
  options.inline_functions = overrides.inline_functions.value_or(!target.local_functions);
  options.simplify = overrides.simplify.value_or(target.simplifies(options.only));
  if (auto cap = target.max_onnx_opset()) options.max_opset = std::min(options.max_opset.value_or(*cap), *cap);
  return options;
}
std::string missing_data_note(const Model& model) {
  const auto& missing = model.missing_external_data;
  std::vector<std::string> names;
  for (const auto& location : missing) names.push_back("'" + printable(location) + "'");
  return fmt::format(
      "the external-data file{} {} {} missing: the weights were not needed here, but the model can't run "
      "(or be rewritten) without them",
      missing.size() == 1 ? "" : "s", fmt::join(names, ", "), missing.size() == 1 ? "is" : "are");
}

const LoadOptions kGraphOnly{.allow_missing_external_data = true};

void print_json_failure(const std::string& input, const std::exception_ptr& error, std::ostream& out) {
  JsonWriter writer;
  writer.begin_object();
  writer.key("model").value(input);
  writer.key("error");
  write_error_json(writer, describe_error(error));
  writer.end_object();
  out << writer.str();
}

}  // namespace onnx_rewrite
