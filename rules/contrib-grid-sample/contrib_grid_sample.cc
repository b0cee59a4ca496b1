// com.microsoft GridSample (ONNX Runtime's contrib op, from before ONNX had one) as ai.onnx
// GridSample (rules/contrib-grid-sample/contrib-grid-sample.rules). ORT runs both with one CPU
// kernel (core/providers/cpu/tensor/grid_sample.h; contrib_ops/cpu/grid_sample.cc registers it
// for float in the com.microsoft domain), which reads the mode names by the node's version: the
// contrib op and GridSample-16 say bilinear / nearest / bicubic, GridSample-20 linear / nearest /
// cubic. padding_mode (zeros, border, reflection) and align_corners mean the same everywhere.
#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

const AttributeTypes& attribute_types() {
  static const AttributeTypes types = {{"mode", onnx::AttributeProto::STRING},
                                       {"padding_mode", onnx::AttributeProto::STRING},
                                       {"align_corners", onnx::AttributeProto::INT}};
  return types;
}

std::string contrib_grid_sample(const Match& match, GraphBuilder& b) {
  const onnx::NodeProto& node = *match.anchor;
  const std::string mode = string_attribute(node, "mode", "bilinear");
  const std::string padding = string_attribute(node, "padding_mode", "zeros");
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic") {
    return fmt::format("mode \"{}\" is not one of bilinear, nearest, bicubic (ONNX Runtime refuses the node)", mode);
  }
  if (padding != "zeros" && padding != "border" && padding != "reflection") {
    return fmt::format("padding_mode \"{}\" is not one of zeros, border, reflection (ONNX Runtime refuses the node)", padding);
  }
  for (const char* name : {"x", "grid"}) {
    const auto& facts = match.facts(name);
    if (facts.elem_type && facts.elem_type != TensorProto::FLOAT) {
      return fmt::format("{} is {}; ORT's contrib kernel takes float only", name, data_type_name(facts.elem_type));
    }
    if (auto rank = facts.rank(); rank && *rank != 4) return fmt::format("{} has rank {}; the contrib op takes 4-D tensors", name, *rank);
  }
  Attributes attributes;
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == "mode" && b.opset() >= 20) {
      attributes.push_back(attr("mode", mode == "bilinear" ? "linear" : mode == "bicubic" ? "cubic" : "nearest"));
    } else {
      attributes.push_back(attribute);
    }
  }
  b.output(match.value("y"), b.op("GridSample", {Value{match.value("x")}, Value{match.value("grid")}}, attributes));
  return {};
}

}  // namespace

void register_contrib_grid_sample_builders(BuilderRegistry& registry) {
  registry.add("contrib_grid_sample", {.values = {"x", "grid", "y"}},
               with_attribute_types_checked(attribute_types(), contrib_grid_sample));
}

}  // namespace onnx_rewrite
