// The attention fusions (rules/fuse-attention): BERT-style self-attention written the way
// torch 1.13 exports Hugging Face's modeling code (the head split's shapes computed by
// Shape/Gather/Unsqueeze/Concat, the padding mask as (1 - mask[:, None, None, :]) · c) becomes
// com.microsoft.Attention (or MultiHeadAttention for cross-attention) under --target ort, and
// ONNX Runtime computes the same as the original (optimizations off, 1e-4). Near misses stay,
// with --explain saying why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/toolkit.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// Deterministic numbers for initializers: `count` values in [-spread, spread).
std::string numbers(int count, double spread, uint32_t seed) {
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    seed = seed * 1664525u + 1013904223u;
    out.push_back(fmt::format("{:.4f}", spread * (2.0 * (seed >> 8) / double(1u << 24) - 1.0)));
  }
  return fmt::format("{{{}}}", fmt::join(out, ", "));
}

struct LayerCase {
  std::string name;
  int opset = 17;
  bool mask = true;
  std::string scale = "div";        // div: Div by 2 (√H); mul: Mul by 0.5; none
  bool two_key_transposes = false;  // K as Transpose [0,2,1,3] then [0,1,3,2] (else [0,2,3,1])
  std::string fill = "-3.4028234663852886e+38";
  bool static_dims = false;         // [2, 5, 8] instead of [B, S, 8]
  bool cross = false;               // K and V from a second input `mem` [B, T, 8] (mask [B, T])
  std::string query_shape = "n, h";  // the constant part of the query's head split
  std::string join_shape = "uo0, uo1, d";  // the last Reshape's shape
  std::string softmax_axis = "-1";
  bool scale_input = false;         // the divisor a graph input
  bool position_bias = false;       // T5: no scale, + a float [1, 2, S, S] input, Cast to float before the Softmax
  bool raw_weights = false;         // initializers in raw_data, as exporters write them (the text parser writes float_data)
  bool raw_query_only = false;      // with raw_weights: only wq and bq so (the packed weights are then a copy)
};

// The Shape/Gather/Unsqueeze/Concat torch writes for Reshape (value, [dim 0, dim 1, N, H])
// (Unsqueeze's axes an attribute below opset 13).
std::string head_split(const std::string& v, int opset = 17) {
  const std::string u0 = opset < 13 ? fmt::format("Unsqueeze <axes = [0]> (g0_{})", v) : fmt::format("Unsqueeze (g0_{}, ax0)", v);
  const std::string u1 = opset < 13 ? fmt::format("Unsqueeze <axes = [0]> (g1_{})", v) : fmt::format("Unsqueeze (g1_{}, ax0)", v);
  return fmt::format(R"(
      s_{0} = Shape ({0})
      g0_{0} = Gather <axis = 0> (s_{0}, c0)
      g1_{0} = Gather <axis = 0> (s_{0}, c1)
      u0_{0} = {1}
      u1_{0} = {2}
      sh_{0} = Concat <axis = 0> (u0_{0}, u1_{0}, n, h)
      r_{0} = Reshape ({0}, sh_{0}))",
                     v, u0, u1);
}

std::string layer_model(const LayerCase& c) {
  const std::string batch = c.static_dims ? "2" : "B", seq = c.static_dims ? "5" : "S", keys = c.cross ? "T" : seq;
  const std::string kv_input = c.cross ? "mem" : "x";
  std::string inputs = fmt::format("float[{}, {}, 8] x", batch, seq);
  if (c.cross) inputs += fmt::format(", float[{}, T, 8] mem", batch);
  if (c.mask) inputs += fmt::format(", int64[{}, {}] mask", batch, keys);
  if (c.scale_input) inputs += ", float scale";
  if (c.position_bias) inputs += fmt::format(", float[1, 2, {0}, {0}] pos", seq);
  std::string body = fmt::format(R"(
      c0 = Constant <value = int64 {{0}}> ()
      c1 = Constant <value = int64 {{1}}> ()
      ax0 = Constant <value = int64[1] {{0}}> ()
      n = Constant <value = int64[1] {{2}}> ()
      h = Constant <value = int64[1] {{4}}> ()
      qm = MatMul (x, wq)
      q = Add (bq, qm)
      km = MatMul ({0}, wk)
      k = Add (bk, km)
      vm = MatMul ({0}, wv)
      v = Add (bv, vm))",
                                 kv_input);
  std::string q_split = head_split("q");
  q_split.replace(q_split.find("n, h)"), 5, c.query_shape + ")");
  body += q_split + "\n      qt = Transpose <perm = [0, 2, 1, 3]> (r_q)";
  body += head_split("k");
  body += c.two_key_transposes ? "\n      k1 = Transpose <perm = [0, 2, 1, 3]> (r_k)\n      kt = Transpose <perm = [0, 1, 3, 2]> (k1)"
                               : "\n      kt = Transpose <perm = [0, 2, 3, 1]> (r_k)";
  body += head_split("v") + "\n      vt = Transpose <perm = [0, 2, 1, 3]> (r_v)";
  body += "\n      sc = MatMul (qt, kt)";
  if (c.scale_input) {
    body += "\n      s = Div (sc, scale)";
  } else if (c.scale == "div") {
    body += "\n      two = Constant <value = float {2.0}> ()\n      s = Div (sc, two)";
  } else if (c.scale == "mul") {
    body += "\n      half = Constant <value = float {0.5}> ()\n      s = Mul (sc, half)";
  }
  const std::string scores = c.scale == "none" && !c.scale_input ? "sc" : "s";
  if (c.mask) {
    body += fmt::format(R"(
      ax1 = Constant <value = int64[1] {{1}}> ()
      ax2 = Constant <value = int64[1] {{2}}> ()
      m1 = Unsqueeze (mask, ax1)
      m2 = Unsqueeze (m1, ax2)
      mf = Cast <to = 1> (m2)
      one = Constant <value = float {{1.0}}> ()
      inv = Sub (one, mf)
      fill = Constant <value = float {{{}}}> ()
      mb = Mul (inv, fill)
      a = Add ({}, mb))",
                        c.fill, scores);
  }
  std::string logits = c.mask ? "a" : scores;
  if (c.position_bias) {
    body += fmt::format("\n      a = Add ({}, pos)\n      af = Cast <to = 1> (a)", scores);
    logits = "af";
  }
  body += fmt::format(R"(
      p = Softmax <axis = {}> ({})
      o = MatMul (p, vt)
      ot = Transpose <perm = [0, 2, 1, 3]> (o)
      s_o = Shape (ot)
      g0_o = Gather <axis = 0> (s_o, c0)
      g1_o = Gather <axis = 0> (s_o, c1)
      uo0 = Unsqueeze (g0_o, ax0)
      uo1 = Unsqueeze (g1_o, ax0)
      d = Constant <value = int64[1] {{8}}> ()
      sh_o = Concat <axis = 0> ({})
      j = Reshape (ot, sh_o)
      om = MatMul (j, wo)
      y = Add (bo, om))",
                      c.softmax_axis, logits, c.join_shape);
  const std::string out_dims = c.join_shape == "uo0, uo1, d" ? fmt::format("{}, {}, 8", batch, seq) : "P, Q";
  std::string weights;
  const char* names[] = {"wq", "wk", "wv", "wo"};
  for (int i = 0; i < 4; ++i) {
    weights += fmt::format("float[8, 8] {} = {}, float[8] b{} = {}, ", names[i], numbers(64, 0.8, 11 + i), names[i][1], numbers(8, 0.3, 31 + i));
  }
  weights.resize(weights.size() - 2);
  return fmt::format("<ir_version: {}, opset_import: [\"\": {}]>\nlayer ({}) => (float[{}] y)\n<{}> {{{}\n}}", ir_version_for(c.opset), c.opset,
                     inputs, out_dims, weights, body);
}

// As `rewrite --target ort` does: the target's default --simplify included (it takes the
// Constant nodes canonicalize-fold-known-shape leaves once their readers are fused away).
Rewritten fuse(const onnx::ModelProto& model, const std::string& explain_op = "") {
  RewriteOptions options;
  options.target = "ort";
  options.simplify = true;
  options.explain = explain_op;
  return rewrite_proto(model, builtin_rules(), options);
}
Rewritten fuse(const std::string& text, const std::string& explain_op = "") { return fuse(parse_model_text(text), explain_op); }

// The model with its initializers' numbers in raw_data: the packed weights are then assembled
// from the file's bytes, not decoded.
onnx::ModelProto with_raw_weights(onnx::ModelProto model, bool query_only) {
  for (auto& tensor : *model.mutable_graph()->mutable_initializer()) {
    if (query_only && tensor.name() != "wq" && tensor.name() != "bq") continue;
    const std::vector<int64_t> dims(tensor.dims().begin(), tensor.dims().end());
    onnx::TensorProto raw = make_tensor(tensor.data_type(), dims, decode_tensor(tensor)->numbers);
    raw.set_name(tensor.name());
    tensor = raw;
  }
  return model;
}

int count(const onnx::ModelProto& model, const std::string& domain, const std::string& op_type) {
  const auto counts = count_ops(model);
  auto it = counts.find({domain, op_type});
  return it == counts.end() ? 0 : it->second;
}

const onnx::NodeProto* find_node(const onnx::ModelProto& model, const std::string& op_type) {
  for (const auto& node : model.graph().node())
    if (node.op_type() == op_type) return &node;
  return nullptr;
}

// ONNX Runtime computes the same with the rewrite, which passes `check --target ort`.
void expect_same_in_ort(const std::string& original_text, const Rewritten& rewritten, const std::vector<std::string>& dims) {
  TempDir dir;
  const auto original = write_model_text(original_text, dir / "original.onnx");
  const auto candidate = dir / "rewritten.onnx";
  write_file(candidate, rewritten.bytes);
  std::vector<std::string> extra = {"--int-range", "0,1", "--float-range", "-2,2", "--trials", "3", "--rtol", "1e-4", "--atol", "1e-5"};
  extra.insert(extra.end(), dims.begin(), dims.end());
  const auto comparison = ort_compare(original, candidate, extra);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers(::testing::UnitTest::GetInstance()->current_test_info()->name(), comparison);
  const auto check = run_cli({"check", candidate.string(), "--target", "ort"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

class SelfAttention : public ::testing::TestWithParam<LayerCase> {};

TEST_P(SelfAttention, FusesIntoOneAttentionAndComputesTheSame) {
  const auto& c = GetParam();
  const std::string text = layer_model(c);
  const auto fused = c.raw_weights ? fuse(with_raw_weights(parse_model_text(text), c.raw_query_only)) : fuse(text);
  const auto& out = fused.model;
  const std::string nodes = canonical_nodes(out, interface_names(out));
  EXPECT_EQ(count(out, "com.microsoft", "Attention"), 1) << nodes;
  EXPECT_EQ(count(out, "com.microsoft", "MultiHeadAttention"), 0) << nodes;
  for (const char* gone : {"Softmax", "Transpose", "Reshape", "Shape", "Concat"}) EXPECT_EQ(count(out, "", gone), 0) << gone << "\n" << nodes;
  // Attention, the output projection (MatMul, Add), the mask's Cast to int32.
  // (Constant nodes the canonicalizations left unread go in the --simplify run of the CLI.)
  std::vector<std::string> ops = op_types(out.graph());
  ops.erase(std::remove(ops.begin(), ops.end(), "Constant"), ops.end());
  EXPECT_EQ(ops.size(), c.mask ? 4u : 3u) << fmt::format("{}", fmt::join(ops, " ")) << "\n" << nodes;
  const auto* attention = find_node(out, "Attention");
  ASSERT_NE(attention, nullptr);
  for (const auto& a : attention->attribute()) {
    if (a.name() == "num_heads") {
      EXPECT_EQ(a.i(), 2);
    } else if (a.name() == "scale") {
      EXPECT_FLOAT_EQ(a.f(), 0.5f);
    } else if (a.name() == "mask_filter_value") {
      EXPECT_FLOAT_EQ(a.f(), std::stof(c.fill));
    }
  }
  EXPECT_EQ(attention->input_size(), c.mask ? 4 : 3);
  // Weights the source holds as raw bytes are packed from there when written, not decoded here;
  // where one of them is not (only the query raw), the packed weights are a copy.
  for (const auto& tensor : out.graph().initializer()) {
    if (tensor.name() == attention->input(1)) {
      EXPECT_EQ(tensor.has_raw_data(), !c.raw_weights || c.raw_query_only) << tensor.name();
    }
  }
  expect_same_in_ort(text, fused, c.static_dims ? std::vector<std::string>{} : std::vector<std::string>{"--dim", "B=3", "--dim", "S=7"});
}

INSTANTIATE_TEST_SUITE_P(
    Exported, SelfAttention,
    ::testing::Values(LayerCase{.name = "Opset17Mask"}, LayerCase{.name = "Opset13Mask", .opset = 13},
                      LayerCase{.name = "Opset17NoMask", .mask = false}, LayerCase{.name = "Opset13NoMask", .opset = 13, .mask = false},
                      LayerCase{.name = "MulByInverseScale", .scale = "mul"},
                      LayerCase{.name = "TwoKeyTransposes", .two_key_transposes = true},
                      LayerCase{.name = "Minus10000Mask", .opset = 13, .fill = "-10000.0"},
                      LayerCase{.name = "StaticShapes", .static_dims = true},
                      LayerCase{.name = "StaticShapesNoMask", .opset = 13, .mask = false, .static_dims = true},
                      LayerCase{.name = "SoftmaxAxis3", .softmax_axis = "3"},
                      LayerCase{.name = "RawWeights", .raw_weights = true},
                      LayerCase{.name = "RawWeightsStaticShapes", .opset = 13, .static_dims = true, .raw_weights = true},
                      LayerCase{.name = "RawQueryWeightsOnly", .raw_weights = true, .raw_query_only = true}),
    [](const auto& info) { return info.param.name; });

// K and V from another sequence (encoder-decoder cross-attention): MultiHeadAttention, whose
// key and value are the projections of `mem` (not one input, so not Attention).
TEST(CrossAttention, StaysMultiHeadAttentionWithItsOwnKeyLength) {
  const LayerCase c{.name = "cross", .cross = true};
  const std::string text = layer_model(c);
  const auto fused = fuse(text);
  const std::string nodes = canonical_nodes(fused.model, interface_names(fused.model));
  EXPECT_EQ(count(fused.model, "com.microsoft", "MultiHeadAttention"), 1) << nodes;
  EXPECT_EQ(count(fused.model, "", "Softmax"), 0) << nodes;
  expect_same_in_ort(text, fused, {"--dim", "B=2", "--dim", "S=3", "--dim", "T=6"});
}

// T5: no scale (folded into the weights), the relative position bias (its mask folded in) added
// to the scores, softmax(scores.float()): MultiHeadAttention with attention_bias, which ORT adds
// to the scores as they are. (No Attention: its projections have no bias, ORT's CPU Attention
// wants one.)
TEST(PositionBias, IsMultiHeadAttentionsAttentionBias) {
  const LayerCase c{.name = "t5", .mask = false, .scale = "none", .position_bias = true};
  const std::string text = layer_model(c);
  const auto fused = fuse(text);
  const std::string nodes = canonical_nodes(fused.model, interface_names(fused.model));
  EXPECT_EQ(count(fused.model, "com.microsoft", "MultiHeadAttention"), 1) << nodes;
  EXPECT_EQ(count(fused.model, "", "Softmax"), 0) << nodes;
  const auto* mha = find_node(fused.model, "MultiHeadAttention");
  ASSERT_NE(mha, nullptr);
  ASSERT_EQ(mha->input_size(), 6) << nodes;
  EXPECT_EQ(mha->input(5), "pos");
  expect_same_in_ort(text, fused, {"--dim", "B=2", "--dim", "S=5", "--float-range", "-3,3"});
}

// The reason the fusion declines, for one near miss: nothing of the attention is fused.
void expect_declined(const LayerCase& c, const std::string& reason) {
  const auto fused = fuse(layer_model(c), "Reshape");
  EXPECT_EQ(count(fused.model, "com.microsoft", "MultiHeadAttention"), 0);
  EXPECT_EQ(count(fused.model, "com.microsoft", "Attention"), 0);
  EXPECT_EQ(count(fused.model, "", "Softmax"), 1);
  EXPECT_NE(fused.explain.find(reason), std::string::npos) << fused.explain;
}

TEST(AttentionNearMiss, PositiveMaskFillIsNotAPaddingMask) {
  expect_declined(LayerCase{.name = "fill", .fill = "10000.0"}, "the mask's fill value 10000 is not a finite negative number");
}

TEST(AttentionNearMiss, ScaleGivenAtRunTime) {
  expect_declined(LayerCase{.name = "scale", .scale_input = true}, "the divisor 'scale' of the scores is not a one-element constant");
}

TEST(AttentionNearMiss, QuerySplitIntoOtherHeadsThanTheKey) {
  // The query split into 4 heads of 2, the key and value into 2 of 4: not one attention.
  LayerCase c{.name = "heads", .query_shape = "h, n"};
  const auto fused = fuse(layer_model(c), "Reshape");
  EXPECT_EQ(count(fused.model, "com.microsoft", "MultiHeadAttention"), 0);
  EXPECT_NE(fused.explain.find("the query has 4 heads of 2, the key 2 of 4, the value 2 of 4"), std::string::npos) << fused.explain;
}

TEST(AttentionNearMiss, LastReshapeThatIsNotTheHeadJoin) {
  expect_declined(LayerCase{.name = "join", .join_shape = "uo0, d"}, "does not join 2 heads of 4 into [B, S, 8]");
}

TEST(AttentionNearMiss, SoftmaxOverTheQueries) {
  expect_declined(LayerCase{.name = "axis", .softmax_axis = "2"}, "fuse-attention-mha");
}

// ---- GPT-2 -------------------------------------------------------------------------------------

struct Gpt2Case {
  std::string name;
  int opset = 17;
  bool mask = false;         // a padding mask (random 0/1: rows whose every visible key is padded too)
  bool static_dims = false;  // [2, 5, 8]
  bool stacked = true;       // present = Concat (Unsqueeze (K), Unsqueeze (V)), else K and V as outputs
  std::string buffer = "";   // the causal buffer's 64 values (default lower-triangular ones)
};

std::string gpt2_model(const Gpt2Case& c) {
  const std::string batch = c.static_dims ? "2" : "B", seq = c.static_dims ? "5" : "S";
  std::string inputs = fmt::format("float[{}, {}, 8] x", batch, seq);
  if (c.mask) inputs += fmt::format(", int64[{}, {}] mask", batch, seq);
  std::string outputs = fmt::format("float[{}, {}, 8] y", batch, seq);
  outputs += c.stacked ? fmt::format(", float[2, {}, 2, {}, 4] present", batch, seq)
                       : fmt::format(", float[{0}, 2, {1}, 4] present_k, float[{0}, 2, {1}, 4] present_v", batch, seq);
  std::string buffer = c.buffer;
  if (buffer.empty()) {
    std::vector<std::string> values;
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 8; ++j) values.push_back(j <= i ? "1" : "0");
    buffer = fmt::format("{}", fmt::join(values, ", "));
  }
  std::string body = R"(
      c0 = Constant <value = int64 {0}> ()
      c1 = Constant <value = int64 {1}> ()
      ax0 = Constant <value = int64[1] {0}> ()
      n = Constant <value = int64[1] {2}> ()
      h = Constant <value = int64[1] {4}> ()
      flat = Constant <value = int64[2] {-1, 8}> ()
      x2 = Reshape (x, flat)
      g = Gemm (x2, w, b)
      s_x = Shape (x)
      g0_x = Gather <axis = 0> (s_x, c0)
      g1_x = Gather <axis = 0> (s_x, c1)
      u0_x = UNSQ(g0_x)
      u1_x = UNSQ(g1_x)
      width = Constant <value = int64[1] {24}> ()
      sh_x = Concat <axis = 0> (u0_x, u1_x, width)
      r3 = Reshape (g, sh_x)
      SPLIT)";
  body += head_split("q", c.opset) + "\n      qt = Transpose <perm = [0, 2, 1, 3]> (r_q)";
  body += head_split("k", c.opset) + "\n      present_k = Transpose <perm = [0, 2, 1, 3]> (r_k)\n      kt = Transpose <perm = [0, 2, 3, 1]> (r_k)";
  body += head_split("v", c.opset) + "\n      present_v = Transpose <perm = [0, 2, 1, 3]> (r_v)";
  body += R"(
      m = MatMul (qt, kt)
      empty = Constant <value = int64[0] {}> ()
      zeros = ConstantOfShape (empty)
      sqrt_h = Constant <value = float {2.0}> ()
      den = Add (zeros, sqrt_h)
      s = Div (m, den)
      m2 = Constant <value = int64[1] {-2}> ()
      m1 = Constant <value = int64[1] {-1}> ()
      ax2 = Constant <value = int64[1] {2}> ()
      ax3 = Constant <value = int64[1] {3}> ()
      one1 = Constant <value = int64[1] {1}> ()
      q_shape = Shape (qt)
      q_len_1 = Slice (q_shape, m2, m1, ax0)
      q_len = SQ(q_len_1)
      k_shape = Shape (present_k)
      k_len_1 = Slice (k_shape, m2, m1, ax0)
      k_len = SQ(k_len_1)
      start = Sub (k_len, q_len)
      start_1 = UNSQ(start)
      end_1 = UNSQ(k_len)
      rows = Slice (buffer, start_1, end_1, ax2, one1)
      end_2 = UNSQ(k_len)
      causal = Slice (rows, ax0, end_2, ax3, one1)
      sf = Cast <to = 1> (s)
      fill = Constant <value = float {-3.4028234663852886e+38}> ()
      w_ = Where (causal, sf, fill))";
  std::string logits = "w_";
  if (c.mask) {
    body += R"(
      ax1 = Constant <value = int64[1] {1}> ()
      mu1 = UNSQ1(mask)
      mu2 = UNSQ2(mu1)
      mf = Cast <to = 1> (mu2)
      one = Constant <value = float {1.0}> ()
      inv = Sub (one, mf)
      mb = Mul (inv, fill)
      a = Add (w_, mb))";
    logits = "a";
  }
  body += fmt::format(R"(
      p = Softmax <axis = -1> ({})
      pf = Cast <to = 1> (p)
      o = MatMul (pf, present_v)
      ot = Transpose <perm = [0, 2, 1, 3]> (o)
      s_o = Shape (ot)
      g0_o = Gather <axis = 0> (s_o, c0)
      g1_o = Gather <axis = 0> (s_o, c1)
      uo0 = UNSQ(g0_o)
      uo1 = UNSQ(g1_o)
      d = Constant <value = int64[1] {{8}}> ()
      sh_o = Concat <axis = 0> (uo0, uo1, d)
      y = Reshape (ot, sh_o))",
                      logits);
  if (c.stacked) {
    body += R"(
      uk = UNSQ(present_k)
      uv = UNSQ(present_v)
      present = Concat <axis = 0> (uk, uv))";
  }
  // Below opset 13, Squeeze/Unsqueeze axes and Split sizes are attributes.
  const bool attributes = c.opset < 13;
  const auto spell = [&](const std::string& marker, const std::string& as_attribute, const std::string& as_input) {
    for (size_t at; (at = body.find(marker)) != std::string::npos;) {
      const size_t open = at + marker.size(), close = body.find(')', open);
      const std::string operand = body.substr(open, close - open);
      body.replace(at, close + 1 - at, fmt::format(fmt::runtime(attributes ? as_attribute : as_input), operand));
    }
  };
  spell("UNSQ1(", "Unsqueeze <axes = [1]> ({})", "Unsqueeze ({}, ax1)");
  spell("UNSQ2(", "Unsqueeze <axes = [2]> ({})", "Unsqueeze ({}, ax2)");
  spell("UNSQ(", "Unsqueeze <axes = [0]> ({})", "Unsqueeze ({}, ax0)");
  spell("SQ(", "Squeeze <axes = [0]> ({})", "Squeeze ({}, ax0)");
  const std::string split = attributes ? "q, k, v = Split <axis = 2, split = [8, 8, 8]> (r3)"
                                       : "sizes = Constant <value = int64[3] {8, 8, 8}> ()\n      q, k, v = Split <axis = 2> (r3, sizes)";
  body.replace(body.find("SPLIT"), 5, split);
  return fmt::format("<ir_version: {}, opset_import: [\"\": {}]>\nattn ({}) => ({})\n<float[8, 24] w = {}, float[24] b = {}, bool[1, 1, 8, 8] buffer = {{{}}}> {{{}\n}}",
                     ir_version_for(c.opset), c.opset, inputs, outputs, numbers(192, 0.8, 41), numbers(24, 0.3, 43), buffer, body);
}

class Gpt2Attention : public ::testing::TestWithParam<Gpt2Case> {};

TEST_P(Gpt2Attention, FusesIntoAttentionAndComputesTheSame) {
  const auto& c = GetParam();
  const std::string text = gpt2_model(c);
  const auto fused = fuse(text);
  const auto& out = fused.model;
  const std::string nodes = canonical_nodes(out, interface_names(out));
  const char* fused_op = c.stacked ? "Attention" : "MultiHeadAttention";
  EXPECT_EQ(count(out, "com.microsoft", fused_op), 1) << nodes;
  for (const char* gone : {"Softmax", "Transpose", "Split"}) {
    if (c.stacked || std::string(gone) != "Split") {
      EXPECT_EQ(count(out, "", gone), 0) << gone << "\n" << nodes;
    }
  }
  const auto* attention = find_node(out, fused_op);
  ASSERT_NE(attention, nullptr);
  bool unidirectional = false;
  for (const auto& a : attention->attribute()) unidirectional = unidirectional || (a.name() == "unidirectional" && a.i() == 1);
  if (c.mask) {
    // The causal window as attention_bias (input 5), one Slice of the buffer and one Where.
    EXPECT_FALSE(unidirectional) << nodes;
    ASSERT_EQ(attention->input_size(), 6) << nodes;
    EXPECT_EQ(count(out, "", "Slice"), 1) << nodes;
    EXPECT_EQ(count(out, "", "Where"), 1) << nodes;
  } else {
    EXPECT_TRUE(unidirectional) << nodes;
    EXPECT_EQ(count(out, "", "Slice"), 0) << nodes;
    EXPECT_EQ(count(out, "", "Where"), 0) << nodes;
  }
  expect_same_in_ort(text, fused, c.static_dims ? std::vector<std::string>{} : std::vector<std::string>{"--dim", "B=3", "--dim", "S=6"});
}

INSTANTIATE_TEST_SUITE_P(Exported, Gpt2Attention,
                         ::testing::Values(Gpt2Case{.name = "Opset17Causal"}, Gpt2Case{.name = "Opset13Causal", .opset = 13},
                                           Gpt2Case{.name = "Opset17PaddingMask", .mask = true},
                                           // Static dims are not here: the lengths of the causal slice then fold
                                           // to constants before the fusion sees them (README, "Left").
                                           Gpt2Case{.name = "Opset13PaddingMask", .opset = 13, .mask = true},
                                           Gpt2Case{.name = "Opset11PaddingMask", .opset = 11, .mask = true},
                                           Gpt2Case{.name = "Opset12Causal", .opset = 12},
                                           Gpt2Case{.name = "PresentKeyAndValueAsOutputs", .stacked = false}),
                         [](const auto& info) { return info.param.name; });

TEST(AttentionNearMiss, CausalBufferThatIsNotLowerTriangular) {
  std::vector<std::string> values;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) values.push_back(j >= i ? "1" : "0");  // upper: keys at or after the query
  const auto fused = fuse(gpt2_model(Gpt2Case{.name = "upper", .buffer = fmt::format("{}", fmt::join(values, ", "))}), "Reshape");
  EXPECT_EQ(count(fused.model, "com.microsoft", "MultiHeadAttention"), 0);
  EXPECT_EQ(count(fused.model, "com.microsoft", "Attention"), 0);
  EXPECT_NE(fused.explain.find("the causal mask 'buffer' is not lower-triangular ones"), std::string::npos) << fused.explain;
}

// ---- LLaMA's rotary embedding ------------------------------------------------------------------

// Hugging Face's rotate_half RoPE on q [B, 2, S, 4], cos/sin from [8, 4] caches (halves equal
// unless `halves_differ`), sliced to the sequence and gathered at position_ids, as torch exports it.
std::string rope_model(bool halves_differ) {
  std::vector<std::string> cos, sin;
  for (int p = 0; p < 8; ++p) {
    for (int half = 0; half < 2; ++half) {
      for (int i = 0; i < 2; ++i) {
        const double angle = p / std::pow(10000.0, i / 2.0);
        cos.push_back(fmt::format("{:.6f}", std::cos(angle) + (halves_differ && half == 1 && p == 3 ? 0.25 : 0.0)));
        sin.push_back(fmt::format("{:.6f}", std::sin(angle)));
      }
    }
  }
  return fmt::format(R"(<ir_version: 8, opset_import: ["": 17]>
rope (float[B, 2, S, 4] x, int64[B, S] position_ids) => (float[B, 2, S, 4] y)
<float[8, 4] cos_cached = {{{}}}, float[8, 4] sin_cached = {{{}}}> {{
  s_x = Shape (x)
  two = Constant <value = int64 {{2}}> ()
  seq = Gather <axis = 0> (s_x, two)
  zero = Constant <value = int64[1] {{0}}> ()
  seq1 = Unsqueeze (seq, zero)
  cos_s = Slice (cos_cached, zero, seq1, zero)
  sin_s = Slice (sin_cached, zero, seq1, zero)
  cos_f = Cast <to = 1> (cos_s)
  sin_f = Cast <to = 1> (sin_s)
  cos_g = Gather <axis = 0> (cos_f, position_ids)
  sin_g = Gather <axis = 0> (sin_f, position_ids)
  one = Constant <value = int64[1] {{1}}> ()
  cos_b = Unsqueeze (cos_g, one)
  sin_b = Unsqueeze (sin_g, one)
  m1 = Mul (x, cos_b)
  half = Constant <value = int64[1] {{2}}> ()
  end = Constant <value = int64[1] {{9223372036854775807}}> ()
  last = Constant <value = int64[1] {{3}}> ()
  lo = Slice (x, zero, half, last, one)
  hi = Slice (x, half, end, last, one)
  n = Neg (hi)
  r = Concat <axis = -1> (n, lo)
  m2 = Mul (r, sin_b)
  y = Add (m1, m2)
}})",
                     fmt::join(cos, ", "), fmt::join(sin, ", "));
}

TEST(Rotary, RotateHalfIsRotaryEmbeddingAndComputesTheSame) {
  const std::string text = rope_model(false);
  const auto fused = fuse(text);
  const std::string nodes = canonical_nodes(fused.model, interface_names(fused.model));
  EXPECT_EQ(count(fused.model, "com.microsoft", "RotaryEmbedding"), 1) << nodes;
  for (const char* gone : {"Neg", "Concat", "Mul", "Add", "Gather"}) EXPECT_EQ(count(fused.model, "", gone), 0) << gone << "\n" << nodes;
  // Positions anywhere the sliced cache has rows (S = 8: any of 0..7, in any order).
  expect_same_in_ort(text, fused, {"--dim", "B=3", "--dim", "S=8", "--range", "position_ids=0,7"});
}

TEST(AttentionNearMiss, RotaryCacheWhoseHalvesDiffer) {
  const auto fused = fuse(rope_model(true), "Add");
  EXPECT_EQ(count(fused.model, "com.microsoft", "RotaryEmbedding"), 0);
  EXPECT_NE(fused.explain.find("a cache's two halves differ"), std::string::npos) << fused.explain;
}

}  // namespace
}  // namespace onnx_rewrite
