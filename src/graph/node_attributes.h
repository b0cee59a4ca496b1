// A node's attribute by name, and how messages name a node: what the stages share to look at a
// node (builders see nodes through NodeView, onnx_rewrite/build_context.h).
#pragma once

#include <string>
#include <string_view>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

const onnx::AttributeProto* find_attribute(const onnx::NodeProto& node, std::string_view name);

// Describes a node for messages: its name if it has one, else its op and first output.
std::string describe_node(const onnx::NodeProto& node);

}  // namespace onnx_rewrite
