// `rewrite`: one model rewritten, checked against its target and written with its reports.
#include <chrono>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "cli/commands.h"
#include "engine/active_rules.h"
#include "cli/html.h"
#include "cli/outcome.h"
#include "cli/path_guard.h"
#include "onnx_rewrite/error.h"
#include "verify/opset.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

void print_summary(const ModelOutcome& outcome, const std::string& target, bool dry_run, std::ostream& out) {
  const RewriteResult& result = outcome.result;
  const std::string destination = dry_run                             ? "(dry run, nothing written)"
                                  : outcome.status == "verify-failed" ? outcome.output + " (not written: it failed its verification)"
                                                                      : outcome.output;
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

const VerifyOptions* verify_options(const RewriteCommand& command) { return command.verify ? &command.verify_options : nullptr; }

// Every file the command reads and writes, before any of them is touched.
PathGuard guard_paths(const RewriteCommand& command) {
  PathGuard guard;
  guard.reads(command.input, "the input model");
  guard.reads_rules(command.rules.paths);
  for (const auto& [name, file] : command.verify_options.input_files) guard.reads(file, "--inputs " + name);
  if (!command.in_place && !command.dry_run) guard.writes(command.output, "-o");
  if (!command.report.empty()) guard.writes(command.report, "--report");
  if (!command.html.empty()) guard.writes(command.html, "--html");
  return guard;
}

int rewrite_one(const RewriteCommand& command, const PathGuard& guard, PendingFile* report, PendingFile* html, std::ostream& out,
                std::ostream& err) {
  const Target& target = find_target(command.options.target);
  const RuleSet rules = command.rules.load();
  RewriteOptions options = effective_options(command.options, command.overrides);
  active_rules(rules, options);  // unknown --only/--skip ids are usage errors, before any work
  if (html) options.record_matches = kHtmlMatchesPerRule;
  const std::string output = command.in_place ? command.input : command.output;
  if (!command.dry_run) require_directory_of(output, "output");
  ProcessOptions how;
  how.dry_run = command.dry_run;
  how.provenance = command.provenance;
  how.write.allow_overwrite_input = command.in_place;
  how.guard = &guard;
  // Found before any work: without a runtime to run them in, nothing is worth doing.
  const std::optional<Runtime> runtime = command.verify ? std::optional(find_runtime(command.verify_options.runtime)) : std::nullopt;
  if (runtime) how.runtime = &*runtime, how.verify = &command.verify_options;
  Processed processed = process(command.input, output, rules, options, target, how);
  ModelOutcome& outcome = processed.outcome;
  const bool verified = !outcome.verification || !outcome.verification->failed();
  // The page first: a picture that can't be drawn leaves nothing written.
  if (html) {
    html->set_contents(html_report({command.input, command.dry_run ? "(dry run, nothing written)" : output, target.name, outcome.check.ok(),
                                    &outcome.result, &rules, outcome.verification ? &*outcome.verification : nullptr}));
  }
  // Everything is prepared: the model, its data files and the reports appear together (the
  // report alone when the model failed its verification).
  if (processed.output && verified) {
    const auto start = std::chrono::steady_clock::now();
    processed.output->commit();
    outcome.timing.write += seconds_since(start);
  }
  if (report) {
    JsonWriter json;
    json.begin_object();
    write_run_json(json, reported_options(command.options, command.overrides), command.rules, command.provenance, command.dry_run,
                   verify_options(command));
    write_outcome_fields(json, outcome, target.name);
    json.end_object();
    report->set_contents(json.str());
  }
  if (report) report->commit();
  if (html && verified) html->commit();
  print_summary(outcome, target.name, command.dry_run, out);
  if (outcome.verification) print_verification(*outcome.verification, out);
  if (!verified) throw verify_error(*outcome.verification, output, false);
  if (!outcome.check.ok()) {
    print_unmet(Coverage{rules, target, command.options.max_opset}, outcome.check, err);
    return static_cast<int>(ExitCode::kTargetNotMet);
  }
  return 0;
}

}  // namespace

int run_rewrite(const RewriteCommand& command, std::ostream& out, std::ostream& err) {
  if (command.in_place && !command.output.empty()) throw UsageError("--in-place and -o exclude each other");
  if (!command.in_place && !command.dry_run && command.output.empty())
    throw UsageError("rewrite needs -o OUT.onnx (or --in-place, --dry-run)");
  const PathGuard guard = guard_paths(command);
  if (!command.html.empty()) require_graphviz();
  const auto report = reserve_report(command.report);
  const auto html = reserve_report(command.html);
  try {
    return rewrite_one(command, guard, report.get(), html.get(), out, err);
  } catch (const VerifyError&) {
    throw;  // its report is written already, with the verification
  } catch (...) {
    report_failure(report.get(), std::current_exception(), [&](JsonWriter& json) {
      write_run_json(json, reported_options(command.options, command.overrides), command.rules, command.provenance, command.dry_run,
                     verify_options(command));
      json.key("model").value(command.input);
      json.key("output").value(command.in_place ? command.input : command.output);
      json.key("target").value(command.options.target);
      json.key("status").value("failed");
    });
    throw;
  }
}
}  // namespace onnx_rewrite
