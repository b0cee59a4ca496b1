// Model-local functions whose ai.onnx import is simply wrong: the onnxscript custom-op tutorial
// writes CastLike (opset 15) in a body that imports opset 14. A strict runtime refuses the
// body, and the inliner can't move it into the model. Where raising the function's import to
// the lowest version its ops exist at changes no other node's meaning, it is raised, with a note.
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/opset_policy.h"
#include "graph/imports.h"
#include "graph/walk.h"
#include "verify/opset.h"

namespace onnx_rewrite {

int raise_wrong_function_imports(Model& model, std::vector<std::string>& notes) {
  const OpTable* table = OpRegistry::builtin().table("");
  if (!table || model.proto.functions_size() == 0) return 0;
  std::map<const onnx::FunctionProto*, std::vector<const onnx::NodeProto*>> bodies;  // ai.onnx nodes, subgraphs included
  for_each_node(std::as_const(model.proto), [&](const onnx::NodeProto& node, const Place& place) {
    if (place.function() && normalize_domain(node.domain()).empty()) bodies[place.function()].push_back(&node);
  });
  const auto types = model_types(model.proto);
  int raised = 0;
  for (auto& function : *model.proto.mutable_functions()) {
    auto body = bodies.find(&function);
    if (body == bodies.end()) continue;
    onnx::OperatorSetIdProto* import = nullptr;
    for (auto& entry : *function.mutable_opset_import()) {
      if (normalize_domain(entry.domain()).empty()) import = &entry;
    }
    if (!import || import->version() < 1 || import->version() >= table->highest_version()) continue;
    const int from = static_cast<int>(import->version());
    int to = from;
    std::string newest_op;
    for (const auto* node : body->second) {
      if (table->since_version(node->op_type(), from)) continue;
      // Only an op born after the import says the import is too low; one deprecated or removed
      // by then (GroupNormalization-18) means something else at a later version.
      const auto born = table->introduced(node->op_type());
      if (!born || *born <= from) {
        to = from;
        break;
      }
      int exists = 0;
      for (int version = from + 1; version <= table->highest_version() && !exists; ++version) {
        if (table->since_version(node->op_type(), version)) exists = version;
      }
      if (!exists) {  // not an op of any version we know: nothing to raise to
        to = from;
        break;
      }
      if (exists > to) {
        to = exists;
        newest_op = node->op_type();
      }
    }
    if (to == from) continue;
    const std::string name = display_domain(function.domain()) + "." + function.name();
    std::optional<std::string> blocker;
    for (const auto* node : body->second) {
      if (!table->since_version(node->op_type(), from)) continue;  // the ops that need the raise
      if ((blocker = table->move_blocker(*node, from, to, types))) break;
    }
    if (blocker) {
      notes.push_back(
          fmt::format("function {} uses {} (ai.onnx {}) but imports ai.onnx {}; raising the import would change its "
                      "other nodes ({}): left as is",
                      name, newest_op, to, from, *blocker));
      continue;
    }
    import->set_version(to);
    ++raised;
    notes.push_back(
        fmt::format("function {} uses {}, which needs ai.onnx {}, but imported ai.onnx {}: its import is raised to {} "
                    "(no other node of it changes meaning)",
                    name, newest_op, to, from, to));
  }
  if (raised) model.changed = true;
  return raised;
}

}  // namespace onnx_rewrite
