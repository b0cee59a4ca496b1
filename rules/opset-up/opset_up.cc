// Adapters that raise a node written for an older ai.onnx opset to a newer one under --to-opset N
// (rules/opset-up/*.rules). Each builds at the opset the engine plans (N), so one builder
// serves every target above the step.
//
// - attributes_as_inputs: an op whose attribute later became a constant input (Reduce* axes,
//   Squeeze / Unsqueeze axes, Split split, Slice starts/ends/axes, TopK k, Clip min/max, Pad
//   pads/value) rebuilt with the input; the node's other attributes and outputs stay.
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

}  // namespace

void register_opset_up_builders(BuilderRegistry& registry) {
  registry.add("attributes_as_inputs",
               {.values = {"data"},
                .optional_attributes = {"axes", "split"},
                .node_attributes = {"axes", "split", "k", "starts", "ends", "min", "max", "pads", "value"}},
               attributes_as_inputs);
}

}  // namespace onnx_rewrite
