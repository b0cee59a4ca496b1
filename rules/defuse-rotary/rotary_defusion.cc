// com.microsoft RotaryEmbedding back to standard ONNX (defuse-rotary.rules): RotaryEmbedding-23
// where the opset has it, else the rotation spelled out (toolkit's rotary_embedding), with the
// numbers of ONNX Runtime's CPU kernel (contrib_ops/cpu/bert/rotary_embedding.cc,
// rotary_embedding_helper.h, core/mlas/lib/rotary_embedding.cpp).
#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

// How the kernel reads the node (rotary_embedding_helper.h CheckInputs), from the attributes and
// the static shapes.
struct Layout {
  size_t rank = 0;           // 3: [B, S, N·H]; 4: [B, N, S, H]
  int64_t heads = 0;         // N
  int64_t head_size = 0;     // H
  int64_t rotary_dim = 0;    // R
  bool offset = false;       // position_ids holds one start position p0 (positions p0 + s)
  int32_t dtype = 0;
};

std::string unknown(const std::string& what) {
  return fmt::format("{} is unknown (the head layout needs it)", what);
}

std::string read_layout(const BuildContext& match, Layout& layout) {
  layout.dtype = match.element_type({"input", "cos_cache", "sin_cache"});
  if (layout.dtype == TensorProto::BFLOAT16) {
    return "bfloat16: ONNX Runtime's CPU provider has no bfloat16 RotaryEmbedding to prove the rewrite against";
  }
  if (auto why = check_element_type(layout.dtype, {TensorProto::FLOAT, TensorProto::FLOAT16}, "RotaryEmbedding")) {
    return *why;
  }
  const auto& input = match.facts("input");
  if (!input.rank()) return unknown("the rank of the input");
  layout.rank = *input.rank();
  if (layout.rank != 3 && layout.rank != 4) return fmt::format("the input has rank {}; the kernel takes 3 or 4", layout.rank);
  const int64_t rotary_attribute = match.attribute_int("rotary_embedding_dim", 0);
  const int64_t heads_attribute = match.attribute_int("num_heads", 0);
  if (rotary_attribute > 0 && heads_attribute <= 0) return "rotary_embedding_dim without num_heads (ONNX Runtime refuses the node)";
  const int64_t half_width = match.facts("cos_cache").dim(1);
  if (half_width <= 0) return unknown("the width of cos_cache (dim 1)");
  // hidden = N·H; -1 when the graph doesn't tell (the input of a MatMulNBits, say): then the
  // Reshapes take the unknown dim with -1 and ORT's consistency checks can't be repeated here.
  int64_t hidden = layout.rank == 3 ? input.dim(2) : (input.dim(1) < 0 || input.dim(3) < 0 ? -1 : input.dim(1) * input.dim(3));
  if (rotary_attribute == 0) {
    layout.head_size = 2 * half_width;
  } else {
    layout.head_size = hidden > 0 ? hidden / heads_attribute : -1;
  }
  layout.heads = heads_attribute > 0 ? heads_attribute : (hidden > 0 ? hidden / layout.head_size : -1);
  layout.rotary_dim = rotary_attribute > 0 ? rotary_attribute : layout.head_size;
  if (layout.rank == 3 && layout.heads <= 0 && layout.head_size <= 0) return unknown("the hidden size (input dim 2)");
  if (layout.head_size > 0 && layout.rotary_dim > layout.head_size) {
    return fmt::format("rotary_embedding_dim {} exceeds the head size {} (ONNX Runtime refuses the node)", layout.rotary_dim,
                       layout.head_size);
  }
  if (layout.rotary_dim % 2 != 0) return fmt::format("rotary_embedding_dim {} is odd", layout.rotary_dim);
  if (hidden > 0 && layout.heads * layout.head_size != hidden) {
    return fmt::format("{} heads of {} values don't make the input's {} values per position: the kernel's strides then "
                       "don't follow the input's layout",
                       layout.heads, layout.head_size, hidden);
  }
  if (layout.rank == 4 && ((input.dim(1) >= 0 && input.dim(1) != layout.heads) ||
                           (input.dim(3) >= 0 && layout.head_size > 0 && input.dim(3) != layout.head_size))) {
    return fmt::format("the 4-D input [B, {}, S, {}] does not have {} heads of {} values (num_heads, cos_cache)", input.dim(1),
                       input.dim(3), layout.heads, layout.head_size);
  }
  if (half_width * 2 != layout.rotary_dim) {
    return fmt::format("cos_cache holds {} values per position, not R/2 = {}: ONNX Runtime then reads its rows with stride R/2",
                       half_width, layout.rotary_dim / 2);
  }
  const auto& positions = match.facts("position_ids");
  if (!positions.rank()) return unknown("the rank of position_ids");
  if (*positions.rank() == 0 || (*positions.rank() == 1 && positions.dim(0) == 1)) {
    layout.offset = true;
  } else if (*positions.rank() != 2) {
    return fmt::format("position_ids is {}: ONNX Runtime takes one element or [B, S]", dims_text(positions.shape));
  }
  return {};
}

// The sequence length S (axis 1 of a 3-D input, 2 of a 4-D one) as a scalar.
Value sequence_length(GraphBuilder& b, Value input, const Layout& layout) {
  const Value shape = b.Shape(input);
  return b.Gather(shape, b.scalar(layout.rank == 3 ? 1 : 2, TensorProto::INT64));
}

// p0 + [0, S): the positions a one-element position_ids stands for, [S].
Value offset_positions(GraphBuilder& b, Value input, Value position_ids, const Layout& layout) {
  const Value start = b.Reshape(position_ids, b.ints({1}));
  const Value length = sequence_length(b, input, layout);
  const Value zero = b.scalar(0, TensorProto::INT64);
  const Value one = b.scalar(1, TensorProto::INT64);
  const Value steps = range_values(b, zero, length, one, TensorProto::INT64);
  return b.Add(start, steps);
}

BuildResult rotary_embedding_as_onnx23(const BuildContext& match, GraphBuilder& b) {
  Layout layout;
  if (auto why = read_layout(match, layout); !why.empty()) return decline(why);
  if (layout.rank == 3 && layout.heads <= 0) return decline("the number of heads is unknown (RotaryEmbedding-23 needs num_heads for 3-D input)");
  const Value input{match.value("input")};
  Value positions{match.value("position_ids")};
  if (layout.offset) {  // RotaryEmbedding-23 takes [B, S] positions only
    const Value row = b.Unsqueeze(offset_positions(b, input, positions, layout), {0});
    const Value shape = b.Shape(input);
    const Value batch = b.Slice(shape, {0}, {1}, {0});
    const Value length = b.Slice(shape, {layout.rank == 3 ? 1 : 2}, {layout.rank == 3 ? 2 : 3}, {0});
    positions = b.op("Expand", {row, b.Concat({batch, length}, 0)});
  }
  Attributes attributes{attr("interleaved", match.attribute_int("interleaved", 0))};
  if (layout.rank == 3) attributes.push_back(attr("num_heads", layout.heads));
  if (layout.head_size <= 0 || layout.rotary_dim < layout.head_size) {
    attributes.push_back(attr("rotary_embedding_dim", layout.rotary_dim));
  }
  b.output(match.value("output"), b.op("RotaryEmbedding", {input, match.value("cos_cache"),
                                                          match.value("sin_cache"), positions},
                                       std::move(attributes)));
  return built();
}

BuildResult defuse_rotary_embedding(const BuildContext& match, GraphBuilder& b) {
  Layout layout;
  if (auto why = read_layout(match, layout); !why.empty()) return decline(why);
  const bool widen = layout.dtype == TensorProto::FLOAT16;
  Value x{match.value("input")};
  Value positions{match.value("position_ids")};
  if (layout.offset) positions = offset_positions(b, x, positions, layout);  // [S]
  Value cos = b.Gather(match.value("cos_cache"), positions);          // [B, S, R/2] or [S, R/2]
  Value sin = b.Gather(match.value("sin_cache"), positions);
  if (layout.rank == 3) {
    // [B, S, N, H]; one of N, H may be known only at run time
    x = b.Reshape(x, b.ints({0, 0, layout.heads > 0 ? layout.heads : -1, layout.head_size > 0 ? layout.head_size : -1}));
    cos = b.Unsqueeze(cos, {-2});
    sin = b.Unsqueeze(sin, {-2});
  } else if (!layout.offset) {  // [B, N, S, H]: positions [B, S] -> [B, 1, S, R/2]
    cos = b.Unsqueeze(cos, {1});
    sin = b.Unsqueeze(sin, {1});
  }
  if (widen) {
    x = b.Cast(x, TensorProto::FLOAT);
    cos = b.Cast(cos, TensorProto::FLOAT);
    sin = b.Cast(sin, TensorProto::FLOAT);
  }
  Value y = rotary_embedding(b, x, cos, sin, layout.head_size, layout.rotary_dim, match.attribute_int("interleaved", 0) != 0);
  if (widen) y = b.Cast(y, layout.dtype);
  if (layout.rank == 3) y = b.Reshape(y, b.ints({0, 0, layout.heads > 0 && layout.head_size > 0 ? layout.heads * layout.head_size : -1}));
  b.output(match.value("output"), y);
  return built();
}

}  // namespace

void register_defuse_rotary_builders(BuilderRegistry& registry) {
  const BuilderSignature signature{.values = {"input", "position_ids", "cos_cache", "sin_cache", "output"},
                                   .attributes = {"interleaved", "rotary_embedding_dim", "num_heads"}};
  registry.add("rotary_embedding_as_onnx23", signature, rotary_embedding_as_onnx23);
  registry.add("defuse_rotary_embedding", signature, defuse_rotary_embedding);
}

}  // namespace onnx_rewrite
