// Errors and the exit codes of the CLI contract (docs/cli.md).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace onnx_rewrite {

enum class ExitCode : int {
  kDone = 0,
  kTargetNotMet = 1,  // the output was written, but nodes the target can't load remain
  kUsage = 2,
  kBadInput = 3,      // unreadable or invalid model, external data or rule file
  kVerifyFailed = 4,  // verify: the rewritten model computes other numbers, or does not load or run in ONNX Runtime
};

// Something wrong with an input file: the CLI prints `onnx-rewrite: error: <file>: <what>` and exits 3.
class InputError : public std::runtime_error {
 public:
  InputError(std::string file, const std::string& what) : std::runtime_error(what), file_(std::move(file)) {}
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// Verifying found the rewritten model `file` wrong in ONNX Runtime: other numbers than the
// original's, or no run at all (exit 4).
class VerifyError : public std::runtime_error {
 public:
  VerifyError(std::string file, const std::string& what) : std::runtime_error(what), file_(std::move(file)) {}
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// The command line asks for something impossible (exit 2).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `text` for a one-line message: control bytes (NUL, newline, ...) written as \xNN.
inline std::string printable(std::string_view text) {
  constexpr char kHexDigits[] = "0123456789abcdef";
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) out += {'\\', 'x', kHexDigits[byte >> 4], kHexDigits[byte & 0xf]};
    else out += c;
  }
  return out;
}

}  // namespace onnx_rewrite
