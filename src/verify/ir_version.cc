// Writing a model as an older (or newer) IR version: older runtimes (ONNX Runtime before 1.15,
// TensorRT 8.x) refuse IR 9 and 10 even when every op they need is there. Lowering is refused
// with the reason when the model uses something the older IR can't hold.
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <google/protobuf/message.h>
#include <google/protobuf/reflection.h>

#include "graph/imports.h"
#include "graph/walk.h"
#include "verify/opset.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {

namespace {

// The IR version that introduced an element type (0: any).
int64_t ir_of_type(int32_t data_type) {
  if (data_type >= 17 && data_type <= 20) return 9;   // float8e4m3fn, e4m3fnuz, e5m2, e5m2fnuz
  if (data_type == 21 || data_type == 22) return 10;  // uint4, int4
  if (data_type >= 23) return 11;                     // float4e2m1 and newer
  return 0;
}

// A field this build's ONNX (1.12, IR 8) does not know, anywhere in `message`: something a newer
// IR added, whose meaning an older IR can't carry.
bool holds_unknown_fields(const google::protobuf::Message& message) {
  std::vector<const google::protobuf::Message*> pending{&message};
  while (!pending.empty()) {
    const google::protobuf::Message* current = pending.back();
    pending.pop_back();
    const google::protobuf::Reflection* reflection = current->GetReflection();
    if (!reflection->GetUnknownFields(*current).empty()) return true;
    std::vector<const google::protobuf::FieldDescriptor*> fields;
    reflection->ListFields(*current, &fields);
    for (const auto* field : fields) {
      if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*current, field); ++i)
          pending.push_back(&reflection->GetRepeatedMessage(*current, field, i));
      } else {
        pending.push_back(&reflection->GetMessage(*current, field));
      }
    }
  }
  return false;
}

void collect_types(const onnx::TypeProto& type, std::set<int32_t>& types) {
  if (type.has_tensor_type()) types.insert(type.tensor_type().elem_type());
  if (type.has_sparse_tensor_type()) types.insert(type.sparse_tensor_type().elem_type());
  if (type.has_sequence_type()) collect_types(type.sequence_type().elem_type(), types);
  if (type.has_optional_type()) collect_types(type.optional_type().elem_type(), types);
  if (type.has_map_type()) {
    types.insert(type.map_type().key_type());
    collect_types(type.map_type().value_type(), types);
  }
}

}  // namespace

std::optional<std::string> ir_version_blocker(const onnx::ModelProto& model, int64_t version) {
  if (version < 3) return "IR versions below 3 have no opset imports";
  if (version >= model.ir_version()) return std::nullopt;
  for (const auto& import : model.opset_import()) {
    if (normalize_domain(import.domain()).empty() && minimum_ir_version(static_cast<int>(import.version())) > version) {
      return fmt::format("its ai.onnx opset {} needs IR {} or later (lower the opset first: --opset)", import.version(),
                         minimum_ir_version(static_cast<int>(import.version())));
    }
  }
  if (version < 8 && model.functions_size() > 0) return "it has model-local functions, which need IR 8";
  if (version < 7 && model.training_info_size() > 0) return "it has training_info, which needs IR 7";
  std::set<int32_t> types;
  bool sparse = false;
  for_each_graph(model, [&](const auto& view) {
    if (view.graph) {
      for (const auto* infos : {&view.graph->input(), &view.graph->output(), &view.graph->value_info()}) {
        for (const auto& info : *infos) collect_types(info.type(), types);
      }
      sparse = sparse || view.graph->sparse_initializer_size() > 0;
    }
    for (const auto& node : *view.nodes) {
      for (const auto& attribute : node.attribute()) {
        if (attribute.has_sparse_tensor() || attribute.sparse_tensors_size() > 0) sparse = true;
        if (attribute.name() == "to" && attribute.type() == onnx::AttributeProto::INT) types.insert(static_cast<int32_t>(attribute.i()));
      }
    }
  });
  for_each_tensor(model, [&](const onnx::TensorProto& tensor, const Place&) { types.insert(tensor.data_type()); });
  if (version < 6 && sparse) return "it has sparse tensors, which need IR 6";
  for (const int32_t type : types) {
    if (ir_of_type(type) > version) {
      return fmt::format("it uses the element type {}, which needs IR {}", data_type_name(type), ir_of_type(type));
    }
  }
  if (version < 4) {
    std::set<std::string> inputs;
    for (const auto& input : model.graph().input()) inputs.insert(input.name());
    for (const auto& tensor : model.graph().initializer()) {
      if (!inputs.count(tensor.name())) return fmt::format("IR 3 lists every initializer as a graph input; '{}' is not", tensor.name());
    }
  }
  if (model.ir_version() > 8 && holds_unknown_fields(model)) {
    return fmt::format("it holds fields of IR {} that this build (ONNX 1.12, IR 8) can't tell the meaning of", model.ir_version());
  }
  return std::nullopt;
}

}  // namespace onnx_rewrite
