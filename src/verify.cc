#include "onnx_rewrite/verify.h"

#include <string_view>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/walk.h"

namespace onnx_rewrite {
namespace {

using Names = std::unordered_set<std::string_view>;

class Verifier {
 public:
  std::optional<std::string> problem;

  // `outer`: the names enclosing graphs defined before the node holding this one.
  void graph(const onnx::GraphProto& graph, std::vector<const Names*>& outer, const std::string& where) {
    Names local;
    for (const auto& input : graph.input()) local.insert(input.name());
    for (const auto& tensor : graph.initializer()) local.insert(tensor.name());
    for (const auto& sparse : graph.sparse_initializer()) local.insert(sparse.values().name());
    nodes(graph.node(), local, outer, where);
    for (const auto& output : graph.output()) {
      if (!problem && !visible(output.name(), local, outer)) {
        problem = fmt::format("{}: output '{}' is computed by nothing", where, output.name());
      }
    }
  }

  void function(const onnx::FunctionProto& function) {
    const std::string where = "function " + function.domain() + "." + function.name();
    Names local(function.input().begin(), function.input().end());
    std::vector<const Names*> outer;
    nodes(function.node(), local, outer, where);
    for (const auto& output : function.output()) {
      if (!problem && !local.count(output)) problem = fmt::format("{}: output '{}' is computed by nothing", where, output);
    }
  }

 private:
  static bool visible(std::string_view name, const Names& local, const std::vector<const Names*>& outer) {
    if (local.count(name)) return true;
    for (const Names* names : outer) {
      if (names->count(name)) return true;
    }
    return false;
  }

  void nodes(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& list, Names& local,
             std::vector<const Names*>& outer, const std::string& where) {
    for (const auto& node : list) {
      if (problem) return;
      for (const auto& input : node.input()) {
        if (!input.empty() && !visible(input, local, outer)) {
          problem = fmt::format("{}: node '{}' reads '{}' before anything computes it", where, describe_node(node), input);
          return;
        }
      }
      outer.push_back(&local);
      for (const auto& attribute : node.attribute()) {
        const std::string inner = fmt::format("subgraph '{}' of node '{}' ({})", attribute.name(), describe_node(node), where);
        if (attribute.has_g()) graph(attribute.g(), outer, inner);
        for (const auto& subgraph : attribute.graphs()) graph(subgraph, outer, inner);
      }
      outer.pop_back();
      for (const auto& output : node.output()) {
        if (!output.empty() && !local.insert(output).second) {
          problem = fmt::format("{}: '{}' is computed twice", where, output);
          return;
        }
      }
    }
  }
};

}  // namespace

std::optional<std::string> structural_problem(const onnx::ModelProto& model) {
  Verifier verifier;
  std::vector<const Names*> outer;
  verifier.graph(model.graph(), outer, "main graph");
  for (const auto& function : model.functions()) {
    if (verifier.problem) break;
    verifier.function(function);
  }
  return verifier.problem;
}

}  // namespace onnx_rewrite
