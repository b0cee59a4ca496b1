#include "runtime/compare.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {

namespace {

using onnx::TensorProto;

std::string dims_text(const std::vector<int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

}  // namespace

Tolerance tolerance_for(int32_t data_type, const Tolerance& asked) {
  double rtol = 0, atol = 0;
  switch (data_type) {
    case TensorProto::FLOAT:
    case TensorProto::DOUBLE: rtol = 1e-4, atol = 1e-5; break;
    case TensorProto::FLOAT16: rtol = 1e-2, atol = 1e-3; break;
    case TensorProto::BFLOAT16: rtol = 2e-2, atol = 1e-2; break;
    case TensorProto::INT8:
    case TensorProto::UINT8: return {0.0, asked.atol.value_or(1.0)};
    default: return {0.0, 0.0};
  }
  return {asked.rtol.value_or(rtol), asked.atol.value_or(atol)};
}

ValueStats stats_of(const TensorProto& tensor) {
  ValueStats stats;
  const auto values = decode_tensor(tensor);
  if (!values) return stats;
  const auto& numbers = values->numbers;
  for (double number : numbers) {
    stats.nan += std::isnan(number);
    stats.inf += std::isinf(number);
  }
  // Integers compared exactly: int64 beyond 2^53 has no double of its own.
  stats.constant =
      values->integers.empty()
          ? numbers.size() > 1 && std::all_of(numbers.begin(), numbers.end(),
                                              [&](double x) { return x == numbers[0] || (std::isnan(x) && std::isnan(numbers[0])); })
          : values->integers.size() > 1 &&
                std::all_of(values->integers.begin(), values->integers.end(), [&](int64_t x) { return x == values->integers[0]; });
  return stats;
}

OutputComparison compare_output(const std::string& name, const TensorProto& original, const TensorProto* rewritten,
                                const Tolerance& asked) {
  OutputComparison result;
  result.name = name;
  result.data_type = original.data_type();
  result.dims.assign(original.dims().begin(), original.dims().end());
  const auto expected = decode_tensor(original);
  result.elements = expected ? static_cast<int64_t>(expected->numbers.size()) : 0;
  const Tolerance tolerance = tolerance_for(original.data_type(), asked);
  result.rtol = *tolerance.rtol;
  result.atol = *tolerance.atol;
  result.original = stats_of(original);
  if (!rewritten) {
    result.status = "missing";
    result.message = "the rewritten model has no output of this name";
    return result;
  }
  result.rewritten = stats_of(*rewritten);
  result.status = "mismatch";
  if (rewritten->data_type() != original.data_type()) {
    result.message = fmt::format("element type {} where the original has {}", data_type_name(rewritten->data_type()),
                                 data_type_name(original.data_type()));
    return result;
  }
  const std::vector<int64_t> dims(rewritten->dims().begin(), rewritten->dims().end());
  if (dims != result.dims) {
    result.message = fmt::format("shape {} where the original has {}", dims_text(dims), dims_text(result.dims));
    return result;
  }
  const auto got = decode_tensor(*rewritten);
  if (!expected || !got) {
    result.message = fmt::format("{} values can't be compared", data_type_name(original.data_type()));
    return result;
  }
  const bool exact_integers = !expected->integers.empty();
  for (size_t i = 0; i < expected->numbers.size(); ++i) {
    const double b = expected->numbers[i], a = got->numbers[i];
    bool within;
    if (std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b)) {
      within = (std::isnan(a) && std::isnan(b)) || a == b;
    } else {
      const double difference = exact_integers ? std::abs(static_cast<double>(got->integers[i] - expected->integers[i])) : std::abs(a - b);
      result.max_abs = std::max(result.max_abs, difference);
      if (b != 0) result.max_rel = std::max(result.max_rel, difference / std::abs(b));
      within = difference <= result.atol + result.rtol * std::abs(b);
    }
    result.over_tolerance += !within;
  }
  if (result.over_tolerance == 0) {
    result.status = "match";
    return result;
  }
  result.message = fmt::format("{} of {} elements over the tolerance", result.over_tolerance, result.elements);
  return result;
}

}  // namespace onnx_rewrite
