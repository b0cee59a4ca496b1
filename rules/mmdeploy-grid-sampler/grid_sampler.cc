// mmdeploy::grid_sampler / mmcv::grid_sampler (torch.nn.functional.grid_sample as mmdeploy and
// mmcv export it) as standard ONNX (grid-sampler.rules): GridSample from ai.onnx 16, or the
// sampling spelled out with Gather (ai.onnx >= 11), computed in the same float32 steps as the
// kernel (mmdeploy csrc/mmdeploy/backend_ops/onnxruntime/grid_sample/grid_sample.cpp, a copy of
// PyTorch's GridSampler.cpp), so that floor(), nearbyint() and the weights come out bit for bit.
//
// The Gather form works per spatial axis: the unnormalized coordinate, its padding, the integer
// taps (2 for bilinear, 1 for nearest, 4 for bicubic) with their weights and whether each is
// inside the image; then one Gather of the taps from the input seen as a table [N*H*W, C], and
// the weighted sum in the kernel's order. The sampling of rules/deform-conv is not shared:
// that one needs only bilinear sampling with zeros padding in pixel coordinates, this one the
// three paddings, three modes and the kernel's float32 order of operations.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;
constexpr int32_t kFloat = TensorProto::FLOAT;
constexpr int32_t kInt64 = TensorProto::INT64;

enum Interpolation : int64_t { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding : int64_t { kZeros = 0, kBorder = 1, kReflection = 2 };

struct GridSampler {
  Value input, grid;
  std::string output;
  int64_t mode = kBilinear, padding = kZeros;
  bool align_corners = false;
  size_t rank = 4;  // of input and grid
};

const char* padding_name(int64_t padding) { return padding == kZeros ? "zeros" : padding == kBorder ? "border" : "reflection"; }

// What the shapes and types allow; `float_only` says why other element types are declined.
std::string check_shapes(const Match& match, GridSampler& sampler, std::string_view float_only);

// The attributes (torch's enums, as mmdeploy and mmcv write them) and what the shapes allow.
std::string parse(const Match& match, GridSampler& sampler) {
  sampler.mode = match.attribute_int("interpolation_mode", kBilinear);
  sampler.padding = match.attribute_int("padding_mode", kZeros);
  const int64_t align_corners = match.attribute_int("align_corners", 0);
  if (sampler.mode < kBilinear || sampler.mode > kBicubic) {
    return fmt::format("interpolation_mode = {} is none of torch's 0 (bilinear), 1 (nearest), 2 (bicubic)", sampler.mode);
  }
  if (sampler.padding < kZeros || sampler.padding > kReflection) {
    return fmt::format("padding_mode = {} is none of torch's 0 (zeros), 1 (border), 2 (reflection)", sampler.padding);
  }
  if (align_corners != 0 && align_corners != 1) return fmt::format("align_corners = {} is not 0 or 1", align_corners);
  sampler.align_corners = align_corners == 1;
  return check_shapes(match, sampler, "mmdeploy's and mmcv's grid_sampler kernels are float32 only");
}

// ONNX GridSample-16/20's string attributes (16: bilinear/bicubic, 20: linear/cubic; torch's
// grid_sample is what GridSample was specified from), read into the same sampler.
std::string parse_onnx(const Match& match, GridSampler& sampler) {
  const std::string mode = string_attribute(*match.anchor, "mode", match.scope->opset("") >= 20 ? "linear" : "bilinear");
  const std::string padding = string_attribute(*match.anchor, "padding_mode", "zeros");
  if (mode == "bilinear" || mode == "linear") sampler.mode = kBilinear;
  else if (mode == "nearest") sampler.mode = kNearest;
  else if (mode == "bicubic" || mode == "cubic") sampler.mode = kBicubic;
  else return fmt::format("mode '{}' is not a GridSample mode", mode);
  if (padding == "zeros") sampler.padding = kZeros;
  else if (padding == "border") sampler.padding = kBorder;
  else if (padding == "reflection") sampler.padding = kReflection;
  else return fmt::format("padding_mode '{}' is not a GridSample padding mode", padding);
  const int64_t align_corners = int_attribute(*match.anchor, "align_corners", 0);
  if (align_corners != 0 && align_corners != 1) return fmt::format("align_corners = {} is not 0 or 1", align_corners);
  sampler.align_corners = align_corners == 1;
  return check_shapes(match, sampler, "the sampling is built in float32 only");
}

std::string check_shapes(const Match& match, GridSampler& sampler, std::string_view float_only) {
  sampler.input = {match.value("input")};
  sampler.grid = {match.value("grid")};
  sampler.output = match.value("y");
  const ShapeFacts &input = match.facts("input"), &grid = match.facts("grid");
  if (!input.rank() || !grid.rank()) return "the rank of the input or of the grid is unknown";
  if (*input.rank() != *grid.rank() || (*input.rank() != 4 && *input.rank() != 5)) {
    return fmt::format("input of rank {} and grid of rank {}: grid_sampler samples 4-D (or 5-D) inputs with grids of the same rank",
                       *input.rank(), *grid.rank());
  }
  sampler.rank = *input.rank();
  if (const int64_t last = grid.dim(sampler.rank - 1); last >= 0 && last != static_cast<int64_t>(sampler.rank) - 2) {
    return fmt::format("the grid's last dim is {}, a {}-D grid_sampler needs {}", last, sampler.rank, sampler.rank - 2);
  }
  for (const char* name : {"input", "grid"}) {
    const int32_t type = match.facts(name).elem_type;
    if (type == 0) return fmt::format("the element type of the {} is unknown", name);
    if (type != kFloat) return fmt::format("the {} is {}: {}", name, data_type_name(type), float_only);
  }
  return {};
}

// ---- GridSample ------------------------------------------------------------------------------

// GridSample-16 (4-D; modes bilinear, nearest, bicubic) or -20 (N-D; linear, nearest, cubic).
std::string build_grid_sample(const Match& match, GraphBuilder& b) {
  GridSampler sampler;
  if (auto why = parse(match, sampler); !why.empty()) return why;
  if (sampler.mode == kNearest && sampler.padding == kReflection && !sampler.align_corners) {
    // ONNX's reference and ORT round to the nearest pixel first, then reflect; torch reflects
    // the coordinate, then rounds. At x.5 they pick neighbouring pixels.
    return "nearest with reflection padding and align_corners = 0 differs from GridSample at .5 ties (GridSample rounds, "
           "then reflects; torch reflects, then rounds): left to the Gather decomposition";
  }
  if (sampler.rank == 5) {
    if (b.opset() < 20) return "a 5-D grid_sampler needs GridSample-20 (ai.onnx >= 20); the Gather decomposition is 4-D only";
    if (sampler.mode == kBicubic) return "bicubic sampling is 4-D only (torch, ONNX GridSample)";
  }
  const bool renamed = b.opset() >= 20;  // GridSample-20 calls the modes linear and cubic
  const std::string mode = sampler.mode == kBilinear ? (renamed ? "linear" : "bilinear")
                           : sampler.mode == kNearest ? "nearest"
                                                      : (renamed ? "cubic" : "bicubic");
  b.output(sampler.output, b.op("GridSample", {sampler.input, sampler.grid},
                                {attr("align_corners", int64_t{sampler.align_corners ? 1 : 0}), attr("mode", mode),
                                 attr("padding_mode", padding_name(sampler.padding))}));
  return {};
}

// ---- Gather ----------------------------------------------------------------------------------

// One spatial axis of the input: its size, a number when static, else computed from Shape(input).
class Axis {
 public:
  Axis(GraphBuilder& b, Value input, size_t dim_index, int64_t size) : b_(b), input_(input), index_(dim_index), size_(size) {}

  bool known() const { return size_ > 0; }
  int64_t size() const { return size_; }

  // size + delta as a float scalar.
  Value size_float(double delta = 0) {
    if (known()) return b_.scalar(static_cast<double>(size_) + delta, kFloat);
    if (float_size_.absent()) float_size_ = b_.Cast(size_int(), kFloat);
    return delta == 0 ? float_size_ : b_.Add(float_size_, b_.scalar(delta, kFloat));
  }
  Value size_int() {
    if (known()) return b_.scalar(static_cast<double>(size_), kInt64);
    if (int_size_.absent()) {
      const Value shape = b_.Shape(input_);
      int_size_ = b_.Gather(shape, b_.scalar(static_cast<double>(index_), kInt64));
    }
    return int_size_;
  }

 private:
  GraphBuilder& b_;
  Value input_;
  size_t index_;
  int64_t size_;
  Value float_size_, int_size_;
};

// grid_sampler_unnormalize: align_corners ((g + 1) / 2) * (size - 1), else ((g + 1) * size - 1) / 2.
Value unnormalize(GraphBuilder& b, Value g, Axis& axis, bool align_corners) {
  const Value shifted = b.Add(g, b.scalar(1, kFloat));
  if (align_corners) {
    const Value half = b.Div(shifted, b.scalar(2, kFloat));
    return b.Mul(half, axis.size_float(-1));
  }
  const Value scaled = b.Mul(shifted, axis.size_float());
  const Value less_one = b.Sub(scaled, b.scalar(1, kFloat));
  return b.Div(less_one, b.scalar(2, kFloat));
}

Value clip_to_image(GraphBuilder& b, Value c, Axis& axis) {
  return b.op("Clip", {c, b.scalar(0, kFloat), axis.size_float(-1)});
}

// reflect_coordinates about [low, low + span] (align_corners: pixel centres 0 and size - 1;
// else the outer edges -0.5 and size - 0.5), then clip_coordinates.
Value reflect(GraphBuilder& b, Value c, Axis& axis, bool align_corners) {
  if (align_corners && axis.known() && axis.size() == 1) return clip_to_image(b, c, axis);  // the kernel returns 0
  const double low = align_corners ? 0 : -0.5;
  const Value span = align_corners ? axis.size_float(-1) : axis.size_float();
  const Value distance = b.op("Abs", {low == 0 ? c : b.Sub(c, b.scalar(low, kFloat))});
  const Value extra = b.op("Mod", {distance, span}, {attr("fmod", int64_t{1})});
  const Value flips = b.Floor(b.Div(distance, span));
  const Value odd = b.op("Equal", {b.op("Mod", {flips, b.scalar(2, kFloat)}, {attr("fmod", int64_t{1})}), b.scalar(1, kFloat)});
  Value even_side = extra, odd_side = b.Sub(span, extra);
  if (low != 0) {
    even_side = b.Add(even_side, b.scalar(low, kFloat));
    odd_side = b.Add(odd_side, b.scalar(low, kFloat));
  }
  Value reflected = b.Where(odd, odd_side, even_side);
  if (align_corners && !axis.known()) {
    // size 1: the kernel returns 0 (the span is 0, fmod would give NaN).
    const Value empty = b.op("Equal", {span, b.scalar(0, kFloat)});
    reflected = b.Where(empty, b.scalar(0, kFloat), reflected);
  }
  return clip_to_image(b, reflected, axis);
}

// compute_coordinates: the padding mode applied to a float coordinate.
Value pad(GraphBuilder& b, Value c, Axis& axis, const GridSampler& sampler) {
  if (sampler.padding == kBorder) return clip_to_image(b, c, axis);
  if (sampler.padding == kReflection) return reflect(b, c, axis, sampler.align_corners);
  return c;
}

// The taps of one axis: integral float coordinates (a new tap axis at `tap_axis`), whether each
// is inside the image, and its int64 index (0 where outside, for Gather); bilinear: the weight of
// each tap; bicubic: the 4 coefficients as separate tensors (without a tap axis).
struct Taps {
  Value inside, index;
  Value weights;                    // bilinear
  std::array<Value, 4> cubic;       // bicubic
};

Value concat_taps(GraphBuilder& b, const std::vector<Value>& taps, int64_t tap_axis) {
  return taps.size() == 1 ? taps.front() : b.Concat(taps, tap_axis);
}

// ((A + 2) * x - (A + 3)) * x * x + 1 and ((A * x - 5A) * x + 8A) * x - 4A with A = -0.75, in
// the kernel's order (cubic_convolution1, cubic_convolution2).
Value convolution1(GraphBuilder& b, Value x) {
  const Value scaled = b.Mul(b.scalar(1.25, kFloat), x);
  const Value inner = b.Sub(scaled, b.scalar(2.25, kFloat));
  const Value cubic = b.Mul(b.Mul(inner, x), x);
  return b.Add(cubic, b.scalar(1, kFloat));
}
Value convolution2(GraphBuilder& b, Value x) {
  const Value scaled = b.Mul(b.scalar(-0.75, kFloat), x);
  const Value inner = b.Sub(scaled, b.scalar(-3.75, kFloat));
  const Value product = b.Mul(inner, x);
  const Value quadratic = b.Add(product, b.scalar(-6, kFloat));
  const Value cubic = b.Mul(quadratic, x);
  return b.Sub(cubic, b.scalar(-3, kFloat));
}

Taps taps(GraphBuilder& b, Value g, Axis& axis, const GridSampler& sampler, int64_t tap_axis) {
  Taps result;
  const Value unnormalized = unnormalize(b, g, axis, sampler.align_corners);
  Value coordinates;
  if (sampler.mode == kBicubic) {
    // The taps floor(u) - 1 .. floor(u) + 2 of the unpadded coordinate, each padded.
    const Value low = b.Floor(unnormalized);
    const Value t = b.Sub(unnormalized, low);
    std::vector<Value> each;
    for (int i = -1; i <= 2; ++i) each.push_back(i == 0 ? low : b.Add(low, b.scalar(i, kFloat)));
    coordinates = pad(b, concat_taps(b, each, tap_axis), axis, sampler);
    const Value opposite = b.Sub(b.scalar(1, kFloat), t);
    result.cubic = {convolution2(b, b.Add(t, b.scalar(1, kFloat))), convolution1(b, t), convolution1(b, opposite),
                    convolution2(b, b.Add(opposite, b.scalar(1, kFloat)))};
  } else {
    const Value c = pad(b, unnormalized, axis, sampler);
    if (sampler.mode == kNearest) {
      coordinates = b.op("Round", {c});  // nearbyint: half to even
    } else {
      const Value low = b.Floor(c);
      const Value high = b.Add(low, b.scalar(1, kFloat));
      coordinates = b.Concat({low, high}, tap_axis);
      result.weights = b.Concat({b.Sub(high, c), b.Sub(c, low)}, tap_axis);
    }
  }
  // Inside [0, size - 1]: for integral coordinates, -1 < c < size (false for NaN).
  result.inside = b.op("And", {b.op("Greater", {coordinates, b.scalar(-1, kFloat)}), b.op("Less", {coordinates, axis.size_float()})});
  result.index = b.Cast(b.Where(result.inside, coordinates, b.scalar(0, kFloat)), kInt64);
  return result;
}

// Splits `x` along `axis` into its `count` unit slices.
std::vector<Value> slices(GraphBuilder& b, Value x, int64_t axis, size_t count) {
  if (count == 1) return {x};
  return b.Split(x, axis, std::vector<int64_t>(count, 1));
}

// sum_i values[i] * weights[i], left to right as the kernel adds them.
Value weighted_sum(GraphBuilder& b, const std::vector<Value>& values, const std::vector<Value>& weights) {
  Value sum = b.Mul(values[0], weights[0]);
  for (size_t i = 1; i < values.size(); ++i) sum = b.Add(sum, b.Mul(values[i], weights[i]));
  return sum;
}

// Layout: the grid's coordinates as [N, H_out, W_out, 1, 1]; y taps on axis 3, x taps on axis 4;
// the gathered values [N, H_out, W_out, taps_y, taps_x, C]; the result transposed to
// [N, C, H_out, W_out].
std::string build_gather_from(const Match& match, GraphBuilder& b, const GridSampler& sampler) {
  if (sampler.rank != 4) return "the Gather decomposition samples 4-D inputs only (a 5-D one needs GridSample-20)";
  const ShapeFacts& input = match.facts("input");
  Axis height(b, sampler.input, 2, input.dim(2)), width(b, sampler.input, 3, input.dim(3));

  const std::vector<Value> xy = b.Split(b.Unsqueeze(sampler.grid, {4}), 3, {1, 1});  // each [N, H_out, W_out, 1, 1]
  const Taps along_x = taps(b, xy[0], width, sampler, 4);
  const Taps along_y = taps(b, xy[1], height, sampler, 3);

  // Row of (n, y, x) in the table [N*H*W, C]: (n*H + y)*W + x.
  Value index = b.Add(b.Mul(along_y.index, width.size_int()), along_x.index);
  if (input.dim(0) != 1) {
    const Value height_size = height.size_int();
    const Value plane = b.Mul(height_size, width.size_int());
    const Value shape = b.Shape(sampler.input);
    const Value batch = b.Gather(shape, b.scalar(0, kInt64));
    const Value starts = b.Mul(b.op("Range", {b.scalar(0, kInt64), batch, b.scalar(1, kInt64)}), plane);
    index = b.Add(index, b.Reshape(starts, b.ints({-1, 1, 1, 1, 1})));
  }
  const Value table = b.op("Flatten", {b.Transpose(sampler.input, {0, 2, 3, 1})}, {attr("axis", int64_t{3})});
  const Value values = b.Gather(table, index, 0);  // [N, H_out, W_out, taps_y, taps_x, C]
  const Value inside = b.Unsqueeze(b.op("And", {along_y.inside, along_x.inside}), {5});
  const Value zero = b.scalar(0, kFloat);

  Value sampled;  // [N, H_out, W_out, 1, 1, C]
  if (sampler.mode == kNearest) {
    sampled = b.Where(inside, values, zero);
  } else if (sampler.mode == kBilinear) {
    // value * (weight_x * weight_y), outside corners skipped, summed nw, ne, sw, se.
    const Value weights = b.Unsqueeze(b.Mul(along_x.weights, along_y.weights), {5});
    const Value terms = b.Where(inside, b.Mul(values, weights), zero);
    std::vector<Value> corners;
    for (const Value& row : slices(b, terms, 3, 2)) {
      for (const Value& corner : slices(b, row, 4, 2)) corners.push_back(corner);
    }
    sampled = b.Add(b.Add(b.Add(corners[0], corners[1]), corners[2]), corners[3]);
  } else {
    // cubic_interp1d along x for each of the 4 rows, then along y.
    const Value taps_values = b.Where(inside, values, zero);
    std::vector<Value> x_coefficients, y_coefficients;
    for (const Value& c : along_x.cubic) x_coefficients.push_back(b.Unsqueeze(c, {5}));
    for (const Value& c : along_y.cubic) y_coefficients.push_back(b.Unsqueeze(c, {5}));
    std::vector<Value> rows;
    for (const Value& row : slices(b, taps_values, 3, 4)) rows.push_back(weighted_sum(b, slices(b, row, 4, 4), x_coefficients));
    sampled = weighted_sum(b, rows, y_coefficients);
  }
  const Value channels_last = b.Squeeze(sampled, {3, 4});
  b.output(sampler.output, b.Transpose(channels_last, {0, 3, 1, 2}));
  return {};
}

}  // namespace

std::string build_gather(const Match& match, GraphBuilder& b) {
  GridSampler sampler;
  if (auto why = parse(match, sampler); !why.empty()) return why;
  return build_gather_from(match, b, sampler);
}

std::string build_gather_onnx(const Match& match, GraphBuilder& b) {
  GridSampler sampler;
  if (auto why = parse_onnx(match, sampler); !why.empty()) return why;
  return build_gather_from(match, b, sampler);
}

void register_mmdeploy_grid_sampler_builders(BuilderRegistry& registry) {
  const BuilderSignature signature{.values = {"input", "grid", "y"},
                                   .optional_values = {},
                                   .attributes = {"interpolation_mode", "padding_mode", "align_corners"},
                                   .optional_attributes = {}};
  registry.add("grid_sampler_grid_sample", signature, build_grid_sample);
  registry.add("grid_sampler_gather", signature, build_gather);
  // ONNX GridSample below opset 16 (rules/opset-down/grid-sample.rules): its own attributes.
  registry.add("grid_sample_gather", {.values = {"input", "grid", "y"}, .attributes = {}}, build_gather_onnx);
}

}  // namespace onnx_rewrite
