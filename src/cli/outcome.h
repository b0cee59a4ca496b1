// What the subcommands share (outcome.cc; a file per subcommand uses it): one model's outcome,
// how it is produced, and how it is reported (JSON, JSON Lines, JUnit). Internal to the CLI.
#pragma once

#include <chrono>
#include <exception>
#include <ostream>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/json.h"
#include "cli/junit.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/target.h"
#include "onnx_rewrite/verify.h"

namespace onnx_rewrite {

// A loaded model that lives until the command ends. When the process exits right after (the
// CLI), it is left to the operating system: freeing millions of protobuf objects one by one
// costs seconds on huge graphs and buys nothing.
class LoadedModel {
 public:
  explicit LoadedModel(const std::string& path, bool may_leave = true, const LoadOptions& options = {});
  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  Model& operator*() { return *model_; }

 private:
  std::unique_ptr<Model> model_;
  bool leave_;
};

// inspect and check read no weights: a graph-only download can be looked at.
extern const LoadOptions kGraphOnly;
// A note for a model whose weights' files are not there (a graph-only download).
std::string missing_data_note(const Model& model);
// A graph ONNX Runtime would refuse (a cycle, a value computed twice or by nothing) is bad input:
// rewriting or checking it would only hide that.
InputCheck refuse_invalid(const Model& model);

std::string op_name(const OpKey& key);  // "domain.op" as the summaries print it
double seconds_since(std::chrono::steady_clock::time_point start);

// What an error is about, for the JSON error object (docs/cli.md, "Errors in JSON"): the file it
// names (none for usage errors), the message, and the exit code main.cc gives it.
struct ErrorInfo {
  std::string file;
  std::string message;
  ExitCode exit_code = ExitCode::kBadInput;
};
ErrorInfo describe_error(const std::exception_ptr& error);
void write_error_json(JsonWriter& json, const ErrorInfo& error);  // {"file", "message", "exit_code"}

// Seconds spent on one model, by stage.
struct Timing {
  double load = 0;
  double rewrite = 0;  // rewriting and checking the target
  double write = 0;    // preparing and committing the output
  double verify = 0;   // --verify: running both models and comparing
  double total() const { return load + rewrite + write + verify; }
};

struct ModelOutcome {
  std::string input;
  std::string output;
  std::string status;  // rewritten, unchanged, target-not-met, verify-failed (error set too), failed
  std::optional<ErrorInfo> error;
  RewriteResult result;
  CheckReport check;
  std::optional<Verification> verification;  // --verify
  Timing timing;
};

// The "verify" object of a report (docs/cli.md).
void write_verify_json(JsonWriter& json, const Verification& verification);
// The lines a summary gives a verification: one per output (only those with something to say when
// there are many), then the verdict.
void print_verification(const Verification& verification, std::ostream& out);
// The error a verification that failed ends the command with, about `file` (the rewritten model).
VerifyError verify_error(const Verification& verification, const std::string& file, bool written);

// --json on a failure: the model and the error object on stdout, as CI reads it; the one-line
// error still goes to stderr.
void print_json_failure(const std::string& input, const std::exception_ptr& error, std::ostream& out);

// The rules covering what a target can't load, where the caller has them (check does; a rewrite's
// report says what the rules it ran left).
// A rule whose replacement needs a higher ai.onnx opset than --opset allows doesn't cover a node.
struct Coverage {
  const RuleSet& rules;
  const Target& target;
  std::optional<int> max_opset = std::nullopt;
};
void write_check_json(JsonWriter& json, const CheckReport& report, const Coverage* coverage = nullptr);
// "; rewrite covers it with RULE" / "; no built-in rule covers it": check's answer to "and now?".
std::string coverage_text(const Coverage& coverage, const Unloadable& entry);
std::string op_text(const Unloadable& entry);
// The nodes a target can't load, on stderr after a rewrite.
void print_unmet(const Coverage& coverage, const CheckReport& report, std::ostream& err);

// A failed model's error for a line that already names the model: the file only when it is another.
std::string error_text(const ModelOutcome& outcome);
int64_t node_total(const OpCounts& counts);

// A model's report object (or one with the same fields) as a JUnit testcase of `command`.
JunitCase junit_case(const JsonValue& model, const std::string& command);

// One model's report fields, and the same as an object (docs/cli.md, "--report").
void write_outcome_fields(JsonWriter& json, const ModelOutcome& outcome, const std::string& target);
void write_outcome_json(JsonWriter& json, const ModelOutcome& outcome, const std::string& target);
// The "options" object of a report; compact, it is what --resume compares. `verify`: --verify's
// options, null without it.
void write_options_json(JsonWriter& json, const RewriteOptions& options, const RuleSources& rules, bool provenance,
                        const VerifyOptions* verify);
// "tool": {"name", "version"}, "options": {...}, "dry_run": the fields every report starts with.
void write_run_json(JsonWriter& json, const RewriteOptions& options, const RuleSources& rules, bool provenance, bool dry_run,
                    const VerifyOptions* verify);

// One model loaded, rewritten and checked, its output prepared (unless dry) and verified (with
// --verify) but not yet in place.
struct Processed {
  ModelOutcome outcome;
  std::unique_ptr<PendingModel> output;
};
class PathGuard;

struct ProcessOptions {
  bool dry_run = false;
  bool provenance = true;  // record what was done in the output's metadata_props
  bool in_batch = false;   // free each model when done (a long-running batch)
  WriteOptions write;
  const PathGuard* guard = nullptr;  // the model's data files are checked against it once loaded
  // --verify: the prepared output (under --dry-run, one in a private temporary directory) is run
  // in this runtime with these options; a failure makes the status verify-failed.
  const Runtime* runtime = nullptr;
  const VerifyOptions* verify = nullptr;
};
Processed process(const std::string& input, const std::string& output, const RuleSet& rules, const RewriteOptions& options,
                  const Target& target, const ProcessOptions& how);

// What the target implies where the command line is silent: inlining for runtimes that don't run
// model-local functions, simplification, and its highest opset.
RewriteOptions effective_options(RewriteOptions options, const TargetDefaultOverrides& overrides);
// The options as the command line gave them, for reports, with what the target decided where it
// was silent about simplifying.
RewriteOptions reported_options(RewriteOptions options, const TargetDefaultOverrides& overrides);

// Checked before any work, so that a mistyped path costs nothing and leaves nothing half done.
void require_directory_of(const std::string& path, const std::string& what);
// A report's temporary file, made before any work (none for an empty path).
std::unique_ptr<PendingFile> reserve_report(const std::string& path);
// On a failed command: the report holds `prefix`'s fields and the error object, committed alone
// (nothing on a collision of paths: PathCollision).
void report_failure(PendingFile* report, const std::exception_ptr& error, const std::function<void(JsonWriter&)>& prefix);

}  // namespace onnx_rewrite
