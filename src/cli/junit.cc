#include "cli/junit.h"

#include <fmt/format.h>

namespace onnx_rewrite {

namespace {

// Text for an attribute or element: markup escaped, and characters XML 1.0 can't hold at all
// (control characters other than tab and line breaks, from names in model files) as U+FFFD.
std::string xml_text(const std::string& text, bool attribute = true) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\n': out += attribute ? "&#10;" : "\n"; break;
      case '\t': out += attribute ? "&#9;" : "\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += "\uFFFD";
        else out += c;
    }
  }
  return out;
}

}  // namespace

std::string junit_xml(const std::string& suite, const std::vector<JunitCase>& cases) {
  int failures = 0, errors = 0;
  double seconds = 0;
  for (const auto& test : cases) {
    failures += test.result == JunitCase::Result::kFailed;
    errors += test.result == JunitCase::Result::kError;
    seconds += test.seconds;
  }
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += fmt::format("<testsuites name=\"{0}\" tests=\"{1}\" failures=\"{2}\" errors=\"{3}\" time=\"{4:.3f}\">\n", xml_text(suite),
                     cases.size(), failures, errors, seconds);
  xml += fmt::format("  <testsuite name=\"{0}\" tests=\"{1}\" failures=\"{2}\" errors=\"{3}\" skipped=\"0\" time=\"{4:.3f}\">\n",
                     xml_text(suite), cases.size(), failures, errors, seconds);
  for (const auto& test : cases) {
    xml += fmt::format("    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3f}\"", xml_text(test.name), xml_text(test.classname),
                       test.seconds);
    if (test.result == JunitCase::Result::kPassed) {
      xml += "/>\n";
      continue;
    }
    const char* element = test.result == JunitCase::Result::kFailed ? "failure" : "error";
    xml += fmt::format(">\n      <{0} message=\"{1}\" type=\"{2}\">{3}</{0}>\n    </testcase>\n", element, xml_text(test.message),
                       test.result == JunitCase::Result::kFailed ? "target-not-met" : "failed", xml_text(test.details, false));
  }
  xml += "  </testsuite>\n</testsuites>\n";
  return xml;
}

}  // namespace onnx_rewrite
