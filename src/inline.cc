#include "onnx_rewrite/inline.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "onnx_rewrite/error.h"
#include "onnx_rewrite/opset.h"
#include "onnx_rewrite/rewriter.h"
#include "onnx_rewrite/walk.h"

namespace onnx_rewrite {
namespace {

constexpr int kNodeOverloadField = 8;      // NodeProto.overload (IR 10), unknown to ONNX 1.12
constexpr int kFunctionOverloadField = 13;  // FunctionProto.overload (IR 10)
constexpr int kFunctionAttributeProtoField = 11;  // FunctionProto.attribute_proto (IR 9): defaults
constexpr int kMaxDepth = 64;

std::string unknown_string(const google::protobuf::Message& message, int number) {
  const auto& fields = message.GetReflection()->GetUnknownFields(message);
  for (int i = 0; i < fields.field_count(); ++i) {
    const auto& field = fields.field(i);
    if (field.number() == number && field.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      return field.length_delimited();
    }
  }
  return {};
}

// Attributes with default values a function declares; ONNX 1.12 keeps them as unknown fields.
std::vector<onnx::AttributeProto> attribute_defaults(const onnx::FunctionProto& function) {
  std::vector<onnx::AttributeProto> defaults;
  const auto& fields = function.GetReflection()->GetUnknownFields(function);
  for (int i = 0; i < fields.field_count(); ++i) {
    const auto& field = fields.field(i);
    if (field.number() != kFunctionAttributeProtoField || field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    onnx::AttributeProto attribute;
    if (attribute.ParseFromString(field.length_delimited())) defaults.push_back(std::move(attribute));
  }
  return defaults;
}

using FunctionKey = std::tuple<std::string, std::string, std::string>;  // domain, name, overload

FunctionKey key_of(const onnx::FunctionProto& function) {
  return {normalize_domain(function.domain()), function.name(), unknown_string(function, kFunctionOverloadField)};
}

FunctionKey key_of(const onnx::NodeProto& node) {
  return {normalize_domain(node.domain()), node.op_type(), unknown_string(node, kNodeOverloadField)};
}

// Renames references in a graph nested in an inlined body; names it defines itself shadow outer ones.
void rename_free_names(onnx::GraphProto& graph, std::map<std::string, std::string> renames) {
  for (const auto& input : graph.input()) renames.erase(input.name());
  for (const auto& tensor : graph.initializer()) renames.erase(tensor.name());
  for (const auto& node : graph.node()) {
    for (const auto& output : node.output()) renames.erase(output);
  }
  for (auto& node : *graph.mutable_node()) {
    for (auto& input : *node.mutable_input()) {
      if (auto it = renames.find(input); it != renames.end()) input = it->second;
    }
    for (auto& attribute : *node.mutable_attribute()) {
      if (attribute.has_g()) rename_free_names(*attribute.mutable_g(), renames);
      for (auto& subgraph : *attribute.mutable_graphs()) rename_free_names(subgraph, renames);
    }
  }
  for (auto& output : *graph.mutable_output()) {
    if (auto it = renames.find(output.name()); it != renames.end()) output.set_name(it->second);
  }
}

// Replaces attribute references (`ref_attr_name`) in a body node by the call's values.
void resolve_attribute_references(onnx::NodeProto& node, const std::map<std::string, onnx::AttributeProto>& values) {
  auto& attributes = *node.mutable_attribute();
  for (int i = attributes.size() - 1; i >= 0; --i) {
    onnx::AttributeProto& attribute = *attributes.Mutable(i);
    if (attribute.has_g()) {
      for (auto& inner : *attribute.mutable_g()->mutable_node()) resolve_attribute_references(inner, values);
    }
    for (auto& graph : *attribute.mutable_graphs()) {
      for (auto& inner : *graph.mutable_node()) resolve_attribute_references(inner, values);
    }
    if (attribute.ref_attr_name().empty()) continue;
    auto it = values.find(attribute.ref_attr_name());
    if (it == values.end()) {
      attributes.DeleteSubrange(i, 1);  // not given and no default: as if never written
      continue;
    }
    const std::string name = attribute.name();
    attribute = it->second;
    attribute.set_name(name);
  }
}

class Inliner {
 public:
  explicit Inliner(Model& model) : model_(model), names_(model.proto) {
    for (const auto& function : model.proto.functions()) functions_[key_of(function)] = &function;
    for (const auto& import : model.proto.opset_import()) model_imports_[normalize_domain(import.domain())] = static_cast<int>(import.version());
    for_each_node(model.proto, [&](onnx::NodeProto& node, const std::string&) {
      for (const auto& attribute : node.attribute()) {
        if (attribute.name() == "to" && attribute.type() == onnx::AttributeProto::INT) model_types_.insert(static_cast<int32_t>(attribute.i()));
      }
    });
    for_each_tensor(model.proto, [&](onnx::TensorProto& tensor, const std::string&) { model_types_.insert(tensor.data_type()); });
  }

  int run() {
    inline_in(*model_.proto.mutable_graph()->mutable_node(), "main graph", 0);
    for (auto& function : *model_.proto.mutable_functions()) {
      if (!blocked_.count(key_of(function))) continue;  // kept: calls inside it may still go
      inline_in(*function.mutable_node(), "function " + function.name(), 0);
    }
    drop_uncalled_functions();
    return inlined_;
  }

 private:
  // Why the body of `function` can't be placed among the caller's imports, if it can't.
  std::optional<std::string> import_conflict(const onnx::FunctionProto& function) {
    for (const auto& import : function.opset_import()) {
      const std::string domain = normalize_domain(import.domain());
      auto it = model_imports_.find(domain);
      if (it == model_imports_.end() || it->second == import.version()) continue;
      const OpTable* table = OpRegistry::builtin().table(domain);
      for (const auto& node : function.node()) {
        if (normalize_domain(node.domain()) != domain) continue;
        auto blocker = table ? table->move_blocker(node, static_cast<int>(import.version()), it->second, model_types_)
                             : std::optional<std::string>("no version history for " + display_domain(domain));
        if (blocker) return *blocker;
      }
    }
    return std::nullopt;
  }

  void inline_in(NodeList& nodes, const std::string& where, int depth) {
    bool any = false;
    for (const auto& node : nodes) {
      if (functions_.count(key_of(node))) any = true;
      for (const auto& attribute : node.attribute()) {
        if (attribute.has_g() || attribute.graphs_size() > 0) any = true;
      }
    }
    if (!any) return;
    NodeList rebuilt;
    for (auto& node : nodes) {
      for (auto& attribute : *node.mutable_attribute()) {
        if (attribute.has_g()) inline_in(*attribute.mutable_g()->mutable_node(), where, depth);
        for (auto& graph : *attribute.mutable_graphs()) inline_in(*graph.mutable_node(), where, depth);
      }
      auto found = functions_.find(key_of(node));
      if (found == functions_.end() || blocked_.count(found->first)) {
        *rebuilt.Add() = std::move(node);
        continue;
      }
      if (auto conflict = import_conflict(*found->second)) {
        blocked_.insert(found->first);
        *rebuilt.Add() = std::move(node);
        continue;
      }
      if (depth >= kMaxDepth) {
        throw InputError(model_.path.string(), fmt::format("model-local function {} calls itself (inlining depth {})",
                                                           found->second->name(), kMaxDepth));
      }
      NodeList body = expand(node, *found->second);
      inline_in(body, where, depth + 1);
      for (auto& inner : body) *rebuilt.Add() = std::move(inner);
      ++inlined_;
    }
    nodes.Swap(&rebuilt);
  }

  // The body of `function` as it computes the call `call`.
  NodeList expand(const onnx::NodeProto& call, const onnx::FunctionProto& function) {
    const std::string base = call.name().empty() ? call.op_type() : call.name();
    std::map<std::string, std::string> renames;
    for (int i = 0; i < function.input_size(); ++i) renames[function.input(i)] = i < call.input_size() ? call.input(i) : "";
    for (int i = 0; i < function.output_size(); ++i) {
      renames[function.output(i)] = i < call.output_size() && !call.output(i).empty()
                                        ? call.output(i)
                                        : names_.fresh(base + "/" + function.output(i));
    }
    std::map<std::string, onnx::AttributeProto> values;
    for (const auto& attribute : attribute_defaults(function)) {
      if (attribute.has_type()) values[attribute.name()] = attribute;  // defaults
    }
    for (const auto& attribute : call.attribute()) values[attribute.name()] = attribute;

    NodeList body;
    for (const auto& original : function.node()) {
      onnx::NodeProto& node = *body.Add();
      node = original;
      node.set_name(names_.fresh(base + "/" + (original.name().empty() ? original.op_type() : original.name())));
      for (auto& input : *node.mutable_input()) {
        if (input.empty()) continue;
        auto [it, fresh] = renames.emplace(input, "");
        if (fresh) it->second = names_.fresh(base + "/" + input);
        input = it->second;
      }
      for (auto& output : *node.mutable_output()) {
        if (output.empty()) continue;
        auto [it, fresh] = renames.emplace(output, "");
        if (fresh) it->second = names_.fresh(base + "/" + output);
        output = it->second;
      }
      resolve_attribute_references(node, values);
      for (auto& attribute : *node.mutable_attribute()) {
        if (attribute.has_g()) rename_free_names(*attribute.mutable_g(), renames);
        for (auto& graph : *attribute.mutable_graphs()) rename_free_names(graph, renames);
      }
      needs_import(function, node.domain());
    }
    return body;
  }

  void needs_import(const onnx::FunctionProto& function, const std::string& domain) {
    const std::string normalized = normalize_domain(domain);
    if (model_imports_.count(normalized) || functions_domain(normalized)) return;
    for (const auto& import : function.opset_import()) {
      if (normalize_domain(import.domain()) != normalized) continue;
      auto* added = model_.proto.add_opset_import();
      added->set_domain(import.domain());
      added->set_version(import.version());
      model_imports_[normalized] = static_cast<int>(import.version());
    }
  }

  bool functions_domain(const std::string& domain) const {
    for (const auto& [key, function] : functions_) {
      if (std::get<0>(key) == domain) return true;
    }
    return false;
  }

  void drop_uncalled_functions() {
    std::set<FunctionKey> called;
    for_each_node(model_.proto, [&](onnx::NodeProto& node, const std::string&) { called.insert(key_of(node)); });
    auto& functions = *model_.proto.mutable_functions();
    for (int i = functions.size() - 1; i >= 0; --i) {
      if (!called.count(key_of(functions.Get(i)))) functions.DeleteSubrange(i, 1);
    }
  }

  Model& model_;
  NameRegistry names_;
  std::map<FunctionKey, const onnx::FunctionProto*> functions_;
  std::map<std::string, int> model_imports_;
  std::set<int32_t> model_types_;
  std::set<FunctionKey> blocked_;
  int inlined_ = 0;
};

}  // namespace

int inline_local_functions(Model& model) {
  if (model.proto.functions_size() == 0) return 0;
  return Inliner(model).run();
}

}  // namespace onnx_rewrite
