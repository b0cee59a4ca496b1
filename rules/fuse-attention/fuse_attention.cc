// The C++ halves of rules/fuse-attention/fuse-attention.rules: spelled-out attention as PyTorch
// exports it becomes ONNX Runtime's com.microsoft MultiHeadAttention, and a MultiHeadAttention of
// three Linear projections of one input becomes com.microsoft Attention. The patterns find the
// ops; the builders check what a pattern can't say — that the Reshapes split the last axis into
// N heads of H and join them back (the shapes torch computes with Shape/Gather/Concat are read
// from the shape facts, or from the nodes computing them), that the additive mask is the
// (1 - mask) · c of a [B, T] padding mask, the scale, the element type the CPU kernels take —
// and decline with the reason when one fails (README.md lists them).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

constexpr const char* kMicrosoft = "com.microsoft";

// One entry of a Reshape's target shape: a number (-1: inferred), or dim `copy` of the data.
struct Entry {
  int64_t number = 0;
  int copy = -1;
};

std::string entry_text(const Entry& e) { return e.copy >= 0 ? fmt::format("dim {}", e.copy) : std::to_string(e.number); }

// The axis of `data` whose dim this Unsqueeze(Gather(Shape(data), i), [0]) is, or -1.
int copied_axis(const BuildContext& match, const Value& piece, const Value& data) {
  auto unsqueeze = match.producer(piece);
  if (!unsqueeze || unsqueeze->op_type() != "Unsqueeze") return -1;
  if (unsqueeze->has_attribute("axes")) {
    if (unsqueeze->attribute_ints("axes") != std::vector<int64_t>{0}) return -1;
  } else {
    auto axes = match.constant_of(unsqueeze->input(1));
    if (!axes || axes->ints() != std::vector<int64_t>{0}) return -1;
  }
  auto gather = match.producer(unsqueeze->input(0));
  if (!gather || gather->op_type() != "Gather" || gather->attribute_int("axis", 0) != 0) return -1;
  auto index = match.constant_of(gather->input(1));
  if (!index || index->ints().size() != 1 || !index->dims.empty()) return -1;
  auto shape = match.producer(gather->input(0));
  if (!shape || shape->op_type() != "Shape" || shape->input(0).name != data.name) return -1;
  if (shape->has_attribute("start") || shape->has_attribute("end")) return -1;
  const auto rank = match.facts_of(data).rank();
  int64_t axis = index->ints()[0];
  if (axis < 0 && rank) axis += static_cast<int64_t>(*rank);
  return axis >= 0 ? static_cast<int>(axis) : -1;
}

// What the Reshape of `data` to `shape` (allowzero = 0) makes of each axis, or why that is unknown.
std::optional<std::vector<Entry>> reshape_entries(const BuildContext& match, const Value& data, const Value& shape, std::string& why) {
  const ShapeFacts& data_facts = match.facts_of(data);
  std::vector<Entry> entries;
  if (auto values = match.constant_of(shape)) {
    for (size_t j = 0; j < values->ints().size(); ++j) {
      const int64_t n = values->ints()[j];
      entries.push_back(n == 0 ? Entry{0, static_cast<int>(j)} : Entry{n, -1});
    }
    return entries;
  }
  // torch's Concat (Unsqueeze (Gather (Shape (data), i)), ..., constants).
  if (auto concat = match.producer(shape); concat && concat->op_type() == "Concat") {
    bool ok = true;
    for (const Value& piece : concat->inputs()) {
      if (auto values = match.constant_of(piece)) {
        for (size_t j = 0; j < values->ints().size(); ++j) {
          const int64_t n = values->ints()[j];
          entries.push_back(n == 0 ? Entry{0, static_cast<int>(entries.size())} : Entry{n, -1});
        }
      } else if (int axis = copied_axis(match, piece, data); axis >= 0) {
        entries.push_back(Entry{0, axis});
      } else {
        ok = false;
        break;
      }
    }
    if (ok) return entries;
    entries.clear();
  }
  // The shape facts: each element a number or the symbol of one of data's dims.
  const ShapeFacts& facts = match.facts_of(shape);
  if (facts.values && data_facts.shape) {
    for (size_t j = 0; j < facts.values->size(); ++j) {
      const Dim& dim = (*facts.values)[j];
      if (dim.known()) {
        entries.push_back(*dim.number == 0 ? Entry{0, static_cast<int>(j)} : Entry{*dim.number, -1});
        continue;
      }
      int found = -1;
      if (dim.symbol) {
        if (j < data_facts.shape->size() && (*data_facts.shape)[j] == dim) found = static_cast<int>(j);
        for (size_t i = 0; found < 0 && i < data_facts.shape->size(); ++i)
          if ((*data_facts.shape)[i] == dim) found = static_cast<int>(i);
      }
      if (found < 0) {
        why = fmt::format("element {} of the shape '{}' of the Reshape of '{}' is unknown", j, shape.name, data.name);
        return std::nullopt;
      }
      entries.push_back(Entry{0, found});
    }
    return entries;
  }
  why = fmt::format("the shape '{}' of the Reshape of '{}' is not known", shape.name, data.name);
  return std::nullopt;
}

// Whether the entry keeps axis `axis` of data (a copy of it, or its own size when that is known).
bool keeps_axis(const Entry& e, const ShapeFacts& data, size_t axis) {
  if (e.copy >= 0) return e.copy == static_cast<int>(axis);
  return e.number > 0 && data.dim(axis) == e.number;
}

struct HeadSplit {
  int64_t heads = 0, head_size = 0;
};

// [B, L, D] -> [B, L, N, H]: the head split of a rank-3 value.
std::optional<HeadSplit> head_split(const BuildContext& match, const std::string& data_name, const std::string& shape_name, std::string& why) {
  const Value& data = match.value(data_name);
  const ShapeFacts& facts = match.facts(data_name);
  if (facts.rank() != 3u) {
    why = fmt::format("'{}' is not known to have rank 3 ([batch, sequence, hidden])", data.name);
    return std::nullopt;
  }
  auto entries = reshape_entries(match, data, match.value(shape_name), why);
  if (!entries) return std::nullopt;
  const auto& e = *entries;
  const int64_t hidden = facts.dim(2);
  auto text = [&] {
    std::vector<std::string> parts;
    for (const Entry& x : e) parts.push_back(entry_text(x));
    return fmt::format("[{}]", fmt::join(parts, ", "));
  };
  if (e.size() != 4 || e[2].copy >= 0 || e[3].copy >= 0 || e[2].number <= 0 || e[3].number <= 0) {
    why = fmt::format("the Reshape of '{}' to {} is not a split of the last axis into heads [B, L, N, H]", data.name, text());
    return std::nullopt;
  }
  const int64_t n = e[2].number, h = e[3].number;
  const bool hidden_ok = hidden > 0 && hidden == n * h;
  const bool batch_ok = keeps_axis(e[0], facts, 0) || (e[0].number == -1 && hidden_ok && keeps_axis(e[1], facts, 1));
  const bool seq_ok = keeps_axis(e[1], facts, 1) || (e[1].number == -1 && hidden_ok && keeps_axis(e[0], facts, 0));
  if (!batch_ok || !seq_ok || (hidden > 0 && hidden != n * h)) {
    why = fmt::format("the Reshape of '{}' (hidden size {}) to {} is not a split of the last axis into heads [B, L, N, H]", data.name,
                      hidden > 0 ? std::to_string(hidden) : "unknown", text());
    return std::nullopt;
  }
  return HeadSplit{n, h};
}

// The padding mask behind an additive mask (1 - Cast(Unsqueeze(Unsqueeze(mask, 1), 2))) · c:
// the [B, T] mask and c.
struct PaddingMask {
  Value mask;
  double fill = 0;
};

std::optional<double> scalar_of(const BuildContext& match, const Value& value) {
  auto values = match.constant_of(value, 1);
  if (!values || values->numbers.size() != 1) return std::nullopt;
  return values->numbers[0];
}

// A one-element value computed from constants the way GPT-2's export writes its √H:
// Add (ConstantOfShape (<empty shape>), c) — zeros of rank 0 plus the constant.
std::optional<double> folded_scalar(const BuildContext& match, const Value& value, int depth = 0) {
  if (auto c = scalar_of(match, value)) return c;
  auto node = match.producer(value);
  if (!node || depth > 3) return std::nullopt;
  if (node->op_type() == "ConstantOfShape") {
    auto shape = match.constant_of(node->input(0));
    if (!shape || !shape->ints().empty()) return std::nullopt;
    const auto* attribute = node->attribute("value");
    if (!attribute) return 0.0;
    auto values = decode_tensor(attribute->t());
    if (!values || values->numbers.size() != 1) return std::nullopt;
    return values->numbers[0];
  }
  if (node->op_type() == "Add" || node->op_type() == "Mul") {
    auto a = folded_scalar(match, node->input(0), depth + 1);
    auto b = folded_scalar(match, node->input(1), depth + 1);
    if (!a || !b) return std::nullopt;
    return node->op_type() == "Add" ? *a + *b : *a * *b;
  }
  return std::nullopt;
}

// Whether the constant is a lower-triangular [1, 1, M, M] of ones: key t visible to
// query s iff t <= s.
std::optional<std::string> lower_triangular(const BuildContext& match, const Value& buffer) {
  auto values = match.constant_of(buffer, size_t{1} << 24);
  if (!values) return fmt::format("the causal mask '{}' is not a constant (of at most 2^24 elements)", buffer.name);
  const auto& dims = values->dims;
  const size_t rank = dims.size();
  if (rank != 4 || dims[2] != dims[3] || dims[0] != 1 || dims[1] != 1) {
    return fmt::format("the causal mask '{}' is not [1, 1, M, M]", buffer.name);
  }
  const int64_t m = dims[rank - 1];
  const bool as_numbers = values->numbers.size() == static_cast<size_t>(m * m);
  const std::vector<int64_t> as_ints = as_numbers ? std::vector<int64_t>{} : values->ints();
  if (!as_numbers && as_ints.size() != static_cast<size_t>(m * m)) return fmt::format("the causal mask '{}' could not be read", buffer.name);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      const size_t at = static_cast<size_t>(i * m + j);
      const bool visible = as_numbers ? values->numbers[at] != 0 : as_ints[at] != 0;
      if (visible != (j <= i)) return fmt::format("the causal mask '{}' is not lower-triangular ones", buffer.name);
    }
  }
  return std::nullopt;
}

std::optional<PaddingMask> padding_mask(const BuildContext& match, const Value& bias, std::string& why) {
  why = fmt::format("the additive mask '{}' is not (1 - mask[:, None, None, :]) · c of a [batch, keys] padding mask", bias.name);
  auto mul = match.producer(bias);
  if (!mul || mul->op_type() != "Mul") return std::nullopt;
  std::optional<double> fill;
  Value inverted;
  for (int i = 0; i < 2; ++i) {
    if (auto c = scalar_of(match, mul->input(i)); c && !match.is_constant(mul->input(1 - i))) {
      fill = c;
      inverted = mul->input(1 - i);
    }
  }
  if (!fill) return std::nullopt;
  auto sub = match.producer(inverted);
  if (!sub || sub->op_type() != "Sub") return std::nullopt;
  auto one = scalar_of(match, sub->input(0));
  if (!one || *one != 1.0) return std::nullopt;
  // Casts (of 0/1 values: exact in any type) and the Unsqueezes that make [B, 1, 1, T] of [B, T].
  Value mask = sub->input(1);
  std::vector<std::vector<int64_t>> unsqueezes;  // outermost first
  while (auto node = match.producer(mask)) {
    if (node->op_type() == "Cast") {
      mask = node->input(0);
    } else if (node->op_type() == "Unsqueeze") {
      std::vector<int64_t> axes;
      if (node->has_attribute("axes")) {
        axes = node->attribute_ints("axes");
      } else if (auto values = match.constant_of(node->input(1))) {
        axes = values->ints();
      } else {
        return std::nullopt;
      }
      unsqueezes.push_back(axes);
      mask = node->input(0);
    } else {
      break;
    }
  }
  const ShapeFacts& facts = match.facts_of(mask);
  if (facts.rank() != 2u) {
    why = fmt::format("the padding mask '{}' is not known to have rank 2 ([batch, keys])", mask.name);
    return std::nullopt;
  }
  // Where the mask's two axes end up: -1 marks an inserted axis.
  std::vector<int> layout = {0, 1};
  for (auto it = unsqueezes.rbegin(); it != unsqueezes.rend(); ++it) {
    std::vector<int64_t> axes = *it;
    const int64_t out_rank = static_cast<int64_t>(layout.size() + axes.size());
    for (auto& a : axes) a = a < 0 ? a + out_rank : a;
    std::sort(axes.begin(), axes.end());
    std::vector<int> next;
    size_t from = 0;
    for (int64_t position = 0; position < out_rank; ++position) {
      if (std::find(axes.begin(), axes.end(), position) != axes.end()) {
        next.push_back(-1);
      } else if (from < layout.size()) {
        next.push_back(layout[from++]);
      } else {
        return std::nullopt;
      }
    }
    layout = next;
  }
  if (layout != std::vector<int>{0, -1, -1, 1}) return std::nullopt;
  if (!std::isfinite(*fill) || *fill >= 0) {
    why = fmt::format("the mask's fill value {} is not a finite negative number", *fill);
    return std::nullopt;
  }
  return PaddingMask{mask, *fill};
}

BuildResult build_attention_mha(const BuildContext& match, GraphBuilder& b) {
  for (const NodeView& node : match.nodes()) {
    if (node.op_type() == "Reshape" && node.attribute_int("allowzero", 0) != 0) return decline("a Reshape has allowzero = 1");
  }
  for (const char* name : {"q", "k", "v"}) {
    if (match.facts(name).elem_type != onnx::TensorProto::FLOAT) {
      return decline(fmt::format("'{}' is not known to be float, the type ONNX Runtime's CPU attention kernels take", match.value(name)));
    }
  }
  std::string why;
  auto q = head_split(match, "q", "shape_q", why);
  if (!q) return decline(why);
  auto k = head_split(match, "k", "shape_k", why);
  if (!k) return decline(why);
  auto v = head_split(match, "v", "shape_v", why);
  if (!v) return decline(why);
  if (k->heads != q->heads || v->heads != q->heads || k->head_size != q->head_size) {
    return decline(fmt::format("the query has {} heads of {}, the key {} of {}, the value {} of {}", q->heads, q->head_size, k->heads,
                               k->head_size, v->heads, v->head_size));
  }
  // The heads joined back: [B, S, N, Hv] -> [B, S, N · Hv].
  const Value ot = match.anchor().input(0);
  const ShapeFacts& q_facts = match.facts("q");
  auto joined = reshape_entries(match, ot, match.value("shape_o"), why);
  if (!joined) return decline(why);
  const auto& e = *joined;
  const int64_t width = v->heads * v->head_size;
  auto keeps = [&](const Entry& entry, size_t axis) { return entry.copy == static_cast<int>(axis) || (entry.number > 0 && q_facts.dim(axis) == entry.number); };
  const bool join_ok = e.size() == 3 && ((keeps(e[0], 0) && keeps(e[1], 1) && (e[2].number == width || e[2].number == -1)) ||
                                         (keeps(e[0], 0) && e[1].number == -1 && e[2].number == width));
  if (!join_ok) {
    std::vector<std::string> parts;
    for (const Entry& x : e) parts.push_back(entry_text(x));
    return decline(fmt::format("the last Reshape to [{}] does not join {} heads of {} into [B, S, {}]", fmt::join(parts, ", "), v->heads,
                               v->head_size, width));
  }
  // K transposed to [B, N, H, T]: by the Transpose, or by the FusedMatMul's transB.
  const auto perm_k = match.attribute_ints("perm_k");
  const std::optional<NodeView> fused = match.node("FusedMatMul");
  int64_t trans_b = 0;
  double scale = 1.0;
  if (fused) {
    if (fused->attribute_int("transA", 0) != 0 || fused->attribute_int("transBatchA", 0) != 0 || fused->attribute_int("transBatchB", 0) != 0) {
      return decline("the FusedMatMul of the scores transposes its first input or moves batch axes");
    }
    trans_b = fused->attribute_int("transB", 0);
    scale = fused->attribute_float("alpha", 1.f);
  } else if (match.has("k_scale")) {
    auto c = folded_scalar(match, match.value("k_scale"));
    if (!c) return decline(fmt::format("the divisor '{}' of the scores is not a one-element constant", match.value("k_scale")));
    scale = 1.0 / *c;
  } else if (match.has("k_mul")) {
    auto c = match.scalar("k_mul");
    if (!c) return decline(fmt::format("the factor '{}' of the scores is not a one-element constant", match.value("k_mul")));
    scale = *c;
  }
  const bool keys_transposed = (perm_k == std::vector<int64_t>{0, 2, 3, 1} && trans_b == 0) ||
                               (perm_k == std::vector<int64_t>{0, 2, 1, 3} && trans_b == 1);
  if (!keys_transposed) {
    return decline(fmt::format("the key is transposed by perm [{}]{}: the scores are not Q · Kᵀ per head", fmt::join(perm_k, ", "),
                               trans_b ? " and transB" : ""));
  }
  if (!std::isfinite(scale) || scale == 0.0 || static_cast<float>(scale) == 0.f) {
    return decline(fmt::format("the scale {} is not a finite non-zero number (MultiHeadAttention reads 0 as 1/sqrt(H))", scale));
  }
  for (const char* name : {"k_scale", "k_mul"}) {
    if (match.has(name) && match.is_constant(name)) {
      const auto rank = match.facts(name).rank();
      if (!rank || *rank > 4) return decline(fmt::format("the scale '{}' could broadcast the scores to a higher rank", match.value(name)));
    }
  }
  Attributes attributes = {attr("num_heads", q->heads), attr("scale", static_cast<float>(scale))};
  const bool causal = match.has("buffer");
  std::optional<double> causal_fill;
  if (causal) {
    // GPT-2's causal mask, rows [T - S, T) of the buffer: with S = T (provably), key t is seen by
    // query s iff t <= s, ORT's unidirectional (the later keys get the lowest float, as the
    // Where's fill hides them).
    if (auto why_not = lower_triangular(match, match.value("buffer"))) return decline(*why_not);
    causal_fill = scalar_of(match, match.value("fill"));
    if (!causal_fill || !std::isfinite(*causal_fill) || *causal_fill > -10000.0) {
      return decline(fmt::format("the causal fill '{}' is not a finite constant of at most -10000", match.value("fill")));
    }
    const auto q_producer = match.producer(match.value("q"));
    const auto k_producer = match.producer(match.value("k"));
    const bool same_split = q_producer && k_producer && *q_producer == *k_producer;
    const Dim& s_dim = (*q_facts.shape)[1];
    const Dim& t_dim = (*match.facts("k").shape)[1];
    if (!same_split && !(s_dim == t_dim)) {
      return decline(fmt::format("the query length {} is not provably the key length {} (the causal rows start at T - S)", s_dim.text(),
                                 t_dim.text()));
    }
  }
  std::vector<Value> inputs = {match.value("q"), match.value("k"), match.value("v")};
  std::optional<PaddingMask> mask;
  if (match.has("mask_bias")) mask = padding_mask(match, match.value("mask_bias"), why);
  if (match.has("mask_bias") && !mask) {
    // Any other additive bias of the scores (T5's position bias with its mask folded in) is
    // MultiHeadAttention's attention_bias, which ORT adds to the scores as they are: of shape
    // [B or 1, N or 1, S, T], S and T exact (ORT broadcasts the first two axes only).
    const Value& bias = match.value("mask_bias");
    const ShapeFacts& f = match.facts_of(bias);
    const ShapeFacts& k_facts = match.facts("k");
    // ORT's kernel refuses (an error, never other numbers) an attention_bias whose last two
    // dims are not S and T; one known to be 1 or to differ (a bias broadcast over the queries
    // or keys) is declined here, an unknown one taken as S and T (T5's come from a Range).
    const auto maybe = [](const Dim& dim, const Dim& want) { return dim.known() ? (*dim.number != 1 || (want.known() && *want.number == 1)) && (!want.known() || dim == want) : true; };
    const bool shaped = f.rank() == 4u && f.elem_type == onnx::TensorProto::FLOAT && (f.dim(1) == 1 || f.dim(1) == q->heads) &&
                        (f.dim(0) == 1 || (*f.shape)[0] == (*q_facts.shape)[0]) && maybe((*f.shape)[2], (*q_facts.shape)[1]) &&
                        maybe((*f.shape)[3], (*k_facts.shape)[1]);
    if (match.has("buffer") || !shaped) {
      return decline(fmt::format("{}; nor is it an attention bias [B or 1, {} or 1, S, T] (its shape: {})", why, q->heads,
                                 dims_text(f.shape)));
    }
    inputs.push_back(Value{});
    inputs.push_back(Value{});
    inputs.push_back(bias);
  }
  if (mask) {
    const ShapeFacts& m = match.facts_of(mask->mask);
    const ShapeFacts& k_facts = match.facts("k");
    // ORT's fusion takes the mask's shape on trust; a width known to be 1 (a row ORT would read
    // as "no mask") or known to differ from the keys' is declined.
    const Dim& width = (*m.shape)[1];
    const Dim& keys = (*k_facts.shape)[1];
    const Dim& batch = (*m.shape)[0];
    const Dim& q_batch = (*q_facts.shape)[0];
    if ((width.known() && *width.number == 1) || (width.known() && keys.known() && !(width == keys)) ||
        (batch.known() && q_batch.known() && !(batch == q_batch))) {
      return decline(fmt::format("the padding mask '{}' has shape [{}, {}], not [batch, keys] = [{}, {}]", mask->mask, batch.text(),
                                 width.text(), q_batch.text(), keys.text()));
    }
    const Value mask_index = m.elem_type == onnx::TensorProto::INT32 ? mask->mask : b.Cast(mask->mask, onnx::TensorProto::INT32);
    inputs.push_back(Value{});
    inputs.push_back(mask_index);
    attributes.push_back(attr("mask_filter_value", static_cast<float>(mask->fill)));
    if (causal) {
      // With a padding mask, ORT's unidirectional differs from the original where every key a
      // query may see is padded (left padding): the original gives the causally hidden keys
      // fill + mask fill (-inf), ORT the lowest float only. The causal window as an additive
      // attention_bias [1, 1, T, T] (0 or the fill), added with the mask as the original adds
      // them, is exact there too; T is the padding mask's width.
      const Value mask_shape = b.op("Shape", {mask->mask});
      const Value second = b.ints({1});
      const Value width = b.Gather(mask_shape, second);
      const Value ends = b.Concat({width, width}, 0);
      const Value window = b.op("Slice", {match.value("buffer"), b.ints({0, 0}), ends, b.ints({2, 3})});
      const Value seen = match.facts("buffer").elem_type == onnx::TensorProto::BOOL ? window : b.Cast(window, onnx::TensorProto::BOOL);
      const Value bias = b.op("Where", {seen, b.scalar(0.0), b.scalar(*causal_fill)});
      inputs.push_back(bias);
    }
  } else if (causal) {
    attributes.push_back(attr("unidirectional", int64_t{1}));
  }
  if (match.has("present_k")) {
    const auto outputs = b.op_outputs("MultiHeadAttention", inputs, 3, attributes, kMicrosoft);
    b.output(match.value("y"), outputs[0]);
    b.output(match.value("present_k"), outputs[1]);
    b.output(match.value("present_v"), outputs[2]);
    return built();
  }
  b.output(match.value("y"), b.op("MultiHeadAttention", inputs, attributes, kMicrosoft));
  return built();
}

// MultiHeadAttention (x·Wq + bq, x·Wk + bk, x·Wv + bv, , mask) -> Attention (x, [Wq Wk Wv], [bq bk bv], mask).
BuildResult build_attention_qkv(const BuildContext& match, GraphBuilder& b) {
  const NodeView mha = match.anchor();
  for (size_t i = 1; i < mha.outputs().size(); ++i) {
    if (!mha.output(i).absent()) return decline("the MultiHeadAttention has present or qk outputs");
  }
  if (mha.attribute_int("unidirectional", 0) != 0) return decline("the MultiHeadAttention is unidirectional");
  if (match.facts("x").elem_type != onnx::TensorProto::FLOAT) {
    return decline(fmt::format("'{}' is not known to be float, the type ONNX Runtime's CPU Attention takes", match.value("x")));
  }
  if (match.facts("x").rank() != 3u) return decline(fmt::format("'{}' is not known to have rank 3", match.value("x")));
  const char* weights[3] = {"wq", "wk", "wv"};
  const char* biases[3] = {"bq", "bk", "bv"};
  int64_t widths[3];
  for (int i = 0; i < 3; ++i) {
    const ShapeFacts& w = match.facts(weights[i]);
    const ShapeFacts& bias = match.facts(biases[i]);
    if (!match.is_constant(weights[i]) || w.elem_type != onnx::TensorProto::FLOAT || w.rank() != 2u || w.dim(1) < 0) {
      return decline(fmt::format("the weights '{}' are not a 2-D float constant", match.value(weights[i])));
    }
    if (!match.is_constant(biases[i]) || bias.elem_type != onnx::TensorProto::FLOAT || bias.rank() != 1u || bias.dim(0) != w.dim(1)) {
      return decline(fmt::format("the bias '{}' is not a 1-D float constant of the projection's width", match.value(biases[i])));
    }
    widths[i] = w.dim(1);
  }
  const int64_t rows = match.facts("wq").dim(0);
  if (match.facts("wk").dim(0) != rows || match.facts("wv").dim(0) != rows) return decline("the three projections take inputs of different widths");
  if (rows <= 0 || match.facts("x").dim(2) != rows) return decline(fmt::format("the last axis of '{}' is not known to be {}", match.value("x"), rows));
  if (widths[0] != widths[1]) return decline("the query and key projections have different widths");
  const int64_t heads = mha.attribute_int("num_heads", 0);
  if (heads <= 0 || widths[0] % heads != 0 || widths[2] % heads != 0) return decline("num_heads does not divide the projections' widths");
  Attributes attributes = {attr("num_heads", heads)};
  if (mha.has_attribute("scale")) attributes.push_back(attr("scale", mha.attribute_float("scale", 0.f)));
  if (mha.has_attribute("mask_filter_value")) attributes.push_back(attr("mask_filter_value", mha.attribute_float("mask_filter_value", 0.f)));
  if (widths[2] != widths[0]) attributes.push_back(attr("qkv_hidden_sizes", std::vector<int64_t>{widths[0], widths[1], widths[2]}));
  // [Wq Wk Wv] and [bq bk bv], their bytes copied as they are (BERT-base's weights stay unread).
  std::string why;
  const auto packed_w = match.concatenated_constants(b, {"wq", "wk", "wv"}, 1, why);
  if (!packed_w) return decline(why);
  const auto packed_b = match.concatenated_constants(b, {"bq", "bk", "bv"}, 0, why);
  if (!packed_b) return decline(why);
  std::vector<Value> inputs = {match.value("x"), *packed_w, *packed_b};
  if (match.has("mask")) inputs.push_back(match.value("mask"));
  b.output(match.value("y"), b.op("Attention", inputs, attributes, kMicrosoft));
  return built();
}

// Reshape (x, Concat (Unsqueeze (Gather (Shape (x), j)), ..., constants)) with each copied dim
// at its own position j -> Reshape (x, [0, ..., constants]) (allowzero = 0: a 0 copies the dim).
BuildResult build_reshape_copied_dims(const BuildContext& match, GraphBuilder& b) {
  if (match.anchor().attribute_int("allowzero", 0) != 0) return decline("the Reshape has allowzero = 1: a 0 is a 0, not a copy");
  if (match.is_constant("shape")) return decline("the shape is already a constant");
  // Only torch's Concat of x's own dims: a shape the facts know as numbers is canonicalize-fold-
  // known-shape's, and a shape of another value's dims (a LayerNormalization body's Shape (x)) is
  // what the fusions of that pattern read.
  const auto concat = match.producer(match.value("shape"));
  if (!concat || concat->op_type() != "Concat") return decline("the shape is not a Concat");
  bool copies = false;
  for (const Value& piece : concat->inputs()) copies = copies || copied_axis(match, piece, match.value("x")) >= 0;
  if (!copies) return decline("no element of the shape is a dim of the Reshape's own input");
  std::string why;
  auto entries = reshape_entries(match, match.value("x"), match.value("shape"), why);
  if (!entries) return decline(why);
  std::vector<int64_t> shape;
  for (size_t j = 0; j < entries->size(); ++j) {
    const Entry& e = (*entries)[j];
    if (e.copy >= 0 && e.copy != static_cast<int>(j)) {
      return decline(fmt::format("element {} of the shape copies dim {} of '{}', not its own", j, e.copy, match.value("x")));
    }
    shape.push_back(e.copy >= 0 ? 0 : e.number);
  }
  if (std::count(shape.begin(), shape.end(), -1) > 1) return decline("the shape has more than one -1");
  b.output(match.value("y"), b.op("Reshape", {match.value("x"), b.ints(shape)}));
  return built();
}

// GPT-2: MultiHeadAttention <unidirectional> (Split (Reshape (Gemm (Reshape (x, [-1, D]), W, b),
// [B, S, 3D]))) whose present key and value are stacked on a new axis 0 -> Attention (x, W, b,
// mask) with its present output.
BuildResult build_attention_packed_qkv(const BuildContext& match, GraphBuilder& b) {
  const NodeView mha = match.anchor().op_type() == "MultiHeadAttention" ? match.anchor() : *match.node("MultiHeadAttention");
  for (size_t i = 6; i < mha.inputs().size(); ++i) {
    if (!mha.input(i).absent()) return decline("the MultiHeadAttention has past, attention_bias or other inputs");
  }
  const NodeView gemm = *match.node("Gemm");
  if (gemm.attribute_float("alpha", 1.f) != 1.f || gemm.attribute_float("beta", 1.f) != 1.f || gemm.attribute_int("transA", 0) != 0 ||
      gemm.attribute_int("transB", 0) != 0) {
    return decline("the Gemm scales or transposes its operands");
  }
  const ShapeFacts& x = match.facts("x");
  if (x.elem_type != onnx::TensorProto::FLOAT) return decline(fmt::format("'{}' is not known to be float", match.value("x")));
  if (x.rank() != 3u || x.dim(2) <= 0) return decline(fmt::format("'{}' is not known to be [batch, sequence, D] with D static", match.value("x")));
  const int64_t d = x.dim(2);
  auto w = match.is_constant("w") ? match.constant("w", size_t{1} << 26) : std::nullopt;
  auto bias = match.is_constant("b") ? match.constant("b", size_t{1} << 26) : std::nullopt;
  if (!w || w->dims.size() != 2 || w->dims[0] != d || w->dims[1] % 3 != 0) return decline("the Gemm's weights are not a [D, 3·D'] constant");
  const int64_t width = w->dims[1];
  if (!bias || bias->dims != std::vector<int64_t>{width}) return decline("the Gemm's bias is not a constant of the projection's width");
  auto flat = match.constant("shape_2d");
  if (!flat || flat->ints() != std::vector<int64_t>{-1, d}) return decline(fmt::format("the first Reshape is not to [-1, {}]", d));
  std::string why;
  auto packed = reshape_entries(match, match.value("x"), match.value("shape_3d"), why);
  if (!packed) return decline(why);
  const auto& e = *packed;
  const auto keeps = [&](const Entry& entry, size_t axis) { return entry.copy == static_cast<int>(axis) || (entry.number > 0 && x.dim(axis) == entry.number); };
  if (e.size() != 3 || !keeps(e[0], 0) || !keeps(e[1], 1) || e[2].number != width) {
    return decline(fmt::format("the second Reshape does not give back [batch, sequence, {}] of '{}'", width, match.value("x")));
  }
  const int64_t third = width / 3;
  const std::vector<int64_t> thirds = {third, third, third};
  if (match.has("split")) {
    auto sizes = match.constant("split");
    if (!sizes || sizes->ints() != thirds) return decline("the Split is not into three equal parts");
  }
  if (const NodeView split = *match.node("Split"); split.has_attribute("split") && split.attribute_ints("split") != thirds) {
    return decline("the Split is not into three equal parts");  // the attribute form, below opset 13
  }
  const int64_t heads = mha.attribute_int("num_heads", 0);
  if (heads <= 0 || (width / 3) % heads != 0) return decline("num_heads does not divide the projections' width");
  Attributes attributes = {attr("num_heads", heads)};
  if (mha.has_attribute("scale")) attributes.push_back(attr("scale", mha.attribute_float("scale", 0.f)));
  if (mha.attribute_int("unidirectional", 0) != 0) attributes.push_back(attr("unidirectional", int64_t{1}));
  if (mha.has_attribute("mask_filter_value")) attributes.push_back(attr("mask_filter_value", mha.attribute_float("mask_filter_value", 0.f)));
  std::vector<Value> inputs = {match.value("x"), match.value("w"), match.value("b")};
  if (match.has("mask") || match.has("attention_bias")) inputs.push_back(match.value("mask"));
  if (match.has("attention_bias")) {
    inputs.push_back(Value{});  // no past
    inputs.push_back(match.value("attention_bias"));
  }
  const auto outputs = b.op_outputs("Attention", inputs, 2, attributes, kMicrosoft);
  b.output(match.value("y"), outputs[0]);
  b.output(match.value("present"), outputs[1]);
  return built();
}

// The cache behind cos_b = Unsqueeze (Gather (cache[0:end] (Cast to float), position_ids), [1]):
// the [M, H] constant and the positions.
struct GatheredCache {
  TensorValues cache;
  Value positions;
};

std::optional<GatheredCache> gathered_cache(const BuildContext& match, const Value& value, std::string& why) {
  why = fmt::format("'{}' is not Unsqueeze (Gather (a constant cache, position_ids), 1)", value.name);
  auto unsqueeze = match.producer(value);
  if (!unsqueeze || unsqueeze->op_type() != "Unsqueeze") return std::nullopt;
  std::vector<int64_t> axes = unsqueeze->has_attribute("axes") ? unsqueeze->attribute_ints("axes") : std::vector<int64_t>{};
  if (!unsqueeze->has_attribute("axes")) {
    auto given = match.constant_of(unsqueeze->input(1));
    if (!given) return std::nullopt;
    axes = given->ints();
  }
  if (axes != std::vector<int64_t>{1}) return std::nullopt;
  auto gather = match.producer(unsqueeze->input(0));
  if (!gather || gather->op_type() != "Gather" || gather->attribute_int("axis", 0) != 0) return std::nullopt;
  Value cache = gather->input(0);
  // Casts to float and a Slice of the first rows (the cache up to the sequence length).
  for (int depth = 0; depth < 3 && !match.is_constant(cache); ++depth) {
    auto node = match.producer(cache);
    if (!node) return std::nullopt;
    if (node->op_type() == "Cast" && node->attribute_int("to", 0) == onnx::TensorProto::FLOAT) {
      cache = node->input(0);
    } else if (node->op_type() == "Slice") {
      auto starts = match.constant_of(node->input(1));
      auto axes_in = node->input(3).absent() ? std::nullopt : match.constant_of(node->input(3));
      auto steps = node->input(4).absent() ? std::nullopt : match.constant_of(node->input(4));
      if (!starts || starts->ints() != std::vector<int64_t>{0}) return std::nullopt;
      if (!node->input(3).absent() && (!axes_in || axes_in->ints() != std::vector<int64_t>{0})) return std::nullopt;
      if (!node->input(4).absent() && (!steps || steps->ints() != std::vector<int64_t>{1})) return std::nullopt;
      cache = node->input(0);
    } else {
      return std::nullopt;
    }
  }
  auto values = match.constant_of(cache, size_t{1} << 24);
  if (!values || values->dims.size() != 2 || !is_float_type(values->data_type)) return std::nullopt;
  return GatheredCache{std::move(*values), gather->input(1)};
}

// Hugging Face's rotate_half rotary embedding -> RotaryEmbedding (x, position_ids, cos, sin) with
// the caches' first halves (the two halves are equal: emb = cat(freqs, freqs)).
BuildResult build_rotary(const BuildContext& match, GraphBuilder& b) {
  const ShapeFacts& x = match.facts("x");
  if (x.elem_type != onnx::TensorProto::FLOAT) return decline(fmt::format("'{}' is not known to be float", match.value("x")));
  if (x.rank() != 4u || x.dim(3) <= 0 || x.dim(3) % 2 != 0) {
    return decline(fmt::format("'{}' is not known to be [B, N, S, H] heads with an even static H", match.value("x")));
  }
  const int64_t h = x.dim(3), half = h / 2;
  const int64_t cat_axis = match.attribute_int("cat_axis", 0);
  if (cat_axis != -1 && cat_axis != 3) return decline("the Concat is not on the last axis");
  const auto slice_is = [&](const char* prefix, int64_t start, bool to_end) {
    const auto value = [&](const char* what) { return match.constant(fmt::format("{}_{}", prefix, what)); };
    auto starts = value("starts");
    auto ends = value("ends");
    auto axes = value("axes");
    if (!starts || !ends || !axes || starts->ints() != std::vector<int64_t>{start}) return false;
    if (axes->ints() != std::vector<int64_t>{-1} && axes->ints() != std::vector<int64_t>{3}) return false;
    if (ends->ints().size() != 1 || (to_end ? ends->ints()[0] < h : ends->ints()[0] != half)) return false;
    if (match.has(fmt::format("{}_steps", prefix))) {
      auto steps = value("steps");
      if (!steps || steps->ints() != std::vector<int64_t>{1}) return false;
    }
    return true;
  };
  if (!slice_is("lo", 0, false) || !slice_is("hi", half, true)) {
    return decline(fmt::format("the Slices are not the halves [0, {}) and [{}, {}) of the last axis", half, half, h));
  }
  std::string why;
  auto cos = gathered_cache(match, match.value("cos_b"), why);
  if (!cos) return decline(why);
  auto sin = gathered_cache(match, match.value("sin_b"), why);
  if (!sin) return decline(why);
  if (cos->positions.name != sin->positions.name) return decline("cos and sin are gathered at different positions");
  const ShapeFacts& positions = match.facts_of(cos->positions);
  if (positions.elem_type != onnx::TensorProto::INT64 || positions.rank() != 2u) {
    return decline(fmt::format("the positions '{}' are not known to be int64 [batch, sequence]", cos->positions.name));
  }
  std::vector<double> halves[2];
  const TensorValues* caches[2] = {&cos->cache, &sin->cache};
  for (int c = 0; c < 2; ++c) {
    const auto& cache = *caches[c];
    if (cache.dims[1] != h) return decline(fmt::format("a cache has rows of {}, the heads {}", cache.dims[1], h));
    for (int64_t row = 0; row < cache.dims[0]; ++row) {
      for (int64_t i = 0; i < half; ++i) {
        const double first = cache.numbers[static_cast<size_t>(row * h + i)];
        if (first != cache.numbers[static_cast<size_t>(row * h + i + half)]) {
          return decline("a cache's two halves differ (not cat(freqs, freqs)): not the rotation RotaryEmbedding computes");
        }
        halves[c].push_back(first);
      }
    }
  }
  const Value cos_half = b.constant(make_tensor(onnx::TensorProto::FLOAT, {cos->cache.dims[0], half}, halves[0]));
  const Value sin_half = b.constant(make_tensor(onnx::TensorProto::FLOAT, {sin->cache.dims[0], half}, halves[1]));
  Attributes attributes;
  if (x.dim(1) > 0) attributes.push_back(attr("num_heads", x.dim(1)));
  b.output(match.value("y"), b.op("RotaryEmbedding", {match.value("x"), cos->positions, cos_half, sin_half}, attributes, kMicrosoft));
  return built();
}

}  // namespace

void register_fuse_attention_builders(BuilderRegistry& registry) {
  registry.add("fuse_attention_mha",
               {.values = {"q", "k", "v", "shape_q", "shape_k", "shape_v", "shape_o", "y"},
                .optional_values = {"k_scale", "k_mul", "mask_bias", "buffer", "fill", "present_k", "present_v"},
                .attributes = {"perm_k"},
                .node_attributes = {"alpha", "transA", "transB", "transBatchA", "transBatchB", "allowzero"}},
               build_attention_mha);
  registry.add("fuse_attention_qkv",
               {.values = {"x", "wq", "bq", "wk", "bk", "wv", "bv", "y"},
                .optional_values = {"mask"},
                .node_attributes = {"num_heads", "scale", "mask_filter_value", "unidirectional"}},
               build_attention_qkv);
  registry.add("fuse_attention_packed_qkv",
               {.values = {"x", "shape_2d", "w", "b", "shape_3d", "y", "present"},
                .optional_values = {"split", "mask", "attention_bias"},
                .node_attributes = {"alpha", "beta", "transA", "transB", "num_heads", "scale", "mask_filter_value", "unidirectional", "split"}},
               build_attention_packed_qkv);
  registry.add("fuse_rotary",
               {.values = {"x", "cos_b", "sin_b", "lo_starts", "lo_ends", "lo_axes", "hi_starts", "hi_ends", "hi_axes", "y"},
                .optional_values = {"lo_steps", "hi_steps"},
                .attributes = {"cat_axis"}},
               build_rotary);
  registry.add("reshape_copied_dims", {.values = {"x", "shape", "y"}, .node_attributes = {"allowzero"}}, build_reshape_copied_dims);
}

}  // namespace onnx_rewrite
