// Errors and the exit codes of the CLI contract (docs/cli.md).
#pragma once

#include <stdexcept>
#include <string>

namespace onnx_rewrite {

enum class ExitCode : int {
  kDone = 0,
  kTargetNotMet = 1,  // the output was written, but nodes the target can't load remain
  kUsage = 2,
  kBadInput = 3,      // unreadable or invalid model, external data or rule file
};

// Something wrong with an input file: the CLI prints `onnx-rewrite: error: <file>: <what>` and exits 3.
class InputError : public std::runtime_error {
 public:
  InputError(std::string file, const std::string& what)
      : std::runtime_error(what), file_(std::move(file)) {}
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// The command line asks for something impossible (exit 2).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace onnx_rewrite
