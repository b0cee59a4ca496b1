// Planted mutations (issue #39): for each rule family, one of its real rules copied from its
// .rules file at test time, broken as a plausible bug would break it (a sign, an axis, an epsilon,
// two inputs swapped), must fail the family's numeric check in ONNX Runtime, while the same run
// with the unbroken copy passes it. A family's numeric tests prove the rewrite right; this proves
// they can tell it wrong. Each edit is asserted to apply, so a rule whose text changes fails here
// loudly rather than letting the mutation silently vanish.
#include <functional>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "test_support.h"
#include "../rules/qlinear-to-qdq/quant_compare.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// The text of rule `id` of rules/FAMILY/FILE, from its `rule ID` line to its `end` (a rule file
// holds nothing but rules and comments).
std::string real_rule(const std::string& family, const std::string& file, const std::string& id) {
  const std::string text = read_file(family_file(family, file));
  const std::string head = "rule " + id + "\n";
  size_t begin = text.rfind("\n" + head);
  begin = begin == std::string::npos ? (text.rfind(head, 0) == 0 ? 0 : std::string::npos) : begin + 1;
  if (begin == std::string::npos) {
    ADD_FAILURE() << "no rule " << id << " in rules/" << family << "/" << file;
    return "";
  }
  const size_t end = text.find("\nend\n", begin);
  if (end == std::string::npos) {
    ADD_FAILURE() << "rule " << id << " has no end";
    return "";
  }
  return text.substr(begin, end + 5 - begin);
}

// `text` with each `from` replaced by `to`; `from` must occur exactly `times` times, or the real
// rule changed and the planted bug with it: the test fails saying so.
std::string plant(const std::string& text, const std::string& from, const std::string& to, int times = 1) {
  std::string out;
  int found = 0;
  size_t at = 0;
  for (size_t next; (next = text.find(from, at)) != std::string::npos; at = next + from.size()) {
    out += text.substr(at, next - at) + to;
    ++found;
  }
  out += text.substr(at);
  EXPECT_EQ(found, times) << "the planted edit '" << from << "' -> '" << to
                          << "' no longer applies to the real rule (it changed?): update the mutation\n"
                          << text;
  return out;
}

// Rewrites `input` with the rules of `rule_text` alone (no built-in rules) into `output`; the
// rule `id` must fire.
bool rewrite_with(const std::string& rule_text, const std::string& id, const fs::path& input, const fs::path& output,
                  const RewriteOptions& options) {
  const auto rules = rules_from_text(rule_text, false);
  const auto rewritten = rewrite_proto(read_model(input), rules, options);
  write_file(output, rewritten.bytes);
  EXPECT_TRUE(rewritten.result.rules.count(id)) << id << " did not fire on " << input << "\n" << rewritten.explain;
  return rewritten.result.rules.count(id) > 0;
}

using Compare = std::function<OrtComparison(const fs::path& rewritten)>;

// The real rule's output passes `compare`; the planted one's fails it (a mismatch, exit 1: not
// an output ONNX Runtime refuses, which would prove nothing about the numbers).
void expect_caught(const std::string& id, const std::string& real, const std::string& planted, const fs::path& input,
                   const Compare& compare, const RewriteOptions& options = {}) {
  ASSERT_NE(real, planted) << "the mutation changed nothing";
  const fs::path dir = input.parent_path();
  ASSERT_TRUE(rewrite_with(real, id, input, dir / "control.onnx", options));
  ASSERT_TRUE(rewrite_with(planted, id, input, dir / "planted.onnx", options));
  const auto control = compare(dir / "control.onnx");
  EXPECT_TRUE(control.ok) << "the real rule " << id << " fails its check:\n" << control.output;
  const auto caught = compare(dir / "planted.onnx");
  EXPECT_EQ(caught.exit_code, 1) << "the planted bug in " << id << " is not caught:\n" << caught.output;
  report_numbers(id + " (real rule)", control);
  report_numbers(id + " (planted bug)", caught);
}

Compare against_original(const fs::path& original, std::vector<std::string> extra = {}) {
  return [original, extra](const fs::path& rewritten) { return ort_compare(original, rewritten, extra); };
}

Compare against_reference(const fs::path& module, std::string params, std::vector<std::string> extra = {}) {
  return [module, params, extra](const fs::path& rewritten) { return ort_compare_reference(rewritten, module, params, extra); };
}

// The quantized families' check (rules/qlinear-to-qdq/quant_compare.h): the rewrite against the
// contrib op evaluated by exact integer math written in the tests (qlinear_reference.js plus
// `references`), which gives the same verdict on every CPU, within `tolerance` on every output.
Compare against_quantized_reference(const fs::path& contrib, std::vector<fs::path> references, Tolerance tolerance) {
  return [contrib, references, tolerance](const fs::path& rewritten) {
    const auto compared = quant_compare(contrib, rewritten, {}, true, references);
    OrtComparison comparison;
    comparison.output = compared.text;
    if (!compared.ran || compared.outputs.empty()) {
      comparison.exit_code = 2;
      return comparison;
    }
    comparison.ok = true;
    for (const auto& [name, stats] : compared.outputs) {
      comparison.ok = comparison.ok && within(stats, tolerance);
      comparison.max_abs = std::max(comparison.max_abs, stats.type == "float32" ? stats.rel_to_max : stats.max_step);
    }
    comparison.exit_code = comparison.ok ? 0 : 1;
    return comparison;
  };
}

// ---- aten: GELU's 1/√2 as √2 ------------------------------------------------------------------

TEST(PlantedMutation, Aten) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 17, "org.pytorch.aten": 1]>
g (float[2, 3, 16] x) => (float[2, 3, 16] y) {
  y = org.pytorch.aten.ATen <operator = "gelu", overload_name = ""> (x)
})", dir / "gelu.onnx");
  const auto real = real_rule("aten", "aten.rules", "aten-gelu-decomposition");
  const auto planted = plant(real, "value_float: float = 0.70710678118654752", "value_float: float = 1.4142135623730951");
  expect_caught("aten-gelu-decomposition", real, planted, input,
                against_reference(family_file("aten", "gelu.js"), R"({"approximate": "none"})", {"--float-range", "-6,6"}));
}


// ---- canonicalize: a fold of Sub with its operands swapped -------------------------------------

TEST(PlantedMutation, Canonicalize) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y) <float[3] w = {1, 2, 3}, float[2, 1] s = {10, 100}> {
  k = Sub (w, s)
  t = Add (x, k)
  y = Neg (t)
})", dir / "fold.onnx");
  // A run in which only canonicalization fires is undone (the model written unchanged): another
  // rule, neg-to-sub, fires too so that the fold stays in the output.
  const auto real = real_rule("canonicalize", "fold-constants.rules", "canonicalize-fold-binary");
  const auto planted = plant(real, "y = Sub (a, b)", "y = Sub (b, a)");
  RewriteOptions options;
  options.fuse = true;  // the folds serve --target onnx under --fuse (and ort always)
  expect_caught("canonicalize-fold-binary", real + kNegToSub, planted + kNegToSub, input, against_original(input), options);
}

// ---- fuse-onnx: HardSigmoid's beta with its sign flipped --------------------------------------

TEST(PlantedMutation, FuseOnnx) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3, 8] x) => (float[2, 3, 8] y) <float three = {3.0}, float zero = {0.0}, float six = {6.0}> {
  a = Add (x, three)
  r = Clip (a, zero, six)
  y = Div (r, six)
})", dir / "hardsigmoid.onnx");
  const auto real = real_rule("fuse-onnx", "fuse-hard-activations.rules", "fuse-hardsigmoid");
  const auto planted = plant(real, "HardSigmoid <alpha = 0.16666667, beta = 0.5>", "HardSigmoid <alpha = 0.16666667, beta = -0.5>",
                             2);  // the replacement and its expect
  RewriteOptions options;
  options.fuse = true;
  expect_caught("fuse-hardsigmoid", real, planted, input, against_original(input, {"--float-range", "-5,5"}), options);
}

// ---- opset-down: Softmax-13's default axis taken as 1 ------------------------------------------

TEST(PlantedMutation, OpsetDown) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 13]>
g (float[2, 3, 4] x) => (float[2, 3, 4] y) {
  y = Softmax (x)
})", dir / "softmax.onnx");
  const auto real = real_rule("opset-down", "softmax.rules", "softmax-axis-13-lowering");
  const auto planted = plant(real, "axis default -1", "axis default 1");
  RewriteOptions options;
  options.max_opset = 12;
  expect_caught("softmax-axis-13-lowering", real, planted, input, against_original(input, {"--float-range", "-4,4"}), options);
}

// ---- opset-up: Softmax-11's coerced axis (default 1) taken as the last axis --------------------

TEST(PlantedMutation, OpsetUp) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 6, opset_import: ["": 11]>
g (float[2, 3, 4] x) => (float[2, 3, 4] y) {
  y = Softmax (x)
})", dir / "softmax.onnx");
  const auto real = real_rule("opset-up", "attributes-to-inputs.rules", "softmax-coerced-13-raising");
  const auto planted = plant(real, "    opset ai.onnx <= 12\n", "    opset ai.onnx <= 12\n    axis default 2\n");
  RewriteOptions options;
  options.max_opset = 13;
  options.exact_opset = true;
  expect_caught("softmax-coerced-13-raising", real, planted, input, against_original(input, {"--float-range", "-4,4"}), options);
}

// ---- registry-tutorial: CustomOpOne as Sub instead of Add --------------------------------------

TEST(PlantedMutation, RegistryTutorial) {
  TempDir dir;
  const auto input = write_model_text(kCustomOpModel, dir / "customop.onnx");
  // What the tutorial's op computes, in ai.onnx ops.
  const auto expected = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x, float[2, 3] y) => (float[2, 3] z) {
  t = Add (x, y)
  z = Relu (t)
})", dir / "expected.onnx");
  const auto real = real_rule("registry-tutorial", "registry-tutorial.rules", "customop-one-to-add");
  const auto planted = plant(real, "z = Add (x, y)", "z = Sub (x, y)", 2);  // the replacement and its expect
  expect_caught("customop-one-to-add", real, planted, input,
                [&](const fs::path& rewritten) { return ort_compare(expected, rewritten); });
}

// ---- trt-instance-norm: scale and bias swapped -------------------------------------------------

TEST(PlantedMutation, TrtInstanceNorm) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 6, opset_import: ["": 11, "mmdeploy": 1]>
g (float[2, 4, 10] x, float[4] scale, float[4] bias) => (float[2, 4, 10] y) {
  y = mmdeploy.TRTInstanceNormalization <epsilon = 1e-3> (x, scale, bias)
})", dir / "instance_norm.onnx");
  const auto real = real_rule("trt-instance-norm", "trt-instance-norm.rules", "trt-instance-normalization");
  const auto planted = plant(real, "y = InstanceNormalization <epsilon: float = @eps> (x, scale, bias)",
                             "y = InstanceNormalization <epsilon: float = @eps> (x, bias, scale)");
  expect_caught("trt-instance-normalization", real, planted, input,
                against_reference(family_file("trt-instance-norm", "instance_norm.js"), R"({"epsilon": 1e-3})",
                                  {"--rtol", "1e-5", "--atol", "1e-5"}));
}

// ---- defuse-contrib: BiasAdd's skip subtracted -------------------------------------------------

TEST(PlantedMutation, DefuseContrib) {
  TempDir dir;
  const auto input = write_model_text(contrib_model_text(17, R"(
g (float[2, 16, 8] x, float[8] bias, float[2, 16, 8] skip) => (float[2, 16, 8] y) {
  y = com.microsoft.BiasAdd (x, bias, skip)
})"), dir / "bias_add.onnx");
  const auto real = real_rule("defuse-contrib", "defuse-bias.rules", "defuse-bias-add");
  const auto planted = plant(real, "    y = Add (s, skip)\n  }\n  example", "    y = Sub (s, skip)\n  }\n  example");
  expect_caught("defuse-bias-add", real, planted, input, against_reference(family_file("defuse-contrib", "bias_add.js"), "{}"));
}

// ---- fuse-contrib: exact GELU fused as the tanh approximation ---------------------------------

TEST(PlantedMutation, FuseContrib) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3, 16] x) => (float[2, 3, 16] y) <float inv_sqrt2 = {0.70710678}, float one = {1.0}, float two = {2.0}> {
  h = Mul (x, inv_sqrt2)
  e = Erf (h)
  a = Add (e, one)
  p = Mul (x, a)
  y = Div (p, two)
})", dir / "gelu.onnx");
  const auto real = real_rule("fuse-contrib", "fuse-gelu.rules", "fuse-gelu-erf");
  const auto planted = plant(real, "approximate = \"none\"", "approximate = \"tanh\"");
  RewriteOptions options;
  options.target = "ort";
  expect_caught("fuse-gelu-erf", real, planted, input, against_original(input, {"--float-range", "-4,4"}), options);
}

// ---- group-norm: mygroupnorm's default epsilon 1e-1 instead of 1e-5 ----------------------------

TEST(PlantedMutation, GroupNorm) {
  TempDir dir;
  const std::string weights =
      "<float[1] num_groups = {2.0}, float[4] scale = {1.0, 2.0, 0.5, 1.5}, float[4] bias = {0.0, 0.1, -0.1, 0.2}>";
  const auto input = write_model_text(fmt::format(R"(<ir_version: 8, opset_import: ["": 17, "mydomain": 1]>
g (float[2, 4, 5, 5] x) => (float[2, 4, 5, 5] y) {} {{
  y = mydomain.mygroupnorm (x, num_groups, scale, bias)
}})", weights), dir / "group_norm.onnx");
  // ONNX Runtime's own GroupNormalization-21 kernel, torch's default epsilon.
  const auto kernel = write_model_text(fmt::format(R"(<ir_version: 10, opset_import: ["": 21]>
g (float[2, 4, 5, 5] x) => (float[2, 4, 5, 5] y) {} {{
  y = GroupNormalization <epsilon = 1e-5, num_groups = 2> (x, scale, bias)
}})", weights), dir / "kernel.onnx");
  const auto real = real_rule("group-norm", "group-norm.rules", "mygroupnorm-decomposition");
  const auto planted = plant(real, "eps default 1e-5", "eps default 1e-1");
  expect_caught("mygroupnorm-decomposition", real, planted, input,
                [&](const fs::path& rewritten) { return ort_compare(kernel, rewritten); });
}

// ---- lower-losses: SoftmaxCrossEntropyLoss' default reduction taken as sum ---------------------

TEST(PlantedMutation, LowerLosses) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 7, opset_import: ["": 13]>
g (float[3, 5] scores, int64[3] target) => (float loss) {
  loss = SoftmaxCrossEntropyLoss (scores, target)
})", dir / "sce.onnx");
  const auto real = real_rule("lower-losses", "softmax-cross-entropy.rules", "softmax-cross-entropy-loss-12-lowering");
  const auto planted = plant(real, "    log_prob is optional\n", "    log_prob is optional\n    reduction default \"sum\"\n");
  RewriteOptions options;
  options.max_opset = 11;
  expect_caught("softmax-cross-entropy-loss-12-lowering", real, planted, input,
                against_original(input, {"--range", "target=0,4"}), options);
}

// ---- lower-attention: RotaryEmbedding's cos and sin caches swapped -----------------------------

TEST(PlantedMutation, LowerAttention) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 10, opset_import: ["": 23]>
g (float[1, 2, 3, 8] x, float[1, 3, 4] cos_cache, float[1, 3, 4] sin_cache) => (float[1, 2, 3, 8] y) {
  y = RotaryEmbedding (x, cos_cache, sin_cache)
})", dir / "rotary.onnx");
  const auto real = real_rule("lower-attention", "rotary-embedding.rules", "rotary-embedding-23-lowering");
  const auto planted = plant(real, "(x, cos_cache, sin_cache, position_ids)\n  }", "(x, sin_cache, cos_cache, position_ids)\n  }");
  RewriteOptions options;
  options.max_opset = 13;
  expect_caught("rotary-embedding-23-lowering", real, planted, input, against_original(input), options);
}

// ---- mmcv-roi-align: mmcv's default aligned = 1 taken as 0 (no half-pixel shift) ---------------

TEST(PlantedMutation, MmcvRoiAlign) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 16, "mmdeploy": 1]>
g (float[2, 3, 12, 10] input, float[9, 1] batch, float[9, 2] xy, float[9, 2] wh) => (float[9, 3, 3, 2] y) {
  x2y2 = Add (xy, wh)
  rois = Concat <axis = 1> (batch, xy, x2y2)
  y = mmdeploy.MMCVRoiAlign <mode = "avg", output_height = 3, output_width = 2, sampling_ratio = 0, spatial_scale = 0.5> (input, rois)
})", dir / "roi_align.onnx");
  const auto real = real_rule("mmcv-roi-align", "mmcv-roi-align.rules", "mmcv-roi-align-to-roi-align-16");
  const auto planted = plant(real, "aligned default 1", "aligned default 0");
  expect_caught("mmcv-roi-align-to-roi-align-16", real, planted, input,
                against_reference(family_file("mmcv-roi-align", "mmcv_roi_align.js"),
                                  R"({"outputHeight": 3, "outputWidth": 2, "spatialScale": 0.5, "samplingRatio": 0, "mode": "avg", "aligned": 1})",
                                  {"--range", "batch=0,1.99", "--range", "xy=-6,22", "--range", "wh=0,14", "--range", "input=-5,5",
                                   "--trials", "2", "--atol", "2e-5", "--rtol", "1e-5"}));
}

// ---- mmdeploy-grid-sampler: torch's default align_corners = False taken as True ----------------

TEST(PlantedMutation, MmdeployGridSampler) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 16, "mmdeploy": 1]>
g (float[2, 3, 5, 7] x, float[2, 4, 6, 2] grid) => (float[2, 3, 4, 6] y) {
  y = mmdeploy.grid_sampler <interpolation_mode = 0, padding_mode = 0> (x, grid)
})", dir / "grid_sampler.onnx");
  const auto real = real_rule("mmdeploy-grid-sampler", "grid-sampler.rules", "grid-sampler-to-grid-sample");
  const auto planted = plant(real, "align_corners default 0", "align_corners default 1");
  expect_caught("grid-sampler-to-grid-sample", real, planted, input,
                against_reference(family_file("mmdeploy-grid-sampler", "grid_sampler.js"),
                                  R"({"interpolationMode": 0, "paddingMode": 0, "alignCorners": 0})",
                                  {"--range", "grid=-2.5,2.5", "--range", "x=-10,10", "--trials", "2", "--atol", "1e-6", "--rtol", "1e-5"}));
}

// ---- defuse-rotary: RotaryEmbedding's default interleaved = 0 taken as 1 -----------------------

TEST(PlantedMutation, DefuseRotary) {
  TempDir dir;
  const auto input = write_model_text(contrib_model_text(17, R"(
g (float[2, 4, 128] x, int64[2, 4] pos, float[32, 8] cos, float[32, 8] sin) => (float[2, 4, 128] y) {
  y = com.microsoft.RotaryEmbedding <num_heads = 4, rotary_embedding_dim = 16> (x, pos, cos, sin)
})"), dir / "rotary.onnx");
  const auto real = real_rule("defuse-rotary", "defuse-rotary.rules", "defuse-rotary-embedding");
  const auto planted = plant(real, "interleaved default 0", "interleaved default 1");
  expect_caught("defuse-rotary-embedding", real, planted, input, against_original(input, {"--range", "pos=0,31"}));
}

// ---- defuse-mha: MultiHeadAttention's default scale (1/√head_size) taken as 1 ------------------

TEST(PlantedMutation, DefuseMha) {
  TempDir dir;
  const auto input = write_model_text(contrib_model_text(17, R"(
g (float[2, 5, 16] q, float[2, 5, 16] k, float[2, 5, 16] v) => (float[2, 5, 16] y) {
  y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, v)
})"), dir / "mha.onnx");
  const auto real = real_rule("defuse-mha", "defuse-mha.rules", "defuse-mha");
  const auto planted = plant(real, "scale default 0.0", "scale default 1.0");
  expect_caught("defuse-mha", real, planted, input, against_original(input, {"--float-range", "-2,2"}));
}

// ---- defuse-gqa: GroupQueryAttention's key and value swapped ----------------------------------

TEST(PlantedMutation, DefuseGqa) {
  TempDir dir;
  const auto input = write_model_text(contrib_model_text(17, R"(
g (float[2, 5, 32] q, float[2, 5, 16] k, float[2, 5, 16] v, int32[2] sl, int32[1] tot)
    => (float[2, 5, 32] y, float[2, 1, 5, 16] present_k, float[2, 1, 5, 16] present_v) {
  y, present_k, present_v = com.microsoft.GroupQueryAttention <num_heads = 2, kv_num_heads = 1> (q, k, v, , , sl, tot)
})"), dir / "gqa.onnx");
  const auto real = real_rule("defuse-gqa", "defuse-gqa.rules", "defuse-gqa");
  const auto planted = plant(real, "        (query, key, value,", "        (query, value, key,");
  expect_caught("defuse-gqa", real, planted, input,
                against_original(input, {"--float-range", "-2,2", "--rtol", "1e-5", "--atol", "1e-5", "--range", "tot=5,5",
                                         "--range", "sl=0,4"}));
}

// ---- defuse-attention: Attention's default unidirectional = 0 taken as 1 (a causal mask) -------

TEST(PlantedMutation, DefuseAttention) {
  TempDir dir;
  const auto input = write_model_text(contrib_model_text(12, R"(
g (float[2, 5, 8] x, float[8, 24] w, float[24] b) => (float[2, 5, 8] y) {
  y = com.microsoft.Attention <num_heads = 2> (x, w, b)
})"), dir / "attention.onnx");
  const auto real = real_rule("defuse-attention", "defuse-attention.rules", "defuse-attention");
  const auto planted = plant(real, "unidirectional default 0", "unidirectional default 1");
  expect_caught("defuse-attention", real, planted, input, against_original(input, {"--float-range", "-2,2"}));
}

// ---- contrib-grid-sample: x and grid swapped ---------------------------------------------------
// The rule renames the op and its builder copies the node's attributes: the rule text holds no
// number to break but the inputs it passes. x [1, 3, 3, 2] and grid [1, 3, 3, 2] give outputs of
// one shape either way round, so swapped inputs run and compute other numbers.

TEST(PlantedMutation, ContribGridSample) {
  TempDir dir;
  const auto input = write_model_text(contrib_model_text(16, R"(
g (float[1, 3, 3, 2] x, float[1, 3, 3, 2] grid) => (float[1, 3, 3, 3] y) {
  y = com.microsoft.GridSample <mode = "bilinear", padding_mode = "border", align_corners = 0> (x, grid)
})"), dir / "grid_sample.onnx");
  const auto real = real_rule("contrib-grid-sample", "contrib-grid-sample.rules", "contrib-grid-sample");
  const auto planted = plant(real, "y = com.microsoft.GridSample (x, grid)", "y = com.microsoft.GridSample (grid, x)");
  expect_caught("contrib-grid-sample", real, planted, input, against_original(input, {"--rtol", "0", "--atol", "0"}));
}

// ---- deform-conv: torchvision's use_mask, left to the inputs, taken as 0 (the mask ignored) ----

TEST(PlantedMutation, DeformConv) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 17, "custom": 1]>
dcn (float[1, 2, 5, 6] input, float[2, 2, 3, 3] weight, float[1, 18, 3, 4] offset, float[1, 9, 3, 4] mask) => (float[1, 2, 3, 4] y) {
  y = custom.deform_conv2d <stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1> (input, weight, offset, mask)
})", dir / "deform_conv.onnx");
  const auto real = real_rule("deform-conv", "deform-conv-torchvision.rules", "torchvision-deform-conv2d-gather");
  const auto planted = plant(real, "    mask is optional\n", "    mask is optional\n    use_mask default 0\n");
  expect_caught("torchvision-deform-conv2d-gather", real, planted, input,
                against_reference(family_file("deform-conv", "deform_conv2d.js"),
                                  R"({"output": "y", "stride": [1, 1], "pad": [0, 0], "dilation": [1, 1], "groups": 1, "offsetGroups": 1, "useMask": true})",
                                  {"--range", "offset=-2,2", "--range", "mask=0,1", "--trials", "2", "--rtol", "1e-4", "--atol", "1e-4"}));
}

// ---- trt-nms: EfficientNMS_TRT's boxes and scores swapped (4 classes: one shape) ---------------

TEST(PlantedMutation, TrtNms) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 13, "TRT": 1]>
g (float[2, 20, 4] boxes, float[2, 20, 4] scores)
    => (int32[2, 1] num, float[2, 5, 4] det_boxes, float[2, 5] det_scores, int32[2, 5] det_classes) {
  num, det_boxes, det_scores, det_classes = TRT.EfficientNMS_TRT <background_class = -1, box_coding = 0, iou_threshold = 0.5,
      max_output_boxes = 5, plugin_version = "1", score_activation = 0, score_threshold = 0.1> (boxes, scores)
})", dir / "nms.onnx");
  const auto real = real_rule("trt-nms", "trt-nms.rules", "efficient-nms-trt");
  const auto planted = plant(real, "= TRT.EfficientNMS_TRT (boxes, scores, anchors)", "= TRT.EfficientNMS_TRT (scores, boxes, anchors)");
  expect_caught("efficient-nms-trt", real, planted, input,
                against_reference(family_file("trt-nms", "efficient_nms.js"),
                                  R"({"score_threshold": 0.1, "iou_threshold": 0.5, "max_output_boxes": 5, "background_class": -1, )"
                                  R"("score_activation": 0, "box_coding": 0, "class_agnostic": 0, "numDetections": "num", )"
                                  R"("detectionBoxes": "det_boxes", "detectionScores": "det_scores", "detectionClasses": "det_classes", )"
                                  R"("quantizeScores": 0, "quantizeBoxes": 0})",
                                  {"--range", "boxes=0,1", "--range", "scores=-2,1", "--atol", "0", "--rtol", "0"}));
}

// ---- dynamic-quant-matmul: MatMulIntegerToFloat's zero points swapped --------------------------

TEST(PlantedMutation, DynamicQuantMatmul) {
  TempDir dir;
  const auto input = write_model_text(contrib_model_text(17, R"(
g (uint8[2, 4, 8] a, uint8[8, 6] b) => (float[2, 4, 6] y) <float a_scale = {0.05}, float b_scale = {0.1}, uint8 a_zero = {3}, uint8 b_zero = {200}> {
  y = com.microsoft.MatMulIntegerToFloat (a, b, a_scale, b_scale, a_zero, b_zero)
})"), dir / "matmul_integer_to_float.onnx");
  const auto real = real_rule("dynamic-quant-matmul", "dynamic-quant-matmul.rules", "matmul-integer-to-float");
  const auto planted = plant(real, "MatMulIntegerToFloat (a, b, a_scale, b_scale, a_zero_point, b_zero_point, bias)",
                             "MatMulIntegerToFloat (a, b, a_scale, b_scale, b_zero_point, a_zero_point, bias)");
  // The integer form accumulates exactly, as the reference does.
  expect_caught("matmul-integer-to-float", real, planted, input,
                against_quantized_reference(input, {family_file("dynamic-quant-matmul", "quant_matmul_reference.js")}, {1e-6, 0}));
}

// ---- defuse-matmul-nbits: MatMulNBits' scales and bias swapped (K one block: both [N]) ---------

TEST(PlantedMutation, DefuseMatmulNbits) {
  TempDir dir;
  std::string b_values, scales, bias;
  uint32_t seed = 39;
  const auto next = [&seed] { return seed = seed * 1664525u + 1013904223u, seed >> 8; };
  for (int i = 0; i < 8 * 16; ++i) b_values += fmt::format("{}{}", i ? ", " : "", next() % 256);
  for (int i = 0; i < 8; ++i) scales += fmt::format("{}{:.4f}", i ? ", " : "", 0.01 + (next() % 1000) / 10000.0);
  for (int i = 0; i < 8; ++i) bias += fmt::format("{}{:.4f}", i ? ", " : "", (next() % 2000) / 1000.0 - 1.0);
  const auto input = write_model_text(contrib_model_text(21, fmt::format(R"(
g (float[2, 3, 32] a) => (float[2, 3, 8] y) <uint8[8, 1, 16] b = {{{}}}, float[8] scales = {{{}}}, float[8] bias = {{{}}}> {{
  y = com.microsoft.MatMulNBits <K = 32, N = 8, bits = 4, block_size = 32> (a, b, scales, , , bias)
}})", b_values, scales, bias)), dir / "matmul_nbits.onnx");
  const auto real = real_rule("defuse-matmul-nbits", "defuse-matmul-nbits.rules", "defuse-matmul-nbits-dq");
  const auto planted = plant(real, "@accuracy_level> (A, B, scales, zero_points, g_idx, bias)", "@accuracy_level> (A, B, bias, zero_points, g_idx, scales)");
  expect_caught("defuse-matmul-nbits-dq", real, planted, input, against_original(input));
}

// ---- defuse-nchwc: a fused Conv's input and its sum input swapped ------------------------------
// The rule hands every NCHWc op of a region to one builder that reads the layout from the graph;
// the rule text holds the Conv's inputs, so the planted bug swaps two of them (x and sum, of one
// shape). Random filters (seeded), in MLAS's OIHWBiBo order for block 8: w[o][i] at [i][o].

TEST(PlantedMutation, DefuseNchwc) {
  TempDir dir;
  std::vector<double> w(64), b(8);
  uint32_t seed = 39;
  for (auto* values : {&w, &b}) {
    for (auto& v : *values) seed = seed * 1664525u + 1013904223u, v = (seed >> 8) / double(1u << 24) - 0.5;
  }
  std::vector<std::string> oihw, blocked, bias;
  for (int o = 0; o < 8; ++o) {
    for (int i = 0; i < 8; ++i) oihw.push_back(fmt::format("{:.6f}", w[o * 8 + i]));
  }
  for (int i = 0; i < 8; ++i) {
    for (int o = 0; o < 8; ++o) blocked.push_back(fmt::format("{:.6f}", w[o * 8 + i]));
  }
  for (double v : b) bias.push_back(fmt::format("{:.6f}", v));
  const auto input = write_model_text(fmt::format(R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft.nchwc": 1]>
g (float[1, 8, 4, 4] x, float[1, 8, 4, 4] s) => (float[1, 8, 4, 4] y) <float[8, 8, 1, 1] w = {{{}}}, float[8] b = {{{}}}> {{
  xb = com.microsoft.nchwc.ReorderInput (x)
  sb = com.microsoft.nchwc.ReorderInput (s)
  cb = com.microsoft.nchwc.Conv <activation = "Relu"> (xb, w, b, sb)
  y = com.microsoft.nchwc.ReorderOutput <channels = 8> (cb)
}})", fmt::join(blocked, ", "), fmt::join(bias, ", ")), dir / "nchwc.onnx");
  const auto nchw = write_model_text(fmt::format(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[1, 8, 4, 4] x, float[1, 8, 4, 4] s) => (float[1, 8, 4, 4] y) <float[8, 8, 1, 1] w = {{{}}}, float[8] b = {{{}}}> {{
  c = Conv (x, w, b)
  t = Add (c, s)
  y = Relu (t)
}})", fmt::join(oihw, ", "), fmt::join(bias, ", ")), dir / "nchw.onnx");
  const auto real = real_rule("defuse-nchwc", "nchwc.rules", "nchwc-to-nchw");
  const auto planted = plant(real, "y = com.microsoft.nchwc.Conv (x, w, b, sum)", "y = com.microsoft.nchwc.Conv (sum, w, b, x)");
  expect_caught("nchwc-to-nchw", real, planted, input, [&](const fs::path& rewritten) { return ort_compare(nchw, rewritten); });
}

// ---- qlinear-to-qdq: QLinearAdd's two input scales swapped -------------------------------------
// Within one quantization step of the reference (the family's bound for QLinearAdd: ORT computes
// the QDQ form's float Add, the kernel its ratios): more than one step is the failure.

TEST(PlantedMutation, QlinearToQdq) {
  TempDir dir;
  const auto input = write_model_text(contrib_model_text(17, R"(
g (uint8[2, 3, 8] a, uint8[2, 3, 8] b) => (uint8[2, 3, 8] c)
    <float a_scale = {0.02}, uint8 a_zero = {128}, float b_scale = {0.05}, uint8 b_zero = {100}, float c_scale = {0.1}, uint8 c_zero = {120}> {
  c = com.microsoft.QLinearAdd (a, a_scale, a_zero, b, b_scale, b_zero, c_scale, c_zero)
})"), dir / "qlinear_add.onnx");
  const auto real = real_rule("qlinear-to-qdq", "qlinear-elementwise.rules", "qlinear-add-to-qdq");
  const auto planted = plant(real, "QLinearAdd (a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point)",
                             "QLinearAdd (a, b_scale, a_zero_point, b, a_scale, b_zero_point, c_scale, c_zero_point)");
  expect_caught("qlinear-add-to-qdq", real, planted, input, against_quantized_reference(input, {}, {1, 48}));
}

// ---- simplify: a Cast taken for a no-op without looking at the types -----------------------------
// The decision is the builder's; the planted bug replaces it with the Identity it builds, so
// that every Cast goes: a float -> int32 -> float round trip then keeps its fractions.

TEST(PlantedMutation, Simplify) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y) {
  same = Cast <to = 1> (x)
  whole = Cast <to = 6> (same)
  y = Cast <to = 1> (whole)
})", dir / "casts.onnx");
  const auto real = real_rule("simplify", "no-ops.rules", "simplify-no-op-cast");
  const auto planted = plant(real, "  replace with simplify_no_op_cast\n", "  replace (x) => (y) {\n    y = Identity (x)\n  }\n");
  RewriteOptions options;
  options.simplify = true;  // the rules of rules/simplify run in --simplify's run only
  expect_caught("simplify-no-op-cast", real, planted, input, against_original(input, {"--float-range", "-5,5"}), options);
}

// ---- Every family has its planted bug ----------------------------------------------------------

// The families the tests above plant a bug in; a new folder of rules/ needs a test here.
TEST(PlantedMutation, EveryFamilyHasOne) {
  const std::set<std::string> planted = {
      "aten", "canonicalize", "contrib-grid-sample", "deform-conv", "defuse-attention", "defuse-contrib", "defuse-gqa",
      "defuse-matmul-nbits", "defuse-mha", "defuse-nchwc", "defuse-rotary", "dynamic-quant-matmul", "fuse-attention", "fuse-contrib", "fuse-onnx",
      "group-norm", "lower-attention", "lower-losses", "mmcv-roi-align", "mmdeploy-grid-sampler", "opset-down", "opset-up",
      "qlinear-to-qdq", "registry-tutorial", "simplify", "trt-instance-norm", "trt-nms"};
  std::set<std::string> families;
  for (const auto& entry : fs::directory_iterator(source_dir() / "rules")) {
    if (entry.is_directory()) families.insert(entry.path().filename().string());
  }
  for (const auto& family : families) EXPECT_TRUE(planted.count(family)) << "rules/" << family << " has no planted-mutation test";
  for (const auto& family : planted) EXPECT_TRUE(families.count(family)) << "no family rules/" << family << " (renamed?)";
}

// ---- fuse-attention: the key and the value swapped in the head split --------------------------
// The builder takes q, k, v by the names the pattern binds; a pattern that reads the key's
// Reshape from v and the value's from k hands MultiHeadAttention the value as the key. K and V of
// one shape, so the swapped node runs and computes other numbers.

TEST(PlantedMutation, FuseAttention) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 5, 8] q, float[2, 5, 8] k, float[2, 5, 8] v, int64[2, 5] mask) => (float[2, 5, 8] y) {
  heads = Constant <value = int64[4] {0, 0, 2, 4}> ()
  qr = Reshape (q, heads)
  qt = Transpose <perm = [0, 2, 1, 3]> (qr)
  kr = Reshape (k, heads)
  kt = Transpose <perm = [0, 2, 3, 1]> (kr)
  vr = Reshape (v, heads)
  vt = Transpose <perm = [0, 2, 1, 3]> (vr)
  m = MatMul (qt, kt)
  sqrt_h = Constant <value = float {2.0}> ()
  s = Div (m, sqrt_h)
  one_axis = Constant <value = int64[1] {1}> ()
  two_axis = Constant <value = int64[1] {2}> ()
  m1 = Unsqueeze (mask, one_axis)
  m2 = Unsqueeze (m1, two_axis)
  mf = Cast <to = 1> (m2)
  one = Constant <value = float {1.0}> ()
  inv = Sub (one, mf)
  fill = Constant <value = float {-10000.0}> ()
  mask_bias = Mul (inv, fill)
  a = Add (s, mask_bias)
  p = Softmax <axis = -1> (a)
  o = MatMul (p, vt)
  ot = Transpose <perm = [0, 2, 1, 3]> (o)
  joined = Constant <value = int64[3] {0, 0, 8}> ()
  y = Reshape (ot, joined)
})", dir / "attention.onnx");
  const auto real = real_rule("fuse-attention", "fuse-attention.rules", "fuse-attention-mha");
  std::string planted = plant(real, "kr = Reshape (k, shape_k)", "kr = Reshape (v, shape_k)", 8);
  planted = plant(planted, "vr = Reshape (v, shape_v)", "vr = Reshape (k, shape_v)", 8);
  RewriteOptions options;
  options.target = "ort";
  expect_caught("fuse-attention-mha", real, planted, input, against_original(input, {"--int-range", "0,1", "--float-range", "-2,2"}), options);
}

}  // namespace
}  // namespace onnx_rewrite
