// Visiting every graph, node and tensor of a model: main graph, graph attributes of nodes
// (If/Loop/Scan bodies, nested), model-local functions and training info.
#pragma once

#include <functional>
#include <string>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

// Where something sits, for messages: "main graph", "subgraph 'body' of node 'loop_1'",
// "function custom.Selu".
using Visit = std::function<void(onnx::NodeProto&, const std::string& where)>;
using VisitTensor = std::function<void(onnx::TensorProto&, const std::string& where)>;

// Every node, depth first, nodes of a subgraph after the node that holds it.
void for_each_node(onnx::ModelProto& model, const Visit& visit);
void for_each_node(onnx::GraphProto& graph, const std::string& where, const Visit& visit);

// Every TensorProto: initializers, sparse initializers, tensor attributes, at any depth.
void for_each_tensor(onnx::ModelProto& model, const VisitTensor& visit);

// Describes a node for messages: its name if it has one, else its first output.
std::string describe_node(const onnx::NodeProto& node);

}  // namespace onnx_rewrite
