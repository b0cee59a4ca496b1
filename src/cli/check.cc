// `check`: what a target can't load, and the rules that cover it.
#include <chrono>
#include <functional>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/outcome.h"
#include "cli/path_guard.h"
#include "onnx_rewrite/error.h"

namespace onnx_rewrite {

namespace {

int check_one(const std::string& input, const std::string& target_name, std::optional<int> max_opset, const InputShapes& input_shapes,
              const RuleSources& sources, const PathGuard& guard, bool json, std::ostream& out, CheckReport& report) {
  const Target& target = find_target(target_name);
  const RuleSet rules = sources.load();
  const Coverage coverage{rules, target, max_opset};
  LoadedModel loaded(input, true, kGraphOnly);
  Model& model = *loaded;
  guard.check_model_data(model, "");
  refuse_invalid(model);
  apply_input_shapes(*model.proto.mutable_graph(), input_shapes, input);
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
      out << fmt::format("  {} x{} ({}): {}{}\n", op_text(entry), entry.count, entry.place, entry.reason, coverage_text(coverage, entry));
    }
    for (const auto& problem : report.opset_problems) out << "  " << problem << "\n";
  }
  if (!json) {
    for (const auto& note : report.notes) out << "  note: " << note << "\n";
  }
  return report.ok() ? 0 : static_cast<int>(ExitCode::kTargetNotMet);
}

}  // namespace

int run_check(const std::string& input, const std::string& target_name, std::optional<int> max_opset, const RuleSources& rules, bool json,
              std::ostream& out, std::ostream& err, const std::string& junit, const InputShapes& input_shapes) {
  (void)err;
  PathGuard guard;
  guard.reads(input, "the input model");
  guard.reads_rules(rules.paths);
  if (!junit.empty()) guard.writes(junit, "--junit");
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
    const int code = check_one(input, target_name, max_opset, input_shapes, rules, guard, json, out, report);
    commit_junit([&](JsonWriter& model) {
      model.key("status").value(report.ok() ? "met" : "target-not-met");
      model.key("check");
      write_check_json(model, report);
    });
    return code;
  } catch (...) {
    const auto error = std::current_exception();
    if (json) print_json_failure(input, error, out);
    if (is_path_collision(error)) throw;
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

}  // namespace onnx_rewrite
