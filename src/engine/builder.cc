#include "onnx_rewrite/builder.h"

#include <set>
#include <stdexcept>

#include "verify/opset.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {

GraphBuilder::GraphBuilder(std::string base, std::string rule_id, std::map<std::string, int> opsets, FreshName fresh)
    : base_(std::move(base)), rule_id_(std::move(rule_id)), opsets_(std::move(opsets)), fresh_(std::move(fresh)) {}

int GraphBuilder::opset(std::string_view domain) const {
  auto it = opsets_.find(normalize_domain(domain));
  return it == opsets_.end() ? 0 : it->second;
}

onnx::NodeProto& GraphBuilder::add_node(std::string_view op_type, std::string_view domain, const std::vector<Value>& inputs,
                                        Attributes attributes) {
  const std::string normalized = normalize_domain(domain);
  if (!opsets_.count(normalized)) {
    throw std::logic_error("rule " + rule_id_ + " builds " + std::string(op_type) + " in domain '" + normalized + "' without requiring it");
  }
  onnx::NodeProto& node = nodes_.emplace_back();
  node.set_op_type(std::string(op_type));
  if (!normalized.empty()) node.set_domain(normalized);
  node.set_name(fresh_(base_ + "/" + rule_id_ + "/" + std::string(op_type)));
  size_t present = inputs.size();
  while (present > 0 && inputs[present - 1].absent()) --present;  // trailing absent inputs are omitted
  for (size_t i = 0; i < present; ++i) node.add_input(inputs[i].name);
  for (auto& attribute : attributes) *node.add_attribute() = std::move(attribute);
  return node;
}

Value GraphBuilder::op(std::string_view op_type, std::vector<Value> inputs, Attributes attributes, std::string_view domain) {
  return op_outputs(op_type, std::move(inputs), 1, std::move(attributes), domain).front();
}

std::vector<Value> GraphBuilder::op_outputs(std::string_view op_type, std::vector<Value> inputs, size_t outputs, Attributes attributes,
                                            std::string_view domain) {
  onnx::NodeProto& node = add_node(op_type, domain, inputs, std::move(attributes));
  std::vector<Value> values;
  for (size_t i = 0; i < outputs; ++i) {
    values.push_back({fresh_value(std::string(op_type) + (i ? "_" + std::to_string(i) : ""))});
    node.add_output(values.back().name);
  }
  return values;
}

std::vector<Value> GraphBuilder::op_named(const onnx::NodeProto& prototype, const std::vector<Value>& inputs) {
  Attributes attributes(prototype.attribute().begin(), prototype.attribute().end());
  onnx::NodeProto& node = add_node(prototype.op_type(), prototype.domain(), inputs, std::move(attributes));
  std::vector<Value> values;
  for (const auto& hint : prototype.output()) {
    values.push_back({hint.empty() ? std::string() : fresh_value(hint)});
    node.add_output(values.back().name);
  }
  return values;
}

Value GraphBuilder::constant(onnx::TensorProto tensor) {
  // A payload that disagrees with its shape would pass our check and fail in the runtime.
  if (tensor.data_type() != onnx::TensorProto::STRING && !decodes(tensor)) {
    throw std::logic_error("rule " + rule_id_ + " made a constant whose data does not match its type and shape");
  }
  // Equal constants are merged where the rewriter makes them initializers.
  Value value{fresh_value("const")};
  tensor.set_name(value.name);
  constants_.emplace_back(value.name, std::move(tensor));
  return value;
}

Value GraphBuilder::assembled_constant(onnx::TensorProto header, std::vector<FileRange> raw_data) {
  Value value{fresh_value("const")};
  header.set_name(value.name);
  constants_.emplace_back(value.name, std::move(header));
  assembled_.emplace(value.name, std::move(raw_data));
  return value;
}

const std::vector<FileRange>* GraphBuilder::assembled_raw_data(const std::string& constant) const {
  auto it = assembled_.find(constant);
  return it == assembled_.end() ? nullptr : &it->second;
}

Value GraphBuilder::scalar(double number, int32_t data_type) { return constant(make_tensor(data_type, {}, {number})); }

Value GraphBuilder::ints(const std::vector<int64_t>& numbers) {
  return constant(make_int64_tensor({static_cast<int64_t>(numbers.size())}, numbers));
}

Value GraphBuilder::floats(const std::vector<double>& numbers, int32_t data_type) {
  return constant(make_tensor(data_type, {static_cast<int64_t>(numbers.size())}, numbers));
}

void GraphBuilder::output(const std::string& graph_name, Value value) {
  // The node computing `value` takes over the graph's name, unless the value comes from outside
  // the replacement or already stands for another output: then an Identity carries it.
  if (auto taken = renamed_.find(value.name); taken != renamed_.end()) value.name = taken->second;
  for (auto& node : nodes_) {
    for (auto& output : *node.mutable_output()) {
      if (output != value.name || outputs_.count(output)) continue;
      for (auto& consumer : nodes_) {
        for (auto& input : *consumer.mutable_input()) {
          if (input == value.name) input = graph_name;
        }
      }
      renamed_[value.name] = graph_name;
      output = graph_name;
      outputs_[graph_name] = graph_name;
      return;
    }
  }
  onnx::NodeProto& identity = add_node("Identity", "", {value}, {});
  identity.add_output(graph_name);
  outputs_[graph_name] = graph_name;
}

void GraphBuilder::prune() {
  std::set<std::string> needed;  // graph names bound as outputs, and what later nodes read
  for (const auto& [graph_name, value] : outputs_) needed.insert(value);
  std::vector<bool> keep(nodes_.size(), false);
  for (size_t i = nodes_.size(); i-- > 0;) {
    for (const auto& output : nodes_[i].output()) keep[i] = keep[i] || needed.count(output);
    if (keep[i]) needed.insert(nodes_[i].input().begin(), nodes_[i].input().end());
  }
  std::vector<onnx::NodeProto> kept;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (keep[i]) kept.push_back(std::move(nodes_[i]));
  }
  nodes_ = std::move(kept);
  std::erase_if(constants_, [&](const auto& constant) { return !needed.count(constant.first); });
}

Value GraphBuilder::Unsqueeze(Value x, const std::vector<int64_t>& axes) {
  if (opset() < 13) return op("Unsqueeze", {x}, {attr("axes", axes)});
  return op("Unsqueeze", {x, ints(axes)});
}

Value GraphBuilder::Squeeze(Value x, const std::vector<int64_t>& axes) {
  if (opset() < 13) return op("Squeeze", {x}, {attr("axes", axes)});
  return op("Squeeze", {x, ints(axes)});
}

Value GraphBuilder::Reduce(std::string_view op_type, Value x, const std::vector<int64_t>& axes, bool keepdims) {
  const bool axes_as_input = op_type == "ReduceSum" ? opset() >= 13 : opset() >= 18;
  Attributes attributes{attr("keepdims", int64_t{keepdims})};
  if (axes.empty()) return op(op_type, {x}, attributes);
  if (axes_as_input) return op(op_type, {x, ints(axes)}, attributes);
  attributes.push_back(attr("axes", axes));
  return op(op_type, {x}, attributes);
}

Value GraphBuilder::Slice(Value x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
                          const std::vector<int64_t>& steps) {
  if (opset() < 10) {
    for (int64_t step : steps) {
      if (step != 1) throw std::logic_error("Slice with steps needs opset 10");
    }
    return op("Slice", {x}, {attr("starts", starts), attr("ends", ends), attr("axes", axes)});
  }
  std::vector<Value> inputs{x, ints(starts), ints(ends), ints(axes)};
  if (!steps.empty()) inputs.push_back(ints(steps));
  return op("Slice", inputs);
}

Value GraphBuilder::Clip(Value x, std::optional<double> low, std::optional<double> high, int32_t data_type) {
  if (opset() < 11) {
    Attributes attributes;
    if (low) attributes.push_back(attr("min", *low));
    if (high) attributes.push_back(attr("max", *high));
    return op("Clip", {x}, attributes);
  }
  return op("Clip", {x, low ? scalar(*low, data_type) : Value{}, high ? scalar(*high, data_type) : Value{}});
}

std::vector<Value> GraphBuilder::Split(Value x, int64_t axis, const std::vector<int64_t>& sizes) {
  if (opset() < 13) return op_outputs("Split", {x}, sizes.size(), {attr("axis", axis), attr("split", sizes)});
  return op_outputs("Split", {x, ints(sizes)}, sizes.size(), {attr("axis", axis)});
}

}  // namespace onnx_rewrite
