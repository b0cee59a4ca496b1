// Opset imports: who owns them (the model, or a model-local function), what a node list imports,
// which element types a model uses, and whether moving an import changes what nodes mean. Shared
// by the opset policy, the inliner and the target check, so that they agree.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

class NodeTypes;

class Place;
using Imports = google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto>;

// Whose imports a node list uses: the model's (main graph, training graphs and every graph nested
// in them) or a model-local function's (its body and the graphs nested in it).
struct ImportOwner {
  const onnx::FunctionProto* function = nullptr;  // null: the model

  static ImportOwner of(const Place& place);
  bool is_model() const { return function == nullptr; }
  std::string text() const;  // "the model", "function custom.Selu"
  auto operator<=>(const ImportOwner&) const = default;
};

// Imported versions by normalized domain, as written: int64, so that an import of 2^32 + 13 is
// not read as 13.
using ImportMap = std::map<std::string, int64_t, std::less<>>;
ImportMap import_map(const Imports& imports);

const Imports& imports_of(const onnx::ModelProto& model, ImportOwner owner);
Imports& imports_of(onnx::ModelProto& model, ImportOwner owner);

// The import of a domain ("" and "ai.onnx" alike); 0 when absent.
int import_of(const Imports& imports, std::string_view domain);
// Sets the import of a domain, adding it if absent.
void set_import(Imports& imports, std::string_view domain, int64_t version);

// Every node the owner's imports apply to, nested graphs included.
void for_each_owned_node(const onnx::ModelProto& model, ImportOwner owner, const std::function<void(const onnx::NodeProto&)>& visit);

// Element types the model mentions anywhere (declared values, tensors, Cast targets), with the
// stand-ins of opset.h for sequences, optionals and maps: a version step that only added other
// types can't matter to it.
std::set<int32_t> model_types(const onnx::ModelProto& model);

// Why moving `domain`'s import from `from` to `to` would change what one of these nodes means
// (or make it disappear); nullopt when the move is safe. `skip` leaves nodes out (calls of local
// functions); nodes `built_for_to` (a rewrite's new ones) are only checked for element types `to` lacks.
// A version step that added types matters if the model's `types` include one, unless the node's
// own types (from `node_types`, asked only then; where all are known) don't.
// The values of `owner`'s initializers (not overridable as graph inputs) and Constant nodes
// <value>, by name: inputs a node's meaning across a version step may depend on.
std::map<std::string, const onnx::TensorProto*> constant_values(const onnx::ModelProto& model, ImportOwner owner);
std::optional<std::string> import_move_blocker(const onnx::ModelProto& model, ImportOwner owner, const std::string& domain, int from,
                                               int to, const std::set<int32_t>& types,
                                               const std::function<bool(const onnx::NodeProto&)>& skip = {},
                                               const std::function<bool(const onnx::NodeProto&)>& built_for_to = {},
                                               const std::function<const NodeTypes*()>& node_types = {});

// (owner, domain) pairs that have nodes.
std::set<std::pair<ImportOwner, std::string>> domains_in_use(const onnx::ModelProto& model);

// The IR version ONNX introduced an ai.onnx opset with (onnx/helper.py VERSION_TABLE).
int64_t minimum_ir_version(int opset);

}  // namespace onnx_rewrite
