// Checks of the external data a loaded model refers to (src/io/external_data.cc).
#pragma once

#include <string>
#include <vector>

#include "onnx_rewrite/model.h"

namespace onnx_rewrite {

// Refuses external data that could read outside the model's directory, is not there, or does
// not hold exactly the tensor its header describes. Reads no weight bytes. `name` is the file
// errors name. With `allow_missing`, a missing file is returned (each location once) instead.
std::vector<std::string> check_external_data(const Model& model, const std::string& name, bool allow_missing);

// Refuses any external data: a model read from memory has no directory for it to be in.
void refuse_external_data(const Model& model, const std::string& name);

}  // namespace onnx_rewrite
