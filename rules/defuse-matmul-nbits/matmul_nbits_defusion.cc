// com.microsoft MatMulNBits (block-quantized weights) back to standard ONNX
// (defuse-matmul-nbits.rules), with the numbers of ONNX Runtime's CPU kernel
// (contrib_ops/cpu/quantization/matmul_nbits.cc, core/mlas/lib/q4_dq.cpp):
//
//   W[n, k] = (q[n, k] - zp[n, k / block_size]) · scales[n, k / block_size]   (float zp: q·s + -(s·zp))
//   Y = A · Wᵀ (+ bias), in float (float16 A, scales and bias widened; Y rounded once)
//
// q are `bits`-bit unsigned integers packed low bits first: the bytes of B [N, k_blocks, blob] are
// a row-major [N, K_pad] tensor of them (K_pad = k_blocks · block_size, the padding past K unused);
// uint8 zero points are packed the same way per row (a row of an odd count of 4-bit blocks ends in
// an unused nibble); without zero points zp = 2^(bits - 1).
//
// Two forms: DequantizeLinear-21 with block_size on new [K, N] int4/uint4/int8/uint8 weights
// (the bytes repacked at rewrite time: the weight-only-quantization pattern runtimes keep in 4 bits),
// and, for any opset from 13 or what that form can't take, the bytes unpacked at run time with
// Mod/BitShift, Cast, Sub, Mul.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

constexpr int32_t kUint4 = 21;  // TensorProto::UINT4 / INT4 (ONNX 1.16, IR 10); libonnx 1.12 lacks the names
constexpr int32_t kInt4 = 22;

enum class Zero { kDefault, kPacked, kFloat };

struct NBits {
  int64_t k = 0, n = 0, bits = 4, block_size = 0;
  int64_t k_blocks = 0, blob = 0, zero_columns = 0;  // blob: bytes per block; zero_columns: bytes per zp row
  int32_t dtype = 0;                                  // A's element type
  Zero zero = Zero::kDefault;
  int64_t padded_k() const { return k_blocks * block_size; }
  int64_t per_byte() const { return 8 / bits; }
};

std::string shape_mismatch(const std::string& input, const ShapeFacts& facts, const std::string& expected) {
  return fmt::format("{} is {}, not {} as K, N, bits and block_size say (ONNX Runtime refuses the node)", input,
                     dims_text(facts.shape), expected);
}

// The attributes, checked as ONNX Runtime's CPU kernel checks them, and the forms of the inputs.
std::string read_nbits(const Match& match, NBits& nb) {
  nb.k = match.attribute_int("K", 0);
  nb.n = match.attribute_int("N", 0);
  nb.bits = match.attribute_int("bits", 4);
  nb.block_size = match.attribute_int("block_size", 0);
  if (nb.k <= 0 || nb.n <= 0) return "K and N must be positive";
  if (nb.bits != 2 && nb.bits != 4 && nb.bits != 8) {
    return fmt::format("bits = {}: ONNX Runtime's CPU kernel takes 2, 4 and 8", nb.bits);
  }
  const int64_t bs = nb.block_size;
  if (bs != 16 && bs != 32 && bs != 64 && bs != 128 && bs != 256) {
    return fmt::format("block_size = {}: ONNX Runtime 1.30 takes 16, 32, 64, 128 and 256 only", bs);
  }
  if (bound(match, "g_idx")) {
    return "g_idx (act-order groups, deprecated) is not rewritten: ONNX Runtime ignores uint8 zero_points when it is "
           "given (a kernel bug), so what such a node means is in doubt";
  }
  nb.k_blocks = (nb.k + bs - 1) / bs;
  nb.blob = bs * nb.bits / 8;
  nb.zero_columns = (nb.k_blocks * nb.bits + 7) / 8;
  nb.dtype = element_type(match, {"A", "scales", "bias"});
  if (nb.dtype == TensorProto::BFLOAT16) {
    return "bfloat16: ONNX Runtime's CPU provider has no bfloat16 MatMulNBits to prove the rewrite against";
  }
  if (auto why = check_element_type(nb.dtype, {TensorProto::FLOAT, TensorProto::FLOAT16}, "MatMulNBits"); !why.empty()) {
    return why;
  }
  const auto& b_facts = match.facts("B");
  if (b_facts.elem_type && b_facts.elem_type != TensorProto::UINT8) return "B is not uint8";
  if (b_facts.shape) {
    const auto dims = *b_facts.static_dims();
    const std::vector<int64_t> expected{nb.n, nb.k_blocks, nb.blob};
    bool fits = dims.size() == 3;
    for (size_t i = 0; fits && i < 3; ++i) fits = dims[i] < 0 || dims[i] == expected[i];
    if (!fits) return shape_mismatch("B", b_facts, fmt::format("[{}, {}, {}]", nb.n, nb.k_blocks, nb.blob));
  }
  const auto& s_facts = match.facts("scales");
  if (s_facts.shape) {
    int64_t count = 1;
    const auto dims = *s_facts.static_dims();
    for (int64_t dim : dims) count = dim < 0 || count < 0 ? -1 : count * dim;
    if (count >= 0 && count != nb.n * nb.k_blocks) {
      return shape_mismatch("scales", s_facts, fmt::format("[{}, {}]", nb.n, nb.k_blocks));
    }
  }
  if (bound(match, "zero_points")) {
    const int32_t zero_type = match.facts("zero_points").elem_type;
    if (zero_type == TensorProto::UINT8) {
      nb.zero = Zero::kPacked;
      const auto& z_facts = match.facts("zero_points");
      if (z_facts.shape) {
        int64_t count = 1;
        const auto dims = *z_facts.static_dims();
        for (int64_t dim : dims) count = dim < 0 || count < 0 ? -1 : count * dim;
        if (count >= 0 && count != nb.n * nb.zero_columns) {
          return shape_mismatch("zero_points", z_facts, fmt::format("[{}, {}]", nb.n, nb.zero_columns));
        }
      }
    } else if (zero_type == nb.dtype) {
      if (nb.bits != 4) return fmt::format("zero_points of A's type with bits = {}: ONNX Runtime takes them for 4 bits only", nb.bits);
      nb.zero = Zero::kFloat;
    } else {
      return "the element type of zero_points is unknown, or neither uint8 nor A's type";
    }
  }
  return {};
}

// A's product with the float weights W [K, N], plus the bias: in float, rounded once to A's type.
void multiply(const Match& match, GraphBuilder& b, const NBits& nb, Value weights) {
  const bool widen = nb.dtype == TensorProto::FLOAT16;
  Value a{match.value("A")};
  if (widen) a = b.Cast(a, TensorProto::FLOAT);
  Value y = b.MatMul(a, weights);
  if (bound(match, "bias")) {
    Value bias = value_of(match, "bias");
    if (widen) bias = b.Cast(bias, TensorProto::FLOAT);
    y = b.Add(y, bias);
  }
  if (widen) y = b.Cast(y, nb.dtype);
  b.output(match.value("Y"), y);
  if (match.attribute_int("accuracy_level", 0) == 4) {
    b.note("MatMulNBits accuracy_level = 4: ONNX Runtime quantizes A to int8 blocks on CPU, the rewrite multiplies in float "
           "(results differ by about 0.5% relative; see rules/defuse-matmul-nbits/README.md)");
  }
}

// ---- Unpacking at run time (ai.onnx >= 13) -------------------------------------------------------

// The bits-wide fields of each byte of `packed` (uint8 [..., m]), low bits first: uint8 [..., m, 8/bits].
Value unpack(GraphBuilder& b, Value packed, int64_t bits) {
  const int64_t per = 8 / bits;
  std::vector<Value> fields;
  for (int64_t j = 0; j < per; ++j) {
    Value field = packed;
    if (j > 0) field = b.op("BitShift", {packed, b.scalar(static_cast<double>(j * bits), TensorProto::UINT8)},
                            {attr("direction", "RIGHT")});
    if (j < per - 1) field = b.op("Mod", {field, b.scalar(static_cast<double>(1 << bits), TensorProto::UINT8)});
    fields.push_back(b.Unsqueeze(field, {-1}));
  }
  return b.Concat(fields, -1);
}

std::string defuse_matmul_nbits(const Match& match, GraphBuilder& b) {
  NBits nb;
  if (auto why = read_nbits(match, nb); !why.empty()) return why;
  const bool widen = nb.dtype == TensorProto::FLOAT16;
  Value q{match.value("B")};
  if (nb.bits != 8) q = unpack(b, q, nb.bits);
  q = b.Reshape(q, b.ints({nb.n, nb.k_blocks, nb.block_size}));
  const Value values = b.Cast(q, TensorProto::FLOAT);
  Value scales = b.Reshape(Value{match.value("scales")}, b.ints({nb.n, nb.k_blocks, 1}));
  if (widen) scales = b.Cast(scales, TensorProto::FLOAT);
  Value weights;
  switch (nb.zero) {
    case Zero::kDefault: {
      const Value centered = b.Sub(values, b.scalar(static_cast<double>(1 << (nb.bits - 1))));
      weights = b.Mul(centered, scales);
      break;
    }
    case Zero::kPacked: {  // [N, zero_columns] bytes -> [N, k_blocks] (a padding field per row dropped)
      Value zero = value_of(match, "zero_points");
      if (nb.bits != 8) zero = unpack(b, zero, nb.bits);
      zero = b.Reshape(zero, b.ints({nb.n, nb.zero_columns * nb.per_byte()}));
      if (nb.zero_columns * nb.per_byte() != nb.k_blocks) zero = b.Slice(zero, {0}, {nb.k_blocks}, {1});
      const Value zero_float = b.Cast(zero, TensorProto::FLOAT);
      const Value centered = b.Sub(values, b.Unsqueeze(zero_float, {-1}));
      weights = b.Mul(centered, scales);
      break;
    }
    case Zero::kFloat: {  // the kernel's two roundings: q·s + (-(s·zp))
      Value zero = b.Reshape(value_of(match, "zero_points"), b.ints({nb.n, nb.k_blocks, 1}));
      if (widen) zero = b.Cast(zero, TensorProto::FLOAT);
      const Value scaled = b.Mul(values, scales);
      const Value adjust = b.op("Neg", {b.Mul(scales, zero)});
      weights = b.Add(scaled, adjust);
      break;
    }
  }
  weights = b.Reshape(weights, b.ints({nb.n, nb.padded_k()}));
  if (nb.padded_k() != nb.k) weights = b.Slice(weights, {0}, {nb.k}, {1});
  multiply(match, b, nb, b.Transpose(weights, {1, 0}));
  return {};
}

// ---- DequantizeLinear-21 on repacked weights (ai.onnx >= 21) -------------------------------------

// The bytes of a constant uint8 tensor with `count` elements, or why not.
std::string constant_bytes(const Match& match, const std::string& name, size_t count, std::string& bytes) {
  const onnx::TensorProto* header = match.scope->constant_tensor(match.value(name));
  if (!header) return fmt::format("{} is not a constant (DequantizeLinear needs the weights repacked now)", name);
  if (header->data_location() == TensorProto::EXTERNAL) {
    return fmt::format("{} is stored as external data: repacked weights would be copied into the model file "
                       "(the unpacking rule keeps the data where it is)", name);
  }
  const onnx::TensorProto tensor = match.scope->model().tensor_with_data(*header);
  if (tensor.data_type() != TensorProto::UINT8) return fmt::format("{} is not uint8", name);
  if (tensor.has_raw_data()) {
    bytes = tensor.raw_data();
  } else {
    bytes.clear();
    for (int32_t v : tensor.int32_data()) bytes.push_back(static_cast<char>(v));
  }
  if (bytes.size() != count) return fmt::format("{} holds {} bytes, not {}", name, bytes.size(), count);
  return {};
}

// A tensor of `bits`-bit integers ([rows, columns], row-major), packed as ONNX stores them.
onnx::TensorProto integer_tensor(int32_t type, int64_t rows, int64_t columns, const std::vector<int8_t>& values, bool four_bits) {
  onnx::TensorProto tensor;
  tensor.set_data_type(type);
  tensor.add_dims(rows);
  tensor.add_dims(columns);
  std::string raw;
  if (four_bits) {
    raw.assign((values.size() + 1) / 2, '\0');
    for (size_t i = 0; i < values.size(); ++i) raw[i / 2] = static_cast<char>(raw[i / 2] | ((values[i] & 0xF) << (4 * (i % 2))));
  } else {
    raw.assign(values.begin(), values.end());
  }
  tensor.set_raw_data(raw);
  return tensor;
}

std::string matmul_nbits_as_dequantize_linear(const Match& match, GraphBuilder& b) {
  NBits nb;
  if (auto why = read_nbits(match, nb); !why.empty()) return why;
  if (nb.bits == 2) return "2-bit weights: DequantizeLinear takes 2-bit types from ai.onnx 25 only (the unpacking rule takes them)";
  if (nb.zero == Zero::kFloat) {
    return "zero_points of A's type: DequantizeLinear's zero point has the weights' integer type (the unpacking rule takes them)";
  }
  const bool four = nb.bits == 4;
  if (four && match.scope->model().proto.ir_version() < 10) {
    return fmt::format("4-bit initializers need IR version 10 (the model has {}; the unpacking rule keeps B as it is)",
                       match.scope->model().proto.ir_version());
  }
  std::string weight_bytes, zero_bytes;
  if (auto why = constant_bytes(match, "B", static_cast<size_t>(nb.n * nb.k_blocks * nb.blob), weight_bytes); !why.empty()) {
    return why;
  }
  if (nb.zero == Zero::kPacked) {
    if (auto why = constant_bytes(match, "zero_points", static_cast<size_t>(nb.n * nb.zero_columns), zero_bytes); !why.empty()) {
      return why;
    }
  }
  const int64_t mask = (1 << nb.bits) - 1, middle = 1 << (nb.bits - 1);
  auto field = [&](const std::string& bytes, int64_t row_bytes, int64_t row, int64_t index) -> int64_t {
    const auto byte = static_cast<uint8_t>(bytes[static_cast<size_t>(row * row_bytes + index / nb.per_byte())]);
    return (byte >> ((index % nb.per_byte()) * nb.bits)) & mask;
  };
  // W [K, N]: without zero points the signed q - 2^(bits-1) (DequantizeLinear's zero point 0), else q.
  const bool is_signed = nb.zero == Zero::kDefault;
  std::vector<int8_t> weights(static_cast<size_t>(nb.k * nb.n));
  for (int64_t n = 0; n < nb.n; ++n) {
    for (int64_t k = 0; k < nb.k; ++k) {
      const int64_t q = field(weight_bytes, nb.k_blocks * nb.blob, n, k);
      weights[static_cast<size_t>(k * nb.n + n)] = static_cast<int8_t>(is_signed ? q - middle : q);
    }
  }
  const int32_t weight_type = four ? (is_signed ? kInt4 : kUint4) : (is_signed ? TensorProto::INT8 : TensorProto::UINT8);
  std::vector<Value> inputs{b.constant(integer_tensor(weight_type, nb.k, nb.n, weights, four))};
  // scales [k_blocks, N] in float: new constants when the values are known, else transposed at run time.
  const auto scale_values = match.scope->constant_values(match.value("scales"), static_cast<size_t>(nb.n * nb.k_blocks));
  if (scale_values && scale_values->numbers.size() == static_cast<size_t>(nb.n * nb.k_blocks)) {
    std::vector<double> transposed(scale_values->numbers.size());
    for (int64_t n = 0; n < nb.n; ++n) {
      for (int64_t kb = 0; kb < nb.k_blocks; ++kb) {
        transposed[static_cast<size_t>(kb * nb.n + n)] = scale_values->numbers[static_cast<size_t>(n * nb.k_blocks + kb)];
      }
    }
    inputs.push_back(b.constant(make_tensor(TensorProto::FLOAT, {nb.k_blocks, nb.n}, transposed)));
  } else {
    Value scales = b.Reshape(Value{match.value("scales")}, b.ints({nb.n, nb.k_blocks}));
    scales = b.Transpose(scales, {1, 0});
    if (nb.dtype != TensorProto::FLOAT) scales = b.Cast(scales, TensorProto::FLOAT);
    inputs.push_back(scales);
  }
  if (nb.zero == Zero::kPacked) {
    std::vector<int8_t> zeros(static_cast<size_t>(nb.k_blocks * nb.n));
    for (int64_t n = 0; n < nb.n; ++n) {
      for (int64_t kb = 0; kb < nb.k_blocks; ++kb) {
        zeros[static_cast<size_t>(kb * nb.n + n)] = static_cast<int8_t>(field(zero_bytes, nb.zero_columns, n, kb));
      }
    }
    inputs.push_back(b.constant(integer_tensor(four ? kUint4 : TensorProto::UINT8, nb.k_blocks, nb.n, zeros, four)));
  }
  const Value weights_kn = b.op("DequantizeLinear", inputs, {attr("axis", int64_t{0}), attr("block_size", nb.block_size)});
  multiply(match, b, nb, weights_kn);
  return {};
}

}  // namespace

void register_defuse_matmul_nbits_builders(BuilderRegistry& registry) {
  const BuilderSignature signature{.values = {"A", "B", "scales", "Y"},
                                   .optional_values = {"zero_points", "g_idx", "bias"},
                                   .attributes = {"K", "N", "bits", "block_size", "accuracy_level"}};
  registry.add("matmul_nbits_as_dequantize_linear", signature, matmul_nbits_as_dequantize_linear);
  registry.add("defuse_matmul_nbits", signature, defuse_matmul_nbits);
}

}  // namespace onnx_rewrite
