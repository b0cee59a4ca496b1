#include "builders.h"

namespace onnx_rewrite {

void add_attention_builders(BuilderTable& table) { (void)table; }

}  // namespace onnx_rewrite
