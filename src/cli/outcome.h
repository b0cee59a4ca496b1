// What the subcommands share (commands.cc, batch.cc): one model's outcome, how it is produced,
// and how it is reported (JSON, JSON Lines, JUnit). Internal to the CLI; not installed.
#pragma once

#include <exception>
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
  double total() const { return load + rewrite + write; }
};

struct ModelOutcome {
  std::string input;
  std::string output;
  std::string status;  // rewritten, unchanged, target-not-met, failed
  std::optional<ErrorInfo> error;
  RewriteResult result;
  CheckReport check;
  Timing timing;
};

// A failed model's error for a line that already names the model: the file only when it is another.
std::string error_text(const ModelOutcome& outcome);
int64_t node_total(const OpCounts& counts);

// A model's report object (or one with the same fields) as a JUnit testcase of `command`.
JunitCase junit_case(const JsonValue& model, const std::string& command);

// One model's report object (docs/cli.md, "--report").
void write_outcome_json(JsonWriter& json, const ModelOutcome& outcome, const std::string& target);
// The "options" object of a report; compact, it is what --resume compares.
void write_options_json(JsonWriter& json, const RewriteOptions& options, const RuleSources& rules, bool provenance);
// "tool": {"name", "version"}, "options": {...}, "dry_run": the fields every report starts with.
void write_run_json(JsonWriter& json, const RewriteOptions& options, const RuleSources& rules, bool provenance, bool dry_run);

// One model loaded, rewritten and checked, its output prepared (unless dry) but not yet in place.
struct Processed {
  ModelOutcome outcome;
  std::unique_ptr<PendingModel> output;
};
struct ProcessOptions {
  bool dry_run = false;
  bool provenance = true;  // record what was done in the output's metadata_props
  bool in_batch = false;   // free each model when done (a long-running batch)
  WriteOptions write;
};
Processed process(const std::string& input, const std::string& output, const RuleSet& rules, const RewriteOptions& options,
                  const Target& target, const ProcessOptions& how);

// What the target implies where the command line is silent: inlining for runtimes that don't run
// model-local functions, and its highest opset.
RewriteOptions effective_options(RewriteOptions options, std::optional<bool> inline_functions);

// Checked before any work, so that a mistyped path costs nothing and leaves nothing half done.
void require_directory_of(const std::string& path, const std::string& what);
// A report's temporary file, made before any work (none for an empty path).
std::unique_ptr<PendingFile> reserve_report(const std::string& path);
// On a failed command: the report holds `prefix`'s fields and the error object, committed alone.
void report_failure(PendingFile* report, const std::exception_ptr& error, const std::function<void(JsonWriter&)>& prefix);

}  // namespace onnx_rewrite
