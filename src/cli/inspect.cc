// `inspect`: what a model holds, without reading its weights.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/outcome.h"
#include "graph/walk.h"
#include "onnx_rewrite/error.h"
#include "verify/opset.h"
#include "graph/scope.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

struct InitializerStats {
  int64_t count = 0;
  uint64_t inline_bytes = 0;
  uint64_t external_bytes = 0;
  std::map<std::string, std::optional<uint64_t>> external_files;  // nullopt: missing
};

InitializerStats initializer_stats(const Model& model) {
  InitializerStats stats;
  for (const auto& tensor : model.proto.graph().initializer()) {
    ++stats.count;
    if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
      std::string location;
      uint64_t length = 0;
      for (const auto& entry : tensor.external_data()) {
        if (entry.key() == "location") location = entry.value();
        if (entry.key() == "length") length = std::strtoull(entry.value().c_str(), nullptr, 10);
      }
      if (!stats.external_files.count(location)) {
        std::error_code ec;
        const uintmax_t size = fs::file_size(model.directory() / location, ec);
        stats.external_files[location] = ec ? std::nullopt : std::optional<uint64_t>(size);
      }
      stats.external_bytes += length;
    } else {
      stats.inline_bytes += model.tensor_size(tensor);
    }
  }
  return stats;
}

std::string bytes_text(uint64_t bytes) {
  if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1ull << 20));
  if (bytes >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / (1ull << 10));
  return fmt::format("{} B", bytes);
}

bool is_standard_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx.ml"; }

// Not a standard op: a custom domain, or an op type the standard domain's table doesn't know
// (TensorRT plugins exported by onnx-graphsurgeon sit in the default domain: EfficientNMS_TRT).
bool is_custom_op(const OpKey& key) {
  if (!is_standard_domain(key.first)) return true;
  const OpTable* table = OpRegistry::builtin().table(key.first);
  return table && !table->knows(key.second);
}

// Rules with a pattern node of this op, per target.
std::vector<std::string> covering_rules(const RuleSet& rules, const OpKey& key) {
  std::vector<std::string> ids;
  for (const auto& rule : rules.rules) {
    bool covers = false;
    for (const auto& pattern : rule->patterns) {
      for (const auto& node : pattern.nodes) covers = covers || (node.domain == key.first && node.op_type == key.second);
    }
    if (covers) ids.push_back(fmt::format("{} [{}]", rule->id, fmt::join(rule->targets, ", ")));
  }
  return ids;
}

// "float", "seq(float)", "map(int64,float)", "optional(float)", "sparse float"; "?" when unset.
std::string type_text(const onnx::TypeProto& type) {
  switch (type.value_case()) {
    case onnx::TypeProto::kTensorType: return data_type_name(type.tensor_type().elem_type());
    case onnx::TypeProto::kSparseTensorType: return "sparse " + data_type_name(type.sparse_tensor_type().elem_type());
    case onnx::TypeProto::kSequenceType: return "seq(" + type_text(type.sequence_type().elem_type()) + ")";
    case onnx::TypeProto::kOptionalType: return "optional(" + type_text(type.optional_type().elem_type()) + ")";
    case onnx::TypeProto::kMapType:
      return "map(" + data_type_name(type.map_type().key_type()) + "," + type_text(type.map_type().value_type()) + ")";
    default: return "?";
  }
}

const onnx::TensorShapeProto* shape_of(const onnx::TypeProto& type) {
  if (type.has_tensor_type() && type.tensor_type().has_shape()) return &type.tensor_type().shape();
  if (type.has_sparse_tensor_type() && type.sparse_tensor_type().has_shape()) return &type.sparse_tensor_type().shape();
  return nullptr;
}

// "[1, 3, height, ?]"; "(rank unknown)" without a shape.
std::string shape_text(const onnx::TypeProto& type) {
  const auto* shape = shape_of(type);
  if (!shape) return type.has_tensor_type() || type.has_sparse_tensor_type() ? "(rank unknown)" : "";
  std::vector<std::string> dims;
  for (const auto& dim : shape->dim()) {
    dims.push_back(dim.has_dim_value() ? std::to_string(dim.dim_value()) : dim.has_dim_param() ? printable(dim.dim_param()) : "?");
  }
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

// {"name", "type", "shape": [numbers, names, null for unknown] or null}
void write_value_json(JsonWriter& json, const onnx::ValueInfoProto& value) {
  json.begin_object().key("name").value(value.name()).key("type").value(type_text(value.type())).key("shape");
  if (const auto* shape = shape_of(value.type())) {
    json.begin_array();
    for (const auto& dim : shape->dim()) {
      if (dim.has_dim_value()) json.value(static_cast<int64_t>(dim.dim_value()));
      else if (dim.has_dim_param()) json.value(dim.dim_param());
      else json.null();
    }
    json.end_array();
  } else {
    json.null();
  }
  json.end_object();
}

// The graph's inputs that are not initializers (IR < 4 lists weights as inputs too).
std::vector<const onnx::ValueInfoProto*> real_inputs(const onnx::GraphProto& graph) {
  std::set<std::string_view> weights;
  for (const auto& tensor : graph.initializer()) weights.insert(tensor.name());
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& input : graph.input()) {
    if (!weights.count(input.name())) inputs.push_back(&input);
  }
  return inputs;
}

// Nodes by where they sit; weights held outside initializers.
struct ModelTotals {
  int64_t main_graph = 0, subgraphs = 0, functions = 0, training = 0;
  int64_t constants = 0;  // Constant nodes holding a tensor
  uint64_t constant_bytes = 0;
  int64_t sparse_initializers = 0;
  uint64_t sparse_bytes = 0;
  int64_t total() const { return main_graph + subgraphs + functions + training; }
};

ModelTotals model_totals(const onnx::ModelProto& proto) {
  ModelTotals totals;
  for_each_graph(proto, [&](const auto& view) {
    const int64_t count = view.nodes->size();
    switch (view.place->kind()) {
      case Place::Kind::kMainGraph: totals.main_graph += count; break;
      case Place::Kind::kFunction: totals.functions += count; break;
      case Place::Kind::kTrainingInitialization:
      case Place::Kind::kTrainingAlgorithm: totals.training += count; break;
      case Place::Kind::kSubgraph: totals.subgraphs += count; break;
    }
    for (const auto& node : *view.nodes) {
      if (!is_constant_node(node)) continue;
      for (const auto& attribute : node.attribute()) {
        if (attribute.name() == "value" || attribute.name() == "sparse_value") {
          ++totals.constants;
          totals.constant_bytes += attribute.name() == "value" ? attribute.t().ByteSizeLong() : attribute.sparse_tensor().ByteSizeLong();
        }
      }
    }
    if (view.graph) {
      totals.sparse_initializers += view.graph->sparse_initializer_size();
      for (const auto& sparse : view.graph->sparse_initializer()) totals.sparse_bytes += sparse.ByteSizeLong();
    }
  });
  return totals;
}

}  // namespace

namespace {

// What inspect reports of one model, read once for either form.
struct Inspection {
  const std::string& input;
  const RuleSet& rules;
  const Model& model;
  const onnx::ModelProto& proto = model.proto;
  const OpCounts ops = count_ops(proto);
  const InitializerStats initializers = initializer_stats(model);
  const ModelTotals totals = model_totals(proto);
  const std::vector<const onnx::ValueInfoProto*> inputs = real_inputs(proto.graph());
  const std::set<std::pair<std::string, std::string>> functions = [&] {
    std::set<std::pair<std::string, std::string>> names;
    for (const auto& function : proto.functions()) names.insert({normalize_domain(function.domain()), function.name()});
    return names;
  }();
};

void write_inspection_json(const Inspection& inspection, std::ostream& out) {
  const auto& [input, rules, model, proto, ops, initializers, totals, inputs, functions] = inspection;
  JsonWriter writer;
  writer.begin_object();
  writer.key("model").value(input);
  writer.key("ir_version").value(static_cast<int64_t>(proto.ir_version()));
  writer.key("producer_name").value(proto.producer_name());
  writer.key("producer_version").value(proto.producer_version());
  writer.key("opset_imports").begin_array();
  for (const auto& import : proto.opset_import()) {
    writer.begin_object().key("domain").value(display_domain(normalize_domain(import.domain())));
    writer.key("version").value(static_cast<int64_t>(import.version())).end_object();
  }
  writer.end_array();
  writer.key("inputs").begin_array();
  for (const auto* input : inputs) write_value_json(writer, *input);
  writer.end_array();
  writer.key("outputs").begin_array();
  for (const auto& output : proto.graph().output()) write_value_json(writer, output);
  writer.end_array();
  writer.key("nodes").begin_object();
  writer.key("total").value(totals.total());
  writer.key("main_graph").value(totals.main_graph);
  writer.key("subgraphs").value(totals.subgraphs);
  writer.key("functions").value(totals.functions);
  writer.key("training").value(totals.training);
  writer.end_object();
  writer.key("ops").begin_array();
  for (const auto& [key, count] : ops) {
    writer.begin_object().key("domain").value(display_domain(key.first)).key("op_type").value(key.second);
    writer.key("count").value(count);
    const bool custom = is_custom_op(key);
    writer.key("custom").value(custom);
    writer.key("local_function").value(functions.count(key) != 0);
    if (custom) writer.key("rules").strings(covering_rules(rules, key));
    writer.end_object();
  }
  writer.end_array();
  writer.key("functions").begin_array();
  for (const auto& [domain, name] : functions) writer.value(display_domain(domain) + "." + name);
  writer.end_array();
  writer.key("initializers").begin_object();
  writer.key("count").value(initializers.count);
  writer.key("inline_bytes").value(initializers.inline_bytes);
  writer.key("external_bytes").value(initializers.external_bytes);
  writer.key("external_files").begin_array();
  for (const auto& [file, size] : initializers.external_files) {
    writer.begin_object().key("location").value(file).key("bytes");
    if (size) writer.value(*size);
    else writer.null();
    writer.key("missing").value(!size).end_object();
  }
  writer.end_array().end_object();
  writer.key("metadata_props").begin_object();
  for (const auto& entry : proto.metadata_props()) writer.key(entry.key()).value(entry.value());
  writer.end_object();
  writer.key("constant_nodes").begin_object().key("count").value(totals.constants).key("bytes").value(totals.constant_bytes).end_object();
  writer.key("sparse_initializers").begin_object();
  writer.key("count").value(totals.sparse_initializers).key("bytes").value(totals.sparse_bytes).end_object();
  writer.key("training_info").begin_array();
  for (const auto& info : proto.training_info()) {
    writer.begin_object();
    writer.key("initialization_nodes").value(info.initialization().node_size());
    writer.key("algorithm_nodes").value(info.algorithm().node_size());
    writer.key("initialization_bindings").value(info.initialization_binding_size());
    writer.key("update_bindings").value(info.update_binding_size());
    writer.end_object();
  }
  writer.end_array();
  writer.key("notes").begin_array();
  if (!model.missing_external_data.empty()) writer.value(missing_data_note(model));
  writer.end_array();
  writer.end_object();
  out << writer.str();
}

void print_inspection(const Inspection& inspection, std::ostream& out) {
  const auto& [input, rules, model, proto, ops, initializers, totals, inputs, functions] = inspection;
  out << fmt::format("{}\n", input);
  out << fmt::format("  IR version {}, producer {} {}\n", proto.ir_version(),
                     proto.producer_name().empty() ? "(none)" : proto.producer_name(), proto.producer_version());
  std::vector<std::string> imports;
  for (const auto& import : proto.opset_import())
    imports.push_back(fmt::format("{} {}", display_domain(normalize_domain(import.domain())), import.version()));
  out << fmt::format("  opset imports: {}\n", fmt::join(imports, ", "));
  const auto print_values = [&](const char* title, const std::vector<const onnx::ValueInfoProto*>& values) {
    out << fmt::format("  {} ({}):\n", title, values.size());
    for (const auto* value : values) {
      out << fmt::format("    {}: {} {}\n", printable(value->name()), type_text(value->type()), shape_text(value->type()));
    }
  };
  print_values("inputs", inputs);
  std::vector<const onnx::ValueInfoProto*> outputs;
  for (const auto& output : proto.graph().output()) outputs.push_back(&output);
  print_values("outputs", outputs);
  out << fmt::format("  nodes: {} (main graph {}, subgraphs {}, functions {}, training {})\n", totals.total(), totals.main_graph,
                     totals.subgraphs, totals.functions, totals.training);
  size_t width = 0;
  for (const auto& [key, count] : ops) width = std::max(width, op_name(key).size());
  out << "  nodes per op (graphs, subgraphs and functions):\n";
  for (const auto& [key, count] : ops) out << fmt::format("    {:<{}}  {}\n", op_name(key), width, count);
  std::vector<std::string> custom;
  for (const auto& [key, count] : ops) {
    if (!is_custom_op(key)) continue;
    const auto covering = covering_rules(rules, key);
    custom.push_back(fmt::format("    {} x{}{}: {}", op_name(key), count, functions.count(key) ? " (model-local function)" : "",
                                 covering.empty() ? "no rule" : fmt::format("{}", fmt::join(covering, ", "))));
  }
  if (!custom.empty()) out << "  custom ops and the rules that cover them:\n" << fmt::format("{}\n", fmt::join(custom, "\n"));
  if (!functions.empty()) {
    std::vector<std::string> names;
    for (const auto& [domain, name] : functions) names.push_back(display_domain(domain) + "." + name);
    out << fmt::format("  model-local functions: {}\n", fmt::join(names, ", "));
  }
  out << fmt::format("  initializers: {}, {} inline, {} external\n", initializers.count, bytes_text(initializers.inline_bytes),
                     bytes_text(initializers.external_bytes));
  for (const auto& [file, size] : initializers.external_files) {
    out << fmt::format("  external data: {} ({})\n", file, size ? bytes_text(*size) : "missing");
  }
  if (totals.constants) out << fmt::format("  weights in Constant nodes: {}, {}\n", totals.constants, bytes_text(totals.constant_bytes));
  if (totals.sparse_initializers) {
    out << fmt::format("  sparse initializers: {}, {}\n", totals.sparse_initializers, bytes_text(totals.sparse_bytes));
  }
  for (int i = 0; i < proto.training_info_size(); ++i) {
    const auto& info = proto.training_info(i);
    out << fmt::format("  training_info[{}]: initialization {} node(s), algorithm {} node(s), {} update binding(s)\n", i,
                       info.initialization().node_size(), info.algorithm().node_size(), info.update_binding_size());
  }
  for (const auto& entry : proto.metadata_props())
    out << fmt::format("  metadata: {} = {}\n", printable(entry.key()), printable(entry.value()));
  if (!model.missing_external_data.empty()) out << "  note: " << missing_data_note(model) << "\n";
}

int inspect_one(const std::string& input, const RuleSources& sources, bool json, std::ostream& out) {
  const RuleSet rules = sources.load();
  LoadedModel loaded(input, true, kGraphOnly);
  const Inspection inspection{input, rules, *loaded};
  if (json) write_inspection_json(inspection, out);
  else print_inspection(inspection, out);
  return 0;
}

}  // namespace

int run_inspect(const std::string& input, const RuleSources& sources, bool json, std::ostream& out) {
  try {
    return inspect_one(input, sources, json, out);
  } catch (...) {
    if (json) print_json_failure(input, std::current_exception(), out);
    throw;
  }
}
}  // namespace onnx_rewrite
