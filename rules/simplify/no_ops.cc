// The C++ half of rules/simplify/no-ops.rules: nodes that compute their input unchanged become
// an Identity (which the engine then removes), where the types, shapes and constants prove it;
// anything else declines with the reason.
#include <string>
#include <string_view>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

// Cast (x) to x's own element type: the input as it is.
BuildResult no_op_cast(const BuildContext& match, GraphBuilder& b) {
  const int32_t type = match.facts("x").elem_type;
  if (type == 0) return decline("the input's element type is unknown");
  if (type != match.anchor().attribute_int("to", 0)) return decline("the Cast changes the element type");
  b.output(match.value("y"), b.Identity(match.value("x")));
  return built();
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
  b.output(match.value("y"), b.Identity(match.value("x")));
  return built();
}

}  // namespace

void register_simplify_builders(BuilderRegistry& registry) {
  registry.add("simplify_no_op_cast", {.values = {"x", "y"}, .node_attributes = {"to"}}, no_op_cast);
  registry.add("simplify_inference_dropout", {.values = {"data", "output"}, .optional_values = {"ratio", "training_mode", "mask"}},
               inference_dropout);
  registry.add("simplify_neutral_operand", {.values = {"x", "k", "y"}}, neutral_operand);
}

}  // namespace onnx_rewrite
