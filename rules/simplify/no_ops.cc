// The C++ half of rules/simplify: nodes that compute their input unchanged become an Identity
// (which the engine then removes), and Reshape shapes the facts decide become constants, where
// the types, shapes and constants prove it; anything else declines with the reason.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>
#include <string_view>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

// y is x: an Identity, which the engine removes (or keeps, to carry a graph output).
BuildResult keep_input(const BuildContext& match, GraphBuilder& b) {
  b.output(match.value("y"), b.Identity(match.value("x")));
  return built();
}

// Cast (x) to x's own element type: the input as it is.
BuildResult no_op_cast(const BuildContext& match, GraphBuilder& b) {
  const int32_t type = match.facts("x").elem_type;
  if (type == 0) return decline("the input's element type is unknown");
  if (type != match.anchor().attribute_int("to", 0)) return decline("the Cast changes the element type");
  return keep_input(match, b);
}

// Dropout keeps every element unless it trains with a ratio above 0: without training_mode
// (Dropout-7 and later, and -12 without the input) or with a constant false one, or with a
// constant ratio of 0. The mask is not built: nothing reads it.
BuildResult inference_dropout(const BuildContext& match, GraphBuilder& b) {
  auto constant_zero = [&](std::string_view name) {
    const auto value = match.scalar(name);
    return value && *value == 0;
  };
  if (match.has("mask")) return decline("the mask is read");
  const bool trains = match.has("training_mode") && !constant_zero("training_mode");
  if (trains && !(match.has("ratio") && constant_zero("ratio"))) {
    return decline("training_mode may be true and the ratio is not a constant 0: elements may be dropped");
  }
  b.output(match.value("output"), b.Identity(match.value("data")));
  return built();
}

// x · 1, x / 1, x − 0, integer x + 0: x itself, when the constant k neither changes x's type
// nor broadcasts it to more elements (k has one element and at most x's rank).
BuildResult neutral_operand(const BuildContext& match, GraphBuilder& b) {
  const auto k = match.constant("k", 1);
  if (!k || k->numbers.size() != 1) return decline("the constant has more than one element");
  const ShapeFacts& x = match.facts("x");
  if (x.elem_type == 0 || x.elem_type != k->data_type) return decline("the operands' element types are unknown or differ");
  if (!x.shape || x.shape->size() < k->dims.size()) return decline("the constant may broadcast x to another shape");
  const std::string op = match.anchor().op_type();
  const bool identity = op == "Mul" || op == "Div" ? k->numbers[0] == 1 : k->numbers[0] == 0;
  if (!identity) return decline("the constant is not the operation's neutral element");
  if (op == "Add" && !is_integer_type(x.elem_type)) return decline("a float x + 0 is not x when x is -0");
  return keep_input(match, b);
}

// Pad (x, pads) of zeros, the batch and channel dims untouched, read by the Conv (or FusedConv,
// whose attributes and inputs are Conv's and an activation's) alone: the Conv with the spatial
// pads added to its own.
BuildResult pad_into_conv(const BuildContext& match, GraphBuilder& b) {
  if (match.attribute_string("mode", "constant") != "constant") return decline("the Pad is not of a constant");
  if (match.has("value")) {
    const auto value = match.scalar("value");
    if (!value || *value != 0) return decline("the Pad's value is not a constant 0");
  }
  if (match.used_outside("p")) return decline("the padded tensor is read elsewhere");
  const auto pads = match.constant("pads");
  auto conv = match.node("Conv");
  if (!conv) conv = match.node("FusedConv");
  if (!pads || !conv) return decline("the pads are not a constant");
  const std::vector<int64_t> padding = pads->ints();
  const size_t rank = padding.size() / 2;
  if (rank < 3 || padding.size() != 2 * rank) return decline("the pads are not those of a batch of images");
  if (padding[0] != 0 || padding[1] != 0 || padding[rank] != 0 || padding[rank + 1] != 0) return decline("the Pad pads the batch or channel dims");
  if (std::any_of(padding.begin(), padding.end(), [](int64_t pad) { return pad < 0; })) return decline("a negative pad crops");
  const std::string auto_pad = conv->attribute_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET") return decline("the Conv pads itself (auto_pad " + auto_pad + ")");
  const size_t spatial = rank - 2;
  std::vector<int64_t> conv_pads = conv->attribute_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  if (conv_pads.size() != 2 * spatial) return decline("the Conv's pads are not of its spatial dims");
  for (size_t axis = 0; axis < spatial; ++axis) {
    conv_pads[axis] += padding[2 + axis];
    conv_pads[spatial + axis] += padding[rank + 2 + axis];
  }
  Attributes attributes = conv->attributes_except({"pads"});
  attributes.push_back(attr("pads", conv_pads));
  std::vector<Value> inputs{match.value("x"), match.value("w")};
  if (match.has("b") || match.has("z")) inputs.push_back(match.has("b") ? match.value("b") : Value{});
  if (match.has("z")) inputs.push_back(match.value("z"));
  b.output(match.value("y"), b.op(conv->op_type(), inputs, std::move(attributes), conv->domain()));
  return built();
}

// Pad (x, pads) with every pad 0, of any mode and value: x.
BuildResult no_op_pad(const BuildContext& match, GraphBuilder& b) {
  const auto pads = match.constant("pads");
  if (!pads) return decline("the pads are not a constant");
  const std::vector<int64_t> padding = pads->ints();
  if (std::any_of(padding.begin(), padding.end(), [](int64_t pad) { return pad != 0; })) return decline("the Pad pads or crops");
  return keep_input(match, b);
}

// Transpose <perm = [0, 1, ..., r-1]> (x), or without perm (reversed) at rank 0 or 1: x.
BuildResult no_op_transpose(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  if (node.has_attribute("perm")) {
    const std::vector<int64_t> perm = node.attribute_ints("perm", {});
    for (size_t axis = 0; axis < perm.size(); ++axis) {
      if (perm[axis] != static_cast<int64_t>(axis)) return decline("the perm moves an axis");
    }
  } else if (!match.facts("x").rank() || *match.facts("x").rank() > 1) {
    return decline("without perm the axes are reversed, and the rank is not known to be at most 1");
  }
  return keep_input(match, b);
}

// Reshape (x, shape) or Expand (x, shape) whose output has x's own dims: x. For Reshape the
// shape facts tell (x's dims and y's are provably the same); Expand takes a constant shape whose
// every element, aligned to the last axis, is 1 or x's dim there.
BuildResult no_op_reshape(const BuildContext& match, GraphBuilder& b) {
  const ShapeFacts& x = match.facts("x");
  if (!x.shape) return decline("the input's rank is unknown");
  if (match.anchor().op_type() == "Expand") {
    const auto shape = match.constant("shape");
    if (!shape) return decline("the shape is not a constant");
    const std::vector<int64_t> dims = shape->ints();
    if (dims.size() > x.shape->size()) return decline("the Expand adds axes");
    const size_t skipped = x.shape->size() - dims.size();
    for (size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] != 1 && x.dim(skipped + i) != dims[i]) return decline(fmt::format("the Expand may widen axis {}", skipped + i));
    }
  } else {
    const ShapeFacts& y = match.facts("y");
    if (!y.shape || !(*y.shape == *x.shape)) return decline("the output's dims are not known to be the input's");
  }
  return keep_input(match, b);
}

// Slice (x, starts, ends, axes, steps) taking every element of each axis it slices: step 1,
// start 0 (or a negative start reaching back past the first element), end past the last element
// (or INT64_MAX, torch's `x[:, :]`): x.
BuildResult no_op_slice(const BuildContext& match, GraphBuilder& b) {
  const ShapeFacts& x = match.facts("x");
  const auto starts = match.constant("starts");
  const auto ends = match.constant("ends");
  const auto axes = match.has("axes") ? match.constant("axes") : std::nullopt;
  const auto steps = match.has("steps") ? match.constant("steps") : std::nullopt;
  if (!starts || !ends || (match.has("axes") && !axes) || (match.has("steps") && !steps)) return decline("the slice is not made of constants");
  const std::vector<int64_t> from = starts->ints(), to = ends->ints();
  const std::vector<int64_t> on = axes ? axes->ints() : std::vector<int64_t>{}, by = steps ? steps->ints() : std::vector<int64_t>{};
  if (to.size() != from.size() || (axes && on.size() != from.size()) || (steps && by.size() != from.size())) {
    return decline("starts, ends, axes and steps differ in length");
  }
  for (size_t i = 0; i < from.size(); ++i) {
    int64_t axis = axes ? on[i] : static_cast<int64_t>(i);
    if (axis < 0 && x.rank()) axis += static_cast<int64_t>(*x.rank());
    const int64_t dim = axis >= 0 ? x.dim(static_cast<size_t>(axis)) : -1;
    const bool whole_start = from[i] == 0 || (dim >= 0 && from[i] <= -dim);
    const bool whole_end = to[i] == std::numeric_limits<int64_t>::max() || (dim >= 0 && to[i] >= dim);
    if (axis < 0 || (steps && by[i] != 1) || !whole_start || !whole_end) {
      return decline(fmt::format("element {} of the slice may leave out elements", i));
    }
  }
  return keep_input(match, b);
}

// Reshape (x, shape) whose shape is computed at run time but known from the facts but for its
// elements of run-time size: the shape as a constant, 0 where an element is x's own dim at the
// same position (allowzero 0: copy it) and -1 for the one element left, which Reshape works out
// from the element count the same way. paddle2onnx's Shape → Cast → Slice → Cast → Concat for
// [batch, 200] so becomes [0, 200], as ONNX Runtime's basic level does.
BuildResult reshape_known_shape(const BuildContext& match, GraphBuilder& b) {
  if (match.is_constant("shape")) return decline("the shape is already a constant");
  const ShapeFacts& shape = match.facts("shape");
  if (!shape.values) return decline("the shape's elements are not known");
  const bool allowzero = match.anchor().attribute_int("allowzero", 0) != 0;
  const ShapeFacts& x = match.facts("x");
  std::vector<int64_t> dims;
  for (size_t i = 0; i < shape.values->size(); ++i) {
    const Dim& element = (*shape.values)[i];
    const bool copies = !allowzero && x.shape && i < x.shape->size() && (*x.shape)[i] == element;
    dims.push_back(element.known() ? *element.number : copies ? 0 : -1);
  }
  if (std::count(dims.begin(), dims.end(), -1) > 1) return decline("more than one element of the shape is unknown or -1");
  if (allowzero && std::count(dims.begin(), dims.end(), 0) > 0 && std::count(dims.begin(), dims.end(), -1) > 0) {
    return decline("with allowzero = 1 a shape may not hold both 0 and -1");
  }
  const Value constant = b.ints(dims);
  b.output(match.value("y"), b.op("Reshape", {match.value("x"), constant}, match.anchor().attributes_except()));
  return built();
}

}  // namespace

void register_simplify_builders(BuilderRegistry& registry) {
  registry.add("simplify_no_op_cast", {.values = {"x", "y"}, .node_attributes = {"to"}}, no_op_cast);
  registry.add("simplify_inference_dropout", {.values = {"data", "output"}, .optional_values = {"ratio", "training_mode", "mask"}},
               inference_dropout);
  registry.add("simplify_neutral_operand", {.values = {"x", "k", "y"}}, neutral_operand);
  registry.add("simplify_pad_into_conv",
               {.values = {"x", "pads", "p", "w", "y"}, .optional_values = {"value", "b", "z"}, .attributes = {"mode"}, .node_attributes = {"auto_pad", "pads"}}, pad_into_conv);
  registry.add("simplify_no_op_pad", {.values = {"x", "pads", "y"}, .optional_values = {"value", "axes"}}, no_op_pad);
  registry.add("simplify_no_op_transpose", {.values = {"x", "y"}, .node_attributes = {"perm"}}, no_op_transpose);
  registry.add("simplify_reshape_known_shape", {.values = {"x", "shape", "y"}, .node_attributes = {"allowzero"}}, reshape_known_shape);
  registry.add("simplify_no_op_reshape", {.values = {"x", "shape", "y"}}, no_op_reshape);
  registry.add("simplify_no_op_slice", {.values = {"x", "starts", "ends", "y"}, .optional_values = {"axes", "steps"}}, no_op_slice);
}

}  // namespace onnx_rewrite
