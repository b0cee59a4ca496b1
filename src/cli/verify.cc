// `verify ORIGINAL REWRITTEN`, and how a verification is reported wherever one ran (rewrite and
// batch --verify): the "verify" object of a report, the summary's lines, the error of a failure.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/outcome.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {

namespace {

// With more outputs than this, the summary names only those with something to say.
constexpr size_t kOutputsListed = 8;

void optional_number(JsonWriter& json, const char* key, const std::optional<double>& value) {
  json.key(key);
  if (value) json.value(*value);
  else json.null();
}

void optional_text(JsonWriter& json, const char* key, const std::string& text) {
  json.key(key);
  if (text.empty()) json.null();
  else json.value(text);
}

void write_dims(JsonWriter& json, const std::vector<int64_t>& dims) {
  json.begin_array();
  for (int64_t dim : dims) json.value(dim);
  json.end_array();
}

std::vector<std::string> flags_of(const OutputComparison& output) {
  std::vector<std::string> flags;
  if (output.status == "not-compared" ? output.rewritten.constant : output.constant()) flags.push_back("constant");
  if (output.non_finite()) flags.push_back("non-finite");
  return flags;
}

std::string type_text(int32_t data_type, const std::vector<int64_t>& dims) {
  return fmt::format("{} [{}]", data_type_name(data_type), fmt::join(dims, ", "));
}

std::string output_line(const OutputComparison& output) {
  std::string line = fmt::format("    {}", output.name);
  if (output.data_type) line += " " + type_text(output.data_type, output.dims);
  line += ": ";
  if (output.status == "match" || output.status == "mismatch") {
    line += output.status == "match" ? "match" : "MISMATCH, " + output.message;
    line +=
        fmt::format(", max abs {:.3g}, max rel {:.3g} (rtol {:g}, atol {:g})", output.max_abs, output.max_rel, output.rtol, output.atol);
  } else if (output.status == "missing") {
    line += "MISSING: " + output.message;
  } else {
    line += output.message.empty() ? "not compared" : "not compared: " + output.message;
  }
  const auto& sides = output.status == "not-compared" ? std::vector<const ValueStats*>{&output.rewritten}
                                                      : std::vector<const ValueStats*>{&output.original, &output.rewritten};
  if (output.non_finite()) {
    std::vector<std::string> counts;
    for (const ValueStats* side : sides) counts.push_back(fmt::format("{} NaN, {} Inf", side->nan, side->inf));
    line += fmt::format("; non-finite values ({})", fmt::join(counts, " | "));
  }
  if (output.status == "not-compared" ? output.rewritten.constant : output.constant()) {
    line += output.status == "not-compared" ? "; constant (it may not depend on the inputs)"
                                            : "; constant on both sides (it may not depend on the inputs, and then proves little)";
  }
  return line;
}

}  // namespace

void write_verify_json(JsonWriter& json, const Verification& verification) {
  json.begin_object();
  json.key("status").value(verification.status);
  optional_text(json, "reason", verification.reason);
  json.key("runtime");
  if (verification.runtime.empty()) {
    json.null();
  } else {
    json.begin_object().key("name").value(verification.runtime);
    optional_text(json, "version", verification.runtime_version);
    json.end_object();
  }
  json.key("seed").value(verification.seed);
  optional_number(json, "rtol", verification.tolerance.rtol);
  optional_number(json, "atol", verification.tolerance.atol);
  json.key("inputs").begin_array();
  for (const auto& input : verification.inputs) {
    json.begin_object().key("name").value(input.name).key("dtype").value(data_type_name(input.data_type)).key("shape");
    write_dims(json, input.dims);
    optional_text(json, "file", input.file);
    json.end_object();
  }
  json.end_array();
  json.key("outputs").begin_array();
  for (const auto& output : verification.outputs) {
    json.begin_object().key("name").value(output.name).key("status").value(output.status);
    optional_text(json, "message", output.message);
    json.key("dtype");
    if (output.data_type) json.value(data_type_name(output.data_type));
    else json.null();
    json.key("shape");
    write_dims(json, output.dims);
    if (output.status == "match" || output.status == "mismatch") {
      json.key("elements").value(output.elements);
      json.key("rtol").value(output.rtol).key("atol").value(output.atol);
      json.key("max_abs").value(output.max_abs).key("max_rel").value(output.max_rel);
      json.key("over_tolerance").value(output.over_tolerance);
    }
    json.key("nan").begin_object().key("original").value(output.original.nan).key("rewritten").value(output.rewritten.nan).end_object();
    json.key("inf").begin_object().key("original").value(output.original.inf).key("rewritten").value(output.rewritten.inf).end_object();
    json.key("flags").strings(flags_of(output));
    json.end_object();
  }
  json.end_array();
  optional_text(json, "original_error", verification.original_error);
  optional_text(json, "rewritten_error", verification.rewritten_error);
  json.key("timing").begin_object();
  for (const auto& [side, run] : {std::pair{"original", &verification.original_run}, {"rewritten", &verification.rewritten_run}}) {
    json.key(side).begin_object();
    json.key("load_seconds").value(run->load_seconds).key("run_seconds").value(run->run_seconds);
    json.end_object();
  }
  json.end_object();
  json.key("seconds").value(verification.seconds);
  json.end_object();
}

void print_verification(const Verification& verification, std::ostream& out) {
  const auto& outputs = verification.outputs;
  size_t quiet = 0;
  for (const auto& output : outputs) {
    const bool says_something = output.status != "match" || !flags_of(output).empty();
    if (outputs.size() > kOutputsListed && !says_something) {
      ++quiet;
      continue;
    }
    out << output_line(output) << "\n";
  }
  if (quiet) out << fmt::format("    ({} more output{} match)\n", quiet, quiet == 1 ? "" : "s");
  std::string where = verification.runtime.empty() ? "" : fmt::format(" in {} {}", verification.runtime, verification.runtime_version);
  std::vector<std::string> inputs;
  for (const auto& input : verification.inputs) {
    inputs.push_back(
        fmt::format("{} {} {}", input.name, type_text(input.data_type, input.dims), input.file.empty() ? "random" : "from " + input.file));
  }
  const std::string fed = inputs.empty() ? "" : fmt::format(" (seed {}: {})", verification.seed, fmt::join(inputs, "; "));
  const std::string& status = verification.status;
  if (status == "match") {
    out << fmt::format("  verify: match{}: {} output{} within tolerance{}\n", where, outputs.size(), outputs.size() == 1 ? "" : "s", fed);
  } else if (status == "mismatch") {
    out << fmt::format("  verify: MISMATCH{}: {}{}\n", where, verification.reason, fed);
  } else if (status == "rewritten-failed") {
    out << fmt::format("  verify: FAILED{}: {}\n", where, verification.reason);
  } else {
    out << fmt::format("  verify: {}{}: {}\n", status == "identical" ? "nothing to run" : "NOT compared", where, verification.reason);
  }
}

VerifyError verify_error(const Verification& verification, const std::string& file, bool written) {
  std::string what = verification.status == "rewritten-failed"
                         ? verification.reason
                         : "the rewritten model computes other numbers than the original: " + verification.reason;
  if (verification.status == "mismatch") {
    std::vector<std::string> differing;
    for (const auto& output : verification.outputs) {
      if (output.status == "mismatch" || output.status == "missing") {
        differing.push_back(output.status == "missing"
                                ? fmt::format("'{}' missing", output.name)
                                : fmt::format("'{}' ({}, max abs {:.3g})", output.name, output.message, output.max_abs));
      }
    }
    what += fmt::format(": {}", fmt::join(differing, ", "));
  }
  return VerifyError(file, written ? what : what + "; nothing was written");
}

int run_verify(const VerifyCommand& command, std::ostream& out) {
  const Runtime runtime = find_runtime(command.options.runtime);
  LoadedModel original(command.original);
  LoadedModel rewritten(command.rewritten);
  const VerifiedModel before{command.original,
                             with_input_shapes(interface_of((*original).proto.graph()), command.input_shapes, command.original)};
  const VerifiedModel after{command.rewritten, interface_of((*rewritten).proto.graph())};
  const Verification verification = verify_models(runtime, before, after, command.options);
  if (command.json) {
    JsonWriter json;
    json.begin_object().key("original").value(command.original).key("rewritten").value(command.rewritten).key("verify");
    write_verify_json(json, verification);
    json.end_object();
    out << json.str();
  } else {
    out << fmt::format("{} -> {}\n", command.original, command.rewritten);
    print_verification(verification, out);
  }
  if (verification.failed()) throw verify_error(verification, command.rewritten, true);
  return 0;
}

}  // namespace onnx_rewrite
