#include "graph/node_types.h"

#include "onnx_rewrite/shapes.h"

namespace onnx_rewrite {

// Scopes hand out their node lists for the rewriter to edit; nothing here edits them.
NodeTypes::NodeTypes(const Model& model) : scopes_(collect_scopes(const_cast<Model&>(model))) {
  for (const auto& scope : scopes_) {
    for (const auto& node : scope->nodes()) scope_of_.emplace(&node, scope.get());
  }
}

NodeTypes::~NodeTypes() = default;

std::optional<std::set<int32_t>> NodeTypes::of(const onnx::NodeProto& node) const {
  auto found = scope_of_.find(&node);
  if (found == scope_of_.end()) return std::nullopt;
  std::set<int32_t> types;
  for (const auto* names : {&node.input(), &node.output()}) {
    for (const auto& name : *names) {
      if (name.empty()) continue;
      const int32_t type = found->second->facts(name).elem_type;
      if (type == 0) return std::nullopt;
      types.insert(type);
    }
  }
  return types;
}

}  // namespace onnx_rewrite
