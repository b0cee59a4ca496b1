#include "onnx_rewrite/tensor.h"

#include <bit>
#include <cmath>
#include <cstring>

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

struct TypeName {
  int32_t type;
  const char* name;
};

// clang-format off
constexpr TypeName kTypeNames[] = {
    {TensorProto::FLOAT, "float"},       {TensorProto::UINT8, "uint8"},         {TensorProto::INT8, "int8"},
    {TensorProto::UINT16, "uint16"},     {TensorProto::INT16, "int16"},         {TensorProto::INT32, "int32"},
    {TensorProto::INT64, "int64"},       {TensorProto::STRING, "string"},       {TensorProto::BOOL, "bool"},
    {TensorProto::FLOAT16, "float16"},   {TensorProto::DOUBLE, "double"},       {TensorProto::UINT32, "uint32"},
    {TensorProto::UINT64, "uint64"},     {TensorProto::COMPLEX64, "complex64"}, {TensorProto::COMPLEX128, "complex128"},
    {TensorProto::BFLOAT16, "bfloat16"}, {17, "float8e4m3fn"},                  {18, "float8e4m3fnuz"},
    {19, "float8e5m2"},                  {20, "float8e5m2fnuz"},                {21, "uint4"},
    {22, "int4"},                        {23, "float4e2m1"},                    {24, "float8e8m0"},
    {25, "uint2"},                       {26, "int2"},
};
// clang-format on

// clang-format off
// Bytes per element in raw_data for the types decode_tensor reads a byte or more at a time; 0
// for the others.
size_t raw_element_size(int32_t type) {
  switch (type) {
    case TensorProto::FLOAT: case TensorProto::INT32: case TensorProto::UINT32:
    case TensorProto::DOUBLE: case TensorProto::INT64: case TensorProto::UINT64:
    case TensorProto::FLOAT16: case TensorProto::BFLOAT16: case TensorProto::INT16: case TensorProto::UINT16:
    case TensorProto::INT8: case TensorProto::UINT8: case TensorProto::BOOL:
      return static_cast<size_t>(element_bits(type) / 8);
    default: return 0;
  }
}
// clang-format on

template <typename T>
T load(const char* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

// clang-format off
double raw_element(int32_t type, const char* p) {
  switch (type) {
    case TensorProto::FLOAT: return load<float>(p);
    case TensorProto::DOUBLE: return load<double>(p);
    case TensorProto::INT32: return load<int32_t>(p);
    case TensorProto::UINT32: return load<uint32_t>(p);
    case TensorProto::INT64: return static_cast<double>(load<int64_t>(p));
    case TensorProto::UINT64: return static_cast<double>(load<uint64_t>(p));
    case TensorProto::INT16: return load<int16_t>(p);
    case TensorProto::UINT16: return load<uint16_t>(p);
    case TensorProto::INT8: return load<int8_t>(p);
    case TensorProto::UINT8: case TensorProto::BOOL: return load<uint8_t>(p);
    case TensorProto::FLOAT16: return half_to_float(load<uint16_t>(p));
    case TensorProto::BFLOAT16: return std::bit_cast<float>(static_cast<uint32_t>(load<uint16_t>(p)) << 16);
    default: return 0;
  }
}
// clang-format on

// int32_data carries the bit patterns of 16-bit floats.
double int32_field_element(int32_t type, int32_t value) {
  if (type == TensorProto::FLOAT16) return half_to_float(static_cast<uint16_t>(value));
  if (type == TensorProto::BFLOAT16) return std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
  return value;
}

// clang-format off
int64_t raw_integer(int32_t type, const char* p) {
  switch (type) {
    case TensorProto::INT8: return load<int8_t>(p);
    case TensorProto::INT16: return load<int16_t>(p);
    case TensorProto::INT32: return load<int32_t>(p);
    case TensorProto::INT64: return load<int64_t>(p);
    case TensorProto::UINT8: case TensorProto::BOOL: return load<uint8_t>(p);
    case TensorProto::UINT16: return load<uint16_t>(p);
    case TensorProto::UINT32: return load<uint32_t>(p);
    default: return static_cast<int64_t>(load<uint64_t>(p));
  }
}
// clang-format on

// The elements of an integer tensor without going through double.
std::vector<int64_t> exact_integers(const TensorProto& tensor, size_t element_size) {
  std::vector<int64_t> out;
  if (tensor.has_raw_data()) {
    const std::string& raw = tensor.raw_data();
    out.reserve(raw.size() / element_size);
    for (size_t at = 0; at < raw.size(); at += element_size) out.push_back(raw_integer(tensor.data_type(), raw.data() + at));
    return out;
  }
  out.assign(tensor.int32_data().begin(), tensor.int32_data().end());
  out.insert(out.end(), tensor.int64_data().begin(), tensor.int64_data().end());
  for (uint64_t v : tensor.uint64_data()) out.push_back(static_cast<int64_t>(v));
  return out;
}

// 4-bit integers (uint4 = 21, int4 = 22; ONNX IR 10): two per byte, the first element in the low
// nibble, an odd count padded; raw_data, or int32_data holding one such byte per entry.
TensorValues decode_4bit(const TensorProto& tensor, TensorValues values, int64_t count) {
  const bool is_signed = tensor.data_type() == 22;
  auto byte_at = [&](size_t i) -> uint8_t {
    return tensor.has_raw_data() ? static_cast<uint8_t>(tensor.raw_data()[i])
                                 : static_cast<uint8_t>(tensor.int32_data(static_cast<int>(i)));
  };
  values.integers.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    int64_t nibble = (byte_at(static_cast<size_t>(i / 2)) >> (4 * (i % 2))) & 0xF;
    if (is_signed && nibble >= 8) nibble -= 16;
    values.integers.push_back(nibble);
  }
  values.numbers.assign(values.integers.begin(), values.integers.end());
  return values;
}

// The element count of a tensor decode_tensor reads, worked out from its dims and the size of
// its payload alone; nullopt where decode_tensor gives nothing.
std::optional<int64_t> decodable_count(const TensorProto& tensor) {
  if (tensor.data_location() == TensorProto::EXTERNAL) return std::nullopt;
  const int32_t type = tensor.data_type();
  const size_t element_size = raw_element_size(type);
  if (element_size == 0 && type != TensorProto::STRING && type != 21 && type != 22) return std::nullopt;
  int64_t count = 1;
  for (int64_t dim : tensor.dims()) {
    if (dim < 0 || (dim > 0 && count > (int64_t{1} << 40) / dim)) return std::nullopt;  // corrupt or huge
    count *= dim;
  }
  const auto elements = static_cast<size_t>(count);
  bool fits = false;
  if (type == 21 || type == 22) {
    const size_t bytes = tensor.has_raw_data() ? tensor.raw_data().size() : static_cast<size_t>(tensor.int32_data_size());
    fits = bytes == (elements + 1) / 2;
  } else if (type == TensorProto::STRING) {
    fits = static_cast<size_t>(tensor.string_data_size()) == elements;
  } else if (tensor.has_raw_data()) {
    fits = tensor.raw_data().size() == elements * element_size;
  } else {
    // An integer tensor's elements are also read exactly, from the integer fields alone.
    const auto size = [](const auto& field) { return static_cast<size_t>(field.size()); };
    const size_t integers = size(tensor.int32_data()) + size(tensor.int64_data()) + size(tensor.uint64_data());
    const size_t numbers = integers + size(tensor.float_data()) + size(tensor.double_data());
    fits = numbers == elements && (!is_integer_type(type) || integers == elements);
  }
  return fits ? std::optional<int64_t>(count) : std::nullopt;
}

}  // namespace

std::vector<int64_t> TensorValues::ints() const {
  if (!integers.empty() || numbers.empty()) return integers;
  std::vector<int64_t> out;
  out.reserve(numbers.size());
  for (double number : numbers) out.push_back(static_cast<int64_t>(number));
  return out;
}

bool decodes(const TensorProto& tensor) { return decodable_count(tensor).has_value(); }

std::optional<TensorValues> decode_tensor(const TensorProto& tensor) {
  const std::optional<int64_t> count = decodable_count(tensor);
  if (!count) return std::nullopt;
  const int32_t type = tensor.data_type();
  TensorValues values;
  values.data_type = type;
  values.dims.assign(tensor.dims().begin(), tensor.dims().end());
  if (type == 21 || type == 22) return decode_4bit(tensor, std::move(values), *count);
  if (type == TensorProto::STRING) {
    values.strings.assign(tensor.string_data().begin(), tensor.string_data().end());
    return values;
  }
  const size_t element_size = raw_element_size(type);
  if (is_integer_type(type)) values.integers = exact_integers(tensor, element_size);
  values.numbers.reserve(static_cast<size_t>(*count));
  if (tensor.has_raw_data()) {
    const std::string& raw = tensor.raw_data();
    for (size_t at = 0; at < raw.size(); at += element_size) values.numbers.push_back(raw_element(type, raw.data() + at));
  } else {
    for (float v : tensor.float_data()) values.numbers.push_back(v);
    for (int32_t v : tensor.int32_data()) values.numbers.push_back(int32_field_element(type, v));
    for (int64_t v : tensor.int64_data()) values.numbers.push_back(static_cast<double>(v));
    for (double v : tensor.double_data()) values.numbers.push_back(v);
    for (uint64_t v : tensor.uint64_data()) values.numbers.push_back(static_cast<double>(v));
  }
  return values;
}

TensorProto make_tensor(int32_t data_type, const std::vector<int64_t>& dims, const std::vector<double>& numbers) {
  TensorProto tensor;
  tensor.set_data_type(data_type);
  for (int64_t dim : dims) tensor.add_dims(dim);
  std::string raw;
  raw.reserve(numbers.size() * raw_element_size(data_type));
  auto append = [&raw](auto value) { raw.append(reinterpret_cast<const char*>(&value), sizeof(value)); };
  for (double number : numbers) {
    switch (data_type) {
      case TensorProto::FLOAT: append(static_cast<float>(number)); break;
      case TensorProto::DOUBLE: append(number); break;
      case TensorProto::FLOAT16: append(float_to_half(static_cast<float>(number))); break;
      case TensorProto::BFLOAT16: {
        const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(number));
        append(static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16));  // round to nearest even
        break;
      }
      case TensorProto::INT64: append(static_cast<int64_t>(number)); break;
      case TensorProto::INT32: append(static_cast<int32_t>(number)); break;
      case TensorProto::INT16: append(static_cast<int16_t>(number)); break;
      case TensorProto::INT8: append(static_cast<int8_t>(number)); break;
      case TensorProto::UINT64: append(static_cast<uint64_t>(number)); break;
      case TensorProto::UINT32: append(static_cast<uint32_t>(number)); break;
      case TensorProto::UINT16: append(static_cast<uint16_t>(number)); break;
      case TensorProto::UINT8: append(static_cast<uint8_t>(number)); break;
      case TensorProto::BOOL: append(static_cast<uint8_t>(number != 0)); break;
      default: break;
    }
  }
  tensor.set_raw_data(std::move(raw));
  return tensor;
}

TensorProto make_int64_tensor(const std::vector<int64_t>& dims, const std::vector<int64_t>& values) {
  TensorProto tensor;
  tensor.set_data_type(TensorProto::INT64);
  for (int64_t dim : dims) tensor.add_dims(dim);
  tensor.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t)));
  return tensor;
}

// clang-format off
int element_bits(int32_t data_type) {
  switch (data_type) {
    case TensorProto::FLOAT: case TensorProto::INT32: case TensorProto::UINT32: return 32;
    case TensorProto::DOUBLE: case TensorProto::INT64: case TensorProto::UINT64: case TensorProto::COMPLEX64: return 64;
    case TensorProto::COMPLEX128: return 128;
    case TensorProto::FLOAT16: case TensorProto::BFLOAT16: case TensorProto::INT16: case TensorProto::UINT16: return 16;
    case TensorProto::INT8: case TensorProto::UINT8: case TensorProto::BOOL:
    case 17: case 18: case 19: case 20:  // the float8 types
    case 24: return 8;                    // float8e8m0
    case 21: case 22: case 23: return 4;  // uint4, int4, float4e2m1: two per byte
    case 25: case 26: return 2;           // uint2, int2: four per byte
    default: return 0;
  }
}
// clang-format on

std::string data_type_name(int32_t data_type) {
  for (const auto& entry : kTypeNames) {
    if (entry.type == data_type) return entry.name;
  }
  return "type" + std::to_string(data_type);
}

std::optional<int32_t> data_type_from_name(std::string_view name) {
  for (const auto& entry : kTypeNames) {
    if (name == entry.name) return entry.type;
  }
  if (name == "float32") return TensorProto::FLOAT;
  if (name == "float64") return TensorProto::DOUBLE;
  return std::nullopt;
}

uint16_t float_to_half(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000;
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xFF) - 127 + 15;
  uint32_t mantissa = bits & 0x7FFFFF;
  if (((bits >> 23) & 0xFF) == 0xFF) return static_cast<uint16_t>(sign | 0x7C00 | (mantissa ? 0x200 : 0));
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7C00);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000;
    const int shift = 14 - exponent;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

float half_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000 | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// clang-format off
bool is_integer_type(int32_t type) {
  switch (type) {
    case TensorProto::INT8: case TensorProto::INT16: case TensorProto::INT32: case TensorProto::INT64:
    case TensorProto::UINT8: case TensorProto::UINT16: case TensorProto::UINT32: case TensorProto::UINT64:
    case TensorProto::BOOL:
      return true;
    default:
      return false;
  }
}
// clang-format on

bool is_float_type(int32_t type) {
  return type == TensorProto::FLOAT || type == TensorProto::DOUBLE || type == TensorProto::FLOAT16 || type == TensorProto::BFLOAT16;
}

}  // namespace onnx_rewrite
