#include "builders.h"

namespace onnx_rewrite {

void add_nchwc_builders(BuilderTable& table) { (void)table; }

}  // namespace onnx_rewrite
