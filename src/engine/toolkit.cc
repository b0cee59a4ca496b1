#include "onnx_rewrite/toolkit.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {

std::optional<std::string> check_element_type(int32_t type, const std::set<int32_t>& allowed, std::string_view kernel) {
  if (type == 0) return "the element type is unknown";
  if (allowed.count(type)) return std::nullopt;
  std::vector<std::string> names;
  for (int32_t t : allowed) names.push_back(data_type_name(t));
  return fmt::format("the element type is {}; ORT's {} kernel takes {}", data_type_name(type), kernel, fmt::join(names, ", "));
}

const AttributeTypes& ort_attribute_types() {
  using A = onnx::AttributeProto;
  // ONNX Runtime's contrib op schemas.
  static const AttributeTypes types = {{"alpha", A::FLOAT},
                                       {"beta", A::FLOAT},
                                       {"gamma", A::FLOAT},
                                       {"epsilon", A::FLOAT},
                                       {"activation", A::STRING},
                                       {"activation_alpha", A::FLOAT},
                                       {"activation_beta", A::FLOAT},
                                       {"activation_gamma", A::FLOAT},
                                       {"activation_params", A::FLOATS},
                                       {"transA", A::INT},
                                       {"transB", A::INT},
                                       {"transBatchA", A::INT},
                                       {"transBatchB", A::INT},
                                       {"axis", A::INT},
                                       {"stash_type", A::INT},
                                       {"is_inner_broadcast", A::INT},
                                       {"channels", A::INT},
                                       {"channels_last", A::INT},
                                       {"group", A::INT},
                                       {"auto_pad", A::STRING},
                                       {"kernel_shape", A::INTS},
                                       {"strides", A::INTS},
                                       {"pads", A::INTS},
                                       {"dilations", A::INTS},
                                       {"ceil_mode", A::INT},
                                       {"storage_order", A::INT},
                                       {"count_include_pad", A::INT},
                                       {"mode", A::STRING},
                                       {"coordinate_transformation_mode", A::STRING},
                                       {"allowzero", A::INT}};
  return types;
}

BuildFunction with_attribute_types_checked(const AttributeTypes& types, BuildFunction builder) {
  using A = onnx::AttributeProto;
  std::map<std::string, A::AttributeType, std::less<>> expected_types(types.begin(), types.end());
  return [expected_types = std::move(expected_types), builder = std::move(builder)](const BuildContext& match,
                                                                                    GraphBuilder& b) -> BuildResult {
    for (const NodeView& node : match.nodes()) {
      for (const auto& attribute : node.attributes_except()) {
        auto expected = expected_types.find(attribute.name());
        if (expected == expected_types.end() || attribute.type() == expected->second) continue;
        return decline(fmt::format("node '{}': attribute '{}' is {}, the op takes {} (an invalid node)", node.description(),
                                   attribute.name(), A::AttributeType_Name(attribute.type()), A::AttributeType_Name(expected->second)));
      }
    }
    return builder(match, b);
  };
}

std::optional<Activation> mlas_activation(const NodeView& node, std::string& why) {
  Activation activation;
  const auto* kind = node.attribute("activation");
  if (!kind) return activation;
  activation.name = kind->s();
  // MLAS activation kinds (onnxruntime/contrib_ops/cpu/fused_activation.cc) and how many
  // activation_params each takes.
  static const std::map<std::string, size_t> kinds = {{"Relu", 0},      {"Silu", 0}, {"Tanh", 0},       {"Sigmoid", 0},
                                                      {"LeakyRelu", 1}, {"Clip", 2}, {"HardSigmoid", 2}};
  auto it = kinds.find(activation.name);
  if (it == kinds.end()) {
    why = fmt::format("activation '{}' is not one ONNX Runtime's MLAS kernels implement", activation.name);
    return std::nullopt;
  }
  const auto* params = node.attribute("activation_params");
  const size_t count = params ? static_cast<size_t>(params->floats_size()) : 0;
  if (count != it->second) {
    why = fmt::format("activation {} takes {} activation_params, the node has {}", activation.name, it->second, count);
    return std::nullopt;
  }
  if (count > 0) activation.alpha = params->floats(0);
  if (count > 1) activation.beta = params->floats(1);
  return activation;
}

std::optional<std::string> apply_activation(GraphBuilder& b, Value x, const Activation& activation, int32_t dtype, Value& y) {
  const std::string& name = activation.name;
  const int opset = b.opset();
  auto with = [](Attributes attributes, const char* attribute, const std::optional<float>& value) {
    if (value) attributes.push_back(attr(attribute, *value));
    return attributes;
  };
  auto need_type = [&]() -> std::optional<std::string> {
    if (dtype) return std::nullopt;
    return fmt::format("the element type of the input of activation {} is unknown", name);
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
    if (auto missing = need_type()) return missing;
    y = b.Clip(x, activation.alpha, activation.beta, dtype);
  } else if (name == "Silu") {
    y = b.Mul(x, b.Sigmoid(x));
  } else if (name == "Celu") {
    if (opset >= 12) {
      y = b.op("Celu", {x}, with({}, "alpha", activation.alpha));
    } else {  // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
      if (auto missing = need_type()) return missing;
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
      if (auto missing = need_type()) return missing;
      if (opset < 9) return "ThresholdedRelu needs ai.onnx >= 9 (Where) to be spelled out";
      Value alpha = b.scalar(activation.alpha.value_or(1.f), dtype);
      Value above = b.op("Greater", {x, alpha});
      y = b.Where(above, x, b.scalar(0, dtype));
    }
  } else if (name == "ScaledTanh" || name == "ParametricSoftplus") {
    if (!activation.alpha || !activation.beta) return name + " needs both alpha and beta";
    if (auto missing = need_type()) return missing;
    Value scaled = b.Mul(x, b.scalar(*activation.beta, dtype));
    Value activated = b.op(name == "ScaledTanh" ? "Tanh" : "Softplus", {scaled});
    y = b.Mul(activated, b.scalar(*activation.alpha, dtype));
  } else {
    return fmt::format("unknown activation '{}'", name);
  }
  return std::nullopt;
}

BodyGraph::BodyGraph(const Value& anchor, std::string_view graph_name) : prefix_(anchor.name) {
  for (char& c : prefix_) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  graph_.set_name(name(graph_name));
}

std::string BodyGraph::name(std::string_view local) const { return prefix_ + "_" + std::string(local); }

void BodyGraph::declare(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* infos, std::string_view local, int32_t element,
                        bool scalar) {
  auto* info = infos->Add();
  info->set_name(name(local));
  auto* tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(element);
  if (scalar) tensor->mutable_shape();
}

void BodyGraph::node(std::string_view op_type, const std::vector<std::string_view>& inputs, std::string_view output) {
  auto* node = graph_.add_node();
  node->set_op_type(std::string(op_type));
  node->set_name(name(output));
  for (auto input : inputs) node->add_input(name(input));
  node->add_output(name(output));
}

namespace {

// Range (start, limit, delta) of `type` as its ONNX function body: a Loop
// of ceil((limit - start) / delta) iterations (none when negative) that emits each value before
// adding delta. delta is a loop-carried value, so the body reads nothing from outside. The count
// is computed in double: exact for every count below 2^53.
Value range_as_loop(GraphBuilder& b, const Value& start, const Value& limit, const Value& delta, int32_t type) {
  const Value span = b.Cast(b.Sub(limit, start), onnx::TensorProto::DOUBLE);
  const Value steps = b.Relu(b.op("Ceil", {b.Div(span, b.Cast(delta, onnx::TensorProto::DOUBLE))}));
  const Value trip_count = b.Cast(steps, onnx::TensorProto::INT64);
  const Value keep_going = b.Cast(steps, onnx::TensorProto::BOOL);
  BodyGraph body(trip_count, "range_body");
  body.input("i", onnx::TensorProto::INT64);
  body.input("cond_in", onnx::TensorProto::BOOL);
  body.input("previous", type);
  body.input("step", type);
  body.node("Identity", {"cond_in"}, "cond_out");
  body.node("Add", {"previous", "step"}, "current");
  body.node("Identity", {"step"}, "step_out");
  body.node("Identity", {"previous"}, "value");
  body.output("cond_out", onnx::TensorProto::BOOL);
  body.output("current", type);
  body.output("step_out", type);
  body.output("value", type);
  return b.op_outputs("Loop", {trip_count, keep_going, start, delta}, 3, {attr("body", body.graph())})[2];
}

}  // namespace

std::optional<Value> gather_elements(GraphBuilder& b, Value data, Value indices, int32_t index_type, int64_t axis,
                                     const std::optional<std::vector<int64_t>>& data_dims,
                                     const std::optional<std::vector<int64_t>>& index_dims) {
  if (b.opset() >= 11) return b.op("GatherElements", {data, indices}, {attr("axis", axis)});
  constexpr int64_t kMaxPositions = int64_t{1} << 22;  // the positions are a constant of the indices' shape
  if (!data_dims || !index_dims || data_dims->size() != index_dims->size()) return std::nullopt;
  const auto rank = static_cast<int64_t>(data_dims->size());
  if (axis < 0 || axis >= rank) return std::nullopt;
  int64_t count = 1;
  for (size_t k = 0; k < index_dims->size(); ++k) {
    if ((*index_dims)[k] < 0 || (*data_dims)[k] < 0) return std::nullopt;
    count *= (*index_dims)[k];
    if (count > kMaxPositions) return std::nullopt;
  }
  std::vector<int64_t> strides(static_cast<size_t>(rank), 1);
  for (int64_t k = rank - 2; k >= 0; --k)
    strides[static_cast<size_t>(k)] = strides[static_cast<size_t>(k + 1)] * (*data_dims)[static_cast<size_t>(k + 1)];
  // Where each position of the indices starts in the flat data, every axis but `axis` counted.
  std::vector<int64_t> base(static_cast<size_t>(count), 0);
  for (int64_t flat = 0; flat < count; ++flat) {
    int64_t rest = flat, offset = 0;
    for (int64_t k = rank - 1; k >= 0; --k) {
      const int64_t position = rest % (*index_dims)[static_cast<size_t>(k)];
      rest /= (*index_dims)[static_cast<size_t>(k)];
      if (k != axis) offset += position * strides[static_cast<size_t>(k)];
    }
    base[static_cast<size_t>(flat)] = offset;
  }
  const Value wide = index_type == onnx::TensorProto::INT64 ? indices : b.Cast(indices, onnx::TensorProto::INT64);
  const Value negative = b.op("Less", {wide, b.scalar(0, onnx::TensorProto::INT64)});
  const Value from_end = b.Add(wide, b.scalar(static_cast<double>((*data_dims)[static_cast<size_t>(axis)]), onnx::TensorProto::INT64));
  const Value counted = b.Where(negative, from_end, wide);
  const Value along = b.Mul(counted, b.scalar(static_cast<double>(strides[static_cast<size_t>(axis)]), onnx::TensorProto::INT64));
  const Value positions = b.Add(b.constant(make_int64_tensor(*index_dims, base)), along);
  const Value flat_data = b.Reshape(data, b.ints({-1}));
  return b.Gather(flat_data, positions, 0);
}

Value range_values(GraphBuilder& b, const Value& start, const Value& limit, const Value& delta, int32_t type) {
  if (b.opset() >= 11) return b.op("Range", {start, limit, delta});
  return range_as_loop(b, start, limit, delta, type);
}

}  // namespace onnx_rewrite

// ---- Rotary position embedding (rules/defuse-rotary, rules/defuse-gqa) --------------------

namespace onnx_rewrite {

Value rotary_embedding(GraphBuilder& b, Value x, Value cos, Value sin, int64_t head_size, int64_t rotary_dim, bool interleaved) {
  const int64_t half = rotary_dim / 2;
  const bool partial = head_size <= 0 || rotary_dim < head_size;  // unknown head size: slice the rest, maybe empty
  auto rotate = [&](Value a, Value c) {                           // (a·cos - c·sin, c·cos + a·sin)
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
