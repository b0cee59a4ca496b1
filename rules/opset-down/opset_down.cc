// Adapters that lower a node written for a newer ai.onnx opset to an older one under --opset N
// (rules/opset-down/*.rules). Each builds at the opset the engine plans (N, or the model's own
// import if that is lower), so one builder serves every target below the step.
//
// - inputs_as_attributes: an op whose attribute became a constant input (Reduce* axes, Squeeze /
//   Unsqueeze axes, Split split, Pad pads/value, Clip min/max, Slice starts/ends/axes, TopK k)
//   rebuilt with the attribute; the node's other attributes and outputs stay. Below 11, axes
//   count from the front.
// - axes_from_the_front: axes (and Gather's indices) counting from the back, as opset 11 lets
//   them, counted from the front for runtimes below 11.
// - last_axis_softmax: Softmax/LogSoftmax/Hardmax-13 normalize over one axis, the older ones over
//   the flattened [axis:] block; equal for the last axis, else the axis is transposed to the end.
// - split_num_outputs: Split-18's num_outputs (the last part may be smaller) as explicit sizes.
// - split_runtime_sizes: Split-13 sizes known only at run time, as Slices between running sums.
// - reduce_runtime_axes: reductions over axes known only at run time, axis by axis.
// - shape_slice, cast_like_as_cast, constant_value_tensor, resize_with_empty_inputs,
//   grid_sample_16_modes, arg_last_index, dropout_inference: newer spellings in older ones.
// - center_crop_pad: CenterCropPad-18 as Pad and Slice with centred offsets.
// - range_as_loop: Range-11 as the Loop of its function body (Trilu's masks below 11 too).
// - float_equal_spelled_out: Equal of floats below 11 from Less, Greater and IsNaN.
// - integer_max_min: Max/Min-12 of two integers as Where over Greater/Less (narrow ones in int64).
// - cumulative_as_scan: CumSum-11 / CumProd-26 as a Scan carrying the running sum or product.
// - bitwise_as_bits: Bitwise And/Or/Xor/Not-18 of integers up to 32 bits, bit by bit in int64.
// - gather_elements_flat: GatherElements-11 as one Gather from the flattened data (toolkit).
// - scatter_elements_as_scatter: ScatterElements-11 as Scatter-9, indices made non-negative.
// - is_inf_widened: IsInf-20 of float16 as IsInf of float.
// - slice_as_gather: Slice-10 with run-time bounds at 9 as Gathers of Range (its Loop).
// - clip_as_max_min: Clip-11 with bounds known at run time as Max and Min.
// - integer_mod_spelled_out: Mod-10 of integers as the truncated remainder, signed as fmod asks.
// - cosine_window: Hann/Hamming/Blackman windows as Range and Cos.
// - widened_integer_arithmetic: Add/Sub/Mul/Div of 8- and 16-bit integers computed in int64.
// - pad_axes_as_full_pads: Pad-18's axes input spread into pads over every axis.
// - attribute_at_default_dropped: an attribute a newer version added, written at its default.
// - operands_of_one_type: Pow-12 / BatchNormalization-15 nodes valid in the older schema, as they are.
// - trilu_as_mask, gelu_spelled_out, celu_as_elu, swish_as_sigmoid: newer ops in older ones,
//   constants of x's type.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <set>
#include <variant>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

// What one input became at the older opset: an ints, int or float attribute.
enum class As { kInts, kInt, kFloat };
struct Moved {
  const char* value;      // the rule's pattern value
  const char* attribute;  // the older attribute
  As as;
};

std::vector<Moved> moved_inputs(const std::string& op) {
  if (op.starts_with("Reduce") || op == "Squeeze" || op == "Unsqueeze") return {{"axes", "axes", As::kInts}};
  if (op == "Split") return {{"split", "split", As::kInts}};
  if (op == "Pad") return {{"pads", "pads", As::kInts}, {"value", "value", As::kFloat}};
  if (op == "Clip") return {{"min", "min", As::kFloat}, {"max", "max", As::kFloat}};
  if (op == "Slice") return {{"starts", "starts", As::kInts}, {"ends", "ends", As::kInts}, {"axes", "axes", As::kInts}};
  if (op == "TopK") return {{"k", "k", As::kInt}};
  return {};
}

// The attribute holding an op's axis (or axes), which counts from the back only from opset 11.
std::optional<std::string_view> axis_attribute(const std::string& op) {
  if (op == "Squeeze" || op == "Unsqueeze" || op == "Slice" || op.starts_with("Reduce")) return "axes";
  if (op == "Flatten" || op == "Concat" || op == "ArgMax" || op == "ArgMin" || op == "Softmax" || op == "LogSoftmax" ||
      op == "Hardmax" || op == "Split" || op == "Compress" || op == "Gather" || op == "TopK") {
    return "axis";
  }
  return std::nullopt;
}

// Below opset 11 an axis counts from the front only: the op's axis attribute with each negative
// entry as the same axis counted from the front, in `rank` dims (Flatten's axis may equal the
// rank). Whether anything moved; the reason when an axis is negative and the rank unknown.
std::variant<bool, std::string> count_axes_from_the_front(Attributes& attributes, const std::string& op, std::optional<int64_t> rank) {
  const auto name = axis_attribute(op);
  if (!name) return false;
  bool moved = false;
  std::optional<std::string> problem;
  auto shift = [&](int64_t axis) {
    if (axis >= 0 || problem) return axis;
    if (!rank) {
      problem = "an axis counted from the back, in a rank that is unknown";
    } else if (axis + *rank < 0) {
      problem = fmt::format("axis {} lies outside rank {}", axis, *rank);
    } else {
      moved = true;
      return axis + *rank;
    }
    return axis;
  };
  for (auto& attribute : attributes) {
    if (attribute.name() != *name) continue;
    if (attribute.type() == onnx::AttributeProto::INT) attribute.set_i(shift(attribute.i()));
    for (int i = 0; i < attribute.ints_size(); ++i) attribute.set_ints(i, shift(attribute.ints(i)));
  }
  if (problem) return *problem;
  return moved;
}

// The rank the node's axes count in: Unsqueeze's name places in its output, the others' in the
// first input.
std::optional<int64_t> counting_rank(const BuildContext& match, const NodeView& node, std::string_view data, size_t axes_count) {
  const auto rank = match.facts(data).rank();
  if (!rank) return std::nullopt;
  return static_cast<int64_t>(*rank) + (node.op_type() == "Unsqueeze" ? static_cast<int64_t>(axes_count) : 0);
}

// Indices of Gather-11 that may count from the back, as Gather before 11 takes them: i + size
// where i < 0 (Where and Less of integers need opset 9).
std::variant<Value, std::string> indices_from_the_front(const BuildContext& match, GraphBuilder& b, int64_t axis) {
  const Value indices = match.value("indices");
  if (auto values = match.constant("indices")) {
    const auto ints = values->ints();
    if (std::all_of(ints.begin(), ints.end(), [](int64_t i) { return i >= 0; })) return indices;
  }
  if (b.opset() < 9) return std::string("indices that may count from the back, and Where needs opset 9");
  const int32_t type = match.element_type({"indices"});
  if (type != onnx::TensorProto::INT64 && type != onnx::TensorProto::INT32) return std::string("the indices' type is unknown");
  Value size;
  if (const int64_t dim = match.facts("data").dim(static_cast<size_t>(axis)); dim >= 0) {
    size = b.scalar(static_cast<double>(dim), type);
  } else {
    const Value shape = b.Shape(match.value("data"));
    size = b.Gather(shape, b.scalar(static_cast<double>(axis), onnx::TensorProto::INT64));
    if (type != onnx::TensorProto::INT64) size = b.Cast(size, type);
  }
  const Value negative = b.op("Less", {indices, b.scalar(0, type)});
  const Value shifted = b.Add(indices, size);
  return b.Where(negative, shifted, indices);
}

// A node of opset 11 or later whose axes (or Gather's indices) count from the back, as the same
// node counting from the front (runtimes below 11).
BuildResult axes_from_the_front(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  const std::string& op = node.op_type();
  Attributes attributes = node.attributes_except();
  // What these ops took before 11; anything else came later (ArgMax-12's select_last_index).
  for (const auto& attribute : attributes) {
    const std::string& name = attribute.name();
    if (name != "axis" && name != "axes" && name != "keepdims" && name != "split") {
      return decline(fmt::format("attribute {} is newer than opset 11", name));
    }
  }
  const auto rank = counting_rank(match, node, "data", node.attribute_ints("axes").size());
  const auto moved = count_axes_from_the_front(attributes, op, rank);
  if (const auto* why = std::get_if<std::string>(&moved)) return decline(*why);
  std::vector<Value> inputs = node.inputs();
  bool indices_moved = false;
  if (op == "Slice") {  // Slice-10 takes its axes as an input (below 10: slice-inputs-10-lowering)
    const auto axes = match.has("axes") ? match.constant("axes") : std::nullopt;
    if (!axes) return decline("the axes are not a constant");
    std::vector<int64_t> from_front = axes->ints();
    if (std::none_of(from_front.begin(), from_front.end(), [](int64_t axis) { return axis < 0; })) {
      return decline("nothing counts from the back: the node means the same below opset 11");
    }
    const auto rank = match.facts("data").rank();
    if (!rank) return decline("an axis counted from the back, in a rank that is unknown");
    for (int64_t& axis : from_front) {
      if (axis < 0) axis += static_cast<int64_t>(*rank);
      if (axis < 0) return decline(fmt::format("an axis lies outside rank {}", *rank));
    }
    inputs[3] = b.ints(from_front);
    indices_moved = true;
  }
  if (op == "Gather") {
    int64_t axis = 0;
    for (const auto& attribute : attributes) {
      if (attribute.name() == "axis") axis = attribute.i();
    }
    auto indices = indices_from_the_front(match, b, axis);
    if (const auto* why = std::get_if<std::string>(&indices)) return decline(*why);
    indices_moved = std::get<Value>(indices).name != inputs[1].name;
    inputs[1] = std::get<Value>(indices);
  }
  if (!std::get<bool>(moved) && !indices_moved) return decline("nothing counts from the back: the node means the same below opset 11");
  const std::vector<Value> node_outputs = node.outputs();
  const auto outputs = b.op_outputs(op, inputs, node_outputs.size(), attributes);
  for (size_t i = 0; i < node_outputs.size(); ++i) {
    if (!node_outputs[i].absent()) b.output(node_outputs[i], outputs[i]);
  }
  return built();
}

BuildResult inputs_as_attributes(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  const std::string& op = node.op_type();
  // Attributes the newer version added, which the older one does not have.
  Attributes attributes = node.attributes_except({"noop_with_empty_axes"});
  std::erase_if(attributes, [](const onnx::AttributeProto& a) { return a.name() == "num_outputs"; });
  const auto moved_list = moved_inputs(op);
  if (std::none_of(moved_list.begin(), moved_list.end(), [&](const Moved& m) { return match.has(m.value); })) {
    return decline("no input to move: the node means the same at the older opset");
  }
  for (const Moved& moved : moved_list) {
    if (!match.has(moved.value)) continue;
    auto values = match.constant(moved.value);
    if (!values) return decline(fmt::format("{} is not a constant", moved.value));
    if (moved.as == As::kInts) {
      attributes.push_back(attr(moved.attribute, values->ints()));
    } else if (values->numbers.size() != 1) {
      return decline(fmt::format("{} has {} elements, not one", moved.value, values->numbers.size()));
    } else if (moved.as == As::kInt) {
      attributes.push_back(attr(moved.attribute, static_cast<int64_t>(values->numbers[0])));
    } else {
      attributes.push_back(attr(moved.attribute, values->numbers[0]));
    }
  }
  if (op == "Slice" && match.has("steps")) {
    auto steps = match.constant("steps");
    if (!steps) return decline("steps is not a constant");
    for (int64_t step : steps->ints()) {
      if (step != 1) return decline(fmt::format("a step of {}, which Slice below opset 10 can't take", step));
    }
  }
  if (op.starts_with("Reduce")) {
    // Empty axes: every axis (the older default), or nothing at all with noop_with_empty_axes.
    const bool empty = std::any_of(attributes.begin(), attributes.end(),
                                   [](const auto& a) { return a.name() == "axes" && a.ints_size() == 0; });
    if (empty) {
      if (node.attribute_int("noop_with_empty_axes", 0) != 0) {
        b.output(node.output(0), b.Identity(match.value("data")));
        return built();
      }
      std::erase_if(attributes, [](const onnx::AttributeProto& a) { return a.name() == "axes"; });
    }
  }
  if (b.opset() < 11) {
    size_t axes_count = 0;
    for (const auto& attribute : attributes) {
      if (attribute.name() == "axes") axes_count = static_cast<size_t>(attribute.ints_size());
    }
    const auto moved = count_axes_from_the_front(attributes, op, counting_rank(match, node, "data", axes_count));
    if (const auto* why = std::get_if<std::string>(&moved)) return decline(*why);
  }
  const std::vector<Value> node_outputs = node.outputs();
  const auto outputs = b.op_outputs(op, {match.value("data")}, node_outputs.size(), attributes);
  for (size_t i = 0; i < node_outputs.size(); ++i) {
    if (!node_outputs[i].absent()) b.output(node_outputs[i], outputs[i]);
  }
  return built();
}

// The first element along each axis whose flag is set (the others whole): one Slice with run-time
// ends from opset 10; below, a Compress per axis keeping the first element or all of them.
Value first_of_reduced_axes(GraphBuilder& b, Value x, const std::vector<Value>& reduced, const std::vector<int64_t>& dims) {
  const auto rank = static_cast<int64_t>(dims.size());
  if (b.opset() < 10) {
    for (int64_t i = 0; i < rank; ++i) {
      std::vector<double> first_only(static_cast<size_t>(dims[static_cast<size_t>(i)]), 0.0);
      first_only.front() = 1.0;
      const Value keep_first = b.constant(make_tensor(onnx::TensorProto::BOOL, {dims[static_cast<size_t>(i)]}, first_only));
      // Where of bools has no ONNX Runtime kernel before 16: not reduced, or the first element.
      const Value kept = b.op("Or", {b.op("Not", {reduced[static_cast<size_t>(i)]}), keep_first});
      x = b.op("Compress", {x, kept}, {attr("axis", i)});
    }
    return x;
  }
  std::vector<Value> ends;
  for (const Value& flag : reduced) {
    const Value one = b.ints({1});
    ends.push_back(b.Where(flag, one, b.ints({std::numeric_limits<int64_t>::max()})));
  }
  std::vector<int64_t> all_axes(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) all_axes[static_cast<size_t>(i)] = i;
  return b.op("Slice", {x, b.ints(std::vector<int64_t>(all_axes.size(), 0)), b.Concat(ends, 0), b.ints(all_axes)});
}

// A reduction over axes computed at run time, for opsets whose reductions take them only as an
// attribute: one axis after another, each reduced and broadcast back where the axis is among
// the given ones (Where), so the tensor keeps its shape; then the first element of each reduced
// axis (first_of_reduced_axes), and for keepdims = 0 the kept dims (Compress of the shape).
// The rank must be known; a static size 0 declines (the broadcast back would stay empty).
BuildResult reduce_runtime_axes(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  const std::string& op = node.op_type();
  if (match.constant("axes")) return decline("constant axes: the attribute form");
  const auto dims = match.facts("data").static_dims();
  if (!dims) return decline("the input's rank is unknown");
  if (std::find(dims->begin(), dims->end(), 0) != dims->end()) return decline("the input has a dimension of size 0");
  const auto rank = static_cast<int64_t>(dims->size());
  const Value data = match.value("data");
  const Value axes = match.value("axes");
  // Which axes are reduced: given (negative ones counted from the end), or every one when none is
  // given, unless noop_with_empty_axes.
  const Value negative = b.op("Less", {axes, b.ints({0})});
  const Value shifted = b.Add(axes, b.ints({rank}));
  const Value normalized = b.Where(negative, shifted, axes);
  const Value size = b.op("Size", {axes});
  const Value none_given = b.op("Equal", {size, b.scalar(0, onnx::TensorProto::INT64)});
  std::vector<Value> reduced;
  for (int64_t i = 0; i < rank; ++i) {
    const Value hits = b.Cast(b.op("Equal", {normalized, b.ints({i})}), onnx::TensorProto::INT64);
    const Value count = b.Reduce("ReduceSum", hits, {}, false);
    Value flag = b.op("Greater", {count, b.scalar(0, onnx::TensorProto::INT64)});
    if (node.attribute_int("noop_with_empty_axes", 0) == 0) flag = b.op("Or", {flag, none_given});
    reduced.push_back(flag);
  }
  auto chained = [&](const char* reduction, Value x) {
    for (int64_t i = 0; i < rank; ++i) {
      const Value along = b.Reduce(reduction, x, {i});
      x = b.Where(reduced[static_cast<size_t>(i)], along, x);
    }
    return x;
  };
  Value result;
  if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd") {
    result = chained(op.c_str(), data);
  } else if (op == "ReduceSumSquare") {
    result = chained("ReduceSum", b.Mul(data, data));
  } else if (op == "ReduceL1") {
    result = chained("ReduceSum", b.op("Abs", {data}));
  } else if (op == "ReduceL2") {
    result = b.Sqrt(chained("ReduceSum", b.Mul(data, data)));
  } else if (op == "ReduceLogSum") {
    result = b.op("Log", {chained("ReduceSum", data)});
  } else if (op == "ReduceLogSumExp") {  // max subtracted first, as the kernels do
    const Value top = chained("ReduceMax", data);
    const Value sum = chained("ReduceSum", b.op("Exp", {b.Sub(data, top)}));
    result = b.Add(b.op("Log", {sum}), top);
  } else {
    return decline(fmt::format("{} has no decomposition here", op));
  }
  result = first_of_reduced_axes(b, result, reduced, *dims);
  if (node.attribute_int("keepdims", 1) == 0) {
    std::vector<Value> flags;
    for (const Value& flag : reduced) flags.push_back(b.Unsqueeze(flag, {0}));
    const Value shape = b.Shape(result);
    const Value kept = b.op("Compress", {shape, b.op("Not", {b.Concat(flags, 0)})}, {attr("axis", int64_t{0})});
    result = b.Reshape(result, kept);
  }
  b.output(node.output(0), result);
  return built();
}

// The node's outputs as parts of `data` along `axis` whose sizes (1-D int64) are known only at
// run time: Split-13 takes them as an input; below, one Slice per part between the running sums
// (CumSum's from 11; below, one Add per part, as the parts are few).
void split_at_run_time(const NodeView& node, GraphBuilder& b, Value data, int64_t axis, Value sizes) {
  const std::vector<Value> node_outputs = node.outputs();
  if (b.opset() >= 13) {
    const auto outputs = b.op_outputs("Split", {data, sizes}, node_outputs.size(), {attr("axis", axis)});
    for (size_t i = 0; i < node_outputs.size(); ++i) {
      if (!node_outputs[i].absent()) b.output(node_outputs[i], outputs[i]);
    }
    return;
  }
  const Value axes = b.ints({axis});
  if (b.opset() < 11) {
    Value start = b.ints({0});
    for (size_t i = 0; i < node_outputs.size(); ++i) {
      const auto at = static_cast<int64_t>(i);
      const Value end = b.Add(start, b.Slice(sizes, {at}, {at + 1}, {0}));
      if (!node_outputs[i].absent()) b.output(node_outputs[i], b.op("Slice", {data, start, end, axes}));
      start = end;
    }
    return;
  }
  const Value ends = b.op("CumSum", {sizes, b.scalar(0, onnx::TensorProto::INT64)});
  const Value starts = b.Sub(ends, sizes);
  for (size_t i = 0; i < node_outputs.size(); ++i) {
    if (node_outputs[i].absent()) continue;
    const auto at = static_cast<int64_t>(i);
    const Value start = b.Slice(starts, {at}, {at + 1}, {0});
    const Value end = b.Slice(ends, {at}, {at + 1}, {0});
    b.output(node_outputs[i], b.op("Slice", {data, start, end, axes}));
  }
}

// Split-13 whose sizes are computed at run time, below 13.
BuildResult split_runtime_sizes(const BuildContext& match, GraphBuilder& b) {
  const auto rank = match.facts("data").rank();
  int64_t axis = match.attribute_int("axis", 0);
  if (axis < 0) {
    if (!rank) return decline("a negative axis of an input of unknown rank");
    axis += static_cast<int64_t>(*rank);
  }
  split_at_run_time(match.anchor(), b, match.value("data"), axis, b.Cast(match.value("split"), onnx::TensorProto::INT64));
  return built();
}

// Split-18 <num_outputs = n> on an axis whose size d is known only at run time: n - 1 parts of
// ceil(d / n), the rest last.
BuildResult split_sizes_at_run_time(const BuildContext& match, GraphBuilder& b, int64_t axis, int64_t parts) {
  const NodeView node = match.anchor();
  const Value data = match.value("data");
  const Value shape = b.Shape(data);
  const Value size = b.Gather(shape, b.ints({axis}));
  const Value rounded_up = b.Add(size, b.ints({parts - 1}));
  const Value chunk = b.Div(rounded_up, b.ints({parts}));
  const Value rest = b.Sub(size, b.Mul(chunk, b.ints({parts - 1})));
  std::vector<Value> sizes(static_cast<size_t>(parts - 1), chunk);
  sizes.push_back(rest);
  split_at_run_time(node, b, data, axis, b.Concat(sizes, 0));
  return built();
}

// Split-18 <num_outputs = n>: parts of ceil(d / n), the last one what is left (ONNX's reference).
BuildResult split_num_outputs(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  const int64_t parts = match.attribute_int("num_outputs", 0);
  const auto rank = match.facts("data").rank();
  int64_t axis = match.attribute_int("axis", 0);
  if (axis < 0 && !rank) return decline("the input's rank is unknown, and the axis counts from the back");
  if (axis < 0) axis += static_cast<int64_t>(*rank);
  const int64_t size = rank ? match.facts("data").dim(static_cast<size_t>(axis)) : -1;
  if (parts != static_cast<int64_t>(node.outputs().size())) {
    return decline(fmt::format("num_outputs is {}, the node has {} outputs", parts, node.outputs().size()));
  }
  if (size < 0 && b.opset() < 10) return decline("the axis's size is known only at run time, and slicing by it needs Slice-10");
  if (size < 0) return split_sizes_at_run_time(match, b, axis, parts);
  // As ONNX's reference: parts of ceil(size / n), the last one what is left (maybe 0).
  const int64_t chunk = (size + parts - 1) / parts;
  std::vector<int64_t> sizes(static_cast<size_t>(parts - 1), chunk);
  sizes.push_back(size - chunk * (parts - 1));
  if (sizes.back() < 0) return decline(fmt::format("{} elements don't make {} parts", size, parts));
  const auto outputs = b.Split(match.value("data"), axis, sizes);
  const std::vector<Value> node_outputs = node.outputs();
  for (size_t i = 0; i < node_outputs.size(); ++i) {
    if (!node_outputs[i].absent()) b.output(node_outputs[i], outputs[i]);
  }
  return built();
}

BuildResult last_axis_softmax(const BuildContext& match, GraphBuilder& b) {
  const std::string& op = match.anchor().op_type();
  const int64_t axis = match.attribute_int("axis", -1);
  // Written -1 means the same before 13; absent means 1 there, so -1 is written out.
  if (match.anchor().attribute("axis") && axis == -1) return decline("the last axis: the node means the same at the older opset");
  const Value x{match.value("x")};
  const auto rank = match.facts("x").rank();
  // Below 11 an axis counts from the front only, so the last one needs the rank.
  if (!rank && b.opset() < 11) return decline("the input's rank is unknown, and below opset 11 the last axis is written as rank - 1");
  const int64_t last = rank ? static_cast<int64_t>(*rank) - 1 : -1;
  const int64_t last_as_written = b.opset() < 11 ? last : -1;
  const int64_t normalized = axis < 0 && rank ? axis + last + 1 : axis;
  if (axis == -1 || (rank && normalized == last)) {
    b.output(match.value("y"), b.op(op, {x}, {attr("axis", last_as_written)}));
    return built();
  }
  if (!rank) return decline("the input's rank is unknown");
  if (normalized < 0 || normalized > last) return decline(fmt::format("axis {} is out of range for rank {}", axis, *rank));
  std::vector<int64_t> perm(*rank);
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[static_cast<size_t>(normalized)], perm.back());  // its own inverse
  const Value moved = b.op(op, {b.Transpose(x, perm)}, {attr("axis", last_as_written)});
  b.output(match.value("y"), b.Transpose(moved, perm));
  return built();
}

// Shape-15 <start, end> as Shape + Slice of the shape vector (negative starts and ends count
// from the back in every Slice; its axis 0 needs no counting from the back).
BuildResult shape_slice(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  if (!node.attribute("start") && !node.attribute("end")) return decline("no start or end: Shape-1 means the same");
  const int64_t start = node.attribute_int("start", 0);
  const int64_t end = node.attribute_int("end", std::numeric_limits<int64_t>::max());
  b.output(match.value("y"), b.Slice(b.Shape(match.value("data")), {start}, {end}, {0}));
  return built();
}

// CastLike-15 as Cast to the element type of `like`, when the graph tells it.
BuildResult cast_like_as_cast(const BuildContext& match, GraphBuilder& b) {
  const int32_t type = match.element_type({"like"});
  if (type == onnx::TensorProto::UNDEFINED) return decline("the element type of the target is unknown");
  b.output(match.value("y"), b.Cast(match.value("x"), type));
  return built();
}

// Constant-12's value_float(s) / value_int(s) as the `value` tensor every version takes.
BuildResult constant_value_tensor(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  const Attributes attributes = node.attributes_except();
  if (attributes.size() != 1) return decline("not a single attribute");
  const onnx::AttributeProto& a = attributes.front();
  onnx::TensorProto tensor;
  if (a.name() == "value_float") {
    tensor = make_tensor(onnx::TensorProto::FLOAT, {}, {a.f()});
  } else if (a.name() == "value_floats") {
    tensor = make_tensor(onnx::TensorProto::FLOAT, {a.floats_size()}, {a.floats().begin(), a.floats().end()});
  } else if (a.name() == "value_int") {
    tensor = make_int64_tensor({}, {a.i()});
  } else if (a.name() == "value_ints") {
    tensor = make_int64_tensor({a.ints_size()}, {a.ints().begin(), a.ints().end()});
  } else {
    return decline(fmt::format("attribute {} has no older spelling here", a.name()));
  }
  b.output(match.value("y"), b.op("Constant", {}, {attr("value", tensor)}));
  return built();
}

// Constant-1 takes float types only (9 added the others, int64 shapes among them): below 9 a
// Constant of another type is the same tensor as an initializer, which every version reads.
BuildResult constant_as_initializer(const BuildContext& match, GraphBuilder& b) {
  const Attributes attributes = match.anchor().attributes_except();
  if (attributes.size() != 1 || attributes[0].name() != "value" || !attributes[0].has_t()) return decline("not a value tensor");
  const onnx::TensorProto& tensor = attributes[0].t();
  const int32_t type = tensor.data_type();
  if (type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::FLOAT16 || type == onnx::TensorProto::DOUBLE) {
    return decline("a float type, which Constant-1 takes");
  }
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) return decline("external data");
  b.output(match.value("y"), b.constant(tensor));
  return built();
}

// Resize-13 made roi and scales optional; Resize-11 takes them as empty tensors.
BuildResult resize_with_empty_inputs(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  if (match.has("roi") && match.has("scales")) return decline("roi and scales given: the node means the same at opset 11");
  if (node.attribute("antialias") || node.attribute("axes") || node.attribute("keep_aspect_ratio_policy")) {
    return decline("attributes of Resize-18");
  }
  if (node.attribute_string("coordinate_transformation_mode") == "half_pixel_symmetric") return decline("half_pixel_symmetric (Resize-19)");
  auto given = [&](const char* name) { return match.has(name) ? match.value(name) : b.floats({}); };
  Attributes attributes = node.attributes_except();
  b.output(match.value("y"), b.op("Resize", {match.value("x"), given("roi"), given("scales"), match.value("sizes")}, attributes));
  return built();
}

// Range-11 for runtimes below 11 (range_values builds its function body there).
BuildResult range_as_loop(const BuildContext& match, GraphBuilder& b) {
  const int32_t type = match.element_type({"start", "limit", "delta"});
  const bool supported = type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::DOUBLE ||
                         type == onnx::TensorProto::INT32 || type == onnx::TensorProto::INT64;
  if (!supported) return decline("an element type other than float, double, int32 or int64 (Sub below 14 lacks int16)");
  b.output(match.value("y"), range_values(b, match.value("start"), match.value("limit"), match.value("delta"), type));
  return built();
}

// Equal of floats for runtimes below 11 (Equal took floats at 11): neither less nor greater, and
// neither operand NaN (where both comparisons are false too).
BuildResult float_equal_spelled_out(const BuildContext& match, GraphBuilder& b) {
  // float16 compares in float: widening keeps every value (and NaN), older kernels lack float16.
  const bool widen = match.facts("a").elem_type == onnx::TensorProto::FLOAT16;
  const Value a = widen ? b.Cast(match.value("a"), onnx::TensorProto::FLOAT) : match.value("a");
  const Value c = widen ? b.Cast(match.value("b"), onnx::TensorProto::FLOAT) : match.value("b");
  const Value less = b.op("Less", {a, c});
  const Value greater = b.op("Greater", {a, c});
  const Value ordered = b.op("Not", {b.op("Or", {less, greater})});
  const Value nan = b.op("Or", {b.op("IsNaN", {a}), b.op("IsNaN", {c})});
  b.output(match.value("y"), b.op("And", {ordered, b.op("Not", {nan})}));
  return built();
}

// Trilu-14 with its last two dims static: Where (mask, x, 0), the mask a constant of them, or for
// a k known only at run time the comparison of a constant j - i with k (no NaN in int64). A
// large mask compares j - i computed from Range instead.
BuildResult trilu_as_mask(const BuildContext& match, GraphBuilder& b) {
  const auto dims = match.facts("x").static_dims();
  if (!dims || dims->size() < 2) return decline("the input's rank is unknown");
  const int64_t rows = (*dims)[dims->size() - 2], columns = dims->back();
  const bool dynamic = rows < 0 || columns < 0;
  if (rows > INT32_MAX || columns > INT32_MAX) return decline(fmt::format("a {}x{} matrix is larger than any mask", rows, columns));
  const int32_t type = match.element_type({"x"});
  if (type == onnx::TensorProto::UNDEFINED) return decline("the element type is unknown");
  const bool upper = match.attribute_int("upper", 1) != 0;
  std::optional<int64_t> k = 0;
  if (match.has("k")) {
    auto value = match.constant("k");
    k = value && value->integers.size() == 1 ? std::optional(value->integers[0]) : std::nullopt;
  }
  // Masks up to 64 Ki elements are written out; larger ones (a long causal mask) and those of sizes
  // known only at run time are computed, from Range (its Loop below 11), so that the model doesn't grow by them.
  constexpr int64_t kLargestConstantMask = int64_t{1} << 16;
  const bool computed = dynamic || (columns != 0 && rows > kLargestConstantMask / columns);
  Value mask;
  if (computed) {
    std::optional<Value> shape;
    auto positions = [&](int64_t count, int64_t axis_from_back, int64_t unsqueezed) {
      Value end;
      if (count >= 0) {
        end = b.scalar(static_cast<double>(count), onnx::TensorProto::INT64);
      } else {
        if (!shape) shape = b.Shape(match.value("x"));
        end = b.Gather(*shape, b.scalar(static_cast<double>(static_cast<int64_t>(dims->size()) - axis_from_back), onnx::TensorProto::INT64));
      }
      const Value zero = b.scalar(0, onnx::TensorProto::INT64);
      const Value one = b.scalar(1, onnx::TensorProto::INT64);
      const Value range = range_values(b, zero, end, one, onnx::TensorProto::INT64);
      return b.Unsqueeze(range, {unsqueezed});
    };
    const Value j = positions(columns, 1, 0);
    const Value i = positions(rows, 2, 1);
    const Value diagonal = b.op("Sub", {j, i});  // j - i, [rows, columns]
    const Value limit = k ? b.scalar(static_cast<double>(*k), onnx::TensorProto::INT64) : match.value("k");
    mask = b.op("Not", {b.op(upper ? "Less" : "Greater", {diagonal, limit})});
  } else {
    std::vector<double> above;  // j - i, or whether the element is kept
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < columns; ++j) above.push_back(!k ? j - i : upper ? j - i >= *k : j - i <= *k);
    }
    if (k) {
      mask = b.constant(make_tensor(onnx::TensorProto::BOOL, {rows, columns}, above));
    } else {
      const Value diagonal = b.constant(make_tensor(onnx::TensorProto::INT64, {rows, columns}, above));
      mask = b.op("Not", {b.op(upper ? "Less" : "Greater", {diagonal, match.value("k")})});
    }
  }
  // ONNX Runtime's Where below 16 has kernels for float, float16, double, int32, int64 and uint8
  // only: a bool x keeps its elements under the mask with And, other integers select in int64.
  const Value& x = match.value("x");
  if (type == onnx::TensorProto::BOOL) {
    b.output(match.value("y"), b.op("And", {x, mask}));
    return built();
  }
  const bool where_kernel = type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::FLOAT16 ||
                            type == onnx::TensorProto::DOUBLE || type == onnx::TensorProto::INT32 ||
                            type == onnx::TensorProto::INT64 || type == onnx::TensorProto::UINT8;
  if (where_kernel) {
    const Value zero = b.scalar(0, type);
    b.output(match.value("y"), b.Where(mask, x, zero));
    return built();
  }
  const Value wide_x = b.Cast(x, onnx::TensorProto::INT64);
  const Value zero = b.scalar(0, onnx::TensorProto::INT64);
  const Value wide = b.Where(mask, wide_x, zero);
  b.output(match.value("y"), b.Cast(wide, type));
  return built();
}

// ArgMax/ArgMin-12 <select_last_index = 1>: the first index in the reversed axis, counted back.
// The node as it is but for one attribute: inputs (absent ones too) and outputs in their places.
void node_without_attribute(const NodeView& node, std::string_view dropped, GraphBuilder& b) {
  Attributes attributes;
  for (const auto& attribute : node.attributes_except()) {
    if (attribute.name() != dropped) attributes.push_back(attribute);
  }
  const std::vector<Value> node_outputs = node.outputs();
  const auto outputs = b.op_outputs(node.op_type(), node.inputs(), node_outputs.size(), attributes);
  for (size_t i = 0; i < node_outputs.size(); ++i) {
    if (!node_outputs[i].absent()) b.output(node_outputs[i], outputs[i]);
  }
}

// An attribute a newer version added, written at the default that means the older behaviour:
// the older schema does not know it, so the node goes without it (the rule's `dropped`).
BuildResult attribute_at_default_dropped(const BuildContext& match, GraphBuilder& b) {
  node_without_attribute(match.anchor(), match.attribute_string("dropped"), b);
  return built();
}

// MaxPool / AveragePool <ceil_mode = 1> (10) below 10: with the input's spatial sizes known, the
// floor-mode pool over more end padding has ONNX Runtime's ceil-mode size (pool_attributes.h:
// ceil(n / stride) + 1 for n = in + pads - ((kernel - 1) * dilation + 1), one less when the last
// window would start in the end padding) and the same windows; padding is never picked by
// MaxPool nor counted by AveragePool with count_include_pad = 0 (the rule's condition).
BuildResult ceil_mode_as_end_pads(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  if (node.op_type() == "MaxPool" && b.opset() < 8 && match.facts("x").elem_type != onnx::TensorProto::FLOAT) {
    return decline("ONNX Runtime's MaxPool below opset 8 takes float only");
  }
  if (const std::string auto_pad = node.attribute_string("auto_pad", "NOTSET"); auto_pad != "NOTSET") {
    return decline(fmt::format("auto_pad {}: the runtime computes the pads", auto_pad));
  }
  const std::vector<int64_t> kernel = node.attribute_ints("kernel_shape");
  const size_t spatial = kernel.size();
  const std::vector<int64_t> strides = node.attribute_ints("strides", std::vector<int64_t>(spatial, 1));
  std::vector<int64_t> pads = node.attribute_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  const std::vector<int64_t> dilations = node.attribute_ints("dilations", std::vector<int64_t>(spatial, 1));
  if (spatial == 0 || strides.size() != spatial || pads.size() != 2 * spatial || dilations.size() != spatial) {
    return decline("kernel_shape, strides, pads and dilations disagree in length");
  }
  if (std::any_of(dilations.begin(), dilations.end(), [](int64_t d) { return d != 1; })) {
    return decline("dilations other than 1, which the pools below opset 10 lack");
  }
  const auto dims = match.facts("x").static_dims();
  if (!dims) return decline("the rank of 'x' is unknown");
  if (dims->size() != spatial + 2) return decline("kernel_shape does not fit the rank of 'x'");
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t in = (*dims)[i + 2];
    if (in < 0) {
      return decline(fmt::format("the size of 'x' on axis {} is known only at run time: ceil_mode's extra padding depends on it", i + 2));
    }
    const int64_t stride = strides[i];
    const int64_t span = in + pads[i] + pads[i + spatial] - kernel[i];
    if (stride <= 0 || kernel[i] <= 0 || span < 0) return decline(fmt::format("the window does not fit axis {}", i + 2));
    int64_t out = (span + stride - 1) / stride + 1;
    if ((out - 1) * stride >= in + pads[i]) --out;  // the last window would start in the end padding
    const int64_t extra = std::max<int64_t>(0, (out - 1) * stride - span);
    if ((span + extra) / stride + 1 != out) return decline(fmt::format("no end padding gives the ceil-mode size on axis {}", i + 2));
    if (pads[i + spatial] + extra >= kernel[i]) {
      return decline(fmt::format("the end padding on axis {} would reach the kernel size, which ONNX Runtime refuses", i + 2));
    }
    pads[i + spatial] += extra;
  }
  const std::vector<Value> node_outputs = node.outputs();
  const bool indices = node_outputs.size() > 1 && !node_outputs[1].absent();
  if ((indices || node.has_attribute("storage_order")) && b.opset() < 8) {
    return decline("MaxPool-8 added the Indices output and storage_order");
  }
  Attributes attributes = node.attributes_except({"ceil_mode", "pads", "dilations"});
  attributes.push_back(attr("pads", pads));
  const auto outputs = b.op_outputs(node.op_type(), {match.value("x")}, indices ? 2 : 1, attributes);
  b.output(node_outputs[0], outputs[0]);
  if (indices) b.output(node_outputs[1], outputs[1]);
  return built();
}

BuildResult arg_last_index(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  if (node.attribute_int("select_last_index", 0) == 0) {
    if (!node.attribute("select_last_index")) return decline("the first index: the node means the same at opset 11");
    node_without_attribute(node, "select_last_index", b);  // written at its default: unknown at 11
    return built();
  }
  int64_t axis = node.attribute_int("axis", 0);
  if (axis < 0 && b.opset() < 11) {  // axes count from the front there
    const auto rank = match.facts("data").rank();
    if (!rank) return decline("the axis counts from the back and the rank is unknown (below opset 11 it can't)");
    axis += static_cast<int64_t>(*rank);
  }
  const Value data = match.value("data");
  Value reversed;
  if (b.opset() >= 10) {
    const Value starts = b.ints({-1});
    const Value ends = b.ints({std::numeric_limits<int64_t>::min()});
    const Value axes = b.ints({axis});
    const Value steps = b.ints({-1});
    reversed = b.op("Slice", {data, starts, ends, axes, steps});
  } else {  // Slice takes no steps before 10: a Gather of the indices backwards, for a static size
    const int64_t size = match.facts("data").rank() ? match.facts("data").dim(static_cast<size_t>(axis)) : -1;
    if (size < 0) return decline("the axis' size is not static (below opset 10 the reversal is a Gather of its indices)");
    std::vector<int64_t> backwards(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) backwards[static_cast<size_t>(i)] = size - 1 - i;
    reversed = b.Gather(data, b.ints(backwards), axis);
  }
  const Value index = b.op(node.op_type(), {reversed}, {attr("axis", axis), attr("keepdims", node.attribute_int("keepdims", 1))});
  const Value shape = b.Shape(data);
  const Value size = b.Gather(shape, b.scalar(static_cast<double>(axis), onnx::TensorProto::INT64));
  const Value last = b.Sub(size, b.scalar(1, onnx::TensorProto::INT64));
  b.output(node.output(0), b.Sub(last, index));
  return built();
}

// Dropout-12 without training_mode (or with a constant false, or training with a constant ratio
// of 0) is the identity, whatever its ratio or seed: Dropout-10 (or 7) without them. Its mask
// keeps everything: all true, built from the shape (ONNX Runtime's Dropout-10 writes another one).
BuildResult dropout_inference(const BuildContext& match, GraphBuilder& b) {
  const bool mask = match.has("mask");
  if (mask && b.opset() < 9) return decline("the mask is used, and an all-true one of x's shape needs ConstantOfShape (opset 9)");
  if (match.has("training_mode")) {  // torch writes a constant false in exported inference graphs
    const auto training = match.scalar("training_mode");
    if (!training) return decline("training_mode is not a constant");
    // Training with a ratio of 0 drops nothing and scales by 1 (torchvision's Swin writes that).
    const auto ratio = match.has("ratio") ? match.scalar("ratio") : std::optional<double>(0.5);
    if (*training != 0 && ratio != 0.0) return decline("training_mode is set and the ratio is not a constant 0: the node drops");
  }
  if (!mask && !match.has("ratio") && !match.has("training_mode") && !match.anchor().attribute("seed")) {
    return decline("nothing to drop: the node means the same at opset 10");
  }
  b.output(match.value("output"), b.op("Dropout", {match.value("data")}));
  if (mask) {
    const Value shape = b.Shape(match.value("data"));
    b.output(match.value("mask"), b.op("ConstantOfShape", {shape}, {attr("value", make_tensor(onnx::TensorProto::BOOL, {1}, {1}))}));
  }
  return built();
}

// GridSample-20 renamed GridSample-16's modes (bilinear, bicubic: linear, cubic; absent: linear)
// and took N-D inputs; a 4-D one in a 16 name. "nearest" kept its name, so such a node can't be
// told from the rewrite of one and is left (refused) rather than rewritten forever.
BuildResult grid_sample_16_modes(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  const std::string mode = node.attribute_string("mode", "linear");
  const std::string older = mode == "linear" ? "bilinear" : mode == "cubic" ? "bicubic" : mode;
  if (match.facts("x").rank() != std::optional<size_t>(4)) return decline("GridSample-16 takes 4-D inputs only (the rank is not 4 or unknown)");
  Attributes attributes = node.attributes_except({"mode"});
  attributes.push_back(attr("mode", older));
  b.output(match.value("y"), b.op("GridSample", {match.value("x"), match.value("grid")}, attributes));
  return built();
}

// The element type of x for the constants of a decomposition; 0 when it can't be used.
int32_t float_type(const BuildContext& match, std::string& why) {
  const int32_t type = match.element_type({"x"});
  why = check_element_type(type, {onnx::TensorProto::FLOAT, onnx::TensorProto::DOUBLE, onnx::TensorProto::FLOAT16},
                           "the decomposition").value_or("");
  return why.empty() ? type : 0;
}

// Pow-12 / BatchNormalization-15 whose operands all have x's type (float, double or float16, the
// older schemas' types): the node as it is, without BatchNormalization's training_mode = 0.
BuildResult operands_of_one_type(const BuildContext& match, GraphBuilder& b) {
  const int32_t type = match.element_type({"x"});
  if (auto why = check_element_type(type, {onnx::TensorProto::FLOAT, onnx::TensorProto::DOUBLE, onnx::TensorProto::FLOAT16},
                                    "older schema's")) {
    return decline(*why);
  }
  const NodeView node = match.anchor();
  std::vector<Value> inputs = node.inputs();
  for (const char* operand : {"e", "scale", "bias", "mean", "var"}) {
    if (!match.has(operand)) continue;
    const int32_t own = match.facts(operand).elem_type;
    // An integer exponent is a whole number the base's type holds exactly (up to 2^24 in float).
    if (std::string_view(operand) == "e" && own != type && is_integer_type(own)) {
      inputs[1] = b.Cast(match.value("e"), type);
      continue;
    }
    if (own != type) {
      return decline(fmt::format("{} is {} while x is {}: the older schema takes one type for both", operand,
                         own ? data_type_name(own) : "of unknown type", data_type_name(type)));
    }
  }
  b.output(node.output(0), b.op(node.op_type(), inputs, node.attributes_except({"training_mode"})));
  return built();
}

// Gelu-20: x·½·(1 + erf(x/√2)), or with approximate = "tanh" x·½·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
BuildResult gelu_spelled_out(const BuildContext& match, GraphBuilder& b) {
  std::string why;
  const int32_t type = float_type(match, why);
  if (!type) return decline(why);
  const Value x{match.value("x")};
  const std::string approximate = match.attribute_string("approximate", "none");
  Value inner;
  if (approximate == "none") {
    inner = b.Erf(b.Mul(x, b.scalar(1 / std::numbers::sqrt2, type)));
  } else if (approximate == "tanh") {
    const Value cube = b.Mul(b.Mul(x, x), x);
    const Value sum = b.Add(x, b.Mul(cube, b.scalar(0.044715, type)));
    inner = b.Tanh(b.Mul(sum, b.scalar(std::sqrt(2 / std::numbers::pi), type)));
  } else {
    return decline(fmt::format("approximate = \"{}\"", approximate));
  }
  const Value half_x = b.Mul(x, b.scalar(0.5, type));
  b.output(match.value("y"), b.Mul(half_x, b.Add(inner, b.scalar(1, type))));
  return built();
}

// Celu-12 (float only): α·Elu(x/α) with Elu's own α = 1.
BuildResult celu_as_elu(const BuildContext& match, GraphBuilder& b) {
  const double alpha = match.attribute_float("alpha", 1.f);
  const Value scaled = b.Div(match.value("x"), b.scalar(alpha));
  const Value elu = b.op("Elu", {scaled}, {attr("alpha", 1.0)});
  b.output(match.value("y"), b.Mul(elu, b.scalar(alpha)));
  return built();
}

// Add/Sub/Mul/Div of 8- and 16-bit integers (14) in int64, cast back: the low bits are the
// narrow op's wrap-around result.
BuildResult widened_integer_arithmetic(const BuildContext& match, GraphBuilder& b) {
  const int32_t type = match.facts("a").elem_type;
  const Value a = b.Cast(match.value("a"), onnx::TensorProto::INT64);
  const Value wide_b = b.Cast(match.value("b"), onnx::TensorProto::INT64);
  const Value wide = b.op(match.anchor().op_type(), {a, wide_b});
  b.output(match.value("y"), b.Cast(wide, type));
  return built();
}

// CenterCropPad-18: pad the short axes (centred, the odd one at the end), then slice the long ones
// (centred, start rounded down), with sizes known at run time.
BuildResult center_crop_pad(const BuildContext& match, GraphBuilder& b) {
  const auto rank = match.facts("x").rank();
  if (!rank) return decline("the rank of the input is unknown");
  const auto r = static_cast<int64_t>(*rank);
  std::vector<int64_t> axes = match.anchor().attribute_ints("axes");
  if (axes.empty()) {
    for (int64_t axis = 0; axis < r; ++axis) axes.push_back(axis);
  }
  std::set<int64_t> seen;
  for (int64_t& axis : axes) {
    if (axis < -r || axis >= r) return decline(fmt::format("axis {} lies outside rank {}", axis, r));
    if (axis < 0) axis += r;
    if (!seen.insert(axis).second) return decline(fmt::format("axes lists axis {} twice", axis));
  }
  const Value target = b.Cast(match.value("shape"), onnx::TensorProto::INT64);
  const Value shape = b.Shape(match.value("x"));
  const Value axes_value = b.ints(axes);
  const Value size = b.Gather(shape, axes_value);
  const Value zero = b.scalar(0, onnx::TensorProto::INT64);
  const Value longer = b.op("Greater", {target, size});
  const Value grow = b.Where(longer, b.Sub(target, size), zero);
  const Value shorter = b.op("Greater", {size, target});
  const Value shrink = b.Where(shorter, b.Sub(size, target), zero);
  const Value two = b.scalar(2, onnx::TensorProto::INT64);
  const Value grow_begin = b.Div(grow, two);
  const Value updates = b.Concat({grow_begin, b.Sub(grow, grow_begin)}, 0);
  std::vector<int64_t> where = axes;
  for (int64_t axis : axes) where.push_back(axis + r);
  const Value zeros = b.ints(std::vector<int64_t>(static_cast<size_t>(2 * r), 0));
  const Value pads = b.op("ScatterElements", {zeros, b.ints(where), updates}, {attr("axis", int64_t{0})});
  const Value padded = b.op("Pad", {match.value("x"), pads});
  const Value start = b.Div(shrink, two);
  b.output(match.value("y"), b.op("Slice", {padded, start, b.Add(start, target), axes_value}));
  return built();
}

// Max/Min-12 of two integers: the operand Greater/Less picks, in int64 for the types older
// Greater and Where kernels lack (every value of them fits).
BuildResult integer_max_min(const BuildContext& match, GraphBuilder& b) {
  const int32_t type = match.facts("a").elem_type;
  const bool widen = type != onnx::TensorProto::INT32 && type != onnx::TensorProto::INT64;
  Value a{match.value("a")}, other{match.value("b")};
  if (widen) {
    a = b.Cast(a, onnx::TensorProto::INT64);
    other = b.Cast(other, onnx::TensorProto::INT64);
  }
  const Value first_wins = b.op(match.anchor().op_type() == "Max" ? "Greater" : "Less", {a, other});
  const Value picked = b.Where(first_wins, a, other);
  b.output(match.value("y"), widen ? b.Cast(picked, type) : picked);
  return built();
}

// GatherElements-11 below 11: the toolkit's flat Gather, from the static dims.
BuildResult gather_elements_flat(const BuildContext& match, GraphBuilder& b) {
  const auto data_dims = match.facts("data").static_dims();
  const auto index_dims = match.facts("indices").static_dims();
  if (!data_dims || !index_dims) return decline("the dims of data or indices are not all static");
  int64_t axis = match.anchor().attribute_int("axis", 0);
  const auto rank = static_cast<int64_t>(data_dims->size());
  if (axis < -rank || axis >= rank) return decline(fmt::format("axis {} lies outside rank {}", axis, rank));
  if (axis < 0) axis += rank;
  const auto gathered = gather_elements(b, match.value("data"), match.value("indices"), match.facts("indices").elem_type, axis,
                                        data_dims, index_dims);
  if (!gathered) return decline("more indices than the positions written out take, or ranks that differ");
  b.output(match.value("y"), *gathered);
  return built();
}

// ScatterElements-11 without a reduction below 11: Scatter-9 (its earlier name), with indices
// counted from the end made non-negative (the axis' size static).
BuildResult scatter_elements_as_scatter(const BuildContext& match, GraphBuilder& b) {
  const NodeView node = match.anchor();
  if (node.attribute_string("reduction", "none") != "none") return decline("a reduction: Scatter-9 has none");
  const auto rank = match.facts("data").rank();
  if (!rank) return decline("the rank of data is unknown");
  const auto r = static_cast<int64_t>(*rank);
  int64_t axis = node.attribute_int("axis", 0);
  if (axis < -r || axis >= r) return decline(fmt::format("axis {} lies outside rank {}", axis, r));
  if (axis < 0) axis += r;
  Value indices = match.value("indices");
  const auto known = match.constant("indices");
  const auto ints = known ? known->ints() : std::vector<int64_t>{};
  if (!known || std::any_of(ints.begin(), ints.end(), [](int64_t i) { return i < 0; })) {
    const int64_t size = match.facts("data").dim(static_cast<size_t>(axis));
    if (size < 0) return decline("indices may count from the end and the axis' size is not static");
    const int32_t type = match.facts("indices").elem_type;
    const Value negative = b.op("Less", {indices, b.scalar(0, type)});
    const Value from_end = b.Add(indices, b.scalar(static_cast<double>(size), type));
    indices = b.Where(negative, from_end, indices);
  }
  b.output(match.value("y"), b.op("Scatter", {match.value("data"), indices, match.value("updates")}, {attr("axis", axis)}));
  return built();
}

// IsInf-20 of float16 below 20: of the operand widened to float, the node's attributes kept.
BuildResult is_inf_widened(const BuildContext& match, GraphBuilder& b) {
  const Value wide = b.Cast(match.value("x"), onnx::TensorProto::FLOAT);
  b.output(match.value("y"), b.op("IsInf", {wide}, match.anchor().attributes_except()));
  return built();
}

// Slice-10 with run-time starts or ends at 9: per sliced axis, a Gather of Range (start, end,
// step), both bounds counted from the end when negative and clamped to [0, size] as Slice does.
BuildResult slice_as_gather(const BuildContext& match, GraphBuilder& b) {
  if (match.constant("starts") && match.constant("ends")) return decline("constant starts and ends: the attribute form");
  const auto rank = match.facts("data").rank();
  const auto count = match.facts("starts").rank() == std::optional<size_t>(1) ? match.facts("starts").dim(0) : -1;
  if (!rank || count < 0) return decline("the rank of data or the number of starts is unknown");
  std::vector<int64_t> axes(static_cast<size_t>(count)), steps(static_cast<size_t>(count), 1);
  for (int64_t k = 0; k < count; ++k) axes[static_cast<size_t>(k)] = k;
  if (match.has("axes")) {
    const auto given = match.constant("axes");
    if (!given) return decline("the axes are not a constant");
    axes = given->ints();
  }
  if (match.has("steps")) {
    const auto given = match.constant("steps");
    if (!given) return decline("the steps are not a constant");
    steps = given->ints();
  }
  if (axes.size() != static_cast<size_t>(count) || steps.size() != axes.size()) return decline("starts, axes and steps differ in length");
  const auto r = static_cast<int64_t>(*rank);
  constexpr auto kInt64 = onnx::TensorProto::INT64;
  auto int64_element = [&](const char* input, int64_t k) {
    const Value element = b.Gather(match.value(input), b.scalar(static_cast<double>(k), kInt64));
    return match.facts(input).elem_type == kInt64 ? element : b.Cast(element, kInt64);
  };
  const Value shape = b.Shape(match.value("data"));
  const Value zero = b.scalar(0, kInt64);
  Value y = match.value("data");
  for (int64_t k = 0; k < count; ++k) {
    int64_t axis = axes[static_cast<size_t>(k)];
    if (axis < -r || axis >= r) return decline(fmt::format("axis {} lies outside rank {}", axis, r));
    if (axis < 0) axis += r;
    if (steps[static_cast<size_t>(k)] <= 0) return decline("a step of 0 or less (the clamping differs backwards)");
    const Value size = b.Gather(shape, b.scalar(static_cast<double>(axis), kInt64));
    auto clamped = [&](Value v) {
      const Value negative = b.op("Less", {v, zero});
      const Value counted = b.Where(negative, b.Add(v, size), v);
      const Value low = b.Where(b.op("Less", {counted, zero}), zero, counted);
      return b.Where(b.op("Greater", {low, size}), size, low);
    };
    const Value start = clamped(int64_element("starts", k));
    const Value end = clamped(int64_element("ends", k));
    const Value step = b.scalar(static_cast<double>(steps[static_cast<size_t>(k)]), kInt64);
    const Value positions = range_values(b, start, end, step, kInt64);
    y = b.Gather(y, positions, axis);
  }
  b.output(match.value("y"), y);
  return built();
}

// Clip-11 whose bounds are known only at run time: Max with the lower, then Min with the upper.
BuildResult clip_as_max_min(const BuildContext& match, GraphBuilder& b) {
  const bool lower = match.has("min"), upper = match.has("max");
  if ((!lower || match.is_constant("min")) && (!upper || match.is_constant("max"))) {
    return decline("constant bounds: the attribute form (clip-bounds-input-11-lowering)");
  }
  Value y = match.value("data");
  if (lower) y = b.op("Max", {y, match.value("min")});
  if (upper) y = b.op("Min", {y, match.value("max")});
  b.output(match.value("y"), y);
  return built();
}

// Mod-10 of integers at 9: the truncated remainder (fmod = 1), moved to the divisor's sign for
// fmod = 0; in int64 for the types older Div/Less kernels lack.
BuildResult integer_mod_spelled_out(const BuildContext& match, GraphBuilder& b) {
  const int32_t type = match.facts("a").elem_type;
  const bool widen = type != onnx::TensorProto::INT32 && type != onnx::TensorProto::INT64;
  const int32_t computed = widen ? onnx::TensorProto::INT64 : type;
  Value a{match.value("a")}, divisor{match.value("b")};
  if (widen) {
    a = b.Cast(a, computed);
    divisor = b.Cast(divisor, computed);
  }
  const Value quotient = b.Div(a, divisor);
  const Value remainder = b.Sub(a, b.Mul(quotient, divisor));
  Value y = remainder;
  const bool is_signed = type == onnx::TensorProto::INT8 || type == onnx::TensorProto::INT16 ||
                         type == onnx::TensorProto::INT32 || type == onnx::TensorProto::INT64;
  if (match.anchor().attribute_int("fmod", 0) == 0 && is_signed) {
    const Value zero = b.scalar(0, computed);
    const Value nonzero = b.op("Not", {b.op("Equal", {remainder, zero})});
    const Value remainder_negative = b.op("Less", {remainder, zero});
    const Value divisor_negative = b.op("Less", {divisor, zero});
    const Value signs_differ = b.op("Xor", {remainder_negative, divisor_negative});
    const Value moved = b.op("And", {nonzero, signs_differ});
    y = b.Add(remainder, b.Mul(b.Cast(moved, computed), divisor));
  }
  b.output(match.value("y"), widen ? b.Cast(y, type) : y);
  return built();
}

// CumSum-11 / CumProd-26 as a Scan along the axis carrying the running sum (product): the same
// additions (multiplications) in the same order as the kernels, so exact. The first carried value
// is 0 (1) in the shape of one slice across the axis.
BuildResult cumulative_as_scan(const BuildContext& match, GraphBuilder& b) {
  const bool product = match.anchor().op_type() == "CumProd";
  const int32_t type = match.element_type({"x"});
  const bool supported = type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::DOUBLE ||
                         type == onnx::TensorProto::INT32 || type == onnx::TensorProto::INT64;
  if (!supported) return decline("an element type other than float, double, int32 or int64 (Add and Mul below 14 lack it)");
  const auto rank = match.facts("x").rank();
  if (!rank) return decline("the input's rank is unknown");
  const auto r = static_cast<int64_t>(*rank);
  const auto axis_values = match.constant("axis");
  // Of a 1-D input the one axis a valid node can name is 0, whatever computes it.
  if (r != 1 && (!axis_values || axis_values->ints().size() != 1)) return decline("the axis is not a one-element constant");
  int64_t axis = r == 1 ? 0 : axis_values->ints().front();
  if (axis < -r || axis >= r) return decline(fmt::format("axis {} lies outside rank {}", axis, r));
  if (axis < 0) axis += r;
  const Value shape = b.Shape(match.value("x"));
  const Value before = b.Slice(shape, {0}, {axis}, {0});
  const Value after = b.Slice(shape, {axis + 1}, {r}, {0});
  const Value slice_shape = b.Concat({before, after}, 0);
  const Value first = b.op("ConstantOfShape", {slice_shape}, {attr("value", make_tensor(type, {1}, {product ? 1.0 : 0.0}))});
  BodyGraph body(first, "cumulative_body");
  body.input("carried", type, false);
  body.input("element", type, false);
  body.node(product ? "Mul" : "Add", {"carried", "element"}, "next");
  const bool exclusive = match.anchor().attribute_int("exclusive", 0) != 0;
  body.node("Identity", {exclusive ? "carried" : "next"}, "emitted");
  body.output("next", type, false);
  body.output("emitted", type, false);
  const int64_t direction = match.anchor().attribute_int("reverse", 0) != 0 ? 1 : 0;
  const auto outputs = b.op_outputs("Scan", {first, match.value("x")}, 2,
                                    {attr("body", body.graph()), attr("num_scan_inputs", int64_t{1}),
                                     attr("scan_input_axes", std::vector<int64_t>{axis}),
                                     attr("scan_input_directions", std::vector<int64_t>{direction}),
                                     attr("scan_output_axes", std::vector<int64_t>{axis}),
                                     attr("scan_output_directions", std::vector<int64_t>{direction})});
  b.output(match.value("y"), outputs[1]);
  return built();
}

// The unsigned type of a signed integer type's width, and the width in bits (0: not handled).
std::pair<int32_t, int64_t> unsigned_of_width(int32_t type) {
  switch (type) {
    case onnx::TensorProto::INT8: case onnx::TensorProto::UINT8: return {onnx::TensorProto::UINT8, 8};
    case onnx::TensorProto::INT16: case onnx::TensorProto::UINT16: return {onnx::TensorProto::UINT16, 16};
    case onnx::TensorProto::INT32: case onnx::TensorProto::UINT32: return {onnx::TensorProto::UINT32, 32};
    default: return {onnx::TensorProto::UNDEFINED, 0};
  }
}

// Bitwise And/Or/Xor/Not-18 of integers up to 32 bits, in int64 arithmetic: each operand's bits
// (its unsigned reading, v / 2^k - 2·(v / 2^(k+1))) along a new leading axis, combined as 0/1
// numbers, summed back with their weights, cast to the type (wrapping, as the bits are). Exact.
BuildResult bitwise_as_bits(const BuildContext& match, GraphBuilder& b) {
  const std::string& op = match.anchor().op_type();
  const bool unary = op == "BitwiseNot";
  const int32_t type = match.element_type({"a"});
  const std::pair<int32_t, int64_t> unsigned_and_width = unsigned_of_width(type);
  const int32_t unsigned_type = unsigned_and_width.first;  // a lambda below reads it (no structured binding)
  const int64_t width = unsigned_and_width.second;
  if (width == 0) return decline("an element type other than 8-, 16- or 32-bit integers (64-bit ones overflow int64 sums)");
  const auto rank_a = match.facts("a").rank();
  const auto rank_b = unary ? rank_a : match.facts("b").rank();
  if (!rank_a || !rank_b) return decline("an operand's rank is unknown (its bits go along a new leading axis)");
  // Powers of two along the leading axis, broadcasting over every operand's dims.
  std::vector<int64_t> weight_dims(std::max(*rank_a, *rank_b) + 1, 1);
  weight_dims.front() = width;
  std::vector<int64_t> powers, next_powers;
  for (int64_t k = 0; k < width; ++k) {
    powers.push_back(int64_t{1} << k);
    next_powers.push_back(int64_t{1} << (k + 1));
  }
  const Value weights = b.constant(make_int64_tensor(weight_dims, powers));
  const Value next_weights = b.constant(make_int64_tensor(weight_dims, next_powers));
  const Value two = b.scalar(2, onnx::TensorProto::INT64);
  auto bits = [&](const char* operand) {
    Value v = match.value(operand);
    if (unsigned_type != type) v = b.Cast(v, unsigned_type);
    v = b.Cast(v, onnx::TensorProto::INT64);
    const Value high = b.Mul(b.Div(v, next_weights), two);
    return b.Sub(b.Div(v, weights), high);
  };
  const Value x = bits("a");
  Value combined;
  if (unary) {
    combined = b.Sub(b.scalar(1, onnx::TensorProto::INT64), x);
  } else {
    const Value y = bits("b");
    const Value both = b.Mul(x, y);
    if (op == "BitwiseAnd") {
      combined = both;
    } else {
      const Value sum = b.Add(x, y);
      combined = op == "BitwiseOr" ? b.Sub(sum, both) : b.Sub(sum, b.Mul(both, two));
    }
  }
  const Value value = b.Reduce("ReduceSum", b.Mul(combined, weights), {0}, false);
  const Value wrapped = b.Cast(value, unsigned_type);
  b.output(match.value("y"), unsigned_type == type ? wrapped : b.Cast(wrapped, type));
  return built();
}

// Swish-24: x · Sigmoid(α·x), α in x's type.
BuildResult swish_as_sigmoid(const BuildContext& match, GraphBuilder& b) {
  const Value x{match.value("x")};
  const Value alpha = b.scalar(match.attribute_float("alpha", 1.f), match.facts("x").elem_type);
  b.output(match.value("y"), b.Mul(x, b.Sigmoid(b.Mul(x, alpha))));
  return built();
}

// Hann/Hamming/Blackman windows (17) as their function bodies compute them, in float.
BuildResult cosine_window(const BuildContext& match, GraphBuilder& b) {
  const std::string& op = match.anchor().op_type();
  const double a0 = op == "HannWindow" ? 0.5 : op == "HammingWindow" ? 0.54347826087 : 0.42;
  const double a1 = op == "HannWindow" ? 0.5 : op == "HammingWindow" ? 0.45652173913 : 0.5;
  const double a2 = op == "BlackmanWindow" ? 0.08 : 0.0;
  const bool periodic = match.anchor().attribute_int("periodic", 1) != 0;
  const auto output_type = static_cast<int32_t>(match.anchor().attribute_int("output_datatype", onnx::TensorProto::FLOAT));
  const Value size = b.Cast(match.value("size"), onnx::TensorProto::FLOAT);
  const Value period = periodic ? size : b.Sub(size, b.scalar(1));
  const Value step = b.Div(b.scalar(6.2831853), period);
  const Value zero = b.scalar(0);
  const Value n = b.op("Range", {zero, size, b.scalar(1)});
  const Value angle = b.Mul(n, step);
  const Value cosine = b.op("Cos", {angle});
  const Value a1_term = b.Mul(b.scalar(a1), cosine);
  Value window = b.Sub(b.scalar(a0), a1_term);
  if (a2 != 0) {
    const Value double_cosine = b.op("Cos", {b.Mul(angle, b.scalar(2))});
    window = b.Add(window, b.Mul(b.scalar(a2), double_cosine));
  }
  b.output(match.value("w"), output_type == onnx::TensorProto::FLOAT ? window : b.Cast(window, output_type));
  return built();
}

// Pad-18 with axes: the pads of the listed axes spread over every axis (0 for the others) by a
// ScatterElements into zeros; pads and axes may be known only at run time.
BuildResult pad_axes_as_full_pads(const BuildContext& match, GraphBuilder& b) {
  const auto rank = match.facts("data").rank();
  if (!rank) return decline("the rank of data is unknown: Pad below 18 pads every axis");
  if (match.anchor().attribute_string("mode", "constant") == "wrap") return decline("mode 'wrap' has no equivalent below Pad-19");
  const auto r = static_cast<int64_t>(*rank);
  Value indices;  // where the begins and ends of the listed axes go in pads of every axis
  if (const auto axes = match.constant("axes")) {
    std::vector<int64_t> begins = axes->ints(), ends;
    std::set<int64_t> seen;
    for (int64_t& axis : begins) {
      if (axis < -r || axis >= r) return decline(fmt::format("axis {} lies outside rank {}", axis, r));
      if (axis < 0) axis += r;
      if (!seen.insert(axis).second) return decline(fmt::format("axes lists axis {} twice", axis));
      ends.push_back(axis + r);
    }
    begins.insert(begins.end(), ends.begin(), ends.end());
    indices = b.ints(begins);
  } else {
    const Value listed = b.Cast(match.value("axes"), onnx::TensorProto::INT64);
    const Value rank_value = b.scalar(static_cast<double>(r), onnx::TensorProto::INT64);
    const Value begins = b.op("Mod", {b.Add(listed, rank_value), rank_value});
    const Value ends = b.Add(begins, rank_value);
    indices = b.Concat({begins, ends}, 0);
  }
  const Value zeros = b.ints(std::vector<int64_t>(static_cast<size_t>(2 * r), 0));
  const Value pads = b.op("ScatterElements", {zeros, indices, match.value("pads")}, {attr("axis", int64_t{0})});
  const Attributes attributes = match.anchor().attributes_except();
  b.output(match.value("y"), b.op("Pad", {match.value("data"), pads, match.value("value")}, attributes));
  return built();
}

}  // namespace

BuildResult resize_as_matrices(const BuildContext& match, GraphBuilder& b);  // resize_matrices.cc

void register_opset_down_builders(BuilderRegistry& registry) {
  registry.add("inputs_as_attributes",
               {.values = {"data"},
                .optional_values = {"axes", "split", "pads", "value", "min", "max", "starts", "ends", "steps", "k"},
                .node_attributes = {"noop_with_empty_axes"}},
               inputs_as_attributes);
  registry.add("axes_from_the_front", {.values = {"data"}, .optional_values = {"indices", "axes"}, .node_attributes = {"axis", "axes"}},
               axes_from_the_front);
  registry.add("reduce_runtime_axes", {.values = {"data", "axes"}, .node_attributes = {"noop_with_empty_axes", "keepdims"}},
               reduce_runtime_axes);
  registry.add("split_runtime_sizes", {.values = {"data", "split"}, .optional_attributes = {"axis"}}, split_runtime_sizes);
  registry.add("split_num_outputs", {.values = {"data"}, .attributes = {"num_outputs"}, .optional_attributes = {"axis"}},
               split_num_outputs);
  registry.add("last_axis_softmax", {.values = {"x", "y"}, .optional_attributes = {"axis"}, .node_attributes = {"axis"}},
               last_axis_softmax);
  registry.add("shape_slice", {.values = {"data", "y"}, .node_attributes = {"start", "end"}}, shape_slice);
  registry.add("cast_like_as_cast", {.values = {"x", "like", "y"}}, cast_like_as_cast);
  registry.add("constant_value_tensor", {.values = {"y"}}, constant_value_tensor);
  registry.add("resize_with_empty_inputs",
               {.values = {"x", "y"},
                .optional_values = {"roi", "scales", "sizes"},
                .node_attributes = {"antialias", "axes", "keep_aspect_ratio_policy", "coordinate_transformation_mode"}},
               resize_with_empty_inputs);
  registry.add("resize_as_matrices",
               {.values = {"x", "y"},
                .optional_values = {"roi", "scales", "sizes"},
                .node_attributes = {"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                                    "extrapolation_value", "antialias", "axes", "keep_aspect_ratio_policy"}},
               resize_as_matrices);
  registry.add("constant_as_initializer", {.values = {"y"}}, constant_as_initializer);
  registry.add("trilu_as_mask", {.values = {"x", "y"}, .optional_values = {"k"}, .optional_attributes = {"upper"}}, trilu_as_mask);
  registry.add("range_as_loop", {.values = {"start", "limit", "delta", "y"}}, range_as_loop);
  registry.add("float_equal_spelled_out", {.values = {"a", "b", "y"}}, float_equal_spelled_out);
  registry.add("arg_last_index", {.values = {"data"}, .node_attributes = {"select_last_index", "axis", "keepdims"}},
               arg_last_index);
  registry.add("dropout_inference",
               {.values = {"data", "output"}, .optional_values = {"ratio", "training_mode", "mask"}, .node_attributes = {"seed"}},
               dropout_inference);
  registry.add("grid_sample_16_modes", {.values = {"x", "grid", "y"}, .node_attributes = {"mode"}}, grid_sample_16_modes);
  registry.add("gelu_spelled_out", {.values = {"x", "y"}, .optional_attributes = {"approximate"}}, gelu_spelled_out);
  registry.add("operands_of_one_type", {.values = {"x", "y"}, .optional_values = {"e", "scale", "bias", "mean", "var"},
                                        .optional_attributes = {"training_mode"}},
               operands_of_one_type);
  registry.add("attribute_at_default_dropped", {.values = {"y"}, .attributes = {"dropped"}}, attribute_at_default_dropped);
  registry.add("ceil_mode_as_end_pads",
               {.values = {"x", "y"},
                .node_attributes = {"auto_pad", "kernel_shape", "strides", "pads", "dilations", "storage_order", "ceil_mode"}},
               ceil_mode_as_end_pads);
  registry.add("center_crop_pad", {.values = {"x", "shape", "y"}, .node_attributes = {"axes"}}, center_crop_pad);
  registry.add("integer_max_min", {.values = {"a", "b", "y"}}, integer_max_min);
  registry.add("cumulative_as_scan", {.values = {"x", "axis", "y"}, .node_attributes = {"exclusive", "reverse"}},
               cumulative_as_scan);
  registry.add("bitwise_as_bits", {.values = {"a", "y"}, .optional_values = {"b"}}, bitwise_as_bits);
  registry.add("gather_elements_flat", {.values = {"data", "indices", "y"}, .node_attributes = {"axis"}}, gather_elements_flat);
  registry.add("scatter_elements_as_scatter", {.values = {"data", "indices", "updates", "y"}, .node_attributes = {"axis", "reduction"}},
               scatter_elements_as_scatter);
  registry.add("is_inf_widened", {.values = {"x", "y"}, .node_attributes = {"detect_negative", "detect_positive"}}, is_inf_widened);
  registry.add("slice_as_gather", {.values = {"data", "starts", "ends", "y"}, .optional_values = {"axes", "steps"}}, slice_as_gather);
  registry.add("clip_as_max_min", {.values = {"data", "y"}, .optional_values = {"min", "max"}}, clip_as_max_min);
  registry.add("integer_mod_spelled_out", {.values = {"a", "b", "y"}, .node_attributes = {"fmod"}}, integer_mod_spelled_out);
  registry.add("swish_as_sigmoid", {.values = {"x", "y"}, .optional_attributes = {"alpha"}}, swish_as_sigmoid);
  registry.add("cosine_window", {.values = {"size", "w"}, .node_attributes = {"periodic", "output_datatype"}}, cosine_window);
  registry.add("widened_integer_arithmetic", {.values = {"a", "b", "y"}}, widened_integer_arithmetic);
  registry.add("pad_axes_as_full_pads",
               {.values = {"data", "pads", "axes", "y"}, .optional_values = {"value"}, .node_attributes = {"mode"}},
               pad_axes_as_full_pads);
  registry.add("celu_as_elu", {.values = {"x", "y"}, .optional_attributes = {"alpha"}}, celu_as_elu);
}

}  // namespace onnx_rewrite
