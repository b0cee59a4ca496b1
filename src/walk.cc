#include "onnx_rewrite/walk.h"

namespace onnx_rewrite {
namespace {

std::string subgraph_place(const onnx::NodeProto& node, const onnx::AttributeProto& attribute) {
  return "subgraph '" + attribute.name() + "' of node '" + describe_node(node) + "'";
}

void visit_tensors(onnx::GraphProto& graph, const std::string& where, const VisitTensor& visit);

void visit_attribute_tensors(onnx::NodeProto& node, const std::string& where, const VisitTensor& visit) {
  for (auto& attribute : *node.mutable_attribute()) {
    if (attribute.has_t()) visit(*attribute.mutable_t(), where);
    for (auto& tensor : *attribute.mutable_tensors()) visit(tensor, where);
    if (attribute.has_sparse_tensor()) {
      visit(*attribute.mutable_sparse_tensor()->mutable_values(), where);
      visit(*attribute.mutable_sparse_tensor()->mutable_indices(), where);
    }
    if (attribute.has_g()) visit_tensors(*attribute.mutable_g(), subgraph_place(node, attribute), visit);
    for (auto& graph : *attribute.mutable_graphs()) visit_tensors(graph, subgraph_place(node, attribute), visit);
  }
}

void visit_tensors(onnx::GraphProto& graph, const std::string& where, const VisitTensor& visit) {
  for (auto& tensor : *graph.mutable_initializer()) visit(tensor, where);
  for (auto& sparse : *graph.mutable_sparse_initializer()) {
    visit(*sparse.mutable_values(), where);
    visit(*sparse.mutable_indices(), where);
  }
  for (auto& node : *graph.mutable_node()) visit_attribute_tensors(node, where, visit);
}

}  // namespace

std::string describe_node(const onnx::NodeProto& node) {
  if (!node.name().empty()) return node.name();
  for (const auto& output : node.output()) {
    if (!output.empty()) return node.op_type() + " -> " + output;
  }
  return node.op_type();
}

void for_each_node(onnx::GraphProto& graph, const std::string& where, const Visit& visit) {
  for (auto& node : *graph.mutable_node()) {
    visit(node, where);
    for (auto& attribute : *node.mutable_attribute()) {
      if (attribute.has_g()) for_each_node(*attribute.mutable_g(), subgraph_place(node, attribute), visit);
      for (auto& subgraph : *attribute.mutable_graphs()) for_each_node(subgraph, subgraph_place(node, attribute), visit);
    }
  }
}

void for_each_node(onnx::ModelProto& model, const Visit& visit) {
  for_each_node(*model.mutable_graph(), "main graph", visit);
  for (auto& function : *model.mutable_functions()) {
    const std::string where = "function " + function.domain() + "." + function.name();
    for (auto& node : *function.mutable_node()) {
      visit(node, where);
      for (auto& attribute : *node.mutable_attribute()) {
        if (attribute.has_g()) for_each_node(*attribute.mutable_g(), where, visit);
        for (auto& subgraph : *attribute.mutable_graphs()) for_each_node(subgraph, where, visit);
      }
    }
  }
  for (auto& training : *model.mutable_training_info()) {
    if (training.has_initialization()) for_each_node(*training.mutable_initialization(), "training initialization", visit);
    if (training.has_algorithm()) for_each_node(*training.mutable_algorithm(), "training algorithm", visit);
  }
}

void for_each_tensor(onnx::ModelProto& model, const VisitTensor& visit) {
  visit_tensors(*model.mutable_graph(), "main graph", visit);
  for (auto& function : *model.mutable_functions()) {
    const std::string where = "function " + function.domain() + "." + function.name();
    for (auto& node : *function.mutable_node()) visit_attribute_tensors(node, where, visit);
  }
  for (auto& training : *model.mutable_training_info()) {
    if (training.has_initialization()) visit_tensors(*training.mutable_initialization(), "training initialization", visit);
    if (training.has_algorithm()) visit_tensors(*training.mutable_algorithm(), "training algorithm", visit);
  }
}

}  // namespace onnx_rewrite
