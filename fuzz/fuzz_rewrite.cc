// The whole pipeline on any model: a valid input is rewritten under every built-in target, with
// the built-in rules, into a valid output, or refused with an InputError (rules that don't reach
// a fixed point, an import that can't move). Any other exception is a bug: abort.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/rule.h"
#include "onnx_rewrite/target.h"
#include "onnx_rewrite/verify.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onnx_rewrite;
  static const RuleSet rules = [] {
    RuleSet builtin;
    builtin.load_builtin();
    return builtin;
  }();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  for (const Target* target : all_targets()) {
    try {
      Model model = parse_model(bytes, "fuzz.onnx");
      if (input_problem(model.proto) || !impossible_opset_imports(model.proto).empty()) return 0;
      RewriteOptions options;
      options.target = target->name;
      options.max_rounds = 8;
      (void)rewrite_model(model, rules, options);
      if (output_problem(model.proto)) std::abort();  // rewrite_model checks this itself
      (void)serialize_model(model);
    } catch (const InputError&) {
    }
  }
  return 0;
}
