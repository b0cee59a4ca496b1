// NumPy's .npy files, for `--inputs NAME=FILE.npy`.
#pragma once

#include <filesystem>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

// The array of a .npy file (format versions 1 to 3) as a TensorProto holding its values in
// raw_data: little-endian (or single-byte), C order, dtype bool, int8..int64, uint8..uint64,
// float16, float32 or float64. Throws InputError naming the file for anything else.
onnx::TensorProto read_npy(const std::filesystem::path& path);

}  // namespace onnx_rewrite
