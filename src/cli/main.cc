// onnx-rewrite: the command line (docs/cli.md). Parses options and hands over to commands.h.
// run_command_line is the tool's main, and `python3 -m onnx_rewrite`'s (python/).
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <google/protobuf/stubs/logging.h>

#include "cli/commands.h"
#include "cli/outcome.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/target.h"
#include "verify/opset.h"

namespace {

using namespace onnx_rewrite;

constexpr const char* kProgram = "onnx-rewrite";

// A repeatable option takes one value per occurrence (--only A --only B): CLI11 would otherwise
// let it swallow the words after it, the model path included.
CLI::Option* one_value_each(CLI::Option* option) { return option->allow_extra_args(false); }

void add_rule_sources(CLI::App& command, RuleSources& sources) {
  one_value_each(command.add_option("--rules", sources.paths, "Rule file or directory of *.rules files to add (repeatable)"));
  command.add_flag("--no-builtin-rules{false}", sources.builtin, "Drop the rules compiled into the binary");
}

// The targets compiled in, for help texts: "onnx, onnx-opset13, openvino, ort, tensorrt".
std::string target_names() {
  std::string names;
  for (const Target* target : all_targets()) names += (names.empty() ? "" : ", ") + target->name;
  return names;
}

void add_target(CLI::App& command, std::string& target, std::optional<int>& opset) {
  command.add_option("--target", target, "Runtime the model must load in: " + target_names() + " (see `targets`), or a .target file")
      ->capture_default_str();
  command.add_option("--opset", opset, "Highest ai.onnx opset the runtime loads (default: no limit)")->check(CLI::Range(1, 1000));
}

// "NAME=VALUE" split at the last '=' (a value holds none; a name rarely does).
std::pair<std::string, std::string> assignment(const std::string& option, const std::string& text, const std::string& form) {
  const auto at = text.rfind('=');
  if (at == std::string::npos || at == 0) throw CLI::ValidationError(option, "'" + text + "': expected " + form);
  return {text.substr(0, at), text.substr(at + 1)};
}

// --input-shape NAME=D0,D1,... (repeatable; NAME= for a scalar). What the model declares is
// checked once it is loaded (apply_input_shapes).
void add_input_shapes(CLI::App& command, InputShapes& shapes) {
  one_value_each(command.add_option_function<std::vector<std::string>>(
      "--input-shape",
      [&shapes](const std::vector<std::string>& values) {
        for (const auto& value : values) {
          const auto [name, text] = assignment("--input-shape", value, "NAME=D0,D1,... (NAME= for a scalar)");
          std::vector<int64_t> dims;
          std::stringstream in(text);
          for (std::string dim; std::getline(in, dim, ',');) {
            size_t used = 0;
            try {
              dims.push_back(std::stoll(dim, &used));
            } catch (...) {
              used = 0;
            }
            if (used == 0 || used != dim.size())
              throw CLI::ValidationError("--input-shape", "'" + value + "': '" + dim + "' is not a whole number");
          }
          if (!shapes.emplace(name, dims).second) throw CLI::ValidationError("--input-shape", "'" + name + "' given twice");
        }
      },
      "Fix a graph input's dims before anything else (repeatable): NAME=D0,D1,... as if the model had been exported with them"));
}

// What --verify and `verify` share; `verify_flag`: the flag they need, when there is one.
void add_verify_options(CLI::App& command, VerifyOptions& options, CLI::Option* verify_flag) {
  std::vector<CLI::Option*> added;
  added.push_back(command
                      .add_option("--runtime", options.runtime,
                                  "Run ONNX Runtime from node (npm onnxruntime-node) or python (pip onnxruntime); default: "
                                  "$ONNX_REWRITE_RUNTIME, else the first found")
                      ->check(CLI::IsMember({"node", "python"})));
  added.push_back(command.add_option("--seed", options.seed, "Seed of the random inputs")->capture_default_str());
  added.push_back(command.add_option("--rtol", options.tolerance.rtol, "Relative tolerance (default by element type: float32 1e-4)")
                      ->check(CLI::NonNegativeNumber));
  added.push_back(command.add_option("--atol", options.tolerance.atol, "Absolute tolerance (default by element type: float32 1e-5)")
                      ->check(CLI::NonNegativeNumber));
  if (!verify_flag) return;
  for (auto* option : added) option->needs(verify_flag);
}

// --inputs NAME=FILE (repeatable): a .npy or TensorProto .pb fed to input NAME instead of random values.
CLI::Option* add_input_files(CLI::App& command, std::map<std::string, std::filesystem::path>& files) {
  return one_value_each(command.add_option_function<std::vector<std::string>>(
      "--inputs",
      [&files](const std::vector<std::string>& values) {
        for (const auto& value : values) {
          const auto [name, file] = assignment("--inputs", value, "NAME=FILE (.npy, or a TensorProto .pb)");
          if (file.empty()) throw CLI::ValidationError("--inputs", "'" + value + "': no file");
          if (!files.emplace(name, file).second) throw CLI::ValidationError("--inputs", "'" + name + "' given twice");
        }
      },
      "Feed input NAME the array in FILE (.npy, or a TensorProto .pb) instead of random values (repeatable)"));
}

void add_rewrite_options(CLI::App& command, RewriteOptions& options, RuleSources& sources, TargetDefaultOverrides& overrides,
                         std::string& report, bool& provenance) {
  add_target(command, options.target, options.max_opset);
  add_rule_sources(command, sources);
  one_value_each(command.add_option("--only", options.only, "Apply only this rule id (repeatable)"));
  one_value_each(command.add_option("--skip", options.skip, "Don't apply this rule id (repeatable)"));
  // A flag callback: CLI11 would set an optional<bool> to false when the flag is absent.
  command.add_flag_callback(
      "--inline-functions", [&overrides] { overrides.inline_functions = true; },
      "Inline calls to model-local functions (default: for --target onnx only)");
  auto* simplify = command.add_flag_callback(
      "--simplify", [&overrides] { overrides.simplify = true; },
      "Fold what the model already decides (constants, shape arithmetic of static dims), drop Identity and dead nodes, "
      "Constant nodes as initializers, unused and duplicate initializers (default: --target ort)");
  command
      .add_flag_callback(
          "--no-simplify", [&overrides] { overrides.simplify = false; }, "Don't simplify (for --target ort)")
      ->excludes(simplify);
  command.add_flag("--fuse", options.fuse,
                   "Also fuse spelled-out patterns into the target's own ops where that is opt-in (--target onnx: "
                   "LayerNormalization, Gelu, HardSwish, ...)");
  command
      .add_option_function<int>(
          "--to-opset", [&options](const int& opset) { options.max_opset = opset, options.exact_opset = true; },
          "Convert to exactly this ai.onnx opset, up or down; exit 1 naming what can't be converted")
      // Beyond the version tables nothing can be converted: a usage error before any work.
      ->check(CLI::Range(1, OpRegistry::builtin().table("")->highest_version(), "opset"))
      ->excludes("--opset");
  command
      .add_option("--ir-version", options.ir_version,
                  "Write this IR version (older runtimes refuse IR 9/10); exit 1 naming what the model uses that it lacks")
      ->check(CLI::Range(3, 11));
  command.add_flag("--no-canonicalize{false}", options.canonicalize,
                   "Don't canonicalize before matching (fold small constants, Sum of two as Add: the canonicalize-* rules)");
  command.add_option("--max-rounds", options.max_rounds, "Rounds before rules that keep firing are an error")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  command.add_option("--report", report, "Also write what happened as JSON to FILE");
  command.add_flag("--no-provenance{false}", provenance,
                   "Don't record in the output's metadata_props what was done (tool, target, opset, rules)");
  add_input_shapes(command, options.input_shapes);
}

// --verify and its options, for rewrite and batch.
CLI::Option* add_verify_flag(CLI::App& command, bool& verify, VerifyOptions& options) {
  auto* flag = command.add_flag("--verify", verify,
                                "Run the output and the input in ONNX Runtime on the same random inputs before writing; on a mismatch "
                                "write nothing (exit 4)");
  add_verify_options(command, options, flag);
  return flag;
}

// CLI11 reads a word that names no subcommand as a stray argument and then says only that a
// subcommand is required; say which word it was and what the subcommands are.
std::string parse_error_text(const CLI::App& app, int argc, char** argv, const CLI::ParseError& error) {
  const std::string first = argc > 1 ? argv[1] : "";
  std::vector<std::string> names;
  for (const auto* command : app.get_subcommands({})) names.push_back(command->get_name());
  if (first.empty() || first.front() == '-' || std::find(names.begin(), names.end(), first) != names.end()) {
    return error.what();
  }
  std::string known;
  for (const auto& name : names) known += (known.empty() ? "" : ", ") + name;
  return "unknown subcommand '" + first + "' (known: " + known + ")";
}

// A subcommand: its CLI11 app, and what runs it once the command line is parsed. The runner owns
// the values the options parse into.
struct Subcommand {
  CLI::App* app;
  std::function<int()> run;
};

Subcommand add_rewrite(CLI::App& app) {
  auto rewrite = std::make_shared<RewriteCommand>();
  auto* command = app.add_subcommand("rewrite", "Apply rules to one model and write the result");
  command->add_option("model", rewrite->input, "Input model (.onnx)")->required();
  command->add_option("-o,--output", rewrite->output, "Output model (.onnx)");
  add_rewrite_options(*command, rewrite->options, rewrite->rules, rewrite->overrides, rewrite->report, rewrite->provenance);
  command->add_option("--html", rewrite->html,
                      "Also write a page showing the op table and each rule's first matches before and after (needs Graphviz)");
  command->add_flag("--dry-run", rewrite->dry_run, "Rewrite and report, but write nothing");
  command->add_flag("--in-place", rewrite->in_place, "Replace the input file");
  command->add_option("--explain", rewrite->options.explain,
                      "For nodes with this op type or name, print each rule tried and why it matched or not");
  auto* verify_flag = add_verify_flag(*command, rewrite->verify, rewrite->verify_options);
  add_input_files(*command, rewrite->verify_options.input_files)->needs(verify_flag);
  return {command, [rewrite] {
            rewrite->options.explain_out = &std::cout;
            if (::isatty(STDERR_FILENO)) rewrite->options.progress_out = &std::cerr;
            return run_rewrite(*rewrite, std::cout, std::cerr);
          }};
}

Subcommand add_check(CLI::App& app) {
  struct CheckCommand {
    std::string model, target = "onnx", junit;
    std::optional<int> opset;
    bool json = false;
    RuleSources rules;
    InputShapes shapes;
  };
  auto check = std::make_shared<CheckCommand>();
  auto* command = app.add_subcommand("check", "List the nodes a target runtime can't load (exit 1 if any)");
  command->add_option("model", check->model, "Model (.onnx)")->required();
  add_target(*command, check->target, check->opset);
  command->add_flag("--json", check->json, "Machine-readable output");
  command->add_option("--junit", check->junit, "Also write JUnit XML to FILE: a testcase for the model and target");
  add_rule_sources(*command, check->rules);
  add_input_shapes(*command, check->shapes);
  return {command, [check] {
            return run_check(check->model, check->target, check->opset, check->rules, check->json, std::cout, std::cerr, check->junit,
                             check->shapes);
          }};
}

Subcommand add_verify(CLI::App& app) {
  auto verify = std::make_shared<VerifyCommand>();
  auto* command = app.add_subcommand(
      "verify", "Run a model and its rewrite in ONNX Runtime on the same inputs and compare every output (exit 4 if they differ)");
  command->add_option("original", verify->original, "The model as it was (.onnx)")->required();
  command->add_option("rewritten", verify->rewritten, "Its rewrite (.onnx)")->required();
  add_verify_options(*command, verify->options, nullptr);
  add_input_files(*command, verify->options.input_files);
  add_input_shapes(*command, verify->input_shapes);
  command->add_flag("--json", verify->json, "Machine-readable output");
  return {command, [verify] { return run_verify(*verify, std::cout); }};
}

Subcommand add_inspect(CLI::App& app) {
  struct InspectCommand {
    std::string model;
    bool json = false;
    RuleSources rules;
  };
  auto inspect = std::make_shared<InspectCommand>();
  auto* command = app.add_subcommand("inspect", "Describe a model: opsets, ops, custom ops and covering rules, weights");
  command->add_option("model", inspect->model, "Model (.onnx)")->required();
  command->add_flag("--json", inspect->json, "Machine-readable output");
  add_rule_sources(*command, inspect->rules);
  return {command, [inspect] { return run_inspect(inspect->model, inspect->rules, inspect->json, std::cout); }};
}

Subcommand add_rules(CLI::App& app) {
  struct RulesCommand {
    RuleSources listed;
    bool json = false;
    std::vector<std::string> tested;
  };
  auto rules = std::make_shared<RulesCommand>();
  auto* command = app.add_subcommand("rules", "List the rules: ids, descriptions, targets, what they match and need");
  add_rule_sources(*command, rules->listed);
  command->add_flag("--json", rules->json, "Machine-readable output");
  one_value_each(command->add_option("--test", rules->tested,
                                     "Rule file or directory: run each of its rules' examples against their expect (repeatable)"));
  return {command, [rules] {
            return rules->tested.empty() ? run_rules(rules->listed, rules->json, std::cout)
                                         : run_rule_tests(rules->tested, rules->listed, rules->json, std::cout);
          }};
}

Subcommand add_targets(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* command = app.add_subcommand("targets", "List the targets: what each runtime loads, and what it builds on");
  command->add_flag("--json", *json, "Machine-readable output");
  return {command, [json] { return run_targets(*json, std::cout); }};
}

Subcommand add_batch(CLI::App& app) {
  auto batch = std::make_shared<BatchCommand>();
  auto* command = app.add_subcommand("batch", "Rewrite every *.onnx under directories into OUT_DIR");
  command->add_option("inputs", batch->inputs, "Input directories (or model files)")->required();
  command->add_option("-o,--output", batch->output_dir, "Output directory")->required();
  command->add_option("-j,--jobs", batch->jobs, "Models rewritten in parallel (default: one per core)")->check(CLI::Range(1, 1024));
  add_rewrite_options(*command, batch->options, batch->rules, batch->overrides, batch->report, batch->provenance);
  command->add_option("--junit", batch->junit, "Also write JUnit XML to FILE: a testcase per model");
  command->add_option("--report-jsonl", batch->report_jsonl, "Append a JSON line to FILE as each model finishes");
  command->add_option("--resume", batch->resume,
                      "Skip models that FILE (an earlier --report-jsonl) shows done with the same options and input");
  command->add_option("--shard", batch->shard, "Rewrite only shard K of N (K/N, 1-based; a stable split by relative path)");
  add_verify_flag(*command, batch->verify, batch->verify_options);
  return {command, [batch] {
            batch->progress_line = ::isatty(STDERR_FILENO);
            return run_batch(*batch, std::cout, std::cerr);
          }};
}

Subcommand add_merge_reports(CLI::App& app) {
  auto merge = std::make_shared<MergeCommand>();
  auto* command = app.add_subcommand("merge-reports", "Join batch --report-jsonl files (shards) into one --report");
  command->add_option("reports", merge->inputs, "JSON Lines files from batch --report-jsonl")->required();
  command->add_option("-o,--output", merge->output, "The merged report (JSON)");
  command->add_option("--junit", merge->junit, "Also write JUnit XML to FILE");
  return {command, [merge] { return run_merge_reports(*merge, std::cout, std::cerr); }};
}

}  // namespace

namespace onnx_rewrite {

int run_command_line(int argc, char** argv) {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});

  CLI::App app{"Rewrites ONNX models with pattern rules so that a target runtime can load them.", kProgram};
  app.set_version_flag("--version", std::string(kProgram) + " " + ONNX_REWRITE_VERSION);
  app.require_subcommand(1);
  // In the order --help lists them.
  const std::vector<Subcommand> subcommands = {add_rewrite(app), add_check(app),   add_verify(app), add_inspect(app),
                                               add_rules(app),   add_targets(app), add_batch(app),  add_merge_reports(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << kProgram << ": error: " << printable(parse_error_text(app, argc, argv, e)) << " (see --help)\n";
    return static_cast<int>(ExitCode::kUsage);
  }

  try {
    for (const auto& subcommand : subcommands) {
      if (*subcommand.app) return subcommand.run();
    }
  } catch (...) {
    // One mapping from exception to message and exit code, shared with the JSON error objects.
    const ErrorInfo error = describe_error(std::current_exception());
    std::cerr << kProgram << ": error: " << (error.file.empty() ? "" : printable(error.file) + ": ") << printable(error.message) << "\n";
    return static_cast<int>(error.exit_code);
  }
  return static_cast<int>(ExitCode::kUsage);
}

}  // namespace onnx_rewrite

// The Python module compiles this file too (python3 -m onnx_rewrite), without a main of its own.
#ifndef ONNX_REWRITE_NO_MAIN
int main(int argc, char** argv) {
  onnx_rewrite::leave_models_to_process_exit();
  return onnx_rewrite::run_command_line(argc, argv);
}
#endif
