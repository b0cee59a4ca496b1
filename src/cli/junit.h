// JUnit XML for CI summaries (`batch --junit`, `check --junit`, `merge-reports --junit`): one
// testcase per model and target, the reason in the failure.
#pragma once

#include <string>
#include <vector>

namespace onnx_rewrite {

struct JunitCase {
  enum class Result { kPassed, kFailed, kError };  // error: the model could not be processed
  std::string name;                                // the model
  std::string classname;                           // "onnx-rewrite.<command>.<target>"
  double seconds = 0;
  Result result = Result::kPassed;
  std::string message;  // one line
  std::string details;  // the full reason, one item per line
};

// A <testsuites> document holding one <testsuite>.
std::string junit_xml(const std::string& suite, const std::vector<JunitCase>& cases);

}  // namespace onnx_rewrite
