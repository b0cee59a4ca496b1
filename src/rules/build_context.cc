#include "onnx_rewrite/build_context.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"

#include "graph/node_attributes.h"
#include "graph/scope.h"
#include "rules/matcher.h"
#include "rules/rule.h"
#include "verify/opset.h"

namespace onnx_rewrite {

// ---- NodeView ---------------------------------------------------------------------------------

std::string NodeView::domain() const { return normalize_domain(node_->domain()); }

static std::vector<Value> values_of(const google::protobuf::RepeatedPtrField<std::string>& names) {
  std::vector<Value> values;
  for (const auto& name : names) values.push_back(Value{name});
  return values;
}

std::vector<Value> NodeView::inputs() const { return values_of(node_->input()); }

std::vector<Value> NodeView::outputs() const { return values_of(node_->output()); }

Value NodeView::input(size_t i) const {
  return i < static_cast<size_t>(node_->input_size()) ? Value{node_->input(static_cast<int>(i))} : Value{};
}

Value NodeView::output(size_t i) const {
  return i < static_cast<size_t>(node_->output_size()) ? Value{node_->output(static_cast<int>(i))} : Value{};
}

const onnx::AttributeProto* NodeView::attribute(std::string_view name) const {
  if (checked_) checked_->require_node_attribute(name);
  return find_attribute(*node_, name);
}

int64_t NodeView::attribute_int(std::string_view name, int64_t otherwise) const {
  const auto* found = attribute(name);
  return found ? found->i() : otherwise;
}

float NodeView::attribute_float(std::string_view name, float otherwise) const {
  const auto* found = attribute(name);
  return found ? found->f() : otherwise;
}

std::string NodeView::attribute_string(std::string_view name, std::string otherwise) const {
  const auto* found = attribute(name);
  return found ? found->s() : otherwise;
}

std::vector<int64_t> NodeView::attribute_ints(std::string_view name, std::vector<int64_t> otherwise) const {
  const auto* found = attribute(name);
  return found ? std::vector<int64_t>(found->ints().begin(), found->ints().end()) : otherwise;
}

Attributes NodeView::attributes_except(std::initializer_list<std::string_view> left_out) const {
  Attributes kept;
  for (const auto& attribute : node_->attribute()) {
    const bool left =
        std::any_of(left_out.begin(), left_out.end(), [&](std::string_view prefix) { return attribute.name().starts_with(prefix); });
    if (!left) kept.push_back(attribute);
  }
  return kept;
}

std::string NodeView::description() const { return describe_node(*node_); }

// ---- BuildContext -----------------------------------------------------------------------------

BuildContext::BuildContext(const Match& match, const BuilderSignature& signature) : match_(match), signature_(signature) {
  for (const auto& [pattern_name, graph_name] : match.values) values_.emplace(pattern_name, Value{graph_name});
}

BuildContext::~BuildContext() = default;

const std::string& BuildContext::rule_id() const { return match_.rule->id; }

void BuildContext::require_value(std::string_view name) const {
  if (!signature_.declares_value(name)) {
    throw BuilderContractError(fmt::format("the builder of rule {} reads pattern value '{}', which it does not declare", rule_id(), name));
  }
}

void BuildContext::require_attribute(std::string_view name) const {
  if (!signature_.declares_attribute(name)) {
    throw BuilderContractError(fmt::format("the builder of rule {} reads '{}', which it does not declare", rule_id(), name));
  }
}

void BuildContext::require_node_attribute(std::string_view name) const {
  if (!signature_.declares_node_attribute(name)) {
    throw BuilderContractError(
        fmt::format("the builder of rule {} reads attribute '{}' of a matched node, which it does not declare", rule_id(), name));
  }
}

const std::string& BuildContext::graph_name(std::string_view name) const { return value(name).name; }

bool BuildContext::has(std::string_view name) const { return !value(name).absent(); }

bool BuildContext::in_pattern(std::string_view name) const {
  require_value(name);
  return values_.count(name) != 0;
}

const Value& BuildContext::value(std::string_view name) const {
  require_value(name);
  static const Value absent;
  auto it = values_.find(name);
  return it == values_.end() ? absent : it->second;
}

const ShapeFacts& BuildContext::facts(std::string_view name) const { return match_.scope->facts(graph_name(name)); }

int32_t BuildContext::element_type(std::initializer_list<std::string_view> names) const {
  for (std::string_view name : names) {
    if (!has(name)) continue;
    if (int32_t type = facts(name).elem_type) return type;
  }
  return 0;
}

bool BuildContext::is_constant(std::string_view name) const { return has(name) && match_.scope->is_constant(graph_name(name)); }

std::optional<TensorValues> BuildContext::constant(std::string_view name, size_t max_elements) const {
  return has(name) ? match_.scope->constant_values(graph_name(name), max_elements) : std::nullopt;
}

std::optional<double> BuildContext::scalar(std::string_view name) const {
  auto values = constant(name);
  if (!values || values->numbers.size() != 1) return std::nullopt;
  return values->numbers.front();
}

std::optional<onnx::TensorProto> BuildContext::constant_tensor(std::string_view name) const {
  if (!has(name)) return std::nullopt;
  if (const onnx::TensorProto* header = match_.scope->constant_tensor(graph_name(name))) {
    return match_.scope->model().tensor_with_data(*header);
  }
  return std::nullopt;
}

bool BuildContext::stored_externally(std::string_view name) const {
  if (!has(name)) return false;
  const onnx::TensorProto* tensor = match_.scope->constant_tensor(graph_name(name));
  return tensor && tensor->data_location() == onnx::TensorProto::EXTERNAL;
}

namespace {

// A constant's raw bytes: where they lie in the source file, or a copy.
struct ConstantBytes {
  std::optional<FileRange> in_source;
  std::string copy;
};

std::optional<ConstantBytes> constant_bytes(const Model& model, const onnx::TensorProto& header) {
  if (auto range = model.raw_data_in_source(header)) return ConstantBytes{range, {}};
  onnx::TensorProto tensor = model.tensor_with_data(header);
  if (tensor.has_raw_data()) return ConstantBytes{std::nullopt, std::move(*tensor.mutable_raw_data())};
  if (!is_float_type(tensor.data_type())) return std::nullopt;  // typed fields: floats go through doubles exactly
  auto values = decode_tensor(tensor);
  if (!values) return std::nullopt;
  const std::vector<int64_t> dims(tensor.dims().begin(), tensor.dims().end());
  return ConstantBytes{std::nullopt, std::move(*make_tensor(tensor.data_type(), dims, values->numbers).mutable_raw_data())};
}

}  // namespace

std::optional<Value> BuildContext::concatenated_constants(GraphBuilder& b, const std::vector<std::string_view>& names, int64_t axis,
                                                          std::string& why) const {
  const Model& model = match_.scope->model();
  std::vector<const onnx::TensorProto*> headers;
  for (std::string_view name : names) {
    const onnx::TensorProto* header = has(name) ? match_.scope->constant_tensor(graph_name(name)) : nullptr;
    if (!header) why = fmt::format("'{}' is not a constant", has(name) ? graph_name(name) : std::string(name));
    else if (header->data_location() == onnx::TensorProto::EXTERNAL) why = fmt::format("'{}' is stored as external data", header->name());
    if (!header || header->data_location() == onnx::TensorProto::EXTERNAL) return std::nullopt;
    headers.push_back(header);
  }
  const onnx::TensorProto& first = *headers.front();
  const int bits = element_bits(first.data_type());
  if (bits <= 0 || bits % 8 != 0) {
    why = fmt::format("'{}' is not of a type of whole bytes per element", first.name());
    return std::nullopt;
  }
  if (axis < 0 || axis >= first.dims_size()) {
    why = fmt::format("'{}' has no axis {}", first.name(), axis);
    return std::nullopt;
  }
  onnx::TensorProto packed;
  packed.set_data_type(first.data_type());
  *packed.mutable_dims() = first.dims();
  packed.set_dims(static_cast<int>(axis), 0);
  int64_t outer = 1;  // the number of slices each constant adds to, one after the other
  for (int k = 0; k < axis; ++k) outer *= first.dims(k);
  std::vector<int64_t> slice_bytes;
  std::vector<ConstantBytes> bytes;
  for (const onnx::TensorProto* header : headers) {
    bool fits = header->data_type() == first.data_type() && header->dims_size() == first.dims_size();
    int64_t slice = bits / 8;
    for (int k = 0; fits && k < first.dims_size(); ++k) {
      fits = header->dims(k) >= 0 && (k == axis || header->dims(k) == first.dims(k));
      if (k >= axis) slice *= header->dims(k);
    }
    auto found = fits ? constant_bytes(model, *header) : std::nullopt;
    const size_t size = found ? (found->in_source ? found->in_source->size() : found->copy.size()) : 0;
    if (!found || size != static_cast<size_t>(outer * slice)) {
      why = fmt::format("'{}' does not fit beside '{}' on axis {}, or its bytes do not match its dims", header->name(), first.name(), axis);
      return std::nullopt;
    }
    packed.set_dims(static_cast<int>(axis), packed.dims(static_cast<int>(axis)) + header->dims(static_cast<int>(axis)));
    slice_bytes.push_back(slice);
    bytes.push_back(std::move(*found));
  }
  const bool all_in_source = std::all_of(bytes.begin(), bytes.end(), [](const ConstantBytes& c) { return c.in_source.has_value(); });
  if (!all_in_source) {
    // One of them is not in the source: the result is a copy, so the others are read once each.
    for (ConstantBytes& constant : bytes) {
      if (constant.in_source) constant.copy = model.source->read({*std::exchange(constant.in_source, std::nullopt)});
    }
  }
  std::vector<FileRange> pieces;
  std::string copy;
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t i = 0; i < bytes.size(); ++i) {
      const size_t size = static_cast<size_t>(slice_bytes[i]);
      const size_t offset = static_cast<size_t>(o) * size;
      if (size == 0) continue;
      if (all_in_source) pieces.push_back({bytes[i].in_source->begin + offset, bytes[i].in_source->begin + offset + size});
      else copy.append(bytes[i].copy, offset, size);
    }
  }
  if (all_in_source) return b.assembled_constant(std::move(packed), std::move(pieces));
  packed.set_raw_data(std::move(copy));
  return b.constant(std::move(packed));
}

static bool read_outside(const Match& match, const std::string& value) {
  if (match.scope->is_output(value)) return true;
  for (const auto& use : match.scope->uses(value)) {
    if (std::find(match.nodes.begin(), match.nodes.end(), use.node) == match.nodes.end()) return true;
  }
  return false;
}

bool BuildContext::used_outside(std::string_view name) const { return has(name) && read_outside(match_, graph_name(name)); }

// The dims of a constant of `count` elements reshaped to `shape`; nullopt where Reshape itself
// must decide (a 0, copying the input's dim) or the shape doesn't fit.
static std::optional<std::vector<int64_t>> reshaped_dims(int64_t count, std::vector<int64_t> dims, int64_t max_elements) {
  int64_t known = 1;
  std::optional<size_t> inferred;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1 && !inferred) {
      inferred = i;
    } else if (dims[i] <= 0 || dims[i] > max_elements || known * dims[i] > max_elements) {
      return std::nullopt;
    } else {
      known *= dims[i];
    }
  }
  if (inferred) {
    if (count % known != 0) return std::nullopt;
    dims[*inferred] = count / known;
  } else if (known != count) {
    return std::nullopt;
  }
  return dims;
}

Value BuildContext::reshaped(GraphBuilder& b, std::string_view name, const std::vector<int64_t>& shape) const {
  const Value& input = value(name);
  const std::string& value = input.name;
  auto as_node = [&] {
    const Value target = b.ints(shape);
    return b.Reshape(input, target);
  };
  const onnx::TensorProto* header = match_.scope->constant_tensor(value);
  if (!header || header->data_location() == onnx::TensorProto::EXTERNAL) return as_node();
  constexpr int64_t kMaxElements = int64_t{1} << 18;  // 1 MiB of float
  int64_t count = 1;
  for (int64_t dim : header->dims()) {
    if (dim < 0 || (dim > 0 && count > kMaxElements / dim)) return as_node();
    count *= dim;
  }
  const auto dims = reshaped_dims(count, shape, kMaxElements);
  if (!dims) return as_node();
  onnx::TensorProto tensor = match_.scope->model().tensor_with_data(*header);
  tensor.clear_name();
  tensor.clear_dims();
  constexpr size_t kCopiedForFree = 64;  // bytes
  // An initializer that is also a graph input (below IR 4 every one is) stays: a copy would be a
  // second one.
  const Scope& scope = *match_.scope;
  const bool only_here = (scope.owns_initializer(value) && !scope.is_graph_input_here(value)) || scope.producer(value);
  if ((!only_here || read_outside(match_, value)) && tensor.ByteSizeLong() > kCopiedForFree) return as_node();
  for (int64_t dim : *dims) tensor.add_dims(dim);
  // A payload that doesn't fit its type and shape is the input's problem: left as it is, for the
  // runtime to report.
  if (tensor.data_type() == onnx::TensorProto::STRING || !decode_tensor(tensor)) return as_node();
  return b.constant(std::move(tensor));
}

const onnx::AttributeProto* BuildContext::attribute(std::string_view name) const {
  require_attribute(name);
  auto it = match_.attributes.find(std::string(name));
  return it == match_.attributes.end() ? nullptr : &it->second;
}

int64_t BuildContext::attribute_int(std::string_view name, int64_t otherwise) const {
  const auto* found = attribute(name);
  if (!found) return otherwise;
  return found->type() == onnx::AttributeProto::FLOAT ? static_cast<int64_t>(found->f()) : found->i();
}

float BuildContext::attribute_float(std::string_view name, float otherwise) const {
  const auto* found = attribute(name);
  if (!found) return otherwise;
  return found->type() == onnx::AttributeProto::INT ? static_cast<float>(found->i()) : found->f();
}

std::vector<int64_t> BuildContext::attribute_ints(std::string_view name, std::vector<int64_t> otherwise) const {
  const auto* found = attribute(name);
  if (!found) return otherwise;
  if (found->type() == onnx::AttributeProto::INT) return {found->i()};  // a one-value list written as an int
  return std::vector<int64_t>(found->ints().begin(), found->ints().end());
}

std::string BuildContext::attribute_string(std::string_view name, std::string otherwise) const {
  const auto* found = attribute(name);
  return found ? found->s() : otherwise;
}

NodeView BuildContext::anchor() const { return NodeView(*match_.anchor, this); }

std::optional<NodeView> BuildContext::node(std::string_view op_type) const {
  for (const auto* node : match_.nodes) {
    if (node->op_type() == op_type) return NodeView(*node, this);
  }
  return std::nullopt;
}

std::vector<NodeView> BuildContext::nodes() const {
  std::vector<NodeView> views;
  for (const auto* node : match_.nodes) views.push_back(NodeView(*node, this));
  return views;
}

std::optional<NodeView> BuildContext::producer(const Value& value) const {
  if (value.absent()) return std::nullopt;
  const auto* produced = match_.scope->producer(value.name);
  return produced ? std::optional<NodeView>(NodeView(*produced->node, nullptr)) : std::nullopt;
}

const ShapeFacts& BuildContext::facts_of(const Value& value) const { return match_.scope->facts(value.name); }

std::optional<TensorValues> BuildContext::constant_of(const Value& value, size_t max_elements) const {
  return value.absent() ? std::nullopt : match_.scope->constant_values(value.name, max_elements);
}

std::vector<BuildContext::Read> BuildContext::readers(const Value& value) const {
  std::vector<Read> reads;
  for (const auto& use : match_.scope->uses(value.name)) reads.push_back({NodeView(*use.node, nullptr), use.input});
  return reads;
}

bool BuildContext::is_constant(const Value& value) const { return !value.absent() && match_.scope->is_constant(value.name); }

bool BuildContext::is_graph_output(const Value& value) const { return match_.scope->is_output(value.name); }

std::vector<NodeView> BuildContext::graph_nodes() const {
  std::vector<NodeView> views;
  for (const auto& node : match_.scope->nodes()) views.push_back(NodeView(node, nullptr));
  return views;
}

int BuildContext::model_opset(std::string_view domain) const { return match_.scope->opset(domain); }

int64_t BuildContext::ir_version() const { return match_.scope->model().proto.ir_version(); }

}  // namespace onnx_rewrite
