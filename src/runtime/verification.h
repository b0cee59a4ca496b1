// Proving a rewritten model: both models run in ONNX Runtime on the same inputs, every output of
// the original compared by name with the rewritten model's (docs/cli.md, "verify").
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "runtime/compare.h"
#include "runtime/driver.h"
#include "runtime/feeds.h"

namespace onnx_rewrite {

struct VerifyOptions {
  std::string runtime;                                       // --runtime node|python; empty: $ONNX_REWRITE_RUNTIME, else the first found
  uint64_t seed = 1;                                         // --seed
  Tolerance tolerance;                                       // --rtol, --atol
  std::map<std::string, std::filesystem::path> input_files;  // --inputs NAME=FILE
  int threads = 0;                                           // ONNX Runtime's intra-op threads; 0: its default
};

// A model to verify: where it is, and what it takes and gives.
struct VerifiedModel {
  std::filesystem::path path;
  ModelInterface interface;
};

struct Verification {
  // match; mismatch (an output differs or is missing); rewritten-failed (it did not load or run);
  // not-compared (the original did not run, or nothing could: `reason` says why); identical (the
  // output is the input, byte for byte: nothing to run)
  std::string status;
  std::string reason;
  std::string runtime, runtime_version;
  uint64_t seed = 0;
  Tolerance tolerance;  // as asked
  struct Input {
    std::string name;
    int32_t data_type = 0;
    std::vector<int64_t> dims;
    std::string file;  // empty: seeded random values
  };
  std::vector<Input> inputs;
  std::vector<OutputComparison> outputs;
  std::string original_error, rewritten_error;  // ONNX Runtime's, when a model did not load or run
  struct Run {
    double load_seconds = 0, run_seconds = 0;  // in ONNX Runtime: creating the session, running it
  };
  Run original_run, rewritten_run;
  double seconds = 0;  // the whole verification: inputs, the driver process, comparing
  // Exit 4: the rewritten model computes other numbers, or does not load or run.
  bool failed() const { return status == "mismatch" || status == "rewritten-failed"; }
};

// Runs both models (one driver process) on inputs made from the original's interface (make_feeds,
// with its shapes as --input-shape left them) and compares. Throws UsageError or InputError for
// inputs that can't be made.
Verification verify_models(const Runtime& runtime, const VerifiedModel& original, const VerifiedModel& rewritten,
                           const VerifyOptions& options);

// A verification that runs nothing: `status` identical or not-compared, and why.
Verification verification_skipped(const std::string& status, const std::string& reason, const VerifyOptions& options);

}  // namespace onnx_rewrite
