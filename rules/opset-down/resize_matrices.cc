// resize_as_matrices (rules/opset-down/resize.rules): a Resize whose input shape and output size
// are known is linear and separable. Along each resized axis, y = W · x for a constant matrix W
// [out × in] computed here as the ONNX specification defines the sampling (linear, cubic,
// antialias, every coordinate_transformation_mode), or, for mode nearest, a Gather of constant
// indices (exact for every element type). For runtimes whose Resize can't say what the node says:
// below 11 (Resize-10 has another meaning, and none before 10), and Resize-18/19's attributes
// below 18/19. Coordinates are computed in float, as ONNX Runtime's kernel computes them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

// A matrix or index table larger than this (4 Mi elements, 16 MiB of float) would weigh more
// than the model it serves: such a Resize stays as it was.
constexpr int64_t kMaxMatrixElements = int64_t{1} << 22;
// In sizes: the input's own size on that axis, known only at run time (the axis is left as it is).
constexpr int64_t kKeptUnknownSize = -1;
// An output length beyond any matrix: a scale that asks for more declines before the float product
// is converted to an integer.
constexpr float kMaxOutputSize = 1e15f;

// What the node says, read from its attributes and constant inputs.
struct Resize {
  std::string mode, transformation, nearest_mode;
  float cubic_a = -0.75f;
  bool exclude_outside = false, antialias = false;
  float extrapolation = 0.f;
  std::vector<int64_t> in, out;
  std::vector<float> scales;
  std::vector<float> roi_start, roi_end;
};

// Where output position x samples the input along an axis (the specification's
// coordinate_transformation_mode, in float).
float original_coordinate(const Resize& r, size_t axis, int64_t position) {
  const float x = static_cast<float>(position);
  const float scale = r.scales[axis];
  const float in = static_cast<float>(r.in[axis]);
  const float out = static_cast<float>(r.out[axis]);
  const std::string& mode = r.transformation;
  if (mode == "asymmetric") return x / scale;
  if (mode == "pytorch_half_pixel") return out > 1 ? (x + 0.5f) / scale - 0.5f : 0.f;
  if (mode == "tf_half_pixel_for_nn") return (x + 0.5f) / scale;
  if (mode == "align_corners") return out == 1 ? 0.f : x * (in - 1) / (out - 1);
  if (mode == "half_pixel_symmetric") {
    const float adjustment = out / (scale * in);
    const float offset = in / 2 * (1 - adjustment);
    return offset + (x + 0.5f) / scale - 0.5f;
  }
  if (mode == "tf_crop_and_resize") {
    const float start = r.roi_start[axis], end = r.roi_end[axis];
    if (out > 1) return start * (in - 1) + x * (end - start) * (in - 1) / (out - 1);
    return static_cast<float>(0.5 * (start + end) * (in - 1));
  }
  return (x + 0.5f) / scale - 0.5f;  // half_pixel
}

bool outside(const Resize& r, size_t axis, float coordinate) {
  return r.transformation == "tf_crop_and_resize" && (coordinate < 0 || coordinate > static_cast<float>(r.in[axis] - 1));
}

double cubic(double s, double a) {
  s = std::abs(s);
  if (s <= 1) return ((a + 2) * s - (a + 3)) * s * s + 1;
  if (s < 2) return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a;
  return 0;
}

// Row `o` of an axis' matrix (linear or cubic): the taps at left + i around the sample point,
// left + 1 the first at or past it; the filter stretched by 1/scale when antialiasing a
// downsampling; taps past an edge take the edge's value, or are dropped with exclude_outside
// (the rest renormalized). False when no tap is left.
bool add_taps(const Resize& r, size_t axis, float coordinate, double* row) {
  const double support = r.mode == "cubic" ? 2 : 1;
  const double s = r.antialias ? std::min(1.0, static_cast<double>(r.scales[axis])) : 1.0;
  const double below = std::floor(static_cast<double>(coordinate));
  const double ratio = coordinate == below ? 1.0 : coordinate - below;
  const int64_t left = static_cast<int64_t>(coordinate - ratio);
  const int64_t start = static_cast<int64_t>(std::floor(-support / s)) + 1;
  std::vector<std::pair<int64_t, double>> taps;
  double total = 0;
  for (int64_t i = start; i < 2 - start; ++i) {
    const int64_t at = left + i;
    if (r.exclude_outside && (at < 0 || at >= r.in[axis])) continue;
    const double d = (static_cast<double>(i) - ratio) * s;
    const double w = r.mode == "cubic" ? cubic(d, r.cubic_a) : std::max(0.0, 1 - std::abs(d));
    taps.emplace_back(std::clamp<int64_t>(at, 0, r.in[axis] - 1), w);
    total += w;
  }
  if (total == 0) return false;
  const bool normalized = r.antialias || r.exclude_outside;
  for (const auto& [at, w] : taps) row[at] += normalized ? w / total : w;
  return true;
}

// The nearest input position (nearest_mode), clamped into the axis.
int64_t nearest(const Resize& r, size_t axis, float x) {
  int64_t at = 0;
  if (r.nearest_mode == "floor") at = static_cast<int64_t>(std::floor(x));
  else if (r.nearest_mode == "ceil") at = static_cast<int64_t>(std::ceil(x));
  else if (r.nearest_mode == "round_prefer_ceil") at = static_cast<int64_t>(std::round(x));
  else at = x == static_cast<float>(static_cast<int64_t>(x)) + 0.5f ? static_cast<int64_t>(x) : static_cast<int64_t>(std::round(x));
  return std::clamp<int64_t>(at, 0, r.in[axis] - 1);
}

// One axis' resampling: a matrix [out × in] (row-major), or the indices of nearest.
struct AxisMap {
  std::vector<double> matrix = {};
  std::vector<int64_t> indices = {};
  std::vector<bool> inside = {};  // per output position (tf_crop_and_resize)
  bool identity = true;
};

std::optional<AxisMap> axis_map(const Resize& r, size_t axis, std::string& why) {
  const int64_t in = r.in[axis], out = r.out[axis];
  AxisMap map;
  map.identity = in == out;
  map.inside.assign(static_cast<size_t>(out), true);
  if (r.mode != "nearest") map.matrix.assign(static_cast<size_t>(out * in), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    const float coordinate = original_coordinate(r, axis, o);
    if (!std::isfinite(coordinate)) {
      why = fmt::format("output position {} of axis {} samples at {}", o, axis, coordinate);
      return std::nullopt;
    }
    if (outside(r, axis, coordinate)) {
      if (r.mode == "nearest") map.indices.push_back(0);  // any: Where replaces it
      map.inside[static_cast<size_t>(o)] = false;
      map.identity = false;
      continue;
    }
    if (r.mode == "nearest") {
      map.indices.push_back(nearest(r, axis, coordinate));
      map.identity = map.identity && map.indices.back() == o;
      continue;
    }
    double* row = &map.matrix[static_cast<size_t>(o * in)];
    if (!add_taps(r, axis, coordinate, row)) {
      why = fmt::format("no input position is left to sample output position {} of axis {}", o, axis);
      return std::nullopt;
    }
    for (int64_t i = 0; i < in && map.identity; ++i) map.identity = row[i] == (i == o ? 1.0 : 0.0);
  }
  return map;
}

// The sizes of the resized axes (or of every axis): scales, or sizes with keep_aspect_ratio_policy,
// as ONNX Runtime computes them (output = scale · input truncated; a policy's size rounded).
std::optional<std::string> read_sizes(const BuildContext& match, Resize& r, const std::vector<int64_t>& axes) {
  const NodeView node = match.anchor();
  std::optional<TensorValues> scales;
  if (match.has("scales")) {
    scales = match.constant("scales");
    if (!scales) return "'scales' is computed at run time";
    if (scales->numbers.empty()) scales.reset();  // Resize-11 writes an empty one when sizes are given
  }
  std::vector<int64_t> sizes;
  if (!scales && match.has("sizes")) {
    if (const auto constant = match.constant("sizes")) sizes = constant->ints();
    else if (const auto& values = match.facts("sizes").values) {
      const auto& x_shape = match.facts("x").shape;
      for (size_t i = 0; i < values->size(); ++i) {
        const Dim& dim = (*values)[i];
        const size_t axis = i < axes.size() ? static_cast<size_t>(axes[i]) : i;
        // The input's own size, known only at run time (Shape (x) sliced into sizes): kept.
        const bool same_as_x = !dim.known() && x_shape && axis < x_shape->size() && dim == (*x_shape)[axis];
        if (!dim.known() && !same_as_x) return "'sizes' is computed at run time";
        sizes.push_back(same_as_x ? kKeptUnknownSize : *dim.number);
      }
    } else return "'sizes' is computed at run time";
  }
  if (!scales && !match.has("sizes")) return "neither scales nor sizes is given";
  const size_t given = scales ? scales->numbers.size() : sizes.size();
  if (given != axes.size()) return fmt::format("{} scales or sizes for {} axes", given, axes.size());
  const std::string policy = node.attribute_string("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller") return fmt::format("keep_aspect_ratio_policy {}", policy);
  float kept = policy == "not_larger" ? std::numeric_limits<float>::infinity() : 0.f;
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto axis = static_cast<size_t>(axes[i]);
    const float in = static_cast<float>(r.in[axis]);
    if (r.in[axis] < 0) {  // known only at run time: only an axis left as it is can say its output size
      const bool kept = scales ? scales->numbers[i] == 1.0 : sizes[i] == kKeptUnknownSize && policy == "stretch";
      if (!kept || r.transformation.starts_with("tf_")) return fmt::format("the size of 'x' on axis {} is known only at run time", axis);
      continue;  // out = in = -1, scale 1
    }
    if (!scales && sizes[i] == kKeptUnknownSize) return "'sizes' is computed at run time";
    if (scales) {
      r.scales[axis] = static_cast<float>(scales->numbers[i]);
      if (!(r.scales[axis] > 0 && r.scales[axis] * in < kMaxOutputSize)) {
        return fmt::format("scale {} on axis {} gives no output size a matrix could have", r.scales[axis], axis);
      }
      r.out[axis] = static_cast<int64_t>(r.scales[axis] * in);
      continue;
    }
    if (sizes[i] <= 0 || sizes[i] > kMaxMatrixElements) return fmt::format("size {} on axis {} is no size a matrix could have", sizes[i], axis);
    r.out[axis] = sizes[i];
    r.scales[axis] = static_cast<float>(sizes[i]) / in;
    kept = policy == "not_larger" ? std::min(kept, r.scales[axis]) : std::max(kept, r.scales[axis]);
  }
  if (!scales && policy != "stretch") {
    for (const int64_t axis : axes) {
      r.scales[static_cast<size_t>(axis)] = kept;
      r.out[static_cast<size_t>(axis)] = static_cast<int64_t>(std::round(kept * static_cast<float>(r.in[static_cast<size_t>(axis)])));
    }
  }
  return std::nullopt;
}

// The roi of tf_crop_and_resize, per axis (the others [0, 1]).
std::optional<std::string> read_roi(const BuildContext& match, Resize& r, const std::vector<int64_t>& axes) {
  r.roi_start.assign(r.in.size(), 0.f);
  r.roi_end.assign(r.in.size(), 1.f);
  if (r.transformation != "tf_crop_and_resize") return std::nullopt;
  const auto roi = match.has("roi") ? match.constant("roi") : std::nullopt;
  if (!roi) return "tf_crop_and_resize without a constant roi";
  if (roi->numbers.size() != 2 * axes.size()) return fmt::format("roi has {} values for {} axes", roi->numbers.size(), axes.size());
  for (size_t i = 0; i < axes.size(); ++i) {
    r.roi_start[static_cast<size_t>(axes[i])] = static_cast<float>(roi->numbers[i]);
    r.roi_end[static_cast<size_t>(axes[i])] = static_cast<float>(roi->numbers[axes.size() + i]);
  }
  return std::nullopt;
}

// An attribute of another type than Resize's schema gives (an INT extrapolation_value) would be
// read as its default here, while a runtime refuses the node.
std::optional<std::string> check_attribute_types(const NodeView& node) {
  using A = onnx::AttributeProto;
  static const std::vector<std::pair<const char*, A::AttributeType>> kTypes = {
      {"mode", A::STRING}, {"coordinate_transformation_mode", A::STRING}, {"nearest_mode", A::STRING},
      {"keep_aspect_ratio_policy", A::STRING}, {"cubic_coeff_a", A::FLOAT}, {"extrapolation_value", A::FLOAT},
      {"exclude_outside", A::INT}, {"antialias", A::INT}, {"axes", A::INTS}};
  for (const auto& [name, type] : kTypes) {
    const auto* attribute = node.attribute(name);
    if (attribute && attribute->type() != type) return fmt::format("attribute {} has another type than Resize's", name);
  }
  return std::nullopt;
}

std::optional<std::string> read_resize(const BuildContext& match, Resize& r) {
  const NodeView node = match.anchor();
  if (auto why = check_attribute_types(node)) return why;
  r.mode = node.attribute_string("mode", "nearest");
  r.transformation = node.attribute_string("coordinate_transformation_mode", "half_pixel");
  r.nearest_mode = node.attribute_string("nearest_mode", "round_prefer_floor");
  r.cubic_a = node.attribute_float("cubic_coeff_a", -0.75f);
  r.exclude_outside = node.attribute_int("exclude_outside", 0) != 0;
  r.antialias = node.attribute_int("antialias", 0) != 0;
  r.extrapolation = node.attribute_float("extrapolation_value", 0.f);
  static const std::set<std::string> kModes = {"nearest", "linear", "cubic"};
  static const std::set<std::string> kTransformations = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                                         "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  static const std::set<std::string> kNearestModes = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  if (!kModes.contains(r.mode)) return fmt::format("mode {}", r.mode);
  if (!kTransformations.contains(r.transformation)) return fmt::format("coordinate_transformation_mode {}", r.transformation);
  if (r.mode == "nearest" && !kNearestModes.contains(r.nearest_mode)) return fmt::format("nearest_mode {}", r.nearest_mode);
  if (r.mode == "nearest" && r.antialias) return "antialias in mode nearest, which the specification leaves undefined";
  const auto dims = match.facts("x").static_dims();
  if (!dims) return "the rank of 'x' is unknown";
  // A size known only at run time (-1) is fine on an axis the node leaves as it is (read_sizes).
  for (size_t axis = 0; axis < dims->size(); ++axis) {
    if ((*dims)[axis] == 0) return fmt::format("'x' is empty on axis {}", axis);
  }
  r.in = r.out = *dims;
  r.scales.assign(dims->size(), 1.f);
  const auto rank = static_cast<int64_t>(dims->size());
  std::vector<int64_t> axes = node.attribute_ints("axes");
  if (!node.has_attribute("axes")) {
    for (int64_t axis = 0; axis < rank; ++axis) axes.push_back(axis);
  }
  for (int64_t& axis : axes) {
    if (axis < -rank || axis >= rank) return fmt::format("axis {} is out of range for rank {}", axis, rank);
    if (axis < 0) axis += rank;
  }
  if (std::set<int64_t>(axes.begin(), axes.end()).size() != axes.size()) return "an axis is repeated";
  if (auto why = read_sizes(match, r, axes)) return why;
  for (size_t axis = 0; axis < r.out.size(); ++axis) {
    if (r.out[axis] == 0 || (r.out[axis] < 0 && r.in[axis] >= 0)) return fmt::format("the output is empty on axis {}", axis);
  }
  return read_roi(match, r, axes);
}

// Every axis' map. An axis of scale 1 that keeps its size maps each position to itself in every
// mode but the tf_ ones (checked in float: x · (n - 1) / (n - 1) is x): left without a matrix,
// however large.
std::optional<std::vector<AxisMap>> axis_maps(const Resize& r, std::string& why) {
  std::vector<AxisMap> maps;
  for (size_t axis = 0; axis < r.in.size(); ++axis) {
    const int64_t in = r.in[axis], out = r.out[axis];
    if (in == out && r.scales[axis] == 1.f && !r.transformation.starts_with("tf_")) {
      maps.push_back({.inside = std::vector<bool>(static_cast<size_t>(std::max<int64_t>(out, 1)), true)});
      continue;
    }
    const int64_t elements = r.mode == "nearest" ? out : in * out;  // Gather's indices, or a matrix
    if (out > kMaxMatrixElements || elements > kMaxMatrixElements) {
      why = fmt::format("the {} of axis {} would take {} elements, above the cap of {}", r.mode == "nearest" ? "indices" : "matrix", axis,
                        elements, kMaxMatrixElements);
      return std::nullopt;
    }
    auto map = axis_map(r, axis, why);
    if (!map) return std::nullopt;
    maps.push_back(std::move(*map));
  }
  return maps;
}

// v resampled along `axis` by the matrix: MatMul(W, v) broadcasts W over the axes before the last
// two; the last axis takes MatMul(v, Wᵀ); another is transposed to the last place and back.
Value apply_matrix(GraphBuilder& b, Value v, const AxisMap& map, const Resize& r, size_t axis, int32_t type) {
  const int64_t in = r.in[axis], out = r.out[axis];
  const size_t rank = r.in.size();
  if (axis + 2 == rank) {
    const Value w = b.constant(make_tensor(type, {out, in}, map.matrix));
    return b.MatMul(w, v);
  }
  std::vector<double> transposed(map.matrix.size());
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) transposed[static_cast<size_t>(i * out + o)] = map.matrix[static_cast<size_t>(o * in + i)];
  }
  const Value wt = b.constant(make_tensor(type, {in, out}, transposed));
  if (axis + 1 == rank) return b.MatMul(v, wt);
  std::vector<int64_t> perm(rank);
  for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[axis], perm.back());  // its own inverse
  const Value moved = b.Transpose(v, perm);
  const Value resized = b.MatMul(moved, wt);
  return b.Transpose(resized, perm);
}

// Where tf_crop_and_resize's sample points fall outside the input (y is extrapolation_value
// there): over the axes that have such points, the out size (1 elsewhere), whether each is inside.
struct Outside {
  std::vector<int64_t> dims;
  std::vector<double> inside;  // 1 or 0 per element
};

std::optional<Outside> outside_positions(const Resize& r, const std::vector<AxisMap>& maps, std::string& why) {
  Outside found{std::vector<int64_t>(r.in.size(), 1), {}};
  int64_t elements = 1;
  for (size_t axis = 0; axis < maps.size(); ++axis) {
    if (std::find(maps[axis].inside.begin(), maps[axis].inside.end(), false) == maps[axis].inside.end()) continue;
    found.dims[axis] = r.out[axis];
    elements *= r.out[axis];
  }
  const bool any = std::any_of(maps.begin(), maps.end(), [](const AxisMap& m) {
    return std::find(m.inside.begin(), m.inside.end(), false) != m.inside.end();
  });
  if (!any) return std::nullopt;
  if (elements > kMaxMatrixElements) {
    why = fmt::format("the extrapolated positions would take {} elements, above the cap of {}", elements, kMaxMatrixElements);
    return std::nullopt;
  }
  found.inside.resize(static_cast<size_t>(elements));
  for (int64_t flat = 0; flat < elements; ++flat) {
    bool inside = true;
    int64_t rest = flat;
    for (size_t axis = found.dims.size(); axis-- > 0;) {
      const int64_t size = found.dims[axis];
      if (size != 1 || !maps[axis].inside[0]) inside = inside && maps[axis].inside[static_cast<size_t>(rest % size)];
      rest /= size;
    }
    found.inside[static_cast<size_t>(flat)] = inside ? 1.0 : 0.0;
  }
  return found;
}

// y with extrapolation_value where a sample falls outside. The matrices' rows there are zero: a
// constant is added (0 inside; NaN and inf added as they are). Gather took some element there:
// Where picks the value instead (Where exists from opset 9).
std::optional<std::string> extrapolate(GraphBuilder& b, Value& v, const Resize& r, const Outside& outside, int32_t type) {
  if (r.mode != "nearest") {
    if (r.extrapolation == 0.f) return std::nullopt;
    std::vector<double> values(outside.inside.size());
    for (size_t i = 0; i < values.size(); ++i) values[i] = outside.inside[i] != 0 ? 0.0 : r.extrapolation;
    const Value added = b.constant(make_tensor(type, outside.dims, values));
    v = b.Add(v, added);
    return std::nullopt;
  }
  if (b.opset() < 9) {
    return "tf_crop_and_resize samples outside the input in mode nearest: the Where that fills extrapolation_value needs opset 9";
  }
  const double e = r.extrapolation;
  if (!is_float_type(type) && (type == onnx::TensorProto::BOOL || e != std::trunc(e) || e < 0 || e > 127)) {
    return fmt::format("extrapolation_value {} in a tensor of {}", e, data_type_name(type));
  }
  const Value inside = b.constant(make_tensor(onnx::TensorProto::BOOL, outside.dims, outside.inside));
  const Value fill = b.constant(make_tensor(type, {}, {e}));
  v = b.Where(inside, v, fill);
  return std::nullopt;
}

// Whether the target's own Resize says what the node says: then the Resize rules lower it as a node.
bool target_resize_means_the_same(const NodeView& node, int opset) {
  const bool uses_18 = node.has_attribute("antialias") || node.has_attribute("axes") || node.has_attribute("keep_aspect_ratio_policy");
  const bool uses_19 = node.attribute_string("coordinate_transformation_mode") == "half_pixel_symmetric";
  return opset >= 11 && (opset >= 18 || !uses_18) && (opset >= 19 || !uses_19);
}

}  // namespace

// Resize with x's shape static and the output size constant, below the opset that can say it.
BuildResult resize_as_matrices(const BuildContext& match, GraphBuilder& b) {
  if (target_resize_means_the_same(match.anchor(), b.opset())) {
    return decline(fmt::format("Resize at opset {} says what the node says", b.opset()));
  }
  Resize r;
  if (auto why = read_resize(match, r)) return decline(*why);
  const int32_t type = match.element_type({"x"});
  if (type == 0) return decline("the element type of 'x' is unknown");
  // ONNX Runtime 1.30 runs MatMul of float16 from opset 1 on, its weights rounded to float16.
  static const std::set<int32_t> kMatMulTypes = {onnx::TensorProto::FLOAT, onnx::TensorProto::DOUBLE, onnx::TensorProto::FLOAT16};
  if (r.mode != "nearest") {
    if (auto why = check_element_type(type, kMatMulTypes, "MatMul")) return decline(*why);
  }
  if (const auto declared = match.facts("y").static_dims(); declared && declared->size() == r.out.size()) {
    for (size_t axis = 0; axis < r.out.size(); ++axis) {
      if ((*declared)[axis] >= 0 && r.out[axis] >= 0 && (*declared)[axis] != r.out[axis]) {
        return decline(fmt::format("'y' is declared with size {} on axis {}, the node computes {}", (*declared)[axis], axis, r.out[axis]));
      }
    }
  }
  std::string why;
  const auto maps = axis_maps(r, why);
  if (!maps) return decline(why);
  const auto extrapolated = outside_positions(r, *maps, why);
  if (!why.empty()) return decline(why);
  Value v = match.value("x");
  for (size_t axis = 0; axis < maps->size(); ++axis) {
    const AxisMap& map = (*maps)[axis];
    if (map.identity) continue;
    if (r.mode != "nearest") {
      v = apply_matrix(b, v, map, r, axis, type);
      continue;
    }
    const Value indices = b.constant(make_int64_tensor({r.out[axis]}, map.indices));
    v = b.Gather(v, indices, static_cast<int64_t>(axis));
  }
  if (extrapolated) {
    if (auto reason = extrapolate(b, v, r, *extrapolated, type)) return decline(*reason);
  }
  if (v.name == match.value("x").name) v = b.Identity(v);
  b.output(match.value("y"), v);
  return built();
}

}  // namespace onnx_rewrite
