// What C++ builders share (rules/*/): reading a match (element types, constants, attributes,
// dims, uses) and the activations ONNX Runtime fuses into Conv and Gemm. A helper two families
// need lives here, once.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include "onnx_rewrite/builder.h"
#include "onnx_rewrite/matcher.h"

namespace onnx_rewrite {

// ---- Reading a match ----------------------------------------------------------------------------

// Whether the pattern bound `name` to a graph value (false for an absent optional input, or a
// name this pattern doesn't have).
bool bound(const Match& match, const std::string& name);
// The bound value, or an absent Value.
Value value_of(const Match& match, const std::string& name);

// The element type of the first of these pattern values whose type is known (0 if none): the ops
// a pattern matches take equal types, so any operand tells.
int32_t element_type(const Match& match, std::initializer_list<const char*> names);
// "" if `type` is one of `allowed`, else why `kernel` can't take it ("the element type is unknown").
std::string check_element_type(int32_t type, const std::set<int32_t>& allowed, std::string_view kernel);

// The one number of a one-element constant pattern value.
std::optional<double> scalar_constant(const Match& match, const std::string& name);

// Whether something outside the match reads a graph value the match computes (or it is an output).
bool used_outside(const Match& match, const std::string& value);
// The first node of the match with this op type.
const onnx::NodeProto* matched_node(const Match& match, std::string_view op_type);

// ---- Reading a node's own attributes ------------------------------------------------------------

const onnx::AttributeProto* find_attribute(const onnx::NodeProto& node, std::string_view name);
int64_t int_attribute(const onnx::NodeProto& node, std::string_view name, int64_t otherwise);
float float_attribute(const onnx::NodeProto& node, std::string_view name, float otherwise);
std::string string_attribute(const onnx::NodeProto& node, std::string_view name, std::string otherwise = {});
std::vector<int64_t> ints_attribute(const onnx::NodeProto& node, std::string_view name, std::vector<int64_t> otherwise = {});
// The node's attributes without those whose name starts with `prefix` (to copy the Conv or Gemm
// attributes of a fused node).
Attributes attributes_without(const onnx::NodeProto& node, std::string_view prefix);

// Attribute name -> the type an op takes it as.
using AttributeTypes = std::vector<std::pair<std::string, onnx::AttributeProto::AttributeType>>;
// The attributes of ONNX Runtime's contrib ops (and of the standard ops fused into them) by name.
const AttributeTypes& ort_attribute_types();
// A builder that first declines nodes of the match whose attributes have the wrong type for their
// name (an INT alpha, a FLOAT transA): a runtime refuses such a node, and reading it as the type
// the kernel takes would silently change what it computes.
BuildFunction with_attribute_types_checked(const AttributeTypes& types, BuildFunction builder);

// Describes a node for messages: its name if it has one, else its op and first output.
std::string describe_node(const onnx::NodeProto& node);

// ---- Building ------------------------------------------------------------------------------------

// Pattern value `name` reshaped to `shape` (a -1 takes what the others leave). A Reshape of a
// constant is the same bytes under new dims; left as a node, the runtime (or a round of
// canonicalize-fold-layout) would have to fold it. So when the value is a constant of at most
// 1 MiB whose bytes the model holds (not external data) and fit its type and shape, this is a new
// constant with those dims, provided the original can go (nothing outside the match reads it, and
// it is not a graph input) or is at most 64 bytes (copying it costs nothing). Else a Reshape node.
Value reshaped(const Match& match, GraphBuilder& b, const std::string& name, const std::vector<int64_t>& shape);

// ---- Activations ONNX Runtime fuses into Conv and Gemm ------------------------------------------

// An activation applied to the output of a fused op, named as the ONNX op computing it (or
// Silu, ScaledTanh, ParametricSoftplus); an empty name is none. Absent parameters take the ONNX
// op's defaults.
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

}  // namespace onnx_rewrite

// ---- Rotary position embedding (rules/defuse-rotary, rules/defuse-gqa) --------------------

namespace onnx_rewrite {

// Rotates the first `rotary_dim` (R) values of x's last axis (a head of `head_size` values) by the
// angles whose cosines and sines are `cos` and `sin` (broadcasting against x[..., :R/2]); values
// from R on pass through. As ONNX Runtime's RotaryEmbedding kernels (MlasRotaryEmbedOneRow) and
// RotaryEmbedding-23:
//   half split:  y[i] = x[i]·c[i] - x[i + R/2]·s[i],   y[i + R/2] = x[i + R/2]·c[i] + x[i]·s[i]
//   interleaved: y[2k] = x[2k]·c[k] - x[2k + 1]·s[k],  y[2k + 1] = x[2k + 1]·c[k] + x[2k]·s[k]
// Computed in x's own type: widen float16 first where the kernel computes in float. A head size
// of 0 or less means unknown (the values from R on are sliced off and rejoined, maybe none).
Value rotary_embedding(GraphBuilder& b, Value x, Value cos, Value sin, int64_t head_size, int64_t rotary_dim,
                       bool interleaved);

}  // namespace onnx_rewrite
