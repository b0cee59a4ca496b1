// Any text as a rule file: it loads, or is refused with an InputError naming file:line:col.
#include <cstddef>
#include <cstdint>
#include <string>

#include "onnx_rewrite/error.h"
#include "onnx_rewrite/rule_set.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onnx_rewrite;
  try {
    RuleSet rules;
    rules.load_text(std::string(reinterpret_cast<const char*>(data), size), "fuzz.rules");
  } catch (const InputError&) {
  }
  return 0;
}
