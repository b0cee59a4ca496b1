// Running models in ONNX Runtime through a runtime driver (tools/ort-driver/README.md): a script
// run by Node.js with npm's onnxruntime-node, or by Python with pip's onnxruntime, found when the
// tool runs. The driver loads each model from its path, feeds TensorProto files by name and writes
// the outputs back as TensorProto files; this side generates the inputs and compares.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace onnx_rewrite {

struct Runtime {
  std::string name;                      // "node" or "python"
  std::vector<std::string> command;      // the interpreter and the driver script
  std::vector<std::string> environment;  // KEY=VALUE set for the driver (NODE_PATH)
};

// The runtime `preference` names ("node", "python"; empty: $ONNX_REWRITE_RUNTIME, else the first
// found): Node.js (`node` on PATH) with onnxruntime-node found in $NODE_PATH,
// $ONNX_REWRITE_NPM_PREFIX (its node_modules or lib/node_modules), a node_modules of the current
// directory or one above it, or one above the driver (a source tree's); else Python
// ($ONNX_REWRITE_PYTHON, else `python3` on PATH) that imports onnxruntime and numpy. Throws
// UsageError saying what was tried and what to install when there is none.
Runtime find_runtime(const std::string& preference);

struct ModelRun {
  std::filesystem::path path;
  std::vector<std::pair<std::string, std::filesystem::path>> inputs;  // by input name, a TensorProto file
  std::vector<std::string> outputs;                                   // the graph outputs to fetch
};

struct RunResult {
  // ran; load-error or run-error (ONNX Runtime's message); unsupported (the binding can't feed
  // or fetch a type); crashed (the driver process died on the model)
  std::string status;
  std::string message;
  std::string runtime, version;                          // "onnxruntime-node", "1.30.0"
  std::map<std::string, std::filesystem::path> outputs;  // by name, a TensorProto file
  double load_seconds = 0, run_seconds = 0;
};

// Runs the models one after the other in one driver process, with its files in `work`; after a
// model it dies on (a crash in ONNX Runtime), the rest in another. `threads`: ONNX Runtime's
// intra-op threads (0: its default, one per core).
std::vector<RunResult> run_models(const Runtime& runtime, const std::vector<ModelRun>& models, const std::filesystem::path& work,
                                  int threads);

}  // namespace onnx_rewrite
