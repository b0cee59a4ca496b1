#include "graph/node_attributes.h"

namespace onnx_rewrite {

const onnx::AttributeProto* find_attribute(const onnx::NodeProto& node, std::string_view name) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) return &attribute;
  }
  return nullptr;
}

std::string describe_node(const onnx::NodeProto& node) {
  if (!node.name().empty()) return node.name();
  for (const auto& output : node.output()) {
    if (!output.empty()) return node.op_type() + " -> " + output;
  }
  return node.op_type();
}

}  // namespace onnx_rewrite
