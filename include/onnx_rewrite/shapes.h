// Static shapes: element type, rank and dims of a value as far as the graph tells, from declared
// types, constants and the ops in between (Scope::facts). Exporters rarely declare the types of
// intermediate values; rules need them (ranks, element types, which operand has the full shape).
//
// Dims are numbers or symbols. A symbol stands for a size known only at run time: a graph
// input's dim_param, or "<value>#<axis>" for the axis of the value where the size first became
// unknown. Symbols flow unchanged through ops that keep a size, so two values with equal
// symbols provably have equal sizes; different symbols prove nothing either way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace onnx_rewrite {

struct Dim {
  std::optional<int64_t> number;        // a size, or an element of a shape being computed (may be -1)
  const std::string* symbol = nullptr;  // else the size's name, or null when nothing is known

  static Dim of(int64_t n) { return {n, nullptr}; }
  // `name` is kept by the scope's shape inference, as long as the facts holding the dim.
  static Dim named(const std::string* name) { return {std::nullopt, name}; }
  bool known() const { return number.has_value(); }
  std::string text() const { return known() ? std::to_string(*number) : symbol ? *symbol : "?"; }
  // Provably the same size.
  friend bool operator==(const Dim& a, const Dim& b) {
    return a.known() || b.known() ? a.number == b.number : a.symbol && b.symbol && (a.symbol == b.symbol || *a.symbol == *b.symbol);
  }
};

using Dims = std::vector<Dim>;

inline std::string dims_text(const std::optional<Dims>& dims) {
  if (!dims) return "[unknown rank]";
  std::vector<std::string> parts;
  for (const Dim& dim : *dims) parts.push_back(dim.text());
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

struct ShapeFacts {
  int32_t elem_type = 0;       // 0 = unknown
  std::optional<Dims> shape;   // nullopt = rank unknown
  std::optional<Dims> values;  // the elements of a small integer tensor (a shape being computed)
  std::optional<size_t> rank() const { return shape ? std::optional<size_t>(shape->size()) : std::nullopt; }
  // The dims as numbers, -1 where a size is known only at run time; nullopt when the rank is unknown.
  std::optional<std::vector<int64_t>> static_dims() const {
    if (!shape) return std::nullopt;
    std::vector<int64_t> dims;
    for (const Dim& dim : *shape) dims.push_back(dim.known() ? *dim.number : -1);
    return dims;
  }
  // One dim as a number; -1 when unknown (or the rank is unknown or too small).
  int64_t dim(size_t axis) const { return shape && axis < shape->size() && (*shape)[axis].known() ? *(*shape)[axis].number : -1; }
};

}  // namespace onnx_rewrite
