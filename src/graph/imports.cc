#include "graph/imports.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "graph/node_types.h"
#include "graph/walk.h"
#include "verify/opset.h"

namespace onnx_rewrite {
namespace {

void add_type(const onnx::TypeProto& type, std::set<int32_t>& types) {
  if (type.has_tensor_type()) types.insert(type.tensor_type().elem_type());
  if (type.has_sequence_type()) {
    types.insert(kSequenceTypes);
    add_type(type.sequence_type().elem_type(), types);
  }
  if (type.has_optional_type()) {
    types.insert(kOptionalTypes);
    add_type(type.optional_type().elem_type(), types);
  }
  if (type.has_map_type()) {
    types.insert(kMapTypes);
    add_type(type.map_type().value_type(), types);
  }
}

}  // namespace

ImportOwner ImportOwner::of(const Place& place) { return ImportOwner{place.function()}; }

std::string ImportOwner::text() const {
  return function ? "function " + display_domain(function->domain()) + "." + function->name() : "the model";
}

ImportMap import_map(const Imports& imports) {
  ImportMap versions;
  for (const auto& import : imports) versions[normalize_domain(import.domain())] = import.version();
  return versions;
}

const Imports& imports_of(const onnx::ModelProto& model, ImportOwner owner) {
  return owner.function ? owner.function->opset_import() : model.opset_import();
}

Imports& imports_of(onnx::ModelProto& model, ImportOwner owner) {
  return owner.function ? *const_cast<onnx::FunctionProto*>(owner.function)->mutable_opset_import() : *model.mutable_opset_import();
}

int import_of(const Imports& imports, std::string_view domain) {
  const std::string wanted = normalize_domain(domain);
  for (const auto& import : imports) {
    if (normalize_domain(import.domain()) == wanted) return static_cast<int>(import.version());
  }
  return 0;
}

void set_import(Imports& imports, std::string_view domain, int64_t version) {
  const std::string wanted = normalize_domain(domain);
  for (auto& import : imports) {
    if (normalize_domain(import.domain()) == wanted) {
      import.set_version(version);
      return;
    }
  }
  auto* added = imports.Add();
  added->set_domain(std::string(domain));
  added->set_version(version);
}

void for_each_owned_node(const onnx::ModelProto& model, ImportOwner owner, const std::function<void(const onnx::NodeProto&)>& visit) {
  if (owner.function) return for_each_nested_node(owner.function->node(), visit);
  for_each_graph(model, [&](const GraphView<true>& view) {
    if (view.place->function()) return;
    for (const auto& node : *view.nodes) visit(node);
  });
}

std::set<int32_t> model_types(const onnx::ModelProto& model) {
  std::set<int32_t> types;
  for_each_graph(model, [&](const GraphView<true>& view) {
    if (view.graph) {
      for (const auto& info : view.graph->input()) add_type(info.type(), types);
      for (const auto& info : view.graph->output()) add_type(info.type(), types);
      for (const auto& info : view.graph->value_info()) add_type(info.type(), types);
    }
    for (const auto& node : *view.nodes) {
      // Values between nodes are often undeclared; the ops that make them say what they are.
      const std::string& op = node.op_type();
      if (op.find("Sequence") != std::string::npos) types.insert(kSequenceTypes);
      if (op.starts_with("Optional")) types.insert(kOptionalTypes);
      for (const auto& attribute : node.attribute()) {
        if (attribute.name() == "to" && attribute.type() == onnx::AttributeProto::INT) types.insert(static_cast<int32_t>(attribute.i()));
      }
    }
  });
  for_each_tensor(model, [&](const onnx::TensorProto& tensor, const Place&) { types.insert(tensor.data_type()); });
  types.erase(0);
  return types;
}

std::map<std::string, const onnx::TensorProto*> constant_values(const onnx::ModelProto& model, ImportOwner owner) {
  std::map<std::string, const onnx::TensorProto*> constants;
  if (owner.is_model()) {
    std::set<std::string> inputs;
    for (const auto& input : model.graph().input()) inputs.insert(input.name());
    for (const auto& initializer : model.graph().initializer()) {
      if (!inputs.count(initializer.name())) constants.emplace(initializer.name(), &initializer);
    }
  }
  for_each_owned_node(model, owner, [&](const onnx::NodeProto& node) {
    if (node.op_type() != "Constant" || !normalize_domain(node.domain()).empty() || node.output_size() != 1) return;
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == "value" && attribute.has_t()) constants.emplace(node.output(0), &attribute.t());
    }
  });
  return constants;
}

std::optional<std::string> import_move_blocker(const onnx::ModelProto& model, ImportOwner owner, const std::string& domain, int from,
                                               int to, const std::set<int32_t>& types,
                                               const std::function<bool(const onnx::NodeProto&)>& skip,
                                               const std::function<bool(const onnx::NodeProto&)>& built_for_to,
                                               const std::function<const NodeTypes*()>& node_types) {
  const OpTable* table = OpRegistry::builtin().table(domain);
  std::optional<std::string> blocker;
  const auto constants = constant_values(model, owner);
  const OpTable::ConstantOf constant = [&](const std::string& name) -> const onnx::TensorProto* {
    auto it = constants.find(name);
    return it == constants.end() ? nullptr : it->second;
  };
  for_each_owned_node(model, owner, [&](const onnx::NodeProto& node) {
    if (blocker || normalize_domain(node.domain()) != domain || (skip && skip(node))) return;
    if (!table) {
      blocker = "no version history is known for " + display_domain(domain);
      return;
    }
    const bool built = built_for_to && built_for_to(node);
    auto check = [&](const std::set<int32_t>& used) {
      return built ? table->type_blocker(node, from, to, used) : table->move_blocker(node, from, to, used, constant);
    };
    blocker = check(types);
    // The model's types are all the node's and more: its own can only clear it (inferred once needed).
    if (!blocker || !node_types) return;
    if (const NodeTypes* known = node_types()) {
      if (auto own = known->of(node)) blocker = check(*own);
    }
  });
  return blocker;
}

std::set<std::pair<ImportOwner, std::string>> domains_in_use(const onnx::ModelProto& model) {
  std::set<std::pair<ImportOwner, std::string>> in_use;
  for_each_node(model, [&](const onnx::NodeProto& node, const Place& place) {
    in_use.insert({ImportOwner::of(place), normalize_domain(node.domain())});
  });
  return in_use;
}

int64_t minimum_ir_version(int opset) {
  if (opset <= 8) return 3;
  if (opset == 9) return 4;
  if (opset == 10) return 5;
  if (opset == 11) return 6;
  if (opset <= 14) return 7;
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  if (opset <= 22) return 10;
  if (opset == 23) return 11;
  if (opset == 24) return 12;
  return 13;  // 25 (ONNX 1.20) and 26 (1.21)
}

}  // namespace onnx_rewrite
