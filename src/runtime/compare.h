// Comparing one output of the original model with the rewritten model's output of that name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

// --rtol / --atol; unset, each element type gets its own (tolerance_for).
struct Tolerance {
  std::optional<double> rtol;
  std::optional<double> atol;
};

// The tolerance an element type is judged at: float32 and float64 rtol 1e-4, atol 1e-5; float16
// 1e-2 and 1e-3; bfloat16 2e-2 and 1e-2; int8 and uint8 (quantized values) one step (atol 1);
// other integers and bools exactly (rtol and atol 0, whatever was asked). `asked` replaces the
// figures it gives, for floats, and atol also for 8-bit integers.
Tolerance tolerance_for(int32_t data_type, const Tolerance& asked);

// What one output's values look like, on one side.
struct ValueStats {
  int64_t nan = 0;
  int64_t inf = 0;
  bool constant = false;  // two elements or more, all equal
};
ValueStats stats_of(const onnx::TensorProto& tensor);

struct OutputComparison {
  std::string name;
  std::string status;   // match, mismatch, missing (not an output of the rewritten model), not-compared
  std::string message;  // why a mismatch is one: dtype, shape, or how many elements are over the tolerance
  int32_t data_type = 0;
  std::vector<int64_t> dims;
  int64_t elements = 0;
  double rtol = 0, atol = 0;
  // Over the elements finite on both sides; max_rel over those where the original is not 0.
  double max_abs = 0, max_rel = 0;
  int64_t over_tolerance = 0;  // elements failing |a - b| <= atol + rtol * |b| (b the original), NaN/Inf pairs that differ included
  ValueStats original, rewritten;
  // An output constant on both sides may not depend on the inputs, and then proves little.
  bool constant() const { return original.constant && rewritten.constant; }
  bool non_finite() const { return original.nan + original.inf + rewritten.nan + rewritten.inf > 0; }
};

// `rewritten` null: missing. NaN matches NaN and an infinity the same infinity; a NaN or an
// infinity against anything else is over the tolerance.
OutputComparison compare_output(const std::string& name, const onnx::TensorProto& original, const onnx::TensorProto* rewritten,
                                const Tolerance& asked);

}  // namespace onnx_rewrite
