// Adapters that raise a node written for an older ai.onnx opset to a newer one under --to-opset N
// (rules/opset-up/*.rules). Each builds at the opset the engine plans (N), so one builder
// serves every target above the step.
//
// - attributes_as_inputs: an op whose attribute later became a constant input (Reduce* axes,
//   Squeeze / Unsqueeze axes, Split split, Slice starts/ends/axes, TopK k, Clip min/max, Pad
//   pads/value) rebuilt with the input; the node's other attributes and outputs stay.
// - coerced_softmax_raised: Softmax/LogSoftmax/Hardmax before 13 (2-D coercion) at 13.
// - upsample_as_resize: Upsample-7/9 (deprecated at 10) as the Resize of the opset built for.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

BuildResult attributes_as_inputs(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  const std::string& op = node.op_type();
  std::vector<std::string> moved;
  std::vector<Value> inputs{match.value("data")};
  auto ints_input = [&](const char* name) {
    const onnx::AttributeProto* attribute = node.attribute(name);
    if (!attribute) return Value{};  // an absent optional input
    moved.push_back(name);
    return attribute->type() == onnx::AttributeProto::INT ? b.ints({attribute->i()})
                                                           : b.ints({attribute->ints().begin(), attribute->ints().end()});
  };
  // Clip's bounds and Pad's value have x's type (the older ops took float types only).
  auto scalar_input = [&](const char* name, int32_t type) {
    const onnx::AttributeProto* attribute = node.attribute(name);
    if (!attribute) return Value{};
    moved.push_back(name);
    return b.scalar(attribute->f(), type);
  };
  if (op.starts_with("Reduce") || op == "Squeeze" || op == "Unsqueeze") {
    inputs.push_back(ints_input("axes"));
  } else if (op == "Split") {
    inputs.push_back(ints_input("split"));
  } else if (op == "TopK") {
    inputs.push_back(ints_input("k"));
  } else if (op == "Slice") {
    for (const char* name : {"starts", "ends", "axes"}) inputs.push_back(ints_input(name));
  } else if (op == "Clip" || op == "Pad") {
    const int32_t type = match.element_type({"data"});
    if (auto why = check_element_type(type, {onnx::TensorProto::FLOAT, onnx::TensorProto::DOUBLE, onnx::TensorProto::FLOAT16},
                                      "older schema's")) {
    return decline(*why);
  }
    if (op == "Clip") {
      for (const char* name : {"min", "max"}) inputs.push_back(scalar_input(name, type));
    } else {
      inputs.push_back(ints_input("pads"));
      inputs.push_back(scalar_input("value", type));
    }
  }
  if (moved.empty()) return decline("no attribute to move: the node means the same at the newer opset");
  while (!inputs.empty() && inputs.back().absent()) inputs.pop_back();
  Attributes attributes;
  for (const auto& attribute : node.attributes_except()) {
    if (std::find(moved.begin(), moved.end(), attribute.name()) == moved.end()) attributes.push_back(attribute);
  }
  const std::vector<Value> node_outputs = node.outputs();
  const auto outputs = b.op_outputs(op, inputs, node_outputs.size(), attributes);
  for (size_t i = 0; i < node_outputs.size(); ++i) {
    if (!node_outputs[i].absent()) b.output(node_outputs[i], outputs[i]);
  }
  return built();
}

// Softmax, LogSoftmax and Hardmax before 13 coerce x to 2-D at `axis` ([d0 *..* d(axis-1),
// d(axis) *..* d(r-1)]) and normalize each row; from 13 they normalize along the one axis. The
// older meaning at 13: Flatten at the axis, the op along the last axis, Reshape back to x's shape.
// An axis that is the last one (rank known) means the same either way: the op with axis -1.
BuildResult coerced_softmax_raised(const BuildContext& match, GraphBuilder& b) {
  const std::string& op = match.anchor().op_type();
  const int64_t axis = match.attribute_int("axis", 1);
  // Written -1, the node means the same at 13 (opset.cc): the import moves over it, and a rewrite
  // without --to-opset must not raise the import for it.
  if (match.attribute("axis") && axis == -1) return decline("axis -1 means the same at 13");
  const Value& x = match.value("x");
  if (const auto dims = match.facts("x").static_dims()) {
    const auto rank = static_cast<int64_t>(dims->size());
    if (rank > 0 && (axis == rank - 1 || axis == -1)) {
      b.output(match.value("y"), b.op(op, {x}, {attr("axis", int64_t{-1})}));
      return built();
    }
  }
  const Value rows = b.op("Flatten", {x}, {attr("axis", axis)});
  const Value normalized = b.op(op, {rows}, {attr("axis", int64_t{-1})});
  const Value shape = b.Shape(x);
  b.output(match.value("y"), b.Reshape(normalized, shape));
  return built();
}

// Upsample-7 (scales an attribute) and Upsample-9 (an input) as Resize. ONNX Runtime's Upsample
// and Resize-10 map an output index to out / scale ("asymmetric") and, nearest, truncate it:
// floor, as Upsample's scales are >= 1. Resize-11 added those choices with other defaults
// (half_pixel, round_prefer_floor), so from 11 they are written; roi is an empty tensor at 11 and
// 12, absent from 13 (where it became optional).
BuildResult upsample_as_resize(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  const std::string mode = match.attribute_string("mode", "nearest");
  Value scales = match.has("scales") ? match.value("scales") : Value{};
  if (scales.absent()) {  // Upsample-7
    const onnx::AttributeProto* attribute = node.attribute("scales");
    if (!attribute || attribute->floats_size() == 0) return decline("no scales: neither an input nor an attribute");
    scales = b.floats({attribute->floats().begin(), attribute->floats().end()});
  }
  const Value& x = match.value("x");
  if (b.opset() < 11) {
    b.output(match.value("y"), b.op("Resize", {x, scales}, {attr("mode", mode)}));
    return built();
  }
  Attributes attributes{attr("coordinate_transformation_mode", "asymmetric"), attr("mode", mode)};
  if (mode == "nearest") attributes.push_back(attr("nearest_mode", "floor"));
  const Value roi = b.opset() < 13 ? b.floats({}) : Value{};
  b.output(match.value("y"), b.op("Resize", {x, roi, scales}, attributes));
  return built();
}

}  // namespace

void register_opset_up_builders(BuilderRegistry& registry) {
  registry.add("attributes_as_inputs",
               {.values = {"data"},
                .optional_attributes = {"axes", "split"},
                .node_attributes = {"axes", "split", "k", "starts", "ends", "min", "max", "pads", "value"}},
               attributes_as_inputs);
  registry.add("coerced_softmax_raised", {.values = {"x", "y"}, .optional_attributes = {"axis"}}, coerced_softmax_raised);
  registry.add("upsample_as_resize",
               {.values = {"x", "y"}, .optional_values = {"scales"}, .optional_attributes = {"mode"}, .node_attributes = {"scales"}},
               upsample_as_resize);
}

}  // namespace onnx_rewrite
