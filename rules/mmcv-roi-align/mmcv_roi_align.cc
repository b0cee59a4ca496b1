// mmcv::MMCVRoiAlign (mmcv's RoIAlign as mmdeploy and mmcv 1.x export it) as ai.onnx RoiAlign
// (mmcv-roi-align.rules). The rois [K, 5] = [batch index, x1, y1, x2, y2] become RoiAlign's
// boxes [K, 4] and int64 batch indices; aligned selects the coordinate transformation
// (RoiAlign-16 half_pixel = mmcv's aligned, output_half_pixel = mmcv's legacy mode, which is all
// RoiAlign-10 knows). mmcv's max mode is the largest bilinearly interpolated sample of a bin, not
// ONNX's max of the weighted corners: with a fixed sampling ratio s it is exactly an avg RoiAlign
// of s times finer bins with one sample each, followed by an s x s MaxPool. An adaptive sampling
// ratio (0) in max mode has a per-roi grid that no static graph reproduces: declined.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

std::string build_roi_align(const Match& match, GraphBuilder& b) {
  const Value input{match.value("input")}, rois{match.value("rois")};
  const int64_t height = match.attribute_int("output_height", 0), width = match.attribute_int("output_width", 0);
  const float scale = match.attribute_float("spatial_scale", 1.f);
  int64_t sampling_ratio = match.attribute_int("sampling_ratio", 0);
  const std::string mode = match.attribute_string("mode", "avg");
  const int64_t aligned = match.attribute_int("aligned", 1);
  if (height < 1 || width < 1) return fmt::format("the output size {} x {} is not positive", height, width);
  if (mode != "avg" && mode != "max") return fmt::format("mode \"{}\" is neither \"avg\" nor \"max\"", mode);
  if (aligned != 0 && aligned != 1) return fmt::format("aligned = {} is not 0 or 1", aligned);
  if (sampling_ratio < 0) sampling_ratio = 0;  // mmcv: any ratio <= 0 is adaptive; ONNX takes 0
  for (const char* name : {"input", "rois"}) {
    const int32_t type = match.facts(name).elem_type;
    if (type == 0) return fmt::format("the element type of {} is unknown", name);
    if (type != TensorProto::FLOAT && type != TensorProto::DOUBLE) {
      return fmt::format("{} is {}: ONNX Runtime's RoiAlign takes float and double", name, data_type_name(type));
    }
  }
  if (const auto rank = match.facts("input").rank(); rank && *rank != 4) return fmt::format("input has rank {}, not 4", *rank);
  if (const auto& facts = match.facts("rois"); facts.rank() && (*facts.rank() != 2 || (facts.dim(1) >= 0 && facts.dim(1) != 5))) {
    return "rois is not [K, 5] ([batch index, x1, y1, x2, y2] per roi)";
  }
  const bool half_pixel = aligned == 1;
  if (half_pixel && b.opset() < 16) {
    return "aligned = 1 needs RoiAlign-16's half_pixel transformation (ai.onnx >= 16): RoiAlign-10 clamps every roi to at "
           "least one pixel, mmcv's aligned mode does not (shifting the rois by half a pixel, as mmdeploy's own ONNX export "
           "does, is wrong for rois under a pixel)";
  }
  const bool max = mode == "max";
  if (max && sampling_ratio == 0) {
    return "mode \"max\" with an adaptive sampling ratio (<= 0): mmcv takes the largest of ceil(roi size / output size) "
           "samples per bin, a count that varies per roi, and ONNX RoiAlign's max is another function (the largest weighted "
           "corner, not the largest interpolated sample)";
  }

  // batch indices: column 0, truncated (as the kernels' (int) cast); boxes: columns 1..4.
  const Value indices = b.Cast(b.Gather(rois, b.scalar(0, TensorProto::INT64), 1), TensorProto::INT64);
  const Value boxes = b.Slice(rois, {1}, {5}, {1});
  // max: s x s one-sample bins per output bin, then their maximum.
  const int64_t refine = max ? sampling_ratio : 1;
  Attributes attributes{attr("mode", "avg"), attr("output_height", height * refine), attr("output_width", width * refine),
                        attr("sampling_ratio", max ? int64_t{1} : sampling_ratio), attr("spatial_scale", scale)};
  if (b.opset() >= 16) attributes.push_back(attr("coordinate_transformation_mode", half_pixel ? "half_pixel" : "output_half_pixel"));
  Value y = b.op("RoiAlign", {input, boxes, indices}, attributes);
  if (max && refine > 1) {
    y = b.op("MaxPool", {y}, {attr("kernel_shape", std::vector<int64_t>{refine, refine}),
                              attr("strides", std::vector<int64_t>{refine, refine})});
  }
  b.output(match.value("y"), y);
  return {};
}

}  // namespace

void register_mmcv_roi_align_builders(BuilderRegistry& registry) {
  registry.add("mmcv_roi_align_as_roi_align",
               {.values = {"input", "rois", "y"},
                .optional_values = {},
                .attributes = {"output_height", "output_width", "spatial_scale", "sampling_ratio", "mode", "aligned"},
                .optional_attributes = {}},
               build_roi_align);
}

}  // namespace onnx_rewrite
