// Deformable convolution with torchvision.ops.deform_conv2d's semantics, from the forms exporters
// write (custom::deform_conv2d, mmcv::MMCVDeformConv2d, mmcv::MMCVModulatedDeformConv2d, and
// ai.onnx DeformConv itself) to what a runtime has: ai.onnx DeformConv (opset >= 19), or
// bilinear sampling with GridSample (opset >= 16) or with Gather (opset >= 11), each followed by
// one Conv. Rules: rules/deform-conv/deform-conv-*.rules; the math and the evidence: rules/deform-conv/README.md.
//
// Both decompositions lay the sampled values out as an image [N, C, out_h*kh, out_w*kw] in which
// output position (y, x) owns the kh x kw tile of its kernel taps; a Conv with the original
// weights, stride = kernel size and the original groups then computes the convolution (bias
// included) exactly as the deformable convolution's im2col + GEMM does.
#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/toolkit.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;
constexpr int32_t kInt64 = TensorProto::INT64;

// A deformable convolution in torchvision's terms, whatever form it was exported in.
struct DeformConv {
  Value input, weight, offset, mask, bias;  // mask and bias absent when not used
  std::string output;
  int64_t kernel_h = 0, kernel_w = 0;       // 0 while unknown
  int64_t channels = 0;                     // input channels, 0 while unknown
  int64_t groups = 1, offset_groups = 1;
  std::array<int64_t, 2> stride{1, 1}, dilation{1, 1};
  std::array<int64_t, 4> pads{0, 0, 0, 0};  // ONNX order: top, left, bottom, right
  int32_t dtype = 0;                        // element type, 0 while unknown

  int64_t kernel_size() const { return kernel_h * kernel_w; }
  int64_t kernel(int axis) const { return axis == 0 ? kernel_h : kernel_w; }
  // The output size along spatial axis `axis` (0 = h) for an input of `size`; 0 when the padded
  // input is smaller than the dilated kernel.
  int64_t output_size(int axis, int64_t size) const {
    const int64_t room = size + pads[axis] + pads[axis + 2] - dilation[axis] * (kernel(axis) - 1) - 1;
    return room < 0 ? 0 : room / stride[axis] + 1;
  }
};

// The largest stride, dilation, padding, group count, kernel size or static dim decomposed: no
// image comes near, and products of two stay far from overflowing.
constexpr int64_t kLargestSize = int64_t{1} << 24;
// The largest constant of tap positions written; beyond, they are computed at run time.
constexpr int64_t kLargestTapConstant = int64_t{1} << 16;

// Dimension `axis` of a value's static shape, or 0 when unknown.
int64_t static_dim(const ShapeFacts& facts, size_t axis) { return std::max<int64_t>(facts.dim(axis), 0); }

// An attribute with one value per spatial axis (h, w): an int, or ints [v] for both axes, or
// [h, w]. With `doubled_pairs`, also [h, h, w, w] as mmdeploy writes padding (zip(padding, padding)).
std::string read_pair(const Match& match, const std::string& name, std::array<int64_t, 2>& pair,
                      bool doubled_pairs = false) {
  if (!match.attribute(name)) return {};
  const std::vector<int64_t> values = match.attribute_ints(name);
  if (values.size() == 1) {
    pair = {values[0], values[0]};
  } else if (values.size() == 2) {
    pair = {values[0], values[1]};
  } else if (doubled_pairs && values.size() == 4 && values[0] == values[1] && values[2] == values[3]) {
    pair = {values[0], values[2]};
  } else {
    return fmt::format("attribute {} = [{}] does not give one value per spatial axis (h, w)", name,
                       fmt::join(values, ", "));
  }
  return {};
}

// custom::deform_conv2d(input, weight, offset[, mask, bias]) with torchvision.ops.deform_conv2d's
// arguments as attributes. Absent ones take torchvision's values: stride 1, padding 0, dilation 1,
// the group counts the shapes imply (1 when they are unknown), use_mask = whether a mask is given.
std::string parse_torchvision(const Match& match, DeformConv& conv) {
  conv.stride = {match.attribute_int("stride_h", 1), match.attribute_int("stride_w", 1)};
  const int64_t pad_h = match.attribute_int("pad_h", 0), pad_w = match.attribute_int("pad_w", 0);
  conv.pads = {pad_h, pad_w, pad_h, pad_w};
  conv.dilation = {match.attribute_int("dilation_h", 1), match.attribute_int("dilation_w", 1)};

  const ShapeFacts &input = match.facts("input"), &weight = match.facts("weight"), &offset = match.facts("offset");
  const int64_t channels = static_dim(input, 1), channels_per_group = static_dim(weight, 1);
  if (match.attribute("groups")) {
    conv.groups = match.attribute_int("groups", 1);
  } else if (channels && channels_per_group) {
    if (channels % channels_per_group) {
      return fmt::format("input has {} channels, not a multiple of the weight's {} input channels", channels,
                         channels_per_group);
    }
    conv.groups = channels / channels_per_group;
  }
  const int64_t kernel_size = static_dim(weight, 2) * static_dim(weight, 3), offset_channels = static_dim(offset, 1);
  if (match.attribute("offset_groups")) {
    conv.offset_groups = match.attribute_int("offset_groups", 1);
  } else if (kernel_size && offset_channels && offset_channels % (2 * kernel_size) == 0) {
    conv.offset_groups = offset_channels / (2 * kernel_size);
  }

  const bool use_mask = match.attribute_int("use_mask", match.has_value("mask") ? 1 : 0) != 0;
  if (use_mask && !match.has_value("mask")) return "use_mask = 1, but the mask input is absent";
  if (!use_mask) conv.mask = {};
  return {};
}

// mmcv::MMCVDeformConv2d(input, offset, weight) and
// mmcv::MMCVModulatedDeformConv2d(input, offset, mask, weight[, bias]): stride, padding and
// dilation as (h, w) pairs, groups, deform_groups; the mmdeploy domain's padding may be [h, h, w, w].
std::string parse_mmcv(const Match& match, DeformConv& conv) {
  std::array<int64_t, 2> padding{0, 0};
  for (const auto& why : {read_pair(match, "stride", conv.stride), read_pair(match, "padding", padding, true),
                          read_pair(match, "dilation", conv.dilation)}) {
    if (!why.empty()) return why;
  }
  conv.pads = {padding[0], padding[1], padding[0], padding[1]};
  conv.groups = match.attribute_int("groups", 1);
  conv.offset_groups = match.attribute_int("deform_groups", 1);
  return {};
}

// ai.onnx DeformConv(X, W, offset[, B, mask]): strides, pads [top, left, bottom, right],
// dilations, group, offset_group, kernel_shape.
std::string parse_onnx(const Match& match, DeformConv& conv) {
  auto read = [&](const std::string& name, auto& into) -> std::string {
    if (!match.attribute(name)) return {};
    const std::vector<int64_t> values = match.attribute_ints(name);
    if (values.size() != into.size()) {
      return fmt::format("attribute {} has {} values, a 2-D DeformConv needs {}", name, values.size(), into.size());
    }
    std::copy(values.begin(), values.end(), into.begin());
    return {};
  };
  std::array<int64_t, 2> kernel_shape{0, 0};
  for (const auto& why : {read("strides", conv.stride), read("pads", conv.pads), read("dilations", conv.dilation),
                          read("kernel_shape", kernel_shape)}) {
    if (!why.empty()) return why;
  }
  conv.kernel_h = kernel_shape[0];
  conv.kernel_w = kernel_shape[1];
  conv.groups = match.attribute_int("group", 1);
  conv.offset_groups = match.attribute_int("offset_group", 1);
  return {};
}

// The matched op in torchvision's terms, with what the shapes tell (kernel size, channels,
// element type) checked for consistency.
std::string parse(const Match& match, DeformConv& conv) {
  conv.input = {match.value("input")};
  conv.weight = {match.value("weight")};
  conv.offset = {match.value("offset")};
  conv.mask = {match.has_value("mask") ? match.value("mask") : ""};
  conv.bias = {match.has_value("bias") ? match.value("bias") : ""};
  conv.output = match.value("y");

  const std::string& op = match.anchor->op_type();
  const std::string why = op == "DeformConv"         ? parse_onnx(match, conv)
                          : op == "deform_conv2d"    ? parse_torchvision(match, conv)
                          : op.starts_with("MMCV")   ? parse_mmcv(match, conv)
                                                     : "not a deformable convolution: " + op;
  if (!why.empty()) return why;

  const ShapeFacts &input = match.facts("input"), &weight = match.facts("weight"), &offset = match.facts("offset");
  for (const auto& [name, type] : {std::pair{"input", &input}, {"weight", &weight}, {"offset", &offset}}) {
    if (type->rank() && *type->rank() != 4) {
      return fmt::format("{} has rank {}, a 2-D deformable convolution needs 4", name, *type->rank());
    }
  }
  if (conv.stride[0] < 1 || conv.stride[1] < 1 || conv.dilation[0] < 1 || conv.dilation[1] < 1) {
    return "strides and dilations must be positive";
  }
  for (int64_t pad : conv.pads) {
    if (pad < 0) return "negative padding";
  }
  if (conv.groups < 1 || conv.offset_groups < 1) return "groups and offset groups must be positive";
  // Sizes no image has keep the arithmetic below from overflowing (a size times a stride).
  for (int64_t size : {conv.stride[0], conv.stride[1], conv.dilation[0], conv.dilation[1], conv.pads[0], conv.pads[1],
                       conv.pads[2], conv.pads[3], conv.groups, conv.offset_groups, conv.kernel_h, conv.kernel_w}) {
    if (size > kLargestSize) return fmt::format("a stride, dilation, padding, group count or kernel size is {}, above {}", size, kLargestSize);
  }

  for (const auto& [name, facts] : {std::pair{"input", &input}, {"weight", &weight}, {"offset", &offset}}) {
    for (size_t axis = 0; axis < 4; ++axis) {
      if (static_dim(*facts, axis) > kLargestSize) {
        return fmt::format("{} is {} along axis {}, above {}", name, static_dim(*facts, axis), axis, kLargestSize);
      }
    }
  }
  if (const int64_t kh = static_dim(weight, 2), kw = static_dim(weight, 3); kh && kw) {
    if (conv.kernel_h && (conv.kernel_h != kh || conv.kernel_w != kw)) {
      return fmt::format("kernel_shape [{}, {}] differs from the weight's [{}, {}]", conv.kernel_h, conv.kernel_w, kh, kw);
    }
    conv.kernel_h = kh;
    conv.kernel_w = kw;
  }
  const int64_t from_weight = static_dim(weight, 1) * conv.groups, from_input = static_dim(input, 1);
  if (from_weight && from_input && from_weight != from_input) {
    return fmt::format("input has {} channels, the weight expects {} ({} groups)", from_input, from_weight, conv.groups);
  }
  conv.channels = from_weight ? from_weight : from_input;
  if (conv.channels && conv.channels % conv.offset_groups) {
    return fmt::format("{} input channels don't split into {} offset groups", conv.channels, conv.offset_groups);
  }
  if (const int64_t out_channels = static_dim(weight, 0); out_channels && out_channels % conv.groups) {
    return fmt::format("{} output channels don't split into {} groups", out_channels, conv.groups);
  }
  if (const int64_t offset_channels = static_dim(offset, 1); offset_channels && conv.kernel_size() &&
                                                             offset_channels != 2 * conv.offset_groups * conv.kernel_size()) {
    return fmt::format("offset has {} channels, {} offset groups of a {}x{} kernel need {}", offset_channels,
                       conv.offset_groups, conv.kernel_h, conv.kernel_w, 2 * conv.offset_groups * conv.kernel_size());
  }
  if (!conv.mask.absent()) {
    if (const int64_t mask_channels = static_dim(match.facts("mask"), 1);
        mask_channels && conv.kernel_size() && mask_channels != conv.offset_groups * conv.kernel_size()) {
      return fmt::format("mask has {} channels, {} offset groups of a {}x{} kernel need {}", mask_channels,
                         conv.offset_groups, conv.kernel_h, conv.kernel_w, conv.offset_groups * conv.kernel_size());
    }
  }
  // The output size the static input size implies must be the offset's and the mask's.
  for (int axis : {0, 1}) {
    const int64_t size = static_dim(input, static_cast<size_t>(axis + 2));
    if (!size || !conv.kernel(axis)) continue;
    const int64_t out = conv.output_size(axis, size);
    if (out < 1) return fmt::format("the padded input is smaller than the kernel along {}", axis ? "width" : "height");
    for (const char* name : {"offset", "mask"}) {
      const int64_t declared = match.has_value(name) ? static_dim(match.facts(name), static_cast<size_t>(axis + 2)) : 0;
      if (declared && declared != out) {
        return fmt::format("{} is {} along {}, the output is {}", name, declared, axis ? "width" : "height", out);
      }
    }
  }
  for (const char* name : {"weight", "input", "offset"}) {
    if (!conv.dtype) conv.dtype = match.facts(name).elem_type;
  }
  return {};
}

// ---- ai.onnx DeformConv ------------------------------------------------------------------------

std::string build_deform_conv(const Match& match, GraphBuilder& b) {
  DeformConv conv;
  if (auto why = parse(match, conv); !why.empty()) return why;
  Attributes attributes;
  auto add_unless = [&](const char* name, const auto& values, int64_t ignored) {
    if (std::any_of(values.begin(), values.end(), [&](int64_t v) { return v != ignored; })) {
      attributes.push_back(attr(name, std::vector<int64_t>(values.begin(), values.end())));
    }
  };
  add_unless("strides", conv.stride, 1);
  add_unless("pads", conv.pads, 0);
  add_unless("dilations", conv.dilation, 1);
  if (conv.groups != 1) attributes.push_back(attr("group", conv.groups));
  if (conv.offset_groups != 1) attributes.push_back(attr("offset_group", conv.offset_groups));
  b.output(conv.output, b.op("DeformConv", {conv.input, conv.weight, conv.offset, conv.bias, conv.mask}, attributes));
  return {};
}

// ---- Spatial sizes: known while rewriting, or computed by the graph ---------------------------

// The input's height and width and the output's: numbers when the input's are static (the
// output's follow), else computed from Shape(input) and Shape(offset) (symbolic H, W).
class Spatial {
 public:
  Spatial(const Match& match, const DeformConv& conv, GraphBuilder& b) : conv_(conv), b_(b) {
    const ShapeFacts& input = match.facts("input");
    in_ = {static_dim(input, 2), static_dim(input, 3)};
    known_ = in_[0] && in_[1];
    if (known_) out_ = {conv.output_size(0, in_[0]), conv.output_size(1, in_[1])};
  }

  bool known() const { return known_; }
  int64_t in(int axis) const { return in_[axis]; }
  int64_t out(int axis) const { return out_[axis]; }

  // Input height (axis 0) or width, plus `delta`, as a scalar of the convolution's type.
  Value in_size(int axis, double delta = 0) {
    if (known_) return b_.scalar(static_cast<double>(in_[axis]) + delta, conv_.dtype);
    Value& size = in_sizes_[axis];
    if (size.absent()) size = b_.Cast(in_size_int(axis), conv_.dtype);
    return delta == 0 ? size : b_.Add(size, b_.scalar(delta, conv_.dtype));
  }
  Value in_size_int(int axis) {
    if (known_) return b_.scalar(static_cast<double>(in_[axis]), kInt64);
    Value& size = in_sizes_int_[axis];
    if (size.absent()) {
      const Value shape = input_shape();
      size = b_.Gather(shape, b_.scalar(axis + 2, kInt64));
    }
    return size;
  }
  // (width, height) as a 1-D tensor of the convolution's type; computed sizes only.
  Value in_width_height() {
    const Value shape = input_shape();
    return b_.Cast(b_.Gather(shape, b_.ints({3, 2})), conv_.dtype);
  }
  // Output positions 0, 1, ..., out - 1 along `axis` in the convolution's type; computed sizes only.
  Value out_positions(int axis) {
    const Value shape = offset_shape();
    Value count = b_.Gather(shape, b_.scalar(axis + 2, kInt64));
    return b_.Cast(b_.op("Range", {b_.scalar(0, kInt64), count, b_.scalar(1, kInt64)}), conv_.dtype);
  }

  // A Reshape shape: `prefix`, out_h * tile[0], out_w * tile[1], `suffix`.
  Value shape(std::vector<int64_t> prefix, std::array<int64_t, 2> tile, const std::vector<int64_t>& suffix = {}) {
    if (known_) {
      prefix.push_back(out_[0] * tile[0]);
      prefix.push_back(out_[1] * tile[1]);
      prefix.insert(prefix.end(), suffix.begin(), suffix.end());
      return b_.ints(prefix);
    }
    Value& tiled = tiled_out_[tile];
    if (tiled.absent()) {
      if (out_hw_.absent()) {
        const Value shape = offset_shape();
        out_hw_ = b_.Gather(shape, b_.ints({2, 3}));
      }
      tiled = tile == std::array<int64_t, 2>{1, 1} ? out_hw_ : b_.Mul(out_hw_, b_.ints({tile[0], tile[1]}));
    }
    std::vector<Value> parts{b_.ints(prefix), tiled};
    if (!suffix.empty()) parts.push_back(b_.ints(suffix));
    return b_.Concat(parts, 0);
  }

 private:
  Value input_shape() {
    if (input_shape_.absent()) input_shape_ = b_.Shape(conv_.input);
    return input_shape_;
  }
  Value offset_shape() {
    if (offset_shape_.absent()) offset_shape_ = b_.Shape(conv_.offset);
    return offset_shape_;
  }

  const DeformConv& conv_;
  GraphBuilder& b_;
  bool known_ = false;
  std::array<int64_t, 2> in_{0, 0}, out_{0, 0};
  Value input_shape_, offset_shape_, out_hw_;
  std::array<Value, 2> in_sizes_, in_sizes_int_;
  std::map<std::array<int64_t, 2>, Value> tiled_out_;
};

// Pixel coordinates o*stride - pad + i*dilation of the kernel taps along `axis` (0 = h), for every
// output position o and tap i: a tensor [out, kernel] followed by `ones` unit dims; with
// `component` 0 (x) or 1 (y), also a trailing (x, y) pair axis with 0 in the other component.
Value taps(GraphBuilder& b, Spatial& spatial, const DeformConv& conv, int axis, size_t ones, int component = -1) {
  auto spread = [&](double coordinate, std::vector<double>& into) {
    if (component < 0) {
      into.push_back(coordinate);
      return;
    }
    into.push_back(component == 0 ? coordinate : 0);
    into.push_back(component == 1 ? coordinate : 0);
  };
  std::vector<int64_t> dims{conv.kernel(axis)};
  dims.insert(dims.end(), ones, 1);
  if (component >= 0) dims.push_back(2);
  std::vector<double> numbers;
  // Computed at run time where a constant of every position would be large (a huge padding).
  const int64_t elements = spatial.out(axis) * conv.kernel(axis) * (component < 0 ? 1 : 2);
  if (spatial.known() && elements <= kLargestTapConstant) {
    for (int64_t o = 0; o < spatial.out(axis); ++o) {
      for (int64_t i = 0; i < conv.kernel(axis); ++i) {
        spread(static_cast<double>(o * conv.stride[axis] - conv.pads[axis] + i * conv.dilation[axis]), numbers);
      }
    }
    dims.insert(dims.begin(), spatial.out(axis));
    return b.constant(make_tensor(conv.dtype, dims, numbers));
  }
  std::vector<int64_t> unit_axes(dims.size());
  std::iota(unit_axes.begin(), unit_axes.end(), 1);
  Value positions = b.Unsqueeze(spatial.out_positions(axis), unit_axes);  // [out, 1, ...]
  std::vector<double> stride;
  spread(static_cast<double>(conv.stride[axis]), stride);
  if (component >= 0 || conv.stride[axis] != 1) positions = b.Mul(positions, b.floats(stride, conv.dtype));
  for (int64_t i = 0; i < conv.kernel(axis); ++i) {
    spread(static_cast<double>(i * conv.dilation[axis] - conv.pads[axis]), numbers);
  }
  return b.Add(positions, b.constant(make_tensor(conv.dtype, dims, numbers)));
}

// What both decompositions need: kernel size, channels, a float type.
std::string check_decomposable(const DeformConv& conv) {
  if (!conv.kernel_size()) return "the kernel size is unknown (the weight has no static shape)";
  if (!conv.channels) return "the number of input channels is unknown (neither input nor weight has a static shape)";
  if (conv.dtype != TensorProto::FLOAT && conv.dtype != TensorProto::FLOAT16 && conv.dtype != TensorProto::DOUBLE) {
    return conv.dtype ? "element type " + data_type_name(conv.dtype) + " is not float, float16 or double"
                      : "the element type is unknown";
  }
  return {};
}

// The sampled taps as an image [N, C, out_h*kh, out_w*kw], one kh x kw tile per output position:
// a Conv with stride = kernel size applies weights, groups and bias.
Value convolve_tiles(GraphBuilder& b, const DeformConv& conv, Value tiles) {
  Attributes attributes{attr("kernel_shape", std::vector<int64_t>{conv.kernel_h, conv.kernel_w}),
                        attr("strides", std::vector<int64_t>{conv.kernel_h, conv.kernel_w})};
  if (conv.groups != 1) attributes.push_back(attr("group", conv.groups));
  return b.op("Conv", {tiles, conv.weight, conv.bias}, attributes);
}

// ---- GridSample ----------------------------------------------------------------------------------

// One GridSample over the input seen as [N*og, C/og, H, W] with a grid [N*og, out_h*kh, out_w*kw, 2]
// of (x, y) tap positions; the mask multiplies the samples; one Conv.
std::string build_grid_sample(const Match& match, GraphBuilder& b) {
  DeformConv conv;
  if (auto why = parse(match, conv); !why.empty()) return why;
  if (auto why = check_decomposable(conv); !why.empty()) return why;
  Spatial spatial(match, conv, b);
  const int64_t groups = conv.offset_groups, kh = conv.kernel_h, kw = conv.kernel_w;
  const int32_t dtype = conv.dtype;

  // Offsets (dy, dx) per tap -> (dx, dy) in the tiled layout [N, og, out_h, kh, out_w, kw, 2].
  Value offsets = b.Reshape(conv.offset, spatial.shape({0, groups, kh, kw, 2}, {1, 1}));
  offsets = b.Transpose(offsets, {0, 1, 5, 2, 6, 3, 4});
  offsets = b.Gather(offsets, b.ints({1, 0}), 6);
  Value positions = b.Add(offsets, taps(b, spatial, conv, 0, 2, 1));
  positions = b.Add(positions, taps(b, spatial, conv, 1, 0, 0));

  // GridSample's coordinates with align_corners = 0 (-1 and 1 are the outer edges of the border
  // pixels): (2p + 1) / size - 1. Points beyond ±2 sample zeros either way: clipping keeps huge
  // or infinite offsets finite.
  Value scale, shift;
  if (spatial.known()) {
    const double width = static_cast<double>(spatial.in(1)), height = static_cast<double>(spatial.in(0));
    scale = b.floats({2 / width, 2 / height}, dtype);
    shift = b.floats({1 / width - 1, 1 / height - 1}, dtype);
  } else {
    Value size = spatial.in_width_height();
    scale = b.Div(b.scalar(2, dtype), size);
    const Value reciprocal = b.Reciprocal(size);
    shift = b.Sub(reciprocal, b.scalar(1, dtype));
  }
  Value grid = b.Clip(b.Add(b.Mul(positions, scale), shift), -2.0, 2.0, dtype);
  grid = b.Reshape(grid, spatial.shape({-1}, {kh, kw}, {2}));

  Value image = groups == 1 ? conv.input : b.Reshape(conv.input, b.ints({-1, conv.channels / groups, 0, 0}));
  Value samples = b.op("GridSample", {image, grid},
                       {attr("align_corners", int64_t{0}), attr("mode", b.opset() >= 20 ? "linear" : "bilinear"),
                        attr("padding_mode", "zeros")});
  if (!conv.mask.absent()) {
    Value mask = b.Reshape(conv.mask, spatial.shape({0, groups, kh, kw}, {1, 1}));
    mask = b.Transpose(mask, {0, 1, 4, 2, 5, 3});
    mask = b.Reshape(mask, spatial.shape({-1, 1}, {kh, kw}));
    samples = b.Mul(samples, mask);
  }
  if (groups != 1) samples = b.Reshape(samples, b.ints({-1, conv.channels, 0, 0}));
  b.output(conv.output, convolve_tiles(b, conv, samples));
  return {};
}

// ---- Gather --------------------------------------------------------------------------------------

// The two neighbours of tap positions along one axis, on a new axis of `corner_rank` trailing
// dims: their coordinates clamped into the image, and their bilinear weights (0 when outside).
struct Neighbours {
  Value coordinate;  // int64
  Value weight;
};

Neighbours neighbours(GraphBuilder& b, Spatial& spatial, int axis, Value positions, size_t corner_rank, int32_t dtype) {
  auto corner_tensor = [&](double first, double second) {
    std::vector<int64_t> dims(corner_rank, 1);
    dims[0] = 2;
    return b.constant(make_tensor(dtype, dims, {first, second}));
  };
  auto clip = [&](Value x, Value low, Value high) { return b.op("Clip", {x, low, high}); };
  // Beyond [-1, size] every neighbour is outside: clamping keeps huge or infinite offsets finite.
  const Value lowest = b.scalar(-1, dtype);
  Value clamped = clip(positions, lowest, spatial.in_size(axis));
  Value low = b.Floor(clamped);
  Value fraction = b.Sub(clamped, low);
  Value weight = b.op("Abs", {b.Sub(fraction, corner_tensor(1, 0))});  // 1 - fraction, fraction
  Value coordinate = b.Add(low, corner_tensor(0, 1));                // low, low + 1
  const Value zero = b.scalar(0, dtype);
  Value inside = clip(coordinate, zero, spatial.in_size(axis, -1));
  weight = b.Where(b.op("Equal", {inside, coordinate}), weight, zero);
  return {b.Cast(inside, kInt64), weight};
}

// Tap positions [N, og, 1, 1, out_h, kh, out_w, kw] for y and x; their four neighbours (axes 2
// and 3) as rows of the input seen as a table [N*og*H*W, C/og]; one Gather, the weighted sum of
// the neighbours with the mask; one Conv.
std::string build_gather(const Match& match, GraphBuilder& b) {
  DeformConv conv;
  if (auto why = parse(match, conv); !why.empty()) return why;
  if (auto why = check_decomposable(conv); !why.empty()) return why;
  Spatial spatial(match, conv, b);
  const int64_t groups = conv.offset_groups, kh = conv.kernel_h, kw = conv.kernel_w;
  const int64_t group_channels = conv.channels / groups;
  const int32_t dtype = conv.dtype;

  // Offsets [N, og, 2, 1, out_h, kh, out_w, kw]: dy and dx, each with a unit corner axis at 3.
  Value offsets = b.Reshape(conv.offset, spatial.shape({0, groups, kh, kw, 2, 1}, {1, 1}));
  offsets = b.Transpose(offsets, {0, 1, 4, 5, 6, 2, 7, 3});
  const std::vector<Value> deltas = b.Split(offsets, 2, {1, 1});
  const Neighbours rows = neighbours(b, spatial, 0, b.Add(deltas[0], taps(b, spatial, conv, 0, 2)), 6, dtype);  // axis 2
  const Neighbours columns = neighbours(b, spatial, 1, b.Add(deltas[1], taps(b, spatial, conv, 1, 0)), 5, dtype);  // axis 3

  // Table row of (n, g, row, column): ((n*og + g)*H + row)*W + column.
  Value index = b.Add(b.Mul(rows.coordinate, spatial.in_size_int(1)), columns.coordinate);
  if (static_dim(match.facts("input"), 0) * groups != 1) {
    Value plane;
    if (spatial.known()) {
      plane = b.scalar(static_cast<double>(spatial.in(0) * spatial.in(1)), kInt64);
    } else {
      const Value height = spatial.in_size_int(0);
      plane = b.Mul(height, spatial.in_size_int(1));
    }
    const Value size = b.op("Size", {conv.input});
    Value rows_total = b.Div(size, b.scalar(static_cast<double>(group_channels), kInt64));
    Value first_rows = b.op("Range", {b.scalar(0, kInt64), rows_total, plane});
    index = b.Add(index, b.Reshape(first_rows, b.ints({-1, groups, 1, 1, 1, 1, 1, 1})));
  }
  Value weights = b.Mul(rows.weight, columns.weight);
  if (!conv.mask.absent()) {
    Value mask = b.Reshape(conv.mask, spatial.shape({0, groups, 1, 1, kh, kw}, {1, 1}));
    weights = b.Mul(weights, b.Transpose(mask, {0, 1, 2, 3, 6, 4, 7, 5}));
  }

  Value table = b.Reshape(conv.input, b.ints({0, groups, group_channels, -1}));
  table = b.Transpose(table, {0, 1, 3, 2});
  table = b.Reshape(table, b.ints({-1, group_channels}));
  Value samples = b.Gather(table, index, 0);
  samples = b.Mul(samples, b.Unsqueeze(weights, {8}));
  samples = b.Reduce("ReduceSum", samples, {2, 3}, false);  // [N, og, out_h, kh, out_w, kw, C/og]
  samples = b.Transpose(samples, {0, 1, 6, 2, 3, 4, 5});
  samples = b.Reshape(samples, spatial.shape({-1, conv.channels}, {kh, kw}));
  b.output(conv.output, convolve_tiles(b, conv, samples));
  return {};
}

}  // namespace

void register_deform_conv_builders(BuilderRegistry& registry) {
  // Every convention's attributes (parse_torchvision, parse_mmcv, parse_onnx): a rule captures
  // those of the op it matches.
  const BuilderSignature deform_conv{
      .values = {"input", "weight", "offset", "y"},
      .optional_values = {"mask", "bias"},
      .optional_attributes = {"stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w", "groups", "offset_groups",
                              "use_mask", "stride", "padding", "dilation", "deform_groups", "strides", "pads", "dilations",
                              "kernel_shape", "group", "offset_group"}};
  registry.add("deform_conv_to_onnx", deform_conv, build_deform_conv);
  registry.add("deform_conv_grid_sample", deform_conv, build_grid_sample);
  registry.add("deform_conv_gather", deform_conv, build_gather);
}

}  // namespace onnx_rewrite
