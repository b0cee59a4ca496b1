// The whole pipeline on any model: a valid input is rewritten under every built-in target, with
// the built-in rules, into a valid output, or refused with an InputError (rules that don't reach
// a fixed point, an import that can't move). Any other exception is a bug: abort.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/rule_set.h"
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
      const bool ordered = !structural_problem(model.proto);  // else only what the rewrite touched is
      RewriteOptions options;
      options.target = target->name;
      options.max_rounds = 8;
      (void)rewrite_model(model, rules, options);
      if (auto problem = output_problem(model.proto, ordered)) {  // rewrite_model checks this itself
        std::fprintf(stderr, "target %s: invalid output: %s\n", target->name.c_str(), problem->c_str());
        std::abort();
      }
      (void)serialize_model(model);
    } catch (const InputError&) {
    }
  }
  return 0;
}
