// ONNX Runtime's float-output quantized matrix products (com.microsoft DynamicQuantizeMatMul and
// MatMulIntegerToFloat) as standard ONNX (rules/dynamic-quant-matmul/*.rules), with the
// numbers of ORT's CPU kernel (contrib_ops/cpu/quantization/dynamic_quantize_matmul.cc).
//
// The kernel: A quantized to uint8 as DynamicQuantizeLinear does (DynamicQuantizeMatMul only;
// the same GetQuantizationParameter and ParQuantizeLinearStd), the int32 product
// acc = Σ_k (A - a_zp)(B - b_zp) as MatMulInteger computes it (b_zp per tensor or per column),
// then Y = acc · (a_scale·b_scale) + bias, where a scale that is not a "GEMM" scale (a_scale with
// more than one element; a b_scale whose shape is neither one element nor per column of B) is
// applied after the bias is added (ScaleOutput). MatMulIntegerToFloat first swaps a_scale and
// b_scale when their shapes say they were given the other way round (FixupScaleTensor).
//
// Two forms:
//   integer (rules dynamic-quantize-matmul, matmul-integer-to-float; the default):
//     [DynamicQuantizeLinear ->] MatMulInteger -> Cast -> Mul (a_scale·b_scale) [-> Add bias]
//     -- exactly the subgraph ORT's MatMulIntegerToFloatFusion / DynamicQuantizeMatMulFusion
//     fuse, with the kernel's integer accumulation.
//   qdq (rules *-qdq, `--skip` the integer rule to get them):
//     [DynamicQuantizeLinear ->] DequantizeLinear (A), DequantizeLinear (B) -> MatMul [-> Add bias]
//     -- float accumulation; per-tensor A and per-tensor or per-column B scales only.
#include <optional>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

// Static dims of a value (a constant's header, or declared/inferred dims all known).
std::optional<std::vector<int64_t>> known_dims(const Match& match, const char* name) {
  if (!bound(match, name)) return std::nullopt;
  if (const auto* tensor = match.scope->constant_tensor(match.value(name))) {
    return std::vector<int64_t>(tensor->dims().begin(), tensor->dims().end());
  }
  auto dims = match.facts(name).static_dims();
  if (!dims) return std::nullopt;
  for (int64_t d : *dims) {
    if (d < 0) return std::nullopt;
  }
  return dims;
}

int64_t elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

bool one_element(const std::vector<int64_t>& dims) { return dims.size() <= 1 && elements(dims) == 1; }

// MatMulIntegerBase::IsBQuantParamSupported: a scale (or zero point) the kernel applies per
// column inside its GEMM: one element, [N] for a 2-D B, or B's shape with a 1 in place of K.
bool gemm_scale_for_b(const std::vector<int64_t>& param, const std::vector<int64_t>& b) {
  if (one_element(param)) return true;
  if (param.size() == 1 && b.size() == 2 && param[0] == b[1]) return true;
  if (param.size() != b.size() || param.size() <= 1 || param[param.size() - 2] != 1) return false;
  for (size_t d = 0; d < param.size(); ++d) {
    if (d != param.size() - 2 && param[d] != b[d]) return false;
  }
  return true;
}

std::string check_type(const Match& match, const char* name, std::initializer_list<int32_t> allowed, const std::string& what) {
  if (!bound(match, name)) return {};
  const int32_t type = match.facts(name).elem_type;
  if (!type) return {};
  for (int32_t t : allowed) {
    if (t == type) return {};
  }
  return fmt::format("{} is {}; {}", name, data_type_name(type), what);
}

// Shared by both ops: a (quantized, or float for DynamicQuantizeMatMul), its scale and zero point
// as built values, the b side from the match.
std::string build(const Match& match, GraphBuilder& b, bool dynamic) {
  const bool qdq = match.attribute_string("form", "integer") == "qdq";
  const std::string op = match.anchor->op_type();
  if (auto why = check_type(match, "b", {TensorProto::UINT8, TensorProto::INT8}, "B must be uint8 or int8"); !why.empty()) return why;
  for (const char* name : {"a_scale", "b_scale", "bias"}) {
    if (dynamic && name == std::string("a_scale")) continue;  // DynamicQuantizeMatMul has none
    if (auto why = check_type(match, name, {TensorProto::FLOAT}, "ORT's CPU kernel takes float"); !why.empty()) return why;
  }
  Value a{match.value("a")}, a_scale, a_zero_point;
  std::vector<int64_t> a_scale_dims;  // {} = one element
  if (dynamic) {
    if (auto why = check_type(match, "a", {TensorProto::FLOAT}, "ORT's CPU kernel takes float"); !why.empty()) return why;
  } else {
    if (auto why = check_type(match, "a", {TensorProto::UINT8, TensorProto::INT8}, "A must be uint8 or int8"); !why.empty()) return why;
    const int32_t a_type = match.facts("a").elem_type, b_type = match.facts("b").elem_type;
    if (a_type == TensorProto::INT8 && b_type == TensorProto::UINT8) return "A is int8 and B uint8; ORT's kernel has no such pair";
    auto dims = known_dims(match, "a_scale");
    if (!dims) return "the shape of a_scale is unknown";
    a_scale_dims = *dims;
    a_scale = Value{match.value("a_scale")};
    a_zero_point = value_of(match, "a_zero_point");
    if (auto zp = known_dims(match, "a_zero_point"); zp && !one_element(*zp)) {
      return "a_zero_point has more than one element; ORT's kernel takes one (per-tensor A)";
    }
  }
  auto b_dims = known_dims(match, "b");
  auto b_scale_dims = known_dims(match, "b_scale");
  if (!b_dims) return "the shape of B is unknown";
  if (!b_scale_dims) return "the shape of b_scale is unknown";
  Value b_scale{match.value("b_scale")};
  if (!dynamic && !one_element(a_scale_dims)) {
    // FixupScaleTensor: scales given the other way round are swapped back.
    if (a_scale_dims.size() == 1 || a_scale_dims.back() != 1) std::swap(a_scale, b_scale), std::swap(a_scale_dims, *b_scale_dims);
  } else if (!dynamic && !one_element(*b_scale_dims)) {
    if (b_scale_dims->size() > 1 && (*b_scale_dims)[b_scale_dims->size() - 2] != 1) {
      std::swap(a_scale, b_scale), std::swap(a_scale_dims, *b_scale_dims);
    }
  }
  const bool a_in_gemm = dynamic || one_element(a_scale_dims);
  const bool b_in_gemm = gemm_scale_for_b(*b_scale_dims, *b_dims);
  if (auto zp = known_dims(match, "b_zero_point"); zp && !gemm_scale_for_b(*zp, *b_dims)) {
    return "b_zero_point is neither per tensor nor per column of B (ORT's kernel refuses it)";
  } else if (!zp && bound(match, "b_zero_point")) {
    return "the shape of b_zero_point is unknown";
  }

  if (dynamic) {
    auto quantized = b.op_outputs("DynamicQuantizeLinear", {a}, 3);
    a = quantized[0], a_scale = quantized[1], a_zero_point = quantized[2];
  }
  Value bias = value_of(match, "bias");
  Value y;
  if (qdq) {
    if (!a_in_gemm || !b_in_gemm) return "the qdq form takes a per-tensor a_scale and a per-tensor or per-column b_scale";
    const bool per_column = !one_element(*b_scale_dims);
    if (per_column && b_dims->size() != 2) return "the qdq form takes per-column scales of a 2-D B only";
    auto zp_dims = known_dims(match, "b_zero_point");
    if (zp_dims && per_column != !one_element(*zp_dims)) return "the qdq form needs b_scale and b_zero_point of one shape";
    Value da = a_zero_point.absent() ? b.op("DequantizeLinear", {a, a_scale}) : b.op("DequantizeLinear", {a, a_scale, a_zero_point});
    std::vector<Value> b_inputs{Value{match.value("b")}, b_scale};
    if (bound(match, "b_zero_point")) b_inputs.push_back(value_of(match, "b_zero_point"));
    Value db;
    if (!per_column) {
      db = b.op("DequantizeLinear", b_inputs);
    } else if (b.opset() >= 13) {
      db = b.op("DequantizeLinear", b_inputs, {attr("axis", int64_t{1})});
    } else {  // the same numbers: (Cast(B) - Cast(b_zp)) · b_scale, broadcast along the columns
      db = b.Cast(b_inputs[0], TensorProto::FLOAT);
      if (b_inputs.size() > 2) db = b.Sub(db, b.Cast(b_inputs[2], TensorProto::FLOAT));
      db = b.Mul(db, b_scale);
    }
    y = b.MatMul(da, db);
    if (!bias.absent()) y = b.Add(y, bias);
    b.output(match.value("y"), y);
    return {};
  }
  std::vector<Value> inputs{a, Value{match.value("b")}};
  const bool b_zero_point = bound(match, "b_zero_point");
  if (!a_zero_point.absent() || b_zero_point) inputs.push_back(a_zero_point);
  if (b_zero_point) inputs.push_back(value_of(match, "b_zero_point"));
  Value product = b.Cast(b.op("MatMulInteger", inputs), TensorProto::FLOAT);
  // Scales the kernel applies in its GEMM, then the bias, then the others (ScaleOutput).
  Value gemm_scale;
  if (a_in_gemm && b_in_gemm) {
    gemm_scale = b.Mul(a_scale, b_scale);
  } else if (a_in_gemm || b_in_gemm) {
    gemm_scale = a_in_gemm ? a_scale : b_scale;
  }
  y = gemm_scale.absent() ? product : b.Mul(product, gemm_scale);
  if (!bias.absent()) y = b.Add(y, bias);
  if (!a_in_gemm) y = b.Mul(y, a_scale);
  if (!b_in_gemm) y = b.Mul(y, b_scale);
  b.output(match.value("y"), y);
  return {};
}

std::string dynamic_quantize_matmul(const Match& match, GraphBuilder& b) { return build(match, b, true); }
std::string matmul_integer_to_float(const Match& match, GraphBuilder& b) { return build(match, b, false); }

}  // namespace

void register_dynamic_quant_matmul_builders(BuilderRegistry& registry) {
  auto add = [&](const std::string& name, BuilderSignature signature, BuildFunction build) {
    registry.add(name, std::move(signature), with_attribute_types_checked(ort_attribute_types(), std::move(build)));
  };
  add("dynamic_quantize_matmul",
      {.values = {"a", "b", "b_scale", "y"}, .optional_values = {"b_zero_point", "bias"}, .optional_attributes = {"form"}},
      dynamic_quantize_matmul);
  add("matmul_integer_to_float",
      {.values = {"a", "b", "a_scale", "b_scale", "y"}, .optional_values = {"a_zero_point", "b_zero_point", "bias"},
       .optional_attributes = {"form"}},
      matmul_integer_to_float);
}

}  // namespace onnx_rewrite
