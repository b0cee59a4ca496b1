// The error for a failed system call of the I/O stage, shared by the files that make them.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "onnx_rewrite/error.h"

namespace onnx_rewrite {

// `what` about `file`, followed by the reason errno gives; call right after the failing call.
inline InputError os_error(const std::string& file, const std::string& what) {
  return InputError(file, what + ": " + std::strerror(errno));
}

}  // namespace onnx_rewrite
