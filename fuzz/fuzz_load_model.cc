// Any bytes as a model file: loading is refused with an InputError or gives a model that every
// read-only stage (the input check, the op counts, both targets' checks) takes without a crash.
#include <cstddef>
#include <cstdint>
#include <string>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/target.h"
#include "onnx_rewrite/verify.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace onnx_rewrite;
  try {
    const Model model = parse_model(std::string(reinterpret_cast<const char*>(data), size), "fuzz.onnx");
    (void)input_problem(model.proto);
    (void)impossible_opset_imports(model.proto);
    (void)count_ops(model.proto);
    for (const char* target : {"onnx", "ort"}) (void)check_model(model, find_target(target), 13);
  } catch (const InputError&) {
  }
  return 0;
}
