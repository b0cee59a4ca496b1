// The opset-down adapters proven on ground truth: ONNX backend conformance cases of each adapted
// op, rewritten with `--opset N` below the op's step, must import exactly N, have lost the newer
// form, and reproduce the case's expected outputs in ONNX Runtime.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

struct Adapted {
  std::string adapter;             // what is proven (the rule)
  int opset;                       // --opset
  std::vector<std::string> cases;  // node/ cases
};

const std::vector<Adapted> kAdapted = {
    {"reduce-runtime-axes-18-lowering", 13,
     {"test_reduce_mean_keepdims_example", "test_reduce_mean_do_not_keepdims_random", "test_reduce_max_negative_axes_keepdims_random",
      "test_reduce_min_keepdims_random", "test_reduce_prod_do_not_keepdims_example", "test_reduce_l1_keep_dims_random",
      "test_reduce_l2_negative_axes_keep_dims_example", "test_reduce_log_sum_asc_axes", "test_reduce_log_sum_exp_keepdims_random",
      "test_reduce_sum_square_do_not_keepdims_random", "test_reduce_mean_default_axes_keepdims_random"}},
    {"reduce-sum-runtime-axes-13-lowering", 11,
     {"test_reduce_sum_keepdims_random", "test_reduce_sum_negative_axes_keepdims_example", "test_reduce_sum_do_not_keepdims_example",
      "test_reduce_sum_empty_axes_input_noop_example", "test_reduce_sum_default_axes_keepdims_random"}},
    {"reduce without axes: moved as is", 13, {"test_reduce_max_default_axes_keepdim_example"}},
    {"split-num-outputs-18-lowering", 13, {"test_split_equal_parts_1d_opset18", "test_split_1d_uneven_split_opset18"}},
    {"split-num-outputs-18-lowering", 11, {"test_split_equal_parts_default_axis_opset18", "test_split_2d_uneven_split_opset18"}},
    {"softmax-axis-13-lowering", 11,
     {"test_softmax_axis_0", "test_softmax_axis_1", "test_softmax_negative_axis", "test_softmax_default_axis", "test_logsoftmax_axis_0",
      "test_hardmax_axis_1", "test_hardmax_axis_2"}},
    {"gelu-20-lowering", 17, {"test_gelu_default_1", "test_gelu_default_2", "test_gelu_tanh_1", "test_gelu_tanh_2"}},
    {"hard-swish-14-lowering", 13, {"test_hardswish"}},
    {"mish-18-lowering", 13, {"test_mish"}},
    {"greater-or-equal-12-lowering", 11, {"test_greater_equal", "test_greater_equal_bcast"}},
    {"less-or-equal-12-lowering", 11, {"test_less_equal", "test_less_equal_bcast"}},
    {"constant-value-attributes-12-lowering", 11, {"test_elu_default_expanded_ver18"}},
    {"resize-optional-inputs-13-lowering", 11,
     {"test_resize_upsample_sizes_nearest", "test_resize_downsample_scales_linear", "test_resize_upsample_scales_cubic"}},
    {"resize (no Resize-18/19 attributes: moved as is)", 13, {"test_resize_upsample_sizes_nearest", "test_resize_downsample_scales_linear"}},
    {"scatter elements (no max/min reduction: moved as is)", 13, {"test_scatter_elements_with_axis"}},
    {"trilu-14-lowering", 11, {"test_tril", "test_tril_neg", "test_triu_pos", "test_triu_one_row", "test_tril_out_pos", "test_triu_square", "test_tril_zero"}},
    {"rms-normalization-23-lowering", 13,
     {"test_rms_normalization_3d_axis1_epsilon", "test_rms_normalization_4d_axis_negative_2", "test_rms_normalization_default_axis"}},
    {"arg-select-last-index-12-lowering", 11,
     {"test_argmax_default_axis_example_select_last_index", "test_argmin_negative_axis_keepdims_random_select_last_index",
      "test_argmax_no_keepdims_random_select_last_index"}},
    {"dropout-12-lowering", 11, {"test_dropout_default", "test_dropout_default_ratio", "test_dropout_default_mask", "test_dropout_default_mask_ratio"}},
    {"grid-sample-20-lowering", 17,
     {"test_gridsample", "test_gridsample_bicubic", "test_gridsample_bilinear_align_corners_1_additional_1", "test_gridsample_nearest",
      "test_gridsample_nearest_align_corners_1_additional_1"}},
    {"cum-prod-26-lowering", 17, {"test_cumprod_1d", "test_cumprod_1d_int32_exclusive", "test_cumprod_1d_reverse_exclusive"}},
    {"cum-sum-11-lowering", 10, {"test_cumsum_1d", "test_cumsum_1d_int32_exclusive", "test_cumsum_1d_reverse_exclusive"}},
    {"integer-mod-10-lowering", 9,
     {"test_mod_mixed_sign_int64", "test_mod_mixed_sign_int8", "test_mod_int64_fmod", "test_mod_broadcast", "test_mod_uint16"}},
    {"gather-elements-11-lowering", 9, {"test_gather_elements_0", "test_gather_elements_1", "test_gather_elements_negative_indices"}},
    {"scatter-elements-11-lowering", 10,
     {"test_scatter_elements_with_axis", "test_scatter_elements_with_negative_indices", "test_scatter_elements_without_axis"}},
    {"arg-select-last-index-12-lowering (below 10: reversed by a Gather)", 9, {"test_argmax_negative_axis_keepdims_example_select_last_index"}},
    {"clip-runtime-bounds-11-lowering", 10, {"test_clip", "test_clip_splitbounds"}},
    {"qlinear-matmul-float16-scales-21-lowering", 17, {"test_qlinearmatmul_2D_int8_float16"}},
    {"is-inf-float16-20-lowering", 17, {"test_isinf_float16"}},
    {"ConvTranspose without auto_pad or output_shape: moved as is", 10, {"test_convtranspose", "test_convtranspose_pads"}},
    {"equal-11-narrow-integer-lowering", 10, {"test_equal_int8", "test_equal_uint16", "test_equal_uint32"}},
    {"greater-or-equal-12-narrow-integer-lowering", 11, {"test_greater_equal_int8", "test_less_equal_uint16", "test_less_equal_int16"}},
    {"layer-normalization-17-lowering", 13, {"test_layer_normalization_3d_axis1_epsilon", "test_layer_normalization_4d_axis_negative_2"}},
    {"pow-exponent-type-12-lowering", 11, {"test_pow", "test_pow_bcast_scalar", "test_pow_bcast_array", "test_pow_example",
                                           "test_pow_types_float32_int32", "test_pow_types_float32_int64"}},
    {"batch-normalization-types-15-lowering", 13, {"test_batchnorm_example", "test_batchnorm_epsilon"}},
    {"batch-normalization-types-15-lowering", 9, {"test_batchnorm_example"}},
    {"pad-axes-18-lowering", 13, {"test_constant_pad_axes", "test_constant_pad_negative_axes"}},
    {"pad-axes-18-lowering", 11, {"test_constant_pad_axes"}},
    {"split-runtime-sizes-13-lowering", 11, {"test_rotary_embedding_expanded", "test_rotary_embedding_interleaved_expanded"}},
    {"small-integer-arithmetic-14-lowering", 13,
     {"test_add_int8", "test_add_uint16", "test_sub_int16", "test_sub_uint8", "test_mul_int8", "test_mul_uint16", "test_div_int16",
      "test_div_uint8"}},
    {"small-integer-arithmetic-14-lowering", 9, {"test_add_uint8", "test_sub_int8", "test_mul_int16", "test_div_uint16"}},
    {"cosine-window-17-lowering", 13, {"test_hannwindow", "test_hammingwindow_symmetric", "test_blackmanwindow"}},
    {"cosine-window-17-lowering", 11, {"test_hannwindow_symmetric", "test_hammingwindow", "test_blackmanwindow_symmetric"}},
    {"swish-24-lowering", 13, {"test_swish"}},
    {"grid-sample-16-lowering", 13,
     {"test_gridsample", "test_gridsample_aligncorners_true", "test_gridsample_bicubic", "test_gridsample_bicubic_align_corners_0_additional_1",
      "test_gridsample_bicubic_align_corners_1_additional_1", "test_gridsample_bilinear", "test_gridsample_border_padding",
      "test_gridsample_reflection_padding", "test_gridsample_zeros_padding"}},
    {"grid-sample-16-lowering", 11,
     {"test_gridsample_bilinear_align_corners_0_additional_1", "test_gridsample_bilinear_align_corners_1_additional_1",
      "test_gridsample_nearest", "test_gridsample_nearest_align_corners_0_additional_1",
      "test_gridsample_nearest_align_corners_1_additional_1"}},
    {"integer-max-min-12-lowering", 11, {"test_max_int64", "test_max_uint8", "test_min_int32", "test_min_uint32", "test_min_int16"}},
    {"negative-axes-11-lowering", 10,
     {"test_concat_3d_axis_negative_2", "test_flatten_negative_axis2", "test_gather_negative_indices", "test_hardmax_negative_axis",
      "test_compress_negative_axis", "test_argmax_negative_axis_keepdims_random", "test_logsoftmax_negative_axis"}},
    {"negative-axes-11-lowering", 9, {"test_concat_2d_axis_negative_1", "test_flatten_negative_axis4", "test_gather_negative_indices"}},
    {"center-crop-pad-18-lowering", 17, {"test_center_crop_pad_crop", "test_center_crop_pad_pad", "test_center_crop_pad_crop_and_pad"}},
    {"center-crop-pad-18-lowering", 11,
     {"test_center_crop_pad_crop_axes_chw", "test_center_crop_pad_crop_axes_hwc", "test_center_crop_pad_crop_negative_axes_hwc"}},
};

class OpsetDown : public ::testing::TestWithParam<Adapted> {};

TEST_P(OpsetDown, ConformanceCasesKeepTheirOutputsBelowTheStep) {
  ASSERT_TEST_DATA(corpus, "conformance");
  expect_conformance_cases_lowered(corpus, GetParam().cases, GetParam().opset);
}

INSTANTIATE_TEST_SUITE_P(Adapters, OpsetDown, ::testing::ValuesIn(kAdapted), [](const auto& info) {
  return test_name(fmt::format("{}_opset{}_{}", info.param.adapter.substr(0, info.param.adapter.find(' ')), info.param.opset, info.index));
});

// Adapters whose conformance cases don't exercise them: axes, sizes and bounds fed as graph inputs
// (no older spelling: refused), imports past the version tables (Pad, Squeeze, Shape: 25, Celu:
// 28), or one the adapter does not start from (Slice, TopK: 13, 24). Models written here, the rewrite
// compared with the original in ONNX Runtime on random inputs.
struct Written {
  std::string adapter;
  int opset;
  std::string model;
  std::vector<std::string> compare_options;
};

// torch's attention and embeddings as they count axes and ids (negative-axes-11-lowering):
// ids in [-2, 1], int32 indices in [-4, 3].
const std::string kNegativeAxes = R"(
      <ir_version: 8, opset_import: ["": 14]>
      g (float[2, 3, 4] x, int64[5] ids, int32[2, 2] small)
        => (float[2, 3, 4, 1] u, float[2, 3, 4] s, float[2, 3, 1] m, float[2, 3, 1] r, float[2, 3, 4] sm, float[2, 6, 4] c,
            float[6, 4] f, int64[2, 3, 1] a, float[5, 3, 4] g, float[2, 3, 2, 2] h, float[2, 3, 2] p, float[2, 3, 2] q,
            float[2, 3, 2] sl)
        <int64[1] last = {-1}, int64[2] halves = {2, 2}, int64[1] start = {1}, int64[1] end = {3}> {
        u = Unsqueeze (x, last)
        s = Squeeze (u, last)
        m = ReduceMean <axes = [-1]> (s)
        r = ReduceSum (x, last)
        sm = Softmax <axis = -1> (x)
        c = Concat <axis = -2> (x, x)
        f = Flatten <axis = -1> (x)
        a = ArgMax <axis = -1> (x)
        g = Gather <axis = 0> (x, ids)
        h = Gather <axis = -1> (x, small)
        p, q = Split <axis = -1> (x, halves)
        sl = Slice (x, start, end, last)
      })";
const std::vector<std::string> kNegativeAxesRanges = {"--range", "ids=-2,1", "--range", "small=-4,3"};

// LLaMA's causal mask of a length known only at run time: Range to the sizes Shape gives.
const std::string kRuntimeTrilu = R"(
      <ir_version: 8, opset_import: ["": 14]>
      g (float[B, N, M] x, int64 k) => (float[B, N, M] u, float[B, N, M] l, float[B, N, M] d) <int64 one = {1}> {
        u = Trilu (x, one)
        l = Trilu <upper = 0> (x)
        d = Trilu <upper = 0> (x, k)
      })";
const std::vector<std::string> kRuntimeTriluOptions = {"--dim", "B=2", "--dim", "N=5", "--dim", "M=7", "--range", "k=-3,3"};

// torch writes Dropout's training_mode as a constant: false in inference graphs, and
// torchvision's Swin true with a ratio of 0 (nothing dropped, a scale of 1).
const std::string kDropoutWritten = R"(
      <ir_version: 8, opset_import: ["": 14]>
      g (float[2, 3] x) => (float[2, 3] a, float[2, 3] b) <float r = {0.25}, bool off = {0}, float none = {0.0}, bool on = {1}> {
        a = Dropout (x, r, off)
        b, unused = Dropout (x, none, on)
      })";

const std::vector<Written> kWritten = {
    {"reduce-axes-input-18-lowering", 17, R"(
      <ir_version: 8, opset_import: ["": 18]>
      g (float[2, 3, 4] x) => (float[2, 1, 4] a, float[2] b, float[3, 1] c, float[1, 3, 1] d, float[2, 3] e, float[2] f)
        <int64[1] one = {1}, int64[2] two = {0, -1}, int64[1] last = {-1}> {
        a = ReduceMean <keepdims = 1> (x, one)
        b = ReduceLogSumExp <keepdims = 0> (x, one)
        m = ReduceMax <keepdims = 0> (x, one)
        c = ReduceL2 <keepdims = 1> (x, two)
        d = ReduceSumSquare (x, two)
        e = ReduceProd <keepdims = 0> (x, last)
        f = ReduceMin <keepdims = 0> (m, last)
      })", {}},
    {"reduce-axes-input-18-lowering", 11, R"(
      <ir_version: 8, opset_import: ["": 18]>
      g (float[2, 3, 4] x) => (float[2, 4] a, float[2, 1, 1] s) <int64[1] one = {1}, int64[2] two = {1, 2}> {
        a = ReduceL1 <keepdims = 0> (x, one)
        s = ReduceSum (x, two)
      })", {}},
    {"reduce-sum-axes-input-13-lowering", 11, R"(
      <ir_version: 7, opset_import: ["": 13]>
      g (float[2, 3, 4] x) => (float[2, 4] a, float[2, 3, 4] n) <int64[1] axes = {-2}, int64[0] none = {}> {
        a = ReduceSum <keepdims = 0> (x, axes)
        n = ReduceSum <noop_with_empty_axes = 1> (x, none)
      })", {}},
    {"squeeze-axes-input-13-lowering", 11, R"(
      <ir_version: 7, opset_import: ["": 13]>
      g (float[3, 1, 4] x) => (float[3, 4] s, float[1, 3, 4, 1] u) <int64[1] one = {1}, int64[2] two = {0, -1}> {
        s = Squeeze (x, one)
        u = Unsqueeze (s, two)
      })", {}},
    {"split-sizes-input-13-lowering", 11, R"(
      <ir_version: 8, opset_import: ["": 18]>
      g (float[2, 7] x) => (float[2, 3] a, float[2, 4] b) <int64[2] split = {3, 4}> {
        a, b = Split <axis = -1> (x, split)
      })", {}},
    {"split-num-outputs-18-lowering (sizes at run time)", 13, R"(
      <ir_version: 8, opset_import: ["": 18]>
      g (float[N, 2] x) => (float[M, 2] a, float[K, 2] b, float[L, 2] c) {
        a, b, c = Split <axis = 0, num_outputs = 3> (x)
      })", {"--dim", "N=7"}},
    {"split-num-outputs-18-lowering (sizes at run time, Slices)", 11, R"(
      <ir_version: 8, opset_import: ["": 18]>
      g (float[N, 2] x) => (float[M, 2] a, float[K, 2] b, float[L, 2] c) {
        a, b, c = Split <axis = 0, num_outputs = 3> (x)
      })", {"--dim", "N=8"}},
    {"small-integer-arithmetic-14-lowering (wrap-around)", 13, R"(
      <ir_version: 8, opset_import: ["": 14]>
      g (int8[4] x, uint16[4] u) => (int8[4] sum, int8[4] product, uint16[4] difference, uint16[4] square)
        <int8[4] big = {127, 100, -128, 64}, uint16[4] top = {65535, 1, 0, 40000}> {
        sum = Add (x, big)
        product = Mul (x, big)
        difference = Sub (u, top)
        square = Mul (top, top)
      })", {}},
    {"split-runtime-sizes-13-lowering", 11, R"(
      <ir_version: 8, opset_import: ["": 13]>
      g (float[2, N] x) => (float[2, M] a, float[2, K] b) {
        n = Shape (x)
        last = Constant <value = int64[1] {1}> ()
        width = Gather (n, last)
        two = Constant <value = int64[1] {2}> ()
        half = Div (width, two)
        rest = Sub (width, half)
        sizes = Concat <axis = 0> (half, rest)
        a, b = Split <axis = -1> (x, sizes)
      })", {"--dim", "N=9"}},
    {"clip-bounds-input-11-lowering", 10, R"(
      <ir_version: 7, opset_import: ["": 13]>
      g (float[3, 4] x) => (float[3, 4] y, float[3, 4] z) <float lo = {-0.25}, float hi = {0.5}> {
        y = Clip (x, lo, hi)
        z = Clip (x, , hi)
      })", {}},
    {"shape-start-end-15-lowering", 13, R"(
      <ir_version: 8, opset_import: ["": 15]>
      g (float[2, 3, 4, 5] x) => (int64[2] a, int64[3] b, int64[1] c) {
        a = Shape <start = 1, end = -1> (x)
        b = Shape <start = -3> (x)
        c = Shape <end = 1> (x)
      })", {}},
    {"cast-like-15-lowering", 13, R"(
      <ir_version: 8, opset_import: ["": 15]>
      g (float[3, 4] x, int32[2] i) => (int32[3, 4] y, float[2] z) {
        y = CastLike (x, i)
        z = CastLike (i, x)
      })", {"--float-range", "-50,50"}},
    {"celu-12-lowering", 11, R"(
      <ir_version: 7, opset_import: ["": 12]>
      g (float[3, 4] x) => (float[3, 4] y, float[3, 4] z) {
        y = Celu <alpha = 2.0> (x)
        z = Celu (x)
      })", {"--float-range", "-4,4"}},
    {"pad-pads-input-11-lowering", 10, R"(
      <ir_version: 6, opset_import: ["": 11]>
      g (float[2, 3] x) => (float[3, 7] y) <int64[4] pads = {1, 2, 0, 2}, float value = {1.5}> {
        y = Pad <mode = "constant"> (x, pads, value)
      })", {}},
    {"pad-pads-input-11-lowering", 10, R"(
      <ir_version: 6, opset_import: ["": 13]>
      g (float[3, 4] x) => (float[3, 8] y) <int64[4] pads = {0, 2, 0, 2}> {
        y = Pad <mode = "reflect"> (x, pads)
      })", {}},
    {"slice-inputs-10-lowering", 9, R"(
      <ir_version: 5, opset_import: ["": 10]>
      g (float[5, 6, 4] x) => (float[5, 3, 2] y) <int64[2] starts = {1, -3}, int64[2] ends = {4, 1000}, int64[2] axes = {1, 2},
                                                   int64[2] steps = {1, 1}> {
        y = Slice (x, starts, ends, axes, steps)
      })", {}},
    {"topk-k-input-10-lowering", 9, R"(
      <ir_version: 5, opset_import: ["": 10]>
      g (float[3, 5] x) => (float[3, 2] v, int64[3, 2] i) <int64[1] k = {2}> {
        v, i = TopK <axis = 1> (x, k)
      })", {}},
    // Relu-14 added int64, which the model uses for shapes: the Relu reads an If's float output
    // (the branches declare it), so it is not an int64 Relu. RNN and Reshape write their new
    // attributes at the default.
    {"recurrent-layout-14-lowering and reshape-allowzero-14-lowering (node types)", 13, R"(
      <ir_version: 8, opset_import: ["": 14]>
      g (float[2, 1, 3] x, bool c) => (float[2, 1, 1, 2] y, float[1, 1, 2] h, float[3, 2] z)
        <float[1, 2, 3] w = {0.1, -0.2, 0.3, 0.4, 0.5, -0.6}, float[1, 2, 2] r = {0.7, -0.1, 0.2, 0.3}, int64[2] shape = {3, 2}> {
        t = If (c) <then_branch = then_g () => (float[2, 1, 3] o) { o = Identity (x) },
                    else_branch = else_g () => (float[2, 1, 3] o) { o = Neg (x) }>
        u = Relu (t)
        y, h = RNN <hidden_size = 2, layout = 0> (u, w, r)
        f = Flatten <axis = 0> (x)
        q = Squeeze (f)
        z = Reshape <allowzero = 0> (q, shape)
      })", {}},
    // 400 x 300 is larger than the masks written out: j - i is computed from Range.
    {"trilu-14-lowering (a large mask)", 13, R"(
      <ir_version: 8, opset_import: ["": 14]>
      g (float[2, 400, 300] x) => (float[2, 400, 300] u, float[2, 400, 300] l) <int64 k = {-7}> {
        u = Trilu (x)
        l = Trilu <upper = 0> (x, k)
      })", {}},
    {"dropout-12-lowering (training_mode written)", 11, kDropoutWritten, {}},
    {"dropout-12-lowering (training_mode written, below 10)", 7, kDropoutWritten, {}},
    // torch writes Range for position ids and masks: counts from run-time limits (0 gives an
    // empty range), negative and fractional steps, each type Range takes below 14.
    {"range-11-lowering", 10, R"(
      <ir_version: 7, opset_import: ["": 11]>
      g (int64 n, int32 m) => (int64[A] a, int32[B] b, float[C] c, double[D] d, int64[E] e)
        <int64 zero = {0}, int64 one = {1}, int32 minus_two = {-2}, float start = {0.5}, float stop = {-2.2},
         float down = {-0.3}, double low = {1.25}, double high = {4.0}, double quarter = {0.25}, int64 two = {2}> {
        a = Range (zero, n, one)
        b = Range (m, minus_two, minus_two)
        c = Range (start, stop, down)
        d = Range (low, high, quarter)
        e = Range (n, zero, two)
      })", {"--range", "n=0,12", "--range", "m=-3,9"}},
    {"range-11-lowering (below 10)", 9, R"(
      <ir_version: 7, opset_import: ["": 11]>
      g (int64 n) => (int64[A] a) <int64 zero = {0}, int64 one = {1}> {
        a = Range (zero, n, one)
      })", {"--range", "n=0,12"}},
    {"trilu-14-lowering (dims known at run time)", 11, kRuntimeTrilu, kRuntimeTriluOptions},
    {"trilu-14-lowering (dims known at run time, below 11: Range's Loop)", 9, kRuntimeTrilu, kRuntimeTriluOptions},
    // GPT-2's causal mask: Trilu of a bool tensor. ONNX Runtime has no bool Where below 16 (the
    // output would load nowhere): the mask is applied with And.
    {"trilu-14-lowering (bool, as GPT-2 writes it)", 13, R"(
      <ir_version: 8, opset_import: ["": 14]>
      g (float[2, 5, 6] x) => (bool[2, 5, 6] l, bool[2, 5, 6] u, bool[400, 300] causal) <int64 k = {1}> {
        zero = Constant <value = float {0.0}> ()
        c = Greater (x, zero)
        l = Trilu <upper = 0> (c)
        u = Trilu (c, k)
        size = Constant <value = int64[2] {400, 300}> ()
        ones = ConstantOfShape <value = bool[1] {1}> (size)
        causal = Trilu <upper = 0> (ones)
      })", {}},
    // A ResNet head as torch.onnx.export writes it at opset 11: MaxPool/AveragePool with
    // ceil_mode = 0 written, BatchNormalization in inference, Gemm with C, Flatten, Concat,
    // ReduceMean and Softmax with non-negative axes, Constant with `value`. Each meant the same
    // before 11 (and 10): the import goes down to 9 (the pools lose the default attribute).
    {"max-pool-ceil-mode-10-lowering and the steps torch's nodes mean the same across", 9, R"(
      <ir_version: 6, opset_import: ["": 11]>
      g (float[2, 3, 8, 8] x) => (float[2, 5] y, float[2, 6, 1, 1] m, float[2, 6] s)
        <float[3] scale = {1.0, 0.5, 2.0}, float[3] bias = {0.1, 0.2, 0.3}, float[3] mean = {0.0, 0.1, -0.1},
         float[3] var = {1.0, 2.0, 0.5}, float[5, 6] w = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, -0.7, -0.8, -0.9, -1.0, -1.1, -1.2,
         0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0}, float[5] c = {0.1, 0.2, 0.3, 0.4, 0.5}> {
        b = BatchNormalization <epsilon = 1e-5, momentum = 0.9> (x, scale, bias, mean, var)
        p = MaxPool <ceil_mode = 0, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]> (b)
        a = AveragePool <ceil_mode = 0, count_include_pad = 0, kernel_shape = [4, 4], strides = [4, 4]> (p)
        both = Concat <axis = 1> (a, a)
        m = ReduceMean <axes = [2, 3], keepdims = 1> (both)
        f = Flatten <axis = 1> (both)
        half = Constant <value = float {0.5}> ()
        h = Mul (f, half)
        g = Gemm <alpha = 1.0, beta = 1.0, transB = 1> (h, w, c)
        y = Softmax <axis = 1> (g)
        s = Identity (f)
      })", {}},
    // Gather-11 and Slice-11 let indices and axes count from the back: with Constant-fed indices
    // and axes >= 0 (as torch writes shape arithmetic) the nodes mean the same at 10.
    {"Gather and Slice fed by Constant nodes: moved as they are", 10, R"(
      <ir_version: 6, opset_import: ["": 11]>
      g (float[3, 4] x) => (int64 n, float[3, 2] s) {
        shape = Shape (x)
        zero = Constant <value = int64 {0}> ()
        n = Gather <axis = 0> (shape, zero)
        starts = Constant <value = int64[1] {1}> ()
        ends = Constant <value = int64[1] {3}> ()
        axes = Constant <value = int64[1] {1}> ()
        s = Slice (x, starts, ends, axes)
      })", {}},
    // torch writes shapes and indices as int64 Constant nodes; Constant-1 (below 9) takes floats
    // only: they become initializers.
    {"constant-types-9-lowering", 7, R"(
      <ir_version: 6, opset_import: ["": 11]>
      g (float[2, 3, 4] x) => (float[2, 12] y, float[2, 3] z) {
        shape = Constant <value = int64[2] {2, 12}> ()
        y = Reshape (x, shape)
        half = Constant <value = float {0.5}> ()
        m = ReduceMean <axes = [2], keepdims = 0> (x)
        z = Mul (m, half)
      })", {}},
    {"reduce-axes-input-18-lowering (empty axes)", 13, R"(
      <ir_version: 8, opset_import: ["": 18]>
      g (float[2, 3, 4] x) => (float[1, 1, 1] y, float[2, 3, 4] z) <int64[0] none = {}> {
        y = ReduceL2 (x, none)
        z = ReduceMax <noop_with_empty_axes = 1> (x, none)
      })", {}},
    // torch writes axes counting from the back (Unsqueeze, Softmax, ReduceMean over -1) and
    // embedding lookups whose ids may be negative: below 11 they count from the front, from the
    // rank, and ids i < 0 become i + size.
    {"negative-axes-11-lowering and the input-to-attribute lowerings", 9, kNegativeAxes, kNegativeAxesRanges},
    {"negative-axes-11-lowering (Slice-10's axes input)", 10, kNegativeAxes, kNegativeAxesRanges},
    // HF position ids are CumSum of the attention mask; ORT's CumSum-11 kernel is the reference.
    {"cum-sum-11-lowering", 10, R"(
      <ir_version: 7, opset_import: ["": 11]>
      g (float[2, 3, 4] x, int64[2, 5] m, int32[6] i) => (float[2, 3, 4] a, float[2, 3, 4] b, int64[2, 5] c, int32[6] d)
        <int64 one = {1}, int64[1] last = {-1}, int32 first = {0}> {
        a = CumSum (x, one)
        b = CumSum <exclusive = 1, reverse = 1> (x, last)
        c = CumSum <reverse = 1> (m, one)
        d = CumSum <exclusive = 1> (i, first)
      })", {"--int-range", "-20,20"}},
    {"cum-prod-26-lowering", 17, R"(
      <ir_version: 10, opset_import: ["": 26]>
      g (float[2, 3, 4] x, int64[3, 4] m) => (float[2, 3, 4] a, float[2, 3, 4] b, int64[3, 4] c)
        <int64 two = {2}, int64 zero = {0}> {
        a = CumProd (x, two)
        b = CumProd <exclusive = 1, reverse = 1> (x, zero)
        c = CumProd <reverse = 1> (m, zero)
      })", {"--int-range", "-9,9"}},
    // Divisors of both signs, remainders of both signs, fmod either way.
    {"integer-mod-10-lowering", 9, R"(
      <ir_version: 5, opset_import: ["": 10]>
      g (int64[2, 4] a, int32[4] b, int8[4] c, uint16[4] d) => (int64[2, 4] r, int64[2, 4] f, int32[4] s, int8[4] t, uint16[4] u)
        <int64[4] p = {3, -3, 7, -1}, int32[4] q = {-5, 4, 2, 9}, int8[4] e = {3, -4, 5, -6}, uint16[4] w = {3, 7, 1000, 65535}> {
        r = Mod (a, p)
        f = Mod <fmod = 1> (a, p)
        s = Mod (b, q)
        t = Mod <fmod = 1> (c, e)
        u = Mod (d, w)
      })", {"--int-range", "-100,100"}},
    // Negative operands (their two's complement bits), 32-bit values near the limits, operands of
    // different ranks broadcasting.
    {"bitwise-18-lowering and bitwise-not-18-lowering", 9, R"(
      <ir_version: 8, opset_import: ["": 18]>
      g (int32[2, 3] a, int32[3] b, int8[4] c, uint16[2, 4] d) => (int32[2, 3] p, int32[2, 3] q, int32[2, 3] r, int8[4] s, uint16[2, 4] t,
                                                             uint16[2, 4] u)
        <int32[3] big = {2147483647, -2147483648, -1}, uint16[4] e = {65535, 1, 32768, 4660}> {
        p = BitwiseAnd (a, b)
        q = BitwiseOr (a, big)
        r = BitwiseXor (a, b)
        s = BitwiseNot (c)
        t = BitwiseXor (d, e)
        u = BitwiseNot (d)
      })", {"--int-range", "-100000,100000"}},
    // Bounds of both signs and beyond the size (clamped), a negative axis, a step of 2, int32 ends.
    {"slice-runtime-bounds-10-lowering", 9, R"(
      <ir_version: 5, opset_import: ["": 10]>
      g (float[4, 6] x, int64[1] m, int64[1] n, int32[2] e) => (float[4, A] y, float[B, C] z)
        <int64[1] axes = {-1}, int32[2] both = {0, 1}, int32[2] s = {1, -5}, int32[2] two = {1, 2}> {
        y = Slice (x, m, n, axes)
        z = Slice (x, s, e, both, two)
      })", {"--range", "m=-8,8", "--range", "n=-8,8", "--range", "e=-9,9"}},
    {"softmax-axis-13-lowering (below 11: the last axis counted from the front)", 9, R"(
      <ir_version: 7, opset_import: ["": 13]>
      g (float[2, 3, 4] x) => (float[2, 3, 4] a, float[2, 3, 4] b, float[2, 3, 4] c) {
        a = Softmax <axis = 1> (x)
        b = LogSoftmax (x)
        c = Hardmax <axis = 0> (x)
      })", {}},
    {"layer-normalization-17-lowering (below 11)", 9, R"(
      <ir_version: 8, opset_import: ["": 17]>
      g (float[2, 3, 4] x, float[4] s, float[4] o, float[3, 4] t) => (float[2, 3, 4] a, float[2, 3, 4] b) {
        a = LayerNormalization <epsilon = 1e-5> (x, s, o)
        b = LayerNormalization <axis = 1> (x, t)
      })", {}},
};

class OpsetDownWritten : public ::testing::TestWithParam<Written> {};

TEST_P(OpsetDownWritten, ComputesWhatTheOriginalComputes) {
  const Written& written = GetParam();
  TempDir dir;
  const fs::path original = write_model_text(written.model, dir / "original.onnx");
  const auto rewritten = rewrite_and_check(original, dir / "lowered.onnx", "onnx", written.opset);
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(opset_import(rewritten->model, ""), written.opset);
  const auto comparison = ort_compare(original, dir / "lowered.onnx", written.compare_options);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers(written.adapter, comparison);
}

INSTANTIATE_TEST_SUITE_P(Adapters, OpsetDownWritten, ::testing::ValuesIn(kWritten), [](const auto& info) {
  return test_name(info.param.adapter.substr(0, info.param.adapter.find(' ')) + "_" + std::to_string(info.index));
});

// An integer base has no older spelling (Pow-7 takes floats only): the lowering is refused. (A
// float base with an integer exponent lowers: the conformance cases test_pow_types_float32_int*.)
TEST(OpsetDown, PowOfAnIntegerBaseStaysAboveOpset12) {
  ASSERT_TEST_DATA(corpus, "conformance");
  TempDir dir;
  const fs::path model = corpus / "node" / "test_pow_types_int32_float32" / "model.onnx";
  const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--opset", "11"});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_NE(result.err.find("Pow x1 (main graph) keeps it there as it is"), std::string::npos) << result.err;
}

// The types a version step added count where the node uses them: an int64 Relu stays above 13.
TEST(OpsetDown, ANodeOfATypeTheOlderVersionLacksStaysAbove) {
  TempDir dir;
  const fs::path model = write_model_text(R"(
    <ir_version: 8, opset_import: ["": 14]>
    g (float[2] x) => (float[2] y, int64[2] n) <int64[2] a = {1, -2}> {
      y = Relu (x)
      n = Relu (a)
    })", dir / "m.onnx");
  const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--opset", "13"});
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_NE(result.err.find("Relu x1 (main graph) keeps it there as it is: Relu-14 added int64 types"), std::string::npos) << result.err;
}

// Near misses of the nodes above: what really uses the newer meaning stays above, named. A
// Flatten, Concat, Gather and ReduceMean counting an axis from the back in a rank nobody knows
// (a Reshape to a shape given at run time), a Gather's negative index below 9, a Dropout in
// training mode,
// a pool rounding up (ceil_mode = 1), a Gemm without C, a BatchNormalization writing its running
// statistics. (With the rank known, negative-axes-11-lowering converts the first four:
// OpsetDownWritten.)
TEST(OpsetDown, NodesUsingTheNewerMeaningStayAbove) {
  struct Case {
    std::string node;
    int opset;
    std::string reason;
  };
  const std::string accepts = " keeps it there as it is: {0}-11 accepts nodes that {0}-10 does not, and this is one";
  const std::vector<Case> cases = {
      {"t = Reshape (x, shape)\n y = Flatten <axis = -1> (t)", 10, "Flatten x1 (main graph)" + fmt::format(fmt::runtime(accepts), "Flatten")},
      {"y = MaxPool <ceil_mode = 1, kernel_shape = [2, 2]> (x)", 9,
       "MaxPool x1 (main graph) keeps it there as it is: MaxPool-10 added attribute ceil_mode, which this node sets"},
      {"y = AveragePool <ceil_mode = 1, kernel_shape = [2, 2]> (x)", 9,
       "AveragePool x1 (main graph) keeps it there as it is: AveragePool-10 added attribute ceil_mode, which this node sets"},
      {"y = Gemm (x, x)", 10, "Gemm x1 (main graph)" + fmt::format(fmt::runtime(accepts), "Gemm")},
      {"t = Reshape (x, shape)\n i = Constant <value = int64[2] {0, -1}> ()\n y = Gather <axis = -1> (t, i)", 10,
       "Gather x1 (main graph)" + fmt::format(fmt::runtime(accepts), "Gather")},
      {"t = Reshape (x, shape)\n y = Concat <axis = -1> (t, t)", 10, "Concat x1 (main graph)" + fmt::format(fmt::runtime(accepts), "Concat")},
      {"t = Reshape (x, shape)\n y = ReduceMean <axes = [-1]> (t)", 10,
       "ReduceMean x1 (main graph)" + fmt::format(fmt::runtime(accepts), "ReduceMean")},
      // A Gather whose indices may be negative below 9, which has no Where to count them from the front.
      {"i = Constant <value = int64[2] {0, -1}> ()\n y = Gather <axis = 1> (x, i)", 8,
       "Gather x1 (main graph) keeps it there as it is: Gather-11 accepts nodes that Gather-8 does not, and this is one"},
      {"r = Constant <value = float {0.25}> ()\n on = Constant <value = bool {1}> ()\n y = Dropout (x, r, on)", 11,
       "Dropout x1 (main graph) keeps it there as it is: Dropout-12 changed its meaning"},
      {"y, rm, rv = BatchNormalization <training_mode = 1> (x, x, x, x, x)", 13,
       "BatchNormalization x1 (main graph) keeps it there as it is: BatchNormalization-14 changed its meaning"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    const fs::path model = write_model_text(fmt::format(R"(
      <ir_version: 8, opset_import: ["": 14]>
      g (float[N, M] x, int64[K] shape) => (float[N, M] y) {{
        {}
      }})", c.node), dir / "m.onnx");
    const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--opset", std::to_string(c.opset)});
    EXPECT_EQ(result.exit_code, 1) << c.node << ": " << result.err;
    EXPECT_NE(result.err.find(c.reason), std::string::npos) << c.node << ": " << result.err;
  }
}

// A rewrite that does not lower keeps every adapted op as it is (`--opset` at the model's own).
TEST(OpsetDown, NothingChangesWithoutALowerOpset) {
  ASSERT_TEST_DATA(corpus, "conformance");
  TempDir dir;
  for (const auto& adapted : kAdapted) {
    const std::string& name = adapted.cases.front();
    const fs::path model = corpus / "node" / name / "model.onnx";
    const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string()});
    EXPECT_EQ(result.exit_code, 0) << name << ": " << result.err;
    EXPECT_EQ(read_file(dir / "out.onnx"), read_file(model)) << name;
  }
}

}  // namespace
}  // namespace onnx_rewrite
