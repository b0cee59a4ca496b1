#include "onnx_rewrite/toolkit.h"

#include <algorithm>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {

bool bound(const Match& match, const std::string& name) { return match.has_value(name); }

Value value_of(const Match& match, const std::string& name) { return Value{bound(match, name) ? match.value(name) : ""}; }

int32_t element_type(const Match& match, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!bound(match, name)) continue;
    if (int32_t type = match.facts(name).elem_type) return type;
  }
  return 0;
}

std::string check_element_type(int32_t type, const std::set<int32_t>& allowed, std::string_view kernel) {
  if (type == 0) return "the element type is unknown";
  if (allowed.count(type)) return {};
  std::vector<std::string> names;
  for (int32_t t : allowed) names.push_back(data_type_name(t));
  return fmt::format("the element type is {}; ORT's {} kernel takes {}", data_type_name(type), kernel, fmt::join(names, ", "));
}

std::optional<double> scalar_constant(const Match& match, const std::string& name) {
  if (!bound(match, name)) return std::nullopt;
  auto values = match.constant(name);
  if (!values || values->numbers.size() != 1) return std::nullopt;
  return values->numbers.front();
}

bool used_outside(const Match& match, const std::string& value) {
  if (match.scope->is_output(value)) return true;
  for (const auto& use : match.scope->uses(value)) {
    if (std::find(match.nodes.begin(), match.nodes.end(), use.node) == match.nodes.end()) return true;
  }
  return false;
}

const onnx::NodeProto* matched_node(const Match& match, std::string_view op_type) {
  for (const auto* node : match.nodes) {
    if (node->op_type() == op_type) return node;
  }
  return nullptr;
}

const onnx::AttributeProto* find_attribute(const onnx::NodeProto& node, std::string_view name) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) return &attribute;
  }
  return nullptr;
}

int64_t int_attribute(const onnx::NodeProto& node, std::string_view name, int64_t otherwise) {
  const auto* attribute = find_attribute(node, name);
  return attribute ? attribute->i() : otherwise;
}

float float_attribute(const onnx::NodeProto& node, std::string_view name, float otherwise) {
  const auto* attribute = find_attribute(node, name);
  return attribute ? attribute->f() : otherwise;
}

std::string string_attribute(const onnx::NodeProto& node, std::string_view name, std::string otherwise) {
  const auto* attribute = find_attribute(node, name);
  return attribute ? attribute->s() : otherwise;
}

std::vector<int64_t> ints_attribute(const onnx::NodeProto& node, std::string_view name, std::vector<int64_t> otherwise) {
  const auto* attribute = find_attribute(node, name);
  return attribute ? std::vector<int64_t>(attribute->ints().begin(), attribute->ints().end()) : otherwise;
}

Attributes attributes_without(const onnx::NodeProto& node, std::string_view prefix) {
  Attributes kept;
  for (const auto& attribute : node.attribute()) {
    if (!attribute.name().starts_with(prefix)) kept.push_back(attribute);
  }
  return kept;
}

const AttributeTypes& ort_attribute_types() {
  using A = onnx::AttributeProto;
  // ONNX Runtime's contrib op schemas.
  static const AttributeTypes types = {
      {"alpha", A::FLOAT}, {"beta", A::FLOAT}, {"gamma", A::FLOAT}, {"epsilon", A::FLOAT},
      {"activation", A::STRING}, {"activation_alpha", A::FLOAT}, {"activation_beta", A::FLOAT},
      {"activation_gamma", A::FLOAT}, {"activation_params", A::FLOATS}, {"transA", A::INT}, {"transB", A::INT},
      {"transBatchA", A::INT}, {"transBatchB", A::INT}, {"axis", A::INT}, {"stash_type", A::INT},
      {"is_inner_broadcast", A::INT}, {"channels", A::INT}, {"channels_last", A::INT}, {"group", A::INT},
      {"auto_pad", A::STRING}, {"kernel_shape", A::INTS}, {"strides", A::INTS}, {"pads", A::INTS},
      {"dilations", A::INTS}, {"ceil_mode", A::INT}, {"storage_order", A::INT}, {"count_include_pad", A::INT},
      {"mode", A::STRING}, {"coordinate_transformation_mode", A::STRING}, {"allowzero", A::INT}};
  return types;
}

BuildFunction with_attribute_types_checked(const AttributeTypes& types, BuildFunction builder) {
  using A = onnx::AttributeProto;
  std::map<std::string, A::AttributeType, std::less<>> expected_types(types.begin(), types.end());
  return [expected_types = std::move(expected_types), builder = std::move(builder)](const Match& match, GraphBuilder& b) -> std::string {
    for (const onnx::NodeProto* node : match.nodes) {
      for (const auto& attribute : node->attribute()) {
        auto expected = expected_types.find(attribute.name());
        if (expected == expected_types.end() || attribute.type() == expected->second) continue;
        return fmt::format("node '{}': attribute '{}' is {}, the op takes {} (an invalid node)", describe_node(*node),
                           attribute.name(), A::AttributeType_Name(attribute.type()), A::AttributeType_Name(expected->second));
      }
    }
    return builder(match, b);
  };
}

std::string describe_node(const onnx::NodeProto& node) {
  if (!node.name().empty()) return node.name();
  for (const auto& output : node.output()) {
    if (!output.empty()) return node.op_type() + " -> " + output;
  }
  return node.op_type();
}

Value reshaped(const Match& match, GraphBuilder& b, const std::string& name, const std::vector<int64_t>& shape) {
  const std::string& value = match.value(name);
  auto as_node = [&] { return b.Reshape(Value{value}, b.ints(shape)); };
  const onnx::TensorProto* header = match.scope->constant_tensor(value);
  if (!header || header->data_location() == onnx::TensorProto::EXTERNAL) return as_node();
  constexpr int64_t kMaxElements = int64_t{1} << 18;  // 1 MiB of float
  int64_t count = 1;
  for (int64_t dim : header->dims()) {
    if (dim < 0 || (dim > 0 && count > kMaxElements / dim)) return as_node();
    count *= dim;
  }
  // Reshape's 0 (copy the input's dim) is left to Reshape; so is a shape that doesn't fit.
  std::vector<int64_t> dims = shape;
  int64_t known = 1;
  std::optional<size_t> inferred;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1 && !inferred) {
      inferred = i;
    } else if (dims[i] <= 0 || dims[i] > kMaxElements || known * dims[i] > kMaxElements) {
      return as_node();
    } else {
      known *= dims[i];
    }
  }
  if (inferred) {
    if (count % known != 0) return as_node();
    dims[*inferred] = count / known;
  } else if (known != count) {
    return as_node();
  }
  onnx::TensorProto tensor = match.scope->model().tensor_with_data(*header);
  tensor.clear_name();
  tensor.clear_dims();
  constexpr size_t kCopiedForFree = 64;  // bytes
  // An initializer that is also a graph input (below IR 4 every one is) stays: a copy would be a
  // second one.
  const bool only_here = (match.scope->owns_initializer(value) && !match.scope->is_graph_input_here(value)) ||
                         match.scope->producer(value);
  if ((!only_here || used_outside(match, value)) && tensor.ByteSizeLong() > kCopiedForFree) return as_node();
  for (int64_t dim : dims) tensor.add_dims(dim);
  // A payload that doesn't fit its type and shape is the input's problem: left as it is, for the
  // runtime to report.
  if (tensor.data_type() == onnx::TensorProto::STRING || !decode_tensor(tensor)) return as_node();
  return b.constant(std::move(tensor));
}

std::optional<Activation> mlas_activation(const onnx::NodeProto& node, std::string& why) {
  Activation activation;
  const auto* kind = find_attribute(node, "activation");
  if (!kind) return activation;
  activation.name = kind->s();
  // MLAS activation kinds (onnxruntime/contrib_ops/cpu/fused_activation.cc) and how many
  // activation_params each takes.
  static const std::map<std::string, size_t> kinds = {{"Relu", 0}, {"Silu", 0}, {"Tanh", 0}, {"Sigmoid", 0},
                                                       {"LeakyRelu", 1}, {"Clip", 2}, {"HardSigmoid", 2}};
  auto it = kinds.find(activation.name);
  if (it == kinds.end()) {
    why = fmt::format("activation '{}' is not one ONNX Runtime's MLAS kernels implement", activation.name);
    return std::nullopt;
  }
  const auto* params = find_attribute(node, "activation_params");
  const size_t count = params ? static_cast<size_t>(params->floats_size()) : 0;
  if (count != it->second) {
    why = fmt::format("activation {} takes {} activation_params, the node has {}", activation.name, it->second, count);
    return std::nullopt;
  }
  if (count > 0) activation.alpha = params->floats(0);
  if (count > 1) activation.beta = params->floats(1);
  return activation;
}

std::string apply_activation(GraphBuilder& b, Value x, const Activation& activation, int32_t dtype, Value& y) {
  const std::string& name = activation.name;
  const int opset = b.opset();
  auto with = [](Attributes attributes, const char* attribute, const std::optional<float>& value) {
    if (value) attributes.push_back(attr(attribute, *value));
    return attributes;
  };
  auto need_type = [&]() -> std::string {
    return dtype ? "" : fmt::format("the element type of the input of activation {} is unknown", name);
  };
  if (name.empty()) {
    y = x;
  } else if (name == "Relu" || name == "Sigmoid" || name == "Tanh" || name == "Softplus" || name == "Softsign") {
    y = b.op(name, {x});
  } else if (name == "LeakyRelu" || name == "Elu") {
    y = b.op(name, {x}, with({}, "alpha", activation.alpha));
  } else if (name == "HardSigmoid") {
    y = b.op(name, {x}, with(with({}, "alpha", activation.alpha), "beta", activation.beta));
  } else if (name == "Selu") {
    y = b.op(name, {x}, with(with({}, "alpha", activation.alpha), "gamma", activation.gamma));
  } else if (name == "Clip") {
    if (auto missing = need_type(); !missing.empty()) return missing;
    y = b.Clip(x, activation.alpha, activation.beta, dtype);
  } else if (name == "Silu") {
    y = b.Mul(x, b.Sigmoid(x));
  } else if (name == "Celu") {
    if (opset >= 12) {
      y = b.op("Celu", {x}, with({}, "alpha", activation.alpha));
    } else {  // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
      if (auto missing = need_type(); !missing.empty()) return missing;
      // Builder calls are sequenced one per statement: the order of the nodes must not depend
      // on the compiler's order of evaluating arguments.
      Value alpha = b.scalar(activation.alpha.value_or(1.f), dtype);
      Value zero = b.scalar(0, dtype);
      Value exp = b.op("Exp", {b.Div(x, alpha)});
      Value expm1 = b.Sub(exp, b.scalar(1, dtype));
      Value positive = b.op("Max", {x, zero});
      Value negative = b.op("Min", {b.Mul(alpha, expm1), zero});
      y = b.Add(positive, negative);
    }
  } else if (name == "ThresholdedRelu") {
    if (opset >= 10) {
      y = b.op(name, {x}, with({}, "alpha", activation.alpha));
    } else {
      if (auto missing = need_type(); !missing.empty()) return missing;
      if (opset < 9) return "ThresholdedRelu needs ai.onnx >= 9 (Where) to be spelled out";
      Value alpha = b.scalar(activation.alpha.value_or(1.f), dtype);
      Value above = b.op("Greater", {x, alpha});
      y = b.Where(above, x, b.scalar(0, dtype));
    }
  } else if (name == "ScaledTanh" || name == "ParametricSoftplus") {
    if (!activation.alpha || !activation.beta) return name + " needs both alpha and beta";
    if (auto missing = need_type(); !missing.empty()) return missing;
    Value scaled = b.Mul(x, b.scalar(*activation.beta, dtype));
    Value activated = b.op(name == "ScaledTanh" ? "Tanh" : "Softplus", {scaled});
    y = b.Mul(activated, b.scalar(*activation.alpha, dtype));
  } else {
    return fmt::format("unknown activation '{}'", name);
  }
  return {};
}

}  // namespace onnx_rewrite

// ---- Rotary position embedding (rules/defuse-rotary, rules/defuse-gqa) --------------------

namespace onnx_rewrite {

Value rotary_embedding(GraphBuilder& b, Value x, Value cos, Value sin, int64_t head_size, int64_t rotary_dim,
                       bool interleaved) {
  // One builder call per statement: the order of the nodes must not depend on the compiler's
  // order of evaluating arguments.
  const int64_t half = rotary_dim / 2;
  const bool partial = head_size <= 0 || rotary_dim < head_size;  // unknown head size: slice the rest, maybe empty
  auto rotate = [&](Value a, Value c) {  // (a·cos - c·sin, c·cos + a·sin)
    const Value a_cos = b.Mul(a, cos);
    const Value c_sin = b.Mul(c, sin);
    const Value first = b.Sub(a_cos, c_sin);
    const Value c_cos = b.Mul(c, cos);
    const Value a_sin = b.Mul(a, sin);
    const Value second = b.Add(c_cos, a_sin);
    return std::pair{first, second};
  };
  Value y;
  if (interleaved) {
    const Value even = b.Slice(x, {0}, {rotary_dim}, {-1}, {2});
    const Value odd = b.Slice(x, {1}, {rotary_dim}, {-1}, {2});
    const auto [even_out, odd_out] = rotate(even, odd);
    const Value even_pair = b.Unsqueeze(even_out, {-1});
    const Value odd_pair = b.Unsqueeze(odd_out, {-1});
    const Value pairs = b.Concat({even_pair, odd_pair}, -1);
    const Value rotated = partial ? b.Slice(x, {0}, {rotary_dim}, {-1}) : x;
    y = b.Reshape(pairs, b.Shape(rotated));
  } else {
    const Value first = b.Slice(x, {0}, {half}, {-1});
    const Value second = b.Slice(x, {half}, {rotary_dim}, {-1});
    const auto [first_out, second_out] = rotate(first, second);
    y = b.Concat({first_out, second_out}, -1);
  }
  if (partial) {
    const Value rest = b.Slice(x, {rotary_dim}, {head_size > 0 ? head_size : std::numeric_limits<int64_t>::max()}, {-1});
    y = b.Concat({y, rest}, -1);
  }
  return y;
}

}  // namespace onnx_rewrite
