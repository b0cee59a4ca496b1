// Small tensors as numbers: the constants rules read (a scalar near 1/√2, num_groups, a shape)
// and the constants replacements create.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

struct TensorValues {
  int32_t data_type = 0;
  std::vector<int64_t> dims;
  std::vector<double> numbers;       // every element of a numeric tensor; integers exact up to 2^53
  std::vector<int64_t> integers;     // every element of an integer (or bool) tensor, exactly
  std::vector<std::string> strings;  // every element of a string tensor

  // The elements as integers: exact for integer tensors (INT64_MAX, torch's "to the end", stays).
  std::vector<int64_t> ints() const;
};

// Nullopt for complex numbers, external data, or bytes that don't fit the dims. 4-bit integers
// (uint4, int4) are unpacked: low nibble first, int4 sign-extended.
std::optional<TensorValues> decode_tensor(const onnx::TensorProto& tensor);
// Whether decode_tensor gives the tensor's values, told from its dims and payload size alone.
bool decodes(const onnx::TensorProto& tensor);

// A tensor of `data_type` (float, double, float16, integers, bool) holding `numbers`.
onnx::TensorProto make_tensor(int32_t data_type, const std::vector<int64_t>& dims, const std::vector<double>& numbers);
// An int64 tensor, exactly.
onnx::TensorProto make_int64_tensor(const std::vector<int64_t>& dims, const std::vector<int64_t>& values);

// Bits per element of the types whose size is fixed (4 for int4, two to a byte); 0 for strings
// and types we don't know. The one table of element sizes.
int element_bits(int32_t data_type);

// The type classes: bool and the 8- to 64-bit integers; float, double, float16 and bfloat16.
bool is_integer_type(int32_t data_type);
bool is_float_type(int32_t data_type);

// "float", "int64", ... (ONNX's lowercase names) and back.
std::string data_type_name(int32_t data_type);
std::optional<int32_t> data_type_from_name(std::string_view name);

uint16_t float_to_half(float value);
float half_to_float(uint16_t bits);

}  // namespace onnx_rewrite
