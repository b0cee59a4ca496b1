#include "builders.h"

namespace onnx_rewrite {

void add_contrib_defusion_builders(BuilderTable& table) { (void)table; }

}  // namespace onnx_rewrite
