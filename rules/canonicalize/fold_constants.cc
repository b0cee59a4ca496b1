// The C++ half of rules/canonicalize/fold-constants.rules: an op whose inputs are all small
// constants becomes a Constant holding its result, so that rules written with plain constants
// (fuse-gelu's √2, fuse-layernorm's ε) also match the spellings that compute them (ONNX's own
// function bodies write `Sqrt (CastLike (2, x))`). Exact per ONNX: every element is computed in
// double and rounded once to the result type (for float, float16 and bfloat16 this equals
// computing in float, as ONNX Runtime does, for everything but Pow); integers must not overflow
// or divide by zero. Anything else declines with the reason.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <variant>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

// A folded constant must stay small and must not grow the model: at most 1 MiB, and no more
// bytes than its inputs had (a few bytes of slack for scalars that change type).
constexpr size_t kMaxBytes = size_t{1} << 20;
constexpr size_t kSlackBytes = 64;
constexpr size_t kMaxElements = kMaxBytes / 4;
constexpr double kExactIntegers = 9007199254740992.0;  // 2^53: doubles hold integers exactly below

// The range of an integer type make_tensor writes exactly (uint64 above 2^53 is left alone).
std::optional<std::pair<double, double>> integer_range(int32_t type) {
  switch (type) {
    case TensorProto::INT8: return std::pair{-128.0, 127.0};
    case TensorProto::UINT8: return std::pair{0.0, 255.0};
    case TensorProto::INT16: return std::pair{-32768.0, 32767.0};
    case TensorProto::UINT16: return std::pair{0.0, 65535.0};
    case TensorProto::INT32: return std::pair{-2147483648.0, 2147483647.0};
    case TensorProto::UINT32: return std::pair{0.0, 4294967295.0};
    case TensorProto::INT64: return std::pair{-kExactIntegers, kExactIntegers};
    case TensorProto::UINT64: return std::pair{0.0, kExactIntegers};
    default: return std::nullopt;
  }
}

// Bytes per element, a sub-byte type's rounded up (the types folded are whole bytes).
size_t element_bytes(int32_t type) { return static_cast<size_t>((element_bits(type) + 7) / 8); }

size_t element_count(const std::vector<int64_t>& dims) {
  size_t count = 1;
  for (int64_t dim : dims) count *= static_cast<size_t>(dim);
  return count;
}

// Why folding `node` into a result of `bytes` would store more than the model does: an input
// another node also reads stays, next to the result. "" if not (or the result is a few bytes).
std::string copies_shared_input(const BuildContext& match, std::initializer_list<const char*> inputs, size_t bytes) {
  if (bytes <= kSlackBytes) return {};
  for (const char* input : inputs) {
    if (match.has(input) && match.used_outside(input)) {
      return fmt::format("'{}' is also read by another node: folding would copy it", match.value(input).name);
    }
  }
  return {};
}

// An input's elements as doubles: integers only where a double holds them exactly.
std::optional<std::vector<double>> numbers_of(const TensorValues& values) {
  if (values.data_type == TensorProto::BOOL || integer_range(values.data_type)) {
    std::vector<double> numbers;
    for (int64_t integer : values.integers) {
      if (std::abs(static_cast<double>(integer)) > kExactIntegers) return std::nullopt;
      numbers.push_back(static_cast<double>(integer));
    }
    return numbers;
  }
  if (is_float_type(values.data_type)) return values.numbers;
  return std::nullopt;
}

struct Folded {
  int32_t type = 0;
  std::vector<int64_t> dims;
  std::vector<double> numbers;
};

// ONNX's Cast of one element: floats round, float -> integer truncates (declined out of range
// and for NaN, where ONNX leaves the result undefined), anything -> bool is "not zero".
std::optional<double> cast_element(double x, int32_t to) {
  if (is_float_type(to)) return x;
  if (to == TensorProto::BOOL) return x != 0 ? 1.0 : 0.0;
  const auto range = integer_range(to);
  if (!range || std::isnan(x)) return std::nullopt;
  const double truncated = std::trunc(x);
  if (truncated < range->first || truncated > range->second) return std::nullopt;
  return truncated;
}

// One element of a unary op on a float tensor, or of Neg/Abs on an integer one.
std::optional<double> unary_element(const std::string& op, double x, int32_t type) {
  if (op == "Neg") return -x;
  if (op == "Abs") return std::abs(x);
  if (!is_float_type(type)) return std::nullopt;
  if (op == "Sqrt") return std::sqrt(x);
  if (op == "Reciprocal") return 1.0 / x;
  return std::nullopt;
}

std::optional<double> binary_element(const std::string& op, double a, double b, int32_t type) {
  const bool integer = !is_float_type(type);
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") {
    if (!integer) return a / b;
    if (b == 0) return std::nullopt;
    return static_cast<double>(static_cast<int64_t>(a) / static_cast<int64_t>(b));  // C++ truncates, as ONNX
  }
  if (op == "Pow" && !integer) return std::pow(a, b);
  return std::nullopt;
}

// Numpy-style (multidirectional) broadcasting of two shapes.
std::optional<std::vector<int64_t>> broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// The flat index into `dims` (right-aligned with `out`, size-1 axes repeated) of element `flat` of `out`.
size_t source_index(size_t flat, const std::vector<int64_t>& out, const std::vector<int64_t>& dims) {
  size_t index = 0, stride = 1;
  for (size_t i = out.size(); i-- > 0;) {
    const size_t coordinate = flat % static_cast<size_t>(out[i]);
    flat /= static_cast<size_t>(out[i]);
    const size_t k = i + dims.size();
    if (k < out.size()) continue;  // an axis `dims` doesn't have
    const int64_t dim = dims[k - out.size()];
    if (dim != 1) index += coordinate * stride;
    stride *= static_cast<size_t>(dim);
  }
  return index;
}

BuildResult fold(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  const std::string& op = node.op_type();
  const bool binary = op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow";
  const std::vector<const char*> inputs = binary ? std::vector<const char*>{"a", "b"} : std::vector<const char*>{"c"};
  std::vector<TensorValues> values;
  size_t input_bytes = 0;
  for (const char* input : inputs) {
    const std::string& name = match.value(input).name;
    if (match.stored_externally(input)) return decline(fmt::format("'{}' is stored as external data", name));
    auto decoded = match.constant(input, kMaxElements);
    if (!decoded) return decline(fmt::format("'{}' is not a constant of at most {} elements", name, kMaxElements));
    input_bytes += element_count(decoded->dims) * element_bytes(decoded->data_type);
    values.push_back(std::move(*decoded));
  }
  auto first = numbers_of(values[0]);
  if (!first) return decline(fmt::format("'{}' has element type {}", match.value(inputs[0]).name, data_type_name(values[0].data_type)));

  Folded out{values[0].data_type, values[0].dims, {}};
  if (op == "Cast" || op == "CastLike") {
    out.type = op == "Cast" ? static_cast<int32_t>(node.attribute_int("to", 0)) : match.facts("like").elem_type;
    if (out.type == 0) return decline(fmt::format("the element type of '{}' is unknown", match.value("like").name));
    if (!is_float_type(out.type) && !integer_range(out.type) && out.type != TensorProto::BOOL) {
      return decline(fmt::format("Cast to {} is not folded", data_type_name(out.type)));
    }
  } else if (binary) {
    auto second = numbers_of(values[1]);
    if (!second) return decline(fmt::format("'{}' has element type {}", match.value("b").name, data_type_name(values[1].data_type)));
    if (values[1].data_type != out.type && op != "Pow") return decline("the operands' element types differ");
    auto dims = broadcast(values[0].dims, values[1].dims);
    if (!dims) return decline("the operands' shapes don't broadcast");
    out.dims = *dims;
  }
  const size_t count = element_count(out.dims);
  const size_t bytes = count * element_bytes(out.type);
  if (bytes > kMaxBytes || bytes > input_bytes + kSlackBytes) {
    return decline(fmt::format("the result would take {} bytes, its inputs {}: folding would grow the model", bytes, input_bytes));
  }
  if (auto why = copies_shared_input(match, {"a", "b", "c", "like"}, bytes); !why.empty()) return decline(why);
  if (out.type == TensorProto::BOOL && op != "Cast" && op != "CastLike") return decline(fmt::format("{} of bool is not folded", op));
  const auto second = binary ? numbers_of(values[1]) : std::nullopt;
  const auto range = integer_range(out.type);
  for (size_t i = 0; i < count; ++i) {
    std::optional<double> number;
    if (op == "Cast" || op == "CastLike") {
      number = cast_element((*first)[i], out.type);
    } else if (binary) {
      number = binary_element(op, (*first)[source_index(i, out.dims, values[0].dims)],
                              (*second)[source_index(i, out.dims, values[1].dims)], out.type);
    } else {
      number = unary_element(op, (*first)[i], out.type);
    }
    if (!number) return decline(fmt::format("{} of these {} elements has no exact value here", op, data_type_name(values[0].data_type)));
    if (range && (*number < range->first || *number > range->second)) return decline(fmt::format("{} overflows {}", op, data_type_name(out.type)));
    // make_tensor's bfloat16 rounding is for numbers, not NaN.
    if (out.type == TensorProto::BFLOAT16 && std::isnan(*number)) return decline("a bfloat16 NaN is not folded");
    out.numbers.push_back(*number);
  }
  const TensorProto tensor = out.type == TensorProto::INT64
                                 ? make_int64_tensor(out.dims, std::vector<int64_t>(out.numbers.begin(), out.numbers.end()))
                                 : make_tensor(out.type, out.dims, out.numbers);
  // A Constant node, not b.constant(): the node takes over the graph name of the folded value,
  // which an initializer made by the builder could only reach through an Identity.
  b.output(node.output(0), b.op("Constant", {}, {attr("value", tensor)}));
  return built();
}

// The dims a Reshape, Unsqueeze or Squeeze of a tensor of `dims` gives (ONNX's rules), or why it
// can't be told; Transpose also gives its permutation.
struct Layout {
  std::vector<int64_t> dims;
  std::vector<int64_t> perm;  // Transpose only
};

std::variant<Layout, std::string> layout_of(const BuildContext& match, const std::vector<int64_t>& dims) {
  const NodeView node = match.anchor();
  const std::string& op = node.op_type();
  const auto rank = static_cast<int64_t>(dims.size());
  // The int64 second input (Reshape's shape, the axes from opset 13), or the `axes` attribute before.
  const char* second_input = match.has("shape") ? "shape" : "axes";
  auto second = [&]() -> std::optional<std::vector<int64_t>> {
    if (!match.has(second_input)) {
      if (const auto* axes = node.attribute("axes")) return std::vector<int64_t>(axes->ints().begin(), axes->ints().end());
      return std::nullopt;
    }
    auto values = match.constant(second_input, kMaxElements);
    if (!values || values->data_type != TensorProto::INT64) return std::vector<int64_t>{INT64_MIN};  // not a constant: declined
    return values->integers;
  };
  auto normalized_axes = [&](std::vector<int64_t> axes, int64_t of_rank) -> std::optional<std::vector<int64_t>> {
    for (int64_t& axis : axes) {
      if (axis < -of_rank || axis >= of_rank) return std::nullopt;
      if (axis < 0) axis += of_rank;
    }
    std::sort(axes.begin(), axes.end());
    if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) return std::nullopt;
    return axes;
  };
  Layout out;
  if (op == "Transpose") {
    out.perm = node.attribute_ints("perm");
    if (out.perm.empty()) {
      for (int64_t i = rank; i-- > 0;) out.perm.push_back(i);
    }
    auto sorted = normalized_axes(out.perm, rank);
    if (!sorted || static_cast<int64_t>(sorted->size()) != rank) return "perm is not a permutation of the axes";
    for (int64_t axis : out.perm) out.dims.push_back(dims[static_cast<size_t>(axis)]);
    return out;
  }
  const auto given = second();
  if (given && given->size() == 1 && (*given)[0] == INT64_MIN) return fmt::format("'{}' is not an int64 constant", match.value(second_input).name);
  if (op == "Reshape") {
    if (!given) return "no shape";
    const bool allow_zero = node.attribute_int("allowzero", 0) != 0;
    int64_t known = 1, inferred = -1;
    for (size_t i = 0; i < given->size(); ++i) {
      int64_t dim = (*given)[i];
      if (dim == 0 && !allow_zero) {
        if (i >= dims.size()) return "a 0 in the shape copies an axis the input doesn't have";
        dim = dims[i];
      }
      if (dim == -1) {
        if (inferred >= 0) return "the shape has two -1";
        inferred = static_cast<int64_t>(i);
      } else if (dim < 0) {
        return fmt::format("the shape holds {}", dim);
      } else {
        known *= dim;
      }
      out.dims.push_back(dim);
    }
    const auto count = static_cast<int64_t>(element_count(dims));
    if (inferred >= 0) {
      if (known == 0 || count % known != 0) return "the -1 in the shape can't be inferred";
      out.dims[static_cast<size_t>(inferred)] = count / known;
    } else if (known != count) {
      return "the shape holds another number of elements";
    }
    return out;
  }
  if (op == "Unsqueeze") {
    if (!given) return "no axes";
    const auto out_rank = rank + static_cast<int64_t>(given->size());
    const auto axes = normalized_axes(*given, out_rank);
    if (!axes) return "the axes are out of range or repeated";
    auto next = dims.begin();
    for (int64_t i = 0; i < out_rank; ++i) out.dims.push_back(std::binary_search(axes->begin(), axes->end(), i) ? 1 : *next++);
    return out;
  }
  // Squeeze: the given axes, or every axis of size 1.
  std::vector<int64_t> axes;
  if (given && !given->empty()) {
    const auto normalized = normalized_axes(*given, rank);
    if (!normalized) return "the axes are out of range or repeated";
    axes = *normalized;
  } else {
    for (int64_t i = 0; i < rank; ++i) {
      if (dims[static_cast<size_t>(i)] == 1) axes.push_back(i);
    }
  }
  for (int64_t i = 0; i < rank; ++i) {
    const bool squeezed = std::binary_search(axes.begin(), axes.end(), i);
    if (squeezed && dims[static_cast<size_t>(i)] != 1) return fmt::format("axis {} has size {}, not 1", i, dims[static_cast<size_t>(i)]);
    if (!squeezed) out.dims.push_back(dims[static_cast<size_t>(i)]);
  }
  return out;
}

// Reshape, Unsqueeze, Squeeze and Transpose of a constant: the same elements in another shape
// (Transpose: in another order), exactly, as a Constant of the input's element type.
BuildResult fold_layout(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  const std::string& data = match.value("c").name;
  if (match.stored_externally("c")) return decline(fmt::format("'{}' is stored as external data", data));
  const auto values = match.constant("c", kMaxElements);
  if (!values) return decline(fmt::format("'{}' is not a constant of at most {} elements", data, kMaxElements));
  const int32_t type = values->data_type;
  const bool exact_integers = type == TensorProto::INT64 || type == TensorProto::BOOL || (integer_range(type) && type != TensorProto::UINT64);
  if (!is_float_type(type) && !exact_integers) return decline(fmt::format("'{}' has element type {}", data, data_type_name(type)));
  if (auto why = copies_shared_input(match, {"c", "shape", "axes"}, element_count(values->dims) * element_bytes(type)); !why.empty()) {
    return decline(why);
  }
  auto layout = layout_of(match, values->dims);
  if (auto* why = std::get_if<std::string>(&layout)) return decline(*why);
  const Layout& out = std::get<Layout>(layout);

  // Element i of the result is element source(i) of the input.
  const size_t count = element_count(out.dims);
  auto source = [&](size_t flat) {
    if (out.perm.empty()) return flat;
    size_t index = 0;
    for (size_t axis = out.dims.size(); axis-- > 0;) {
      const auto size = static_cast<size_t>(out.dims[axis]);
      const auto from = static_cast<size_t>(out.perm[axis]);
      size_t stride = 1;
      for (size_t k = from + 1; k < values->dims.size(); ++k) stride *= static_cast<size_t>(values->dims[k]);
      index += (flat % size) * stride;
      flat /= size;
    }
    return index;
  };
  TensorProto tensor;
  if (type == TensorProto::INT64) {
    std::vector<int64_t> integers(count);
    for (size_t i = 0; i < count; ++i) integers[i] = values->integers[source(i)];
    tensor = make_int64_tensor(out.dims, integers);
  } else {
    std::vector<double> numbers(count);
    for (size_t i = 0; i < count; ++i) {
      const size_t from = source(i);
      numbers[i] = exact_integers ? static_cast<double>(values->integers[from]) : values->numbers[from];
    }
    if (type == TensorProto::BFLOAT16 && std::any_of(numbers.begin(), numbers.end(), [](double n) { return std::isnan(n); })) {
      return decline("a bfloat16 NaN is not folded");
    }
    tensor = make_tensor(type, out.dims, numbers);
  }
  b.output(node.output(0), b.op("Constant", {}, {attr("value", tensor)}));
  return built();
}

// A small integer tensor (rank 0 or 1) whose every element the shape facts know: a Shape of a
// statically shaped value and what is computed from it and constants.
BuildResult fold_known_values(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  if (node.outputs().size() != 1) return decline("more than one output");
  const ShapeFacts& facts = match.facts("y");
  if (facts.elem_type != TensorProto::INT64 && facts.elem_type != TensorProto::INT32) return decline("not an int32 or int64 tensor");
  const auto dims = facts.static_dims();
  if (!dims || dims->size() > 1 || (dims->size() == 1 && (*dims)[0] < 0)) return decline("not a tensor of rank 0 or 1 of known size");
  if (!facts.values) return decline("its values are not known before run time");
  std::vector<int64_t> numbers;
  for (const Dim& element : *facts.values) {
    if (!element.known()) return decline("some of its values are known only at run time");
    numbers.push_back(*element.number);
  }
  if (static_cast<int64_t>(numbers.size()) != (dims->empty() ? 1 : (*dims)[0])) return decline("its values and its shape disagree");
  TensorProto tensor;
  if (facts.elem_type == TensorProto::INT64) {
    tensor = make_int64_tensor(*dims, numbers);
  } else {
    for (int64_t number : numbers) {
      if (number < INT32_MIN || number > INT32_MAX) return decline("a value outside int32");
    }
    tensor = make_tensor(TensorProto::INT32, *dims, std::vector<double>(numbers.begin(), numbers.end()));
  }
  b.output(node.output(0), b.op("Constant", {}, {attr("value", tensor)}));
  return built();
}

// Mean (a, b) as ONNX defines it: the sum divided by the number of inputs. Halving is exact, so
// this is bit for bit what Mean computes; the 2 is made in the inputs' element type.
BuildResult mean_of_two(const BuildContext& match, GraphBuilder& b) {
  const int32_t type = match.element_type({"a", "b", "y"});
  if (auto why = check_element_type(type, {TensorProto::FLOAT, TensorProto::DOUBLE, TensorProto::FLOAT16, TensorProto::BFLOAT16}, "Div")) {
    return decline(*why);
  }
  const Value sum = b.Add(match.value("a"), match.value("b"));
  const Value two = b.scalar(2, type);
  b.output(match.value("y"), b.Div(sum, two));
  return built();
}

}  // namespace

void register_canonicalize_builders(BuilderRegistry& registry) {
  registry.add("canonicalize_fold_known_values",
               {.values = {"a", "y"}, .optional_values = {"b", "c", "d", "e", "f", "g", "h"}, .attributes = {}, .optional_attributes = {}},
               fold_known_values);
  registry.add("canonicalize_fold_layout", {.values = {"c", "y"}, .optional_values = {"shape", "axes"}, .node_attributes = {"perm", "axes", "allowzero"}},
               fold_layout);
  registry.add("canonicalize_mean_of_two", {.values = {"a", "b", "y"}, .optional_values = {}, .attributes = {}, .optional_attributes = {}},
               mean_of_two);
  registry.add("canonicalize_fold", {.values = {"y"}, .optional_values = {"c", "like", "a", "b"}, .node_attributes = {"to"}}, fold);
}

}  // namespace onnx_rewrite
