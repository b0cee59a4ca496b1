#include "runtime/verification.h"

#include <chrono>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "io/atomic_file.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model_io.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

bool is_tensor(const onnx::ValueInfoProto& value) { return !value.has_type() || value.type().has_tensor_type(); }

onnx::TensorProto read_tensor(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  onnx::TensorProto tensor;
  if (!tensor.ParseFromIstream(&in)) throw InputError(file.string(), "the runtime driver wrote no readable TensorProto");
  return tensor;
}

// What can be said of the rewritten model's outputs alone (its original did not run).
OutputComparison alone(const std::string& name, const fs::path& file) {
  OutputComparison output;
  output.name = name;
  output.status = "not-compared";
  const onnx::TensorProto tensor = read_tensor(file);
  output.data_type = tensor.data_type();
  output.dims.assign(tensor.dims().begin(), tensor.dims().end());
  output.rewritten = stats_of(tensor);
  return output;
}

// The two runs: the original on every input fed (each written to `work`, and listed in
// `verification`), the rewrite on those it declares (a rewritten model lacking one it does not
// read is fine); each asked for the original's tensor outputs it has.
std::vector<ModelRun> plan_runs(const VerifiedModel& original, const VerifiedModel& rewritten, const fs::path& work,
                                const VerifyOptions& options, Verification& verification) {
  std::vector<ModelRun> runs(2);
  for (const auto& feed : make_feeds(original.interface, original.path.string(), options.seed, options.input_files)) {
    const fs::path file = work / fmt::format("input{}.pb", verification.inputs.size());
    write_file_atomically(file, feed.SerializeAsString());
    auto source = options.input_files.find(feed.name());
    verification.inputs.push_back({feed.name(),
                                   feed.data_type(),
                                   {feed.dims().begin(), feed.dims().end()},
                                   source == options.input_files.end() ? "" : source->second.string()});
    runs[0].inputs.emplace_back(feed.name(), file);
  }
  std::set<std::string> rewritten_inputs;
  for (const auto& input : rewritten.interface.inputs) rewritten_inputs.insert(input.name());
  for (const auto& input : runs[0].inputs) {
    if (rewritten_inputs.count(input.first)) runs[1].inputs.push_back(input);
  }
  std::set<std::string> rewritten_outputs;
  for (const auto& output : rewritten.interface.outputs) rewritten_outputs.insert(output.name());
  for (const auto& output : original.interface.outputs) {
    if (!is_tensor(output)) {
      OutputComparison skipped;
      skipped.name = output.name();
      skipped.status = "not-compared";
      skipped.message = "not a tensor: only tensors are compared";
      verification.outputs.push_back(skipped);
      continue;
    }
    runs[0].outputs.push_back(output.name());
    if (rewritten_outputs.count(output.name())) runs[1].outputs.push_back(output.name());
  }
  runs[0].path = original.path;
  runs[1].path = rewritten.path;
  return runs;
}

// When the two runs can't be compared, says why in `verification` and returns true.
bool judged_without_comparing(const RunResult& before, const RunResult& after, const ModelRun& rewritten_run, Verification& verification) {
  if (after.status == "unsupported" || before.status == "unsupported") {
    verification.status = "not-compared";
    verification.reason = after.status == "unsupported" ? after.message : before.message;
    return true;
  }
  // The original loaded but did not run: the inputs don't fit it (a length a Conv can't take, an
  // id the model checks), and the rewrite can't be judged on them, unless it does not even load.
  const bool inputs_unfit = before.status == "run-error" || before.status == "crashed";
  if (after.status == "load-error" || (after.status != "ran" && !inputs_unfit)) {
    verification.status = "rewritten-failed";
    verification.reason = fmt::format("ONNX Runtime {} the rewritten model: {}",
                                      after.status == "load-error" ? "does not load" : "fails to run", after.message);
    return true;
  }
  if (before.status == "ran") return false;
  const std::string rewritten_too = after.status == "ran" ? "" : ", nor does the rewritten model";
  verification.status = "not-compared";
  if (before.status == "crashed") {
    verification.reason = fmt::format("ONNX Runtime died running the original ({}){}", before.message, rewritten_too);
  } else if (inputs_unfit) {
    verification.reason = fmt::format("the original does not run on these inputs ({}){}; give inputs that fit it (--input-shape, --inputs)",
                                      before.message, rewritten_too);
  } else {
    verification.reason = fmt::format(
        "the original does not load in ONNX Runtime ({}), so there is nothing to compare with; the "
        "rewritten model loads and runs",
        before.message);
  }
  for (const auto& name : rewritten_run.outputs) {
    if (after.outputs.count(name)) verification.outputs.push_back(alone(name, after.outputs.at(name)));
  }
  return true;
}

// Every output of the original against the rewrite's; the verdict.
void compare_outputs(const RunResult& before, const RunResult& after, const ModelRun& original_run, const Tolerance& tolerance,
                     Verification& verification) {
  for (const auto& name : original_run.outputs) {
    const onnx::TensorProto expected = read_tensor(before.outputs.at(name));
    auto got = after.outputs.find(name);
    if (got == after.outputs.end()) {
      verification.outputs.push_back(compare_output(name, expected, nullptr, tolerance));
      continue;
    }
    const onnx::TensorProto actual = read_tensor(got->second);
    verification.outputs.push_back(compare_output(name, expected, &actual, tolerance));
  }
  int differing = 0;
  for (const auto& output : verification.outputs) differing += output.status == "mismatch" || output.status == "missing";
  verification.status = differing ? "mismatch" : "match";
  if (differing) {
    verification.reason = fmt::format("{} of {} output{} differ{}", differing, verification.outputs.size(),
                                      verification.outputs.size() == 1 ? "" : "s", differing == 1 ? "s" : "");
  }
}

}  // namespace

Verification verification_skipped(const std::string& status, const std::string& reason, const VerifyOptions& options) {
  Verification verification;
  verification.status = status;
  verification.reason = reason;
  verification.seed = options.seed;
  verification.tolerance = options.tolerance;
  return verification;
}

Verification verify_models(const Runtime& runtime, const VerifiedModel& original, const VerifiedModel& rewritten,
                           const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Verification verification = verification_skipped("", "", options);
  const TemporaryDirectory work(fs::temp_directory_path(), "onnx-rewrite-verify-");
  const std::vector<ModelRun> runs = plan_runs(original, rewritten, work.path(), options, verification);

  const auto results = run_models(runtime, runs, work.path(), options.threads);
  const RunResult& before = results[0];
  const RunResult& after = results[1];
  for (const RunResult* result : {&after, &before}) {
    if (!result->version.empty()) verification.runtime = result->runtime, verification.runtime_version = result->version;
  }
  if (verification.runtime.empty()) verification.runtime = runtime.name;
  verification.original_run = {before.load_seconds, before.run_seconds};
  verification.rewritten_run = {after.load_seconds, after.run_seconds};
  if (before.status != "ran") verification.original_error = before.message;
  if (after.status != "ran") verification.rewritten_error = after.message;
  verification.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!judged_without_comparing(before, after, runs[1], verification))
    compare_outputs(before, after, runs[0], options.tolerance, verification);
  return verification;
}

}  // namespace onnx_rewrite
