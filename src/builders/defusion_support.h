// Shared by the de-fusion builders (contrib_defusion.cc, nchwc.cc): the activations ONNX Runtime
// fuses into Conv and Gemm.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "onnx_rewrite/builder.h"

namespace onnx_rewrite::defusion {

// An activation applied to the output of a fused op, named as the ONNX op computing it (or
// Silu, ScaledTanh, ParametricSoftplus); an empty name is none. Absent parameters take the
// ONNX op's defaults.
struct Activation {
  std::string name;
  std::optional<float> alpha, beta, gamma;
};

// The activation of FusedConv and com.microsoft.nchwc::Conv: MLAS activation kinds, set by the
// attributes `activation` (string) and `activation_params` (floats, exactly as many as the kind
// takes); nullopt with `why` set when ONNX Runtime would refuse the node.
std::optional<Activation> mlas_activation(const onnx::NodeProto& node, std::string& why);

// y = activation(x); "" on success, else why it can't be spelled at the opset being built for.
std::string apply_activation(GraphBuilder& b, Value x, const Activation& activation, int32_t dtype, Value& y);

// The node's attributes without those whose name starts with `prefix` (to copy the Conv or
// Gemm attributes of a fused node).
Attributes attributes_without(const onnx::NodeProto& node, const std::string& prefix);

// A builder that first declines nodes whose attributes have the wrong type for their name (an
// INT alpha, a FLOAT transA): ONNX Runtime refuses such a node, and reading it as the type the
// kernel takes would silently change what it computes.
BuilderFunction with_attribute_types_checked(BuilderFunction builder);

}  // namespace onnx_rewrite::defusion
