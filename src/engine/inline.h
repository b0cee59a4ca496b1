// Inlining of model-local functions (onnxscript exports, torch.onnx with local functions):
// every call is replaced by the function's body, recursively, with attribute references
// resolved (the call's values, else the defaults the function declares) and every name the body
// defines, subgraphs included, made fresh; functions no longer called are dropped.
#pragma once

#include <string>
#include <vector>

#include "onnx_rewrite/model.h"

namespace onnx_rewrite {

// Returns the number of calls inlined. A call is left alone (and stays a call) when its body
// would mean something else under the caller's opset imports; `notes` (if given) receives why.
int inline_local_functions(Model& model, std::vector<std::string>* notes = nullptr);

}  // namespace onnx_rewrite
