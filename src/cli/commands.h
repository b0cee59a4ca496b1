// The CLI's subcommands as library functions (docs/cli.md): each returns an exit code and
// prints to the streams it is given; errors in input files are thrown as InputError, bad
// combinations of options as UsageError.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "onnx_rewrite/engine.h"
#include "rules/rule.h"
#include "runtime/verification.h"

namespace onnx_rewrite {

// Options whose default is the target's; set when the command line says.
struct TargetDefaultOverrides {
  std::optional<bool> inline_functions;  // --inline-functions; default: for targets that don't run local functions
  std::optional<bool> simplify;          // --simplify / --no-simplify; default: the target's `simplify`
};

struct RuleSources {
  bool builtin = true;             // false: --no-builtin-rules
  std::vector<std::string> paths;  // --rules
  RuleSet load() const;
};

struct RewriteCommand {
  std::string input;
  std::string output;  // -o
  RewriteOptions options;
  RuleSources rules;
  TargetDefaultOverrides overrides;  // --inline-functions, --[no-]simplify
  std::string report;                // --report FILE.json
  std::string html;                  // --html FILE.html
  bool dry_run = false;
  bool in_place = false;
  bool provenance = true;  // false: --no-provenance
  bool verify = false;     // --verify: proven in ONNX Runtime before anything is written
  VerifyOptions verify_options;
};

struct BatchCommand {
  std::vector<std::string> inputs;  // directories (or single model files)
  std::string output_dir;
  int jobs = 0;  // 0: one per core
  RewriteOptions options;
  RuleSources rules;
  TargetDefaultOverrides overrides;
  std::string report;
  std::string junit;         // --junit FILE.xml
  std::string report_jsonl;  // --report-jsonl FILE: a line per model as it finishes
  std::string resume;        // --resume FILE: skip models an earlier run's lines show done
  std::string shard;         // --shard K/N
  bool provenance = true;
  bool progress_line = false;  // a terminal: one updating line instead of a line per model
  bool verify = false;         // --verify: each model proven before it is written
  VerifyOptions verify_options;
};

// `verify ORIGINAL REWRITTEN`.
struct VerifyCommand {
  std::string original;
  std::string rewritten;
  InputShapes input_shapes;  // --input-shape: the shapes the inputs are made with
  VerifyOptions options;
  bool json = false;
};

// `merge-reports`: shards' --report-jsonl files joined into the report one unsharded batch writes.
struct MergeCommand {
  std::vector<std::string> inputs;
  std::string output;  // -o REPORT.json
  std::string junit;
};

// For a process that exits right after its command (the CLI): models are not freed one object
// at a time but left to the operating system.
void leave_models_to_process_exit();

// The whole command line (main.cc): parses argv as `onnx-rewrite` does, runs the subcommand,
// prints errors, returns the exit code. The tool's main, and `python3 -m onnx_rewrite`'s.
int run_command_line(int argc, char** argv);

int run_rewrite(const RewriteCommand& command, std::ostream& out, std::ostream& err);
int run_check(const std::string& input, const std::string& target, std::optional<int> max_opset, const RuleSources& rules, bool json,
              std::ostream& out, std::ostream& err, const std::string& junit = "", const InputShapes& input_shapes = {});
int run_inspect(const std::string& input, const RuleSources& rules, bool json, std::ostream& out);
int run_rules(const RuleSources& rules, bool json, std::ostream& out);
// `rules --test PATH...`: each rule in the files runs its example (with `rules` loaded too, for
// `expect like` and the rules they sit beside); exit 1 if any does not rewrite as documented.
int run_rule_tests(const std::vector<std::string>& paths, const RuleSources& rules, bool json, std::ostream& out);
int run_targets(bool json, std::ostream& out);
int run_batch(const BatchCommand& command, std::ostream& out, std::ostream& err);
// Exit 4 when the rewritten model computes other numbers than the original or does not run.
int run_verify(const VerifyCommand& command, std::ostream& out);
// Exit 1 if a merged model failed or missed the target, or the lines don't cover the batch.
int run_merge_reports(const MergeCommand& command, std::ostream& out, std::ostream& err);

}  // namespace onnx_rewrite
