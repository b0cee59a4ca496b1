#include "onnx_rewrite/scope.h"

#include <set>

#include "onnx_rewrite/opset.h"
#include "shape_inference.h"

namespace onnx_rewrite {
namespace {

// Names a graph reads without defining them, in order of first use.
void collect_free_names(const onnx::GraphProto& graph, std::vector<std::string_view>& free_names,
                        std::unordered_set<std::string_view>& seen) {
  std::unordered_set<std::string_view> defined;
  for (const auto& input : graph.input()) defined.insert(input.name());
  for (const auto& initializer : graph.initializer()) defined.insert(initializer.name());
  for (const auto& sparse : graph.sparse_initializer()) defined.insert(sparse.values().name());
  auto use = [&](std::string_view name) {
    if (!name.empty() && !defined.count(name) && seen.insert(name).second) free_names.push_back(name);
  };
  for (const auto& node : graph.node()) {
    for (const auto& input : node.input()) use(input);
    for (const auto& name : implicit_inputs(node)) use(name);
    for (const auto& output : node.output()) defined.insert(output);
  }
  for (const auto& output : graph.output()) use(output.name());
}


}  // namespace

std::vector<std::string_view> implicit_inputs(const onnx::NodeProto& node) {
  std::vector<std::string_view> names;
  std::unordered_set<std::string_view> seen;
  for (const auto& attribute : node.attribute()) {
    if (attribute.has_g()) collect_free_names(attribute.g(), names, seen);
    for (const auto& graph : attribute.graphs()) collect_free_names(graph, names, seen);
  }
  return names;
}

std::optional<onnx::TensorProto> constant_node_tensor(const onnx::NodeProto& node) {
  if (node.op_type() != "Constant" || !normalize_domain(node.domain()).empty()) return std::nullopt;
  for (const auto& attribute : node.attribute()) {
    const std::string& name = attribute.name();
    if (name == "value" && attribute.has_t()) return attribute.t();
    if (name == "value_float") return make_tensor(onnx::TensorProto::FLOAT, {}, {attribute.f()});
    if (name == "value_int") return make_tensor(onnx::TensorProto::INT64, {}, {static_cast<double>(attribute.i())});
    if (name == "value_floats") {
      std::vector<double> numbers(attribute.floats().begin(), attribute.floats().end());
      return make_tensor(onnx::TensorProto::FLOAT, {static_cast<int64_t>(numbers.size())}, numbers);
    }
    if (name == "value" && attribute.type() == onnx::AttributeProto::STRING) {
      // torch writes a str constant as a STRING attribute named value.
      onnx::TensorProto tensor;
      tensor.set_data_type(onnx::TensorProto::STRING);
      tensor.add_string_data(attribute.s());
      return tensor;
    }
    if (name == "value_string" || name == "value_strings") {
      onnx::TensorProto tensor;
      tensor.set_data_type(onnx::TensorProto::STRING);
      if (name == "value_string") tensor.add_string_data(attribute.s());
      else tensor.add_dims(attribute.strings_size());
      for (const auto& text : attribute.strings()) tensor.add_string_data(text);
      return tensor;
    }
    if (name == "value_ints") {
      std::vector<double> numbers(attribute.ints().begin(), attribute.ints().end());
      return make_tensor(onnx::TensorProto::INT64, {static_cast<int64_t>(numbers.size())}, numbers);
    }
  }
  return std::nullopt;
}

Scope::Scope(Kind kind, std::string where, const Model& model, const Scope* parent, onnx::GraphProto* graph,
             onnx::FunctionProto* function)
    : kind_(kind), where_(std::move(where)), model_(model), parent_(parent), graph_(graph), function_(function) {
  index();
}

NodeList& Scope::nodes() const { return graph_ ? *graph_->mutable_node() : *function_->mutable_node(); }

void Scope::add_type(const onnx::ValueInfoProto& info) {
  if (!info.type().has_tensor_type()) return;
  const auto& tensor = info.type().tensor_type();
  ValueType type;
  type.elem_type = tensor.elem_type();
  if (tensor.has_shape()) {
    std::vector<int64_t> dims;
    for (const auto& dim : tensor.shape().dim()) dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    type.dims = std::move(dims);
  }
  types_[info.name()] = std::move(type);
}

void Scope::index() {
  if (kind_ != Kind::kSubgraph) {  // subgraphs use the imports of the graph or function holding them
    const auto& imports = function_ ? function_->opset_import() : model_.proto.opset_import();
    for (const auto& import : imports) opsets_[normalize_domain(import.domain())] = static_cast<int>(import.version());
  }

  if (graph_) {
    for (const auto& input : graph_->input()) {
      graph_inputs_.insert(input.name());
      add_type(input);
    }
    for (const auto& output : graph_->output()) {
      outputs_.insert(output.name());
      add_type(output);
    }
    if (kind_ == Kind::kMainGraph) {
      // Training graphs read the main graph's values: what they read must stay as it is.
      std::vector<std::string_view> read;
      std::unordered_set<std::string_view> seen;
      for (const auto& training : model_.proto.training_info()) {
        if (training.has_initialization()) collect_free_names(training.initialization(), read, seen);
        if (training.has_algorithm()) collect_free_names(training.algorithm(), read, seen);
      }
      outputs_.insert(read.begin(), read.end());
    }
    types_.reserve(static_cast<size_t>(graph_->value_info_size() + graph_->initializer_size()));
    for (const auto& info : graph_->value_info()) add_type(info);
    initializers_.reserve(static_cast<size_t>(graph_->initializer_size()));
    for (const auto& initializer : graph_->initializer()) {
      initializers_[initializer.name()] = &initializer;
      ValueType type;
      type.elem_type = initializer.data_type();
      type.dims = std::vector<int64_t>(initializer.dims().begin(), initializer.dims().end());
      types_[initializer.name()] = std::move(type);
    }
  } else {
    for (const auto& output : function_->output()) outputs_.insert(output);
  }

  // Uses are stored flat, grouped by value: count, place, then fill in node order.
  const size_t count = static_cast<size_t>(nodes().size());
  positions_.reserve(count);
  producers_.reserve(count + count / 2);
  use_ranges_.reserve(count + count / 2);
  auto for_each_use = [&](auto&& visit) {
    for (auto& node : nodes()) {
      for (int i = 0; i < node.input_size(); ++i) {
        if (!node.input(i).empty()) visit(std::string_view(node.input(i)), Use{&node, i});
      }
      for (const auto name : implicit_inputs(node)) visit(name, Use{&node, -1});
    }
  };
  for_each_use([&](std::string_view name, const Use&) { ++use_ranges_[name].count; });
  uint32_t next = 0;
  use_ranges_.for_each([&](std::string_view, UseRange& range) {
    range.begin = next;
    next += range.count;
    range.count = 0;
  });
  uses_.resize(next);
  for_each_use([&](std::string_view name, const Use& use) {
    UseRange& range = use_ranges_[name];
    uses_[range.begin + range.count++] = use;
  });

  int position = 0;
  for (auto& node : nodes()) {
    positions_[&node] = position++;
    for (int i = 0; i < node.output_size(); ++i) {
      if (!node.output(i).empty()) producers_[node.output(i)] = {&node, i};
    }
  }
}

int Scope::opset(std::string_view domain) const {
  if (kind_ == Kind::kSubgraph) return parent_->opset(domain);
  auto it = opsets_.find(normalize_domain(domain));
  return it == opsets_.end() ? 0 : it->second;
}

const Scope::Producer* Scope::producer(std::string_view value) const { return producers_.find(value); }

std::span<const Use> Scope::uses(std::string_view value) const {
  const UseRange* range = use_ranges_.find(value);
  if (!range) return {};
  return std::span<const Use>(uses_).subspan(range->begin, range->count);
}

bool Scope::is_graph_input(std::string_view value) const {
  if (graph_inputs_.count(value) || initializers_.contains(value)) return true;
  if (producers_.contains(value)) return false;
  return parent_ && parent_->is_graph_input(value);
}

const onnx::TensorProto* Scope::constant_tensor(std::string_view value) const {
  if (const auto* initializer = initializers_.find(value)) {
    // An initializer that is also a graph input can be overridden at run time (IR >= 4).
    if (graph_inputs_.count(value) && model_.proto.ir_version() >= 4) return nullptr;
    return *initializer;
  }
  if (const Producer* produced = producer(value)) {
    const onnx::NodeProto& node = *produced->node;
    if (node.op_type() != "Constant" || !normalize_domain(node.domain()).empty()) return nullptr;
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == "value" && attribute.has_t()) return &attribute.t();
    }
    return nullptr;  // value_float & co are read by constant_values
  }
  if (graph_inputs_.count(value)) return nullptr;
  return parent_ ? parent_->constant_tensor(value) : nullptr;
}

bool Scope::is_constant(std::string_view value) const {
  if (constant_tensor(value)) return true;
  const Producer* produced = producer(value);
  return produced && produced->node->op_type() == "Constant" && normalize_domain(produced->node->domain()).empty();
}

std::optional<TensorValues> Scope::constant_values(std::string_view value, size_t max_elements) const {
  const onnx::TensorProto* tensor = constant_tensor(value);
  if (!tensor) {
    const Producer* produced = producer(value);
    if (!produced) return std::nullopt;
    auto made = constant_node_tensor(*produced->node);
    return made ? decode_tensor(*made) : std::nullopt;
  }
  size_t elements = 1;
  for (int64_t dim : tensor->dims()) {
    if (dim < 0) return std::nullopt;
    if (dim > 0 && elements > max_elements / static_cast<size_t>(dim)) return std::nullopt;
    elements *= static_cast<size_t>(dim);
  }
  if (elements > max_elements) return std::nullopt;
  return decode_tensor(model_.tensor_with_data(*tensor));
}

Scope::~Scope() = default;

const ShapeFacts& Scope::facts(const std::string& value) const {
  if (!inference_) inference_ = std::make_unique<ShapeInference>(*this);
  return (*inference_)(value);
}

ValueType Scope::type_of(std::string_view value) const {
  ValueType type = declared_type(value);
  if (type.elem_type != 0 && type.dims) return type;
  const ShapeFacts& inferred = facts(std::string(value));
  if (type.elem_type == 0) type.elem_type = inferred.elem_type;
  if (!type.dims && inferred.shape) {
    std::vector<int64_t> dims;
    for (const Dim& dim : *inferred.shape) dims.push_back(dim.known() ? *dim.number : -1);
    type.dims = std::move(dims);
  }
  return type;
}

ValueType Scope::declared_type(std::string_view value) const {
  if (const ValueType* type = types_.find(value)) return *type;
  if (const Producer* produced = producer(value)) {
    if (auto tensor = constant_node_tensor(*produced->node)) {
      ValueType type;
      type.elem_type = tensor->data_type();
      type.dims = std::vector<int64_t>(tensor->dims().begin(), tensor->dims().end());
      return type;
    }
    return {};
  }
  return parent_ ? parent_->declared_type(value) : ValueType{};
}

std::vector<std::unique_ptr<Scope>> collect_scopes(Model& model) {
  std::vector<std::unique_ptr<Scope>> scopes;
  // Breadth-first so that a scope's parent is always listed (and indexed) before it.
  auto add_subgraphs = [&](size_t from) {
    for (size_t i = from; i < scopes.size(); ++i) {
      const Scope* parent = scopes[i].get();
      for (auto& node : parent->nodes()) {
        for (auto& attribute : *node.mutable_attribute()) {
          auto add = [&](onnx::GraphProto& graph) {
            std::string where = "subgraph '" + attribute.name() + "' of node '" +
                                (node.name().empty() ? node.op_type() : node.name()) + "' (" + parent->where() + ")";
            scopes.push_back(std::make_unique<Scope>(Scope::Kind::kSubgraph, std::move(where), model, parent, &graph, nullptr));
          };
          if (attribute.has_g()) add(*attribute.mutable_g());
          for (auto& graph : *attribute.mutable_graphs()) add(graph);
        }
      }
    }
  };
  scopes.push_back(std::make_unique<Scope>(Scope::Kind::kMainGraph, "main graph", model, nullptr, model.proto.mutable_graph(), nullptr));
  for (auto& function : *model.proto.mutable_functions()) {
    scopes.push_back(std::make_unique<Scope>(Scope::Kind::kFunction, "function " + function.domain() + "." + function.name(),
                                             model, nullptr, nullptr, &function));
  }
  add_subgraphs(0);
  return scopes;
}

}  // namespace onnx_rewrite
