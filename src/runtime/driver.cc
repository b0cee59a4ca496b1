#include "runtime/driver.h"

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "cli/json.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model_io.h"
#include "runtime/process.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, separator);) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// Where the driver scripts are: installed beside the tool (share/onnx-rewrite/ort-driver), else
// the source tree's tools/ort-driver for a tool run from its build tree.
std::optional<fs::path> driver_directory() {
  std::error_code ec;
  const fs::path executable = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = (executable.parent_path() / ONNX_REWRITE_DRIVER_FROM_BIN).lexically_normal();
    if (fs::is_regular_file(installed / "ort_driver.js", ec)) return installed;
  }
  if (fs::is_regular_file(fs::path(ONNX_REWRITE_DRIVER_SOURCE_DIR) / "ort_driver.js", ec)) return fs::path(ONNX_REWRITE_DRIVER_SOURCE_DIR);
  return std::nullopt;
}

// A node_modules holding onnxruntime-node, where node would find it for the driver.
std::optional<fs::path> node_modules_with_ort(const fs::path& drivers) {
  std::vector<fs::path> candidates;
  for (const auto& entry : split(env_or("NODE_PATH", ""), ':')) candidates.emplace_back(entry);
  if (const std::string prefix = env_or("ONNX_REWRITE_NPM_PREFIX", ""); !prefix.empty()) {
    candidates.push_back(fs::path(prefix) / "node_modules");
    candidates.push_back(fs::path(prefix) / "lib" / "node_modules");  // a global prefix (npm install -g)
  }
  std::error_code ec;
  for (fs::path directory : {fs::current_path(ec), fs::absolute(drivers, ec)}) {
    for (; !directory.empty(); directory = directory.parent_path()) {
      candidates.push_back(directory / "node_modules");
      if (directory == directory.root_path()) break;
    }
  }
  for (const auto& candidate : candidates) {
    if (fs::is_regular_file(candidate / "onnxruntime-node" / "package.json", ec)) return candidate;
  }
  return std::nullopt;
}

std::string last_line(const fs::path& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
  }
  return last;
}

RunResult read_result(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  const auto json = parse_json(text.str());
  RunResult result;
  if (!json || json->kind != JsonValue::Kind::kObject) {
    result.status = "crashed";
    result.message = "the runtime driver wrote no readable result";
    return result;
  }
  result.status = json->string_or("status", "crashed");
  result.message = json->string_or("message", "");
  result.runtime = json->string_or("runtime", "");
  result.version = json->string_or("version", "");
  result.load_seconds = json->number_or("load_seconds", 0);
  result.run_seconds = json->number_or("run_seconds", 0);
  if (const JsonValue* outputs = json->find("outputs")) {
    for (const auto& output : outputs->items) result.outputs[output.string_or("name", "")] = output.string_or("file", "");
  }
  return result;
}

}  // namespace

Runtime find_runtime(const std::string& preference) {
  const std::string wanted = preference.empty() ? env_or("ONNX_REWRITE_RUNTIME", "") : preference;
  if (!wanted.empty() && wanted != "node" && wanted != "python") {
    throw UsageError(fmt::format("runtime '{}': expected node or python (--runtime, ONNX_REWRITE_RUNTIME)", wanted));
  }
  const auto drivers = driver_directory();
  if (!drivers) throw UsageError("the runtime drivers are not installed beside onnx-rewrite (share/onnx-rewrite/ort-driver)");
  std::vector<std::string> tried;
  if (wanted != "python") {
    const auto node = find_on_path("node");
    const auto modules = node ? node_modules_with_ort(*drivers) : std::nullopt;
    if (modules) {
      const std::string node_path = env_or("NODE_PATH", "");
      return {"node",
              {*node, (*drivers / "ort_driver.js").string()},
              {"NODE_PATH=" + modules->string() + (node_path.empty() ? "" : ":" + node_path)}};
    }
    tried.push_back(node ? "node has no onnxruntime-node (looked in NODE_PATH, ONNX_REWRITE_NPM_PREFIX and the node_modules of this "
                           "directory and those above it)"
                         : "no node on PATH");
  }
  if (wanted != "node") {
    const std::string python = env_or("ONNX_REWRITE_PYTHON", "python3");
    const auto interpreter = find_on_path(python);
    if (interpreter && run_process({*interpreter, "-c", "import onnxruntime, numpy"}, {}, {}).status == 0) {
      return {"python", {*interpreter, (*drivers / "ort_driver.py").string()}, {}};
    }
    tried.push_back(interpreter ? python + " can't import onnxruntime and numpy" : "no " + python + " on PATH");
  }
  const std::string npm = "`npm install onnxruntime-node` (in this directory, or set ONNX_REWRITE_NPM_PREFIX to the prefix it went to)";
  const std::string pip = "`pip install onnxruntime`";
  throw UsageError(fmt::format("no ONNX Runtime to run the models in: {}; install {}", fmt::join(tried, "; "),
                               wanted == "node"     ? "it: " + npm
                               : wanted == "python" ? "it: " + pip
                                                    : "one: " + npm + " or " + pip));
}

std::vector<RunResult> run_models(const Runtime& runtime, const std::vector<ModelRun>& models, const fs::path& work, int threads) {
  std::vector<RunResult> results(models.size());
  std::vector<size_t> pending(models.size());
  for (size_t i = 0; i < models.size(); ++i) pending[i] = i;
  for (int attempt = 0; !pending.empty(); ++attempt) {
    JsonWriter job;
    job.begin_object().key("threads").value(threads).key("models").begin_array();
    for (size_t i : pending) {
      const ModelRun& model = models[i];
      job.begin_object().key("path").value(model.path.string()).key("inputs").begin_array();
      for (const auto& [name, file] : model.inputs)
        job.begin_object().key("name").value(name).key("file").value(file.string()).end_object();
      job.end_array().key("outputs").strings(model.outputs);
      job.key("output_dir").value((work / fmt::format("model{}", i)).string());
      job.key("result").value((work / fmt::format("model{}.json", i)).string()).end_object();
    }
    job.end_array().end_object();
    const fs::path job_file = work / fmt::format("job{}.json", attempt);
    const fs::path log = work / fmt::format("job{}.log", attempt);
    write_file_atomically(job_file, job.str());
    std::vector<std::string> argv = runtime.command;
    argv.push_back(job_file.string());
    const ProcessExit exit = run_process(argv, runtime.environment, log);
    std::vector<size_t> left;
    for (size_t k = 0; k < pending.size(); ++k) {
      const size_t i = pending[k];
      const fs::path result = work / fmt::format("model{}.json", i);
      if (fs::exists(result)) {
        results[i] = read_result(result);
        continue;
      }
      // The first model without a result is the one the driver died on; the rest go again.
      results[i].status = "crashed";
      const std::string said = last_line(log);
      results[i].message = exit.describe("the " + runtime.name + " process running ONNX Runtime") + (said.empty() ? "" : ": " + said);
      left.assign(pending.begin() + static_cast<std::ptrdiff_t>(k) + 1, pending.end());
      break;
    }
    pending = std::move(left);
  }
  return results;
}

}  // namespace onnx_rewrite
