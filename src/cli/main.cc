#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/error.h"
#include <iostream>
int main(int argc, char** argv) {
  try {
    auto m = onnx_rewrite::load_model(argv[1]);
    if (argc > 3) m.changed = true;
    onnx_rewrite::write_model(m, argv[2]);
  } catch (const onnx_rewrite::InputError& e) { std::cerr << "onnx-rewrite: error: " << e.file() << ": " << e.what() << "\n"; return 3; }
}
