// What C++ builders of several families share (rules/*/): checks of a match, the activations
// ONNX Runtime fuses into Conv and Gemm, rotary embeddings. A helper two families need lives here,
// once; what a builder reads of a match is in build_context.h.
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
#include "onnx_rewrite/build_context.h"

namespace onnx_rewrite {

// ---- Checking a match -------------------------------------------------------------------------

// Why `kernel` can't take `type` ("the element type is unknown"), or nullopt when `allowed` has it.
std::optional<std::string> check_element_type(int32_t type, const std::set<int32_t>& allowed, std::string_view kernel);

// Attribute name -> the type an op takes it as.
using AttributeTypes = std::vector<std::pair<std::string, onnx::AttributeProto::AttributeType>>;
// The attributes of ONNX Runtime's contrib ops (and of the standard ops fused into them) by name.
const AttributeTypes& ort_attribute_types();
// A builder that first declines nodes of the match whose attributes have the wrong type for their
// name (an INT alpha, a FLOAT transA): a runtime refuses such a node, and reading it as the type
// the kernel takes would silently change what it computes.
BuildFunction with_attribute_types_checked(const AttributeTypes& types, BuildFunction builder);

// The body of a Loop or Scan a builder makes. Its values are named after `anchor` (a fresh name
// of the model, so no other graph has them), in letters, digits and '_' as ONNX text writes
// names; `local` names are the body's own ("cond_in"). Values are scalars unless `scalar` is
// false (then of any shape).
class BodyGraph {
 public:
  BodyGraph(const Value& anchor, std::string_view graph_name);
  void input(std::string_view local, int32_t element, bool scalar = true) { declare(graph_.mutable_input(), local, element, scalar); }
  void output(std::string_view local, int32_t element, bool scalar = true) { declare(graph_.mutable_output(), local, element, scalar); }
  void node(std::string_view op_type, const std::vector<std::string_view>& inputs, std::string_view output);
  const onnx::GraphProto& graph() const { return graph_; }

 private:
  std::string name(std::string_view local) const;
  void declare(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* infos, std::string_view local, int32_t element, bool scalar);
  std::string prefix_;
  onnx::GraphProto graph_;
};

// GatherElements (data, indices of `index_type`, axis >= 0): the op from opset 11; below, one
// Gather from the flattened data at positions computed from the static dims (negative indices
// counted from the end). Nullopt below 11 when a dim is unknown or the indices too many.
std::optional<Value> gather_elements(GraphBuilder& b, Value data, Value indices, int32_t index_type, int64_t axis,
                                     const std::optional<std::vector<int64_t>>& data_dims,
                                     const std::optional<std::vector<int64_t>>& index_dims);

// Range (start, limit, delta) of `type` (float, double, int32, int64): the op from opset 11, its
// ONNX function body (a Loop) below.
Value range_values(GraphBuilder& b, const Value& start, const Value& limit, const Value& delta, int32_t type);

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
std::optional<Activation> mlas_activation(const NodeView& node, std::string& why);

// y = activation(x); else why it can't be spelled at the opset being built for.
std::optional<std::string> apply_activation(GraphBuilder& b, Value x, const Activation& activation, int32_t dtype, Value& y);

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
Value rotary_embedding(GraphBuilder& b, Value x, Value cos, Value sin, int64_t head_size, int64_t rotary_dim, bool interleaved);

}  // namespace onnx_rewrite
