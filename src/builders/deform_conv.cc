#include "builders.h"

namespace onnx_rewrite {

void add_deform_conv_builders(BuilderTable& table) { (void)table; }

}  // namespace onnx_rewrite
