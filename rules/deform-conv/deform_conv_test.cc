// Deformable convolution (rules/deform-conv/deform-conv-*.rules, rules/deform-conv/deform_conv.cc): every exported
// form, rewritten for every opset family (DeformConv at 19+, GridSample at 16..18, Gather at
// 11..15), computes in ONNX Runtime what ORT's own DeformConv-19 kernel computes and what an
// independent naive reference of torchvision's semantics computes (tests/ort/reference/
// deform_conv2d.js); the rewritten model passes `onnx-rewrite check`.
#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// ---- One deformable convolution and the forms exporters write it in --------------------------

struct Geometry {
  int64_t batch = 1;                // 0: symbolic N
  bool symbolic_spatial = false;    // H, W and the output's height and width symbolic
  int64_t channels = 2, height = 5, width = 6, out_channels = 2, kernel_h = 3, kernel_w = 3;
  std::array<int64_t, 2> stride{1, 1}, dilation{1, 1};
  std::array<int64_t, 4> pads{0, 0, 0, 0};  // top, left, bottom, right
  int64_t groups = 1, offset_groups = 1;
  bool mask = false, bias = false;
  bool ignore_mask = false;  // torchvision's use_mask = 0 with a mask input given

  int64_t out(int axis) const {
    const int64_t size = axis == 0 ? height : width, kernel = axis == 0 ? kernel_h : kernel_w;
    return (size + pads[axis] + pads[axis + 2] - dilation[axis] * (kernel - 1) - 1) / stride[axis] + 1;
  }
  int64_t taps() const { return kernel_h * kernel_w; }
};

enum class Form {
  kOnnx,               // ai.onnx DeformConv (the ORT reference, and the input of the lowering rules)
  kTorchvision3,       // custom::deform_conv2d (input, weight, offset), no attributes
  kTorchvision5,       // custom::deform_conv2d (input, weight, offset, mask, bias) with every attribute
  kTorchvisionShapes,  // the same, groups/offset_groups/use_mask left to the shapes
  kMmcv,               // mmcv::MMCVDeformConv2d or MMCVModulatedDeformConv2d
  kMmdeploy,           // the same in the mmdeploy domain, DCN v1 padding as [h, h, w, w]
};

std::string ints(const std::vector<int64_t>& values) { return fmt::format("[{}]", fmt::join(values, ", ")); }

std::string dim(const char* symbol, int64_t value, bool symbolic) { return symbolic ? symbol : std::to_string(value); }

// Node inputs, absent ones as empty names (trailing ones left out).
std::string inputs(std::vector<std::string> names) {
  while (!names.empty() && names.back().empty()) names.pop_back();
  return fmt::format("({})", fmt::join(names, ", "));
}

// The graph inputs: input, weight, offset[, mask][, bias] (all fed by compare.js).
std::string signature(const Geometry& g) {
  const std::string n = dim("N", g.batch, g.batch == 0);
  const std::string h = dim("H", g.height, g.symbolic_spatial), w = dim("W", g.width, g.symbolic_spatial);
  const std::string oh = dim("OH", g.out(0), g.symbolic_spatial), ow = dim("OW", g.out(1), g.symbolic_spatial);
  std::string inputs = fmt::format("float[{}, {}, {}, {}] input, float[{}, {}, {}, {}] weight, float[{}, {}, {}, {}] offset", n,
                                   g.channels, h, w, g.out_channels, g.channels / g.groups, g.kernel_h, g.kernel_w, n,
                                   2 * g.offset_groups * g.taps(), oh, ow);
  if (g.mask) inputs += fmt::format(", float[{}, {}, {}, {}] mask", n, g.offset_groups * g.taps(), oh, ow);
  if (g.bias) inputs += fmt::format(", float[{}] bias", g.out_channels);
  return fmt::format("dcn ({}) => (float[{}, {}, {}, {}] y)", inputs, n, g.out_channels, oh, ow);
}

std::string model_text(const Geometry& g, Form form, int opset) {
  const std::string mask = g.mask && (form != Form::kOnnx || !g.ignore_mask) ? "mask" : "", bias = g.bias ? "bias" : "";
  std::string domain, node;
  switch (form) {
    case Form::kOnnx: {
      std::string attributes = fmt::format("pads = {}, group = {}, offset_group = {}", ints({g.pads.begin(), g.pads.end()}),
                                           g.groups, g.offset_groups);
      attributes += fmt::format(", strides = {}, dilations = {}", ints({g.stride[0], g.stride[1]}),
                                ints({g.dilation[0], g.dilation[1]}));
      node = fmt::format("y = DeformConv <{}> {}", attributes, inputs({"input", "weight", "offset", bias, mask}));
      break;
    }
    case Form::kTorchvision3:
      domain = "custom";
      node = "y = custom.deform_conv2d (input, weight, offset)";
      break;
    case Form::kTorchvision5:
    case Form::kTorchvisionShapes: {
      domain = "custom";
      std::string attributes = fmt::format("stride_h = {}, stride_w = {}, pad_h = {}, pad_w = {}, dilation_h = {}, dilation_w = {}",
                                           g.stride[0], g.stride[1], g.pads[0], g.pads[1], g.dilation[0], g.dilation[1]);
      if (form == Form::kTorchvision5) {
        attributes += fmt::format(", groups = {}, offset_groups = {}, use_mask = {}", g.groups, g.offset_groups,
                                  g.mask && !g.ignore_mask ? 1 : 0);
      }
      node = fmt::format("y = custom.deform_conv2d <{}> {}", attributes, inputs({"input", "weight", "offset", mask, bias}));
      break;
    }
    case Form::kMmcv:
    case Form::kMmdeploy: {
      domain = form == Form::kMmcv ? "mmcv" : "mmdeploy";
      const bool modulated = g.mask;
      std::vector<int64_t> padding{g.pads[0], g.pads[1]};
      if (form == Form::kMmdeploy && !modulated) padding = {g.pads[0], g.pads[0], g.pads[1], g.pads[1]};
      // mmcv's own exports write an (h, w) pair of equal values as one int; mmdeploy's as a list.
      auto pair = [&](const std::vector<int64_t>& values) {
        return form == Form::kMmcv && values.size() == 2 && values[0] == values[1] ? std::to_string(values[0]) : ints(values);
      };
      const std::string attributes =
          fmt::format("stride = {}, padding = {}, dilation = {}, groups = {}, deform_groups = {}", pair({g.stride[0], g.stride[1]}),
                      pair(padding), pair({g.dilation[0], g.dilation[1]}), g.groups, g.offset_groups);
      node = modulated ? fmt::format("y = {}.MMCVModulatedDeformConv2d <{}> {}", domain, attributes,
                                     inputs({"input", "offset", "mask", "weight", bias}))
                       : fmt::format("y = {}.MMCVDeformConv2d <{}, bias = 0, im2col_step = 32> (input, offset, weight)", domain,
                                     attributes);
      break;
    }
  }
  const std::string imports = domain.empty() ? fmt::format("\"\": {}", opset) : fmt::format("\"\": {}, \"{}\": 1", opset, domain);
  return fmt::format("<ir_version: 8, opset_import: [{}]>\n{} {{\n  {}\n}}\n", imports, signature(g), node);
}

// compare.js options: symbolic dims, offsets of `offset_range` (beyond the image for these sizes),
// a mask in [0, 1).
std::vector<std::string> compare_options(const Geometry& g, const std::string& offset_range) {
  std::vector<std::string> options{"--range", "offset=" + offset_range, "--trials", "2", "--rtol", "1e-4", "--atol", "1e-4"};
  if (g.mask) options.insert(options.end(), {"--range", "mask=0,1"});
  if (g.batch == 0) options.insert(options.end(), {"--dim", "N=2"});
  if (g.symbolic_spatial) {
    for (const auto& [name, value] : {std::pair{"H", g.height}, {"W", g.width}, {"OH", g.out(0)}, {"OW", g.out(1)}}) {
      options.insert(options.end(), {"--dim", fmt::format("{}={}", name, value)});
    }
  }
  return options;
}

// The naive reference's parameters (torchvision's arguments).
std::string reference_params(const Geometry& g, bool use_mask) {
  return fmt::format(R"({{"output": "y", "stride": [{}, {}], "pad": [{}, {}], "dilation": [{}, {}], )"
                     R"("groups": {}, "offsetGroups": {}, "useMask": {}}})",
                     g.stride[0], g.stride[1], g.pads[0], g.pads[1], g.dilation[0], g.dilation[1], g.groups, g.offset_groups,
                     use_mask ? "true" : "false");
}

fs::path reference_module() { return family_file("deform-conv", "deform_conv2d.js"); }

// ---- Rewriting and inspecting ---------------------------------------------------------------

std::multiset<std::string> op_types(const fs::path& model_path) {
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(read_file(model_path))) << model_path;
  std::multiset<std::string> ops;
  for (const auto& node : model.graph().node()) ops.insert((node.domain().empty() ? "" : node.domain() + ".") + node.op_type());
  return ops;
}

// The op that shows which rewrite happened.
enum class Path { kDeformConv, kGridSample, kGather };

// What a rewrite at `opset` gives by default: DeformConv where it exists, else the Gather form
// (exact to float rounding; GridSample, from 16, is chosen only by skipping the Gather rules).
Path path_for(int opset) { return opset >= 19 ? Path::kDeformConv : Path::kGather; }

// Every path a rewrite at `opset` can take.
std::vector<Path> paths_for(int opset) {
  if (opset >= 19) return {Path::kDeformConv};
  if (opset >= 16) return {Path::kGather, Path::kGridSample};
  return {Path::kGather};
}

// The options that make the rewrite take `path` instead of the default.
std::vector<std::string> selecting(Path path) {
  if (path != Path::kGridSample) return {};
  return {"--skip", "torchvision-deform-conv2d-gather", "--skip", "mmcv-deform-conv2d-gather",
          "--skip", "mmcv-modulated-deform-conv2d-gather", "--skip", "deform-conv-gather"};
}

const char* path_name(Path path) {
  return path == Path::kDeformConv ? "DeformConv" : path == Path::kGridSample ? "GridSample" : "Gather";
}

// Rewrites `input` (with --opset when given), checks the result is loadable for the target and
// took `path`; returns the rewritten model's path.
fs::path rewrite(const fs::path& input, const fs::path& output, std::optional<int> opset, Path path) {
  std::vector<std::string> args{"rewrite", input.string(), "-o", output.string()};
  if (opset) args.insert(args.end(), {"--opset", std::to_string(*opset)});
  const auto select = selecting(path);
  args.insert(args.end(), select.begin(), select.end());
  const CommandResult rewritten = run_cli(args);
  EXPECT_EQ(rewritten.exit_code, 0) << rewritten.out << rewritten.err;
  for (const char* target : {"onnx", "ort"}) {
    std::vector<std::string> check{"check", output.string(), "--target", target};
    if (opset) check.insert(check.end(), {"--opset", std::to_string(*opset)});
    const CommandResult checked = run_cli(check);
    EXPECT_EQ(checked.exit_code, 0) << "check --target " << target << ": " << checked.out << checked.err;
  }
  const auto ops = op_types(output);
  for (const auto& op : ops) EXPECT_EQ(op.find('.'), std::string::npos) << "custom op left: " << op;
  EXPECT_EQ(ops.count("DeformConv"), path == Path::kDeformConv ? 1u : 0u) << rewritten.out;
  EXPECT_EQ(ops.count("GridSample"), path == Path::kGridSample ? 1u : 0u) << rewritten.out;
  if (path == Path::kGather) {
    EXPECT_EQ(ops.count("Floor"), 2u) << rewritten.out;  // the neighbours of y and x
  }
  if (opset) {
    EXPECT_LE(opset_import(read_model(output), ""), *opset);
  }
  return output;
}

// ---- Every form, geometry and opset family against DeformConv-19 and the naive reference -----

struct Case {
  std::string name;
  Form form;
  Geometry geometry;
  std::vector<int> opsets;  // model imports for custom forms, --opset for ai.onnx DeformConv
};

void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

class DeformConvCase : public ::testing::TestWithParam<Case> {};

TEST_P(DeformConvCase, MatchesOrtDeformConvAndNaiveReference) {
  const Case& c = GetParam();
  const Geometry& g = c.geometry;
  const bool uses_mask = g.mask && !g.ignore_mask;
  TempDir dir;
  // The reference: ORT's DeformConv-19 kernel; itself checked against the naive reference.
  const fs::path reference = write_model_text(model_text(g, Form::kOnnx, 19), dir / "reference.onnx");
  for (const std::string range : {"-4,4", "-1e30,1e30"}) {
    const OrtComparison ort_vs_naive =
        ort_compare_reference(reference, reference_module(), reference_params(g, uses_mask), compare_options(g, range));
    EXPECT_TRUE(ort_vs_naive.ok) << ort_vs_naive.output;
    report_numbers(fmt::format("{} ORT DeformConv-19 vs naive (offsets {})", c.name, range), ort_vs_naive);
  }

  for (int opset : c.opsets) {
    const bool lowering = c.form == Form::kOnnx;
    const fs::path original =
        write_model_text(model_text(g, c.form, lowering ? 19 : opset), dir / fmt::format("original-{}.onnx", opset));
    for (const Path path : paths_for(opset)) {
      const fs::path rewritten = rewrite(original, dir / fmt::format("rewritten-{}-{}.onnx", opset, path_name(path)),
                                         lowering ? std::optional<int>(opset) : std::nullopt, path);
      for (const std::string range : {"-4,4", "-1e30,1e30"}) {
        const auto options = compare_options(g, range);
        const OrtComparison vs_ort = ort_compare(reference, rewritten, options);
        EXPECT_TRUE(vs_ort.ok) << "opset " << opset << ": " << vs_ort.output;
        const OrtComparison vs_naive = ort_compare_reference(rewritten, reference_module(), reference_params(g, uses_mask), options);
        EXPECT_TRUE(vs_naive.ok) << "opset " << opset << ": " << vs_naive.output;
        report_numbers(fmt::format("{} opset {} ({}), offsets {}: vs DeformConv-19", c.name, opset, path_name(path), range), vs_ort);
        report_numbers(fmt::format("{} opset {} ({}), offsets {}: vs naive", c.name, opset, path_name(path), range), vs_naive);
      }
    }
  }
}

Geometry plain() {  // no attributes: stride 1, no padding, dilation 1, one group
  Geometry g;
  g.channels = 3, g.height = 7, g.width = 8, g.out_channels = 4;
  return g;
}

Geometry every_attribute() {
  Geometry g;
  g.batch = 2, g.channels = 4, g.height = 9, g.width = 8, g.out_channels = 6;
  g.stride = {2, 1}, g.pads = {1, 2, 1, 2}, g.dilation = {1, 2};
  g.groups = 2, g.offset_groups = 2, g.mask = true, g.bias = true;
  return g;
}

Geometry symbolic() {  // batch, height and width symbolic
  Geometry g;
  g.batch = 0, g.symbolic_spatial = true, g.channels = 4, g.height = 6, g.width = 7, g.out_channels = 4;
  g.pads = {1, 1, 1, 1}, g.offset_groups = 2, g.mask = true;
  return g;
}

Geometry groups_bias_no_mask() {  // 2x3 kernel, three groups and offset groups, bias only
  Geometry g;
  g.channels = 6, g.height = 5, g.width = 7, g.out_channels = 3, g.kernel_h = 2, g.kernel_w = 3;
  g.stride = {1, 2}, g.pads = {0, 1, 0, 1}, g.groups = 3, g.offset_groups = 3, g.bias = true;
  return g;
}

Geometry dcn_v1() {  // mmcv DCN v1: no mask, no bias
  Geometry g;
  g.batch = 2, g.channels = 4, g.height = 8, g.width = 7, g.out_channels = 4;
  g.stride = {2, 2}, g.pads = {1, 1, 1, 1}, g.dilation = {2, 2}, g.groups = 2, g.offset_groups = 2;
  return g;
}

Geometry dcn_v1_wide_padding() {  // mmdeploy's doubled padding pairs with a 3x5 kernel
  Geometry g;
  g.channels = 2, g.height = 5, g.width = 7, g.out_channels = 2, g.kernel_h = 3, g.kernel_w = 5;
  g.pads = {1, 2, 1, 2};
  return g;
}

Geometry dcn_v2_without_bias() {
  Geometry g = every_attribute();
  g.bias = false;
  return g;
}

Geometry mask_ignored() {  // use_mask = 0: the mask input is there but not applied
  Geometry g = every_attribute();
  g.ignore_mask = true;
  return g;
}

Geometry asymmetric_pads() {  // ONNX pads [top, left, bottom, right], not expressible by torchvision
  Geometry g;
  g.channels = 2, g.height = 6, g.width = 5, g.out_channels = 3, g.kernel_h = 3, g.kernel_w = 2;
  g.stride = {2, 1}, g.pads = {1, 0, 2, 1}, g.offset_groups = 2, g.mask = true, g.bias = true;
  return g;
}

Geometry large_image() {  // sampling positions far from the origin: GridSample's normalized grid keeps precision
  Geometry g;
  g.channels = 4, g.height = 40, g.width = 56, g.out_channels = 4, g.pads = {1, 1, 1, 1}, g.offset_groups = 2, g.bias = true;
  return g;
}

Geometry typical() {  // a DCN v2 layer of a detection backbone, scaled down
  Geometry g;
  g.channels = 16, g.height = 12, g.width = 12, g.out_channels = 16, g.pads = {1, 1, 1, 1}, g.mask = true, g.bias = true;
  return g;
}

const std::vector<int> kCustomOpsets{19, 17, 16, 13, 11};
const std::vector<int> kLoweredOpsets{18, 16, 15, 11};

INSTANTIATE_TEST_SUITE_P(
    Forms, DeformConvCase,
    ::testing::Values(Case{"torchvision_3_inputs", Form::kTorchvision3, plain(), kCustomOpsets},
                      Case{"torchvision_every_attribute", Form::kTorchvision5, every_attribute(), kCustomOpsets},
                      Case{"torchvision_symbolic_groups_from_shapes", Form::kTorchvisionShapes, symbolic(), {19, 17, 13}},
                      Case{"torchvision_bias_without_mask", Form::kTorchvision5, groups_bias_no_mask(), {19, 17, 13}},
                      Case{"mmcv_dcn_v1", Form::kMmcv, dcn_v1(), {19, 17, 13}},
                      Case{"mmcv_dcn_v2", Form::kMmcv, every_attribute(), {19, 17, 13}},
                      Case{"mmcv_dcn_v2_symbolic", Form::kMmcv, symbolic(), {19, 17, 13}},
                      Case{"mmdeploy_dcn_v1_padding_pairs", Form::kMmdeploy, dcn_v1_wide_padding(), {19, 17, 13}},
                      Case{"torchvision_use_mask_0", Form::kTorchvision5, mask_ignored(), {19, 17, 13}},
                      Case{"mmdeploy_dcn_v2_without_bias", Form::kMmdeploy, dcn_v2_without_bias(), {19, 16, 11}},
                      Case{"onnx_asymmetric_pads", Form::kOnnx, asymmetric_pads(), kLoweredOpsets},
                      Case{"onnx_every_attribute", Form::kOnnx, every_attribute(), {18, 15}},
                      Case{"onnx_symbolic", Form::kOnnx, symbolic(), {18, 15}},
                      Case{"onnx_typical_3x3", Form::kOnnx, typical(), {18, 15}},
                      Case{"onnx_large_image", Form::kOnnx, large_image(), {18, 15}}),
    [](const auto& info) { return info.param.name; });


// ---- The ONNX backend cases of DeformConv (onnx/backend/test/case/node/deformconv.py) --------

// A generator case: fixed inputs (as initializers) and the expected output it lists.
struct BackendCase {
  std::string name;
  std::string attributes;
  std::vector<int64_t> x_dims, w_dims, offset_dims;
  std::vector<double> x;
  std::map<int64_t, double> offsets;  // flat index -> value; the rest 0
  std::vector<double> mask;           // empty: no mask input (then also no bias)
  std::vector<int64_t> y_dims;
  std::vector<double> y;
};

std::string tensor_literal(const std::vector<int64_t>& dims, const std::vector<double>& values) {
  return fmt::format("float[{}] {{{}}}", fmt::join(dims, ", "), fmt::join(values, ", "));
}

std::string initializer(const std::string& name, const std::vector<int64_t>& dims, const std::vector<double>& values) {
  return fmt::format("float[{}] {} = {{{}}}", fmt::join(dims, ", "), name, fmt::join(values, ", "));
}

int64_t elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::vector<double> arange(int64_t from, int64_t to, int64_t step = 1) {
  std::vector<double> values;
  for (int64_t v = from; step > 0 ? v < to : v > to; v += step) values.push_back(static_cast<double>(v));
  return values;
}

std::vector<BackendCase> backend_cases() {
  // flat index of (channel c, row h, column w) in [1, C, height, width]
  auto at = [](int64_t height, int64_t width, int64_t c, int64_t h, int64_t w) { return (c * height + h) * width + w; };
  std::vector<double> two_images = arange(0, 9);
  for (double v : arange(8, -1, -1)) two_images.push_back(v);
  std::vector<double> mask(16, 1.0);
  mask[at(2, 2, 2, 1, 1)] = 0.2;  // [0, 2, 1, 1]
  return {
      {"basic_deform_conv_with_padding", "kernel_shape = [2, 2], pads = [1, 1, 1, 1]", {1, 1, 3, 3}, {1, 1, 2, 2}, {1, 8, 4, 4},
       arange(0, 9), {{at(4, 4, 0, 0, 0), 0.5}, {at(4, 4, 5, 1, 2), -0.1}}, {}, {1, 1, 4, 4},
       {0.0, 1.0, 3.0, 2.0, 3.0, 8.0, 11.9, 7.0, 9.0, 20.0, 24.0, 13.0, 6.0, 13.0, 15.0, 8.0}},
      {"basic_deform_conv_without_padding", "kernel_shape = [2, 2], pads = [0, 0, 0, 0]", {1, 1, 3, 3}, {1, 1, 2, 2}, {1, 8, 2, 2},
       arange(0, 9), {{at(2, 2, 0, 0, 0), 0.5}, {at(2, 2, 5, 0, 1), -0.1}}, {}, {1, 1, 2, 2}, {9.5, 11.9, 20.0, 24.0}},
      {"deform_conv_with_mask_bias", "kernel_shape = [2, 2], pads = [0, 0, 0, 0]", {1, 1, 3, 3}, {1, 1, 2, 2}, {1, 8, 2, 2},
       arange(0, 9), {{at(2, 2, 0, 0, 0), 0.5}, {at(2, 2, 5, 0, 1), -0.1}}, mask, {1, 1, 2, 2}, {10.5, 12.9, 21.0, 19.4}},
      {"deform_conv_with_multiple_offset_groups", "kernel_shape = [2, 2], pads = [0, 0, 0, 0], offset_group = 2", {1, 2, 3, 3},
       {1, 2, 2, 2}, {1, 16, 2, 2}, two_images, {{at(2, 2, 0, 0, 0), 0.5}, {at(2, 2, 13, 0, 1), -0.1}}, {}, {1, 1, 2, 2},
       {33.5, 32.1, 32.0, 32.0}},
  };
}

void PrintTo(const BackendCase& c, std::ostream* out) { *out << c.name; }

class DeformConvBackendCase : public ::testing::TestWithParam<BackendCase> {};

TEST_P(DeformConvBackendCase, LoweredModelsReproduceTheGeneratorsOutputs) {
  const BackendCase& c = GetParam();
  std::vector<double> offset(static_cast<size_t>(elements(c.offset_dims)), 0.0);
  for (const auto& [index, value] : c.offsets) offset[static_cast<size_t>(index)] = value;
  std::vector<std::string> initializers{initializer("X", c.x_dims, c.x),
                                        initializer("W", c.w_dims, std::vector<double>(static_cast<size_t>(elements(c.w_dims)), 1.0)),
                                        initializer("offset", c.offset_dims, offset)};
  std::string node_inputs = "X, W, offset";
  if (!c.mask.empty()) {
    initializers.push_back(initializer("B", {1}, {1.0}));
    initializers.push_back(initializer("mask", {1, static_cast<int64_t>(c.mask.size()) / 4, 2, 2}, c.mask));
    node_inputs += ", B, mask";
  }
  const std::string y_type = fmt::format("float[{}] y", fmt::join(c.y_dims, ", "));
  TempDir dir;
  const fs::path model = write_model_text(
      fmt::format("<ir_version: 9, opset_import: [\"\": 19]>\ng () => ({}) <{}> {{\n  y = DeformConv <{}> ({})\n}}\n", y_type,
                  fmt::join(initializers, ", "), c.attributes, node_inputs),
      dir / "model.onnx");
  const fs::path expected = write_model_text(
      fmt::format("<ir_version: 9, opset_import: [\"\": 19]>\ng () => ({}) {{\n  y = Constant <value = {}> ()\n}}\n", y_type,
                  tensor_literal(c.y_dims, c.y)),
      dir / "expected.onnx");
  EXPECT_TRUE(ort_compare(expected, model).ok) << "ORT's DeformConv-19 itself";
  for (int opset : {18, 16, 15, 11}) {
    for (const Path path : paths_for(opset)) {
      const fs::path lowered = rewrite(model, dir / fmt::format("lowered-{}-{}.onnx", opset, path_name(path)), opset, path);
      const OrtComparison comparison = ort_compare(expected, lowered, {"--trials", "1"});
      EXPECT_TRUE(comparison.ok) << "--opset " << opset << ": " << comparison.output;
      report_numbers(fmt::format("backend {} --opset {} ({}) vs generator", c.name, opset, path_name(path)), comparison);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Generator, DeformConvBackendCase, ::testing::ValuesIn(backend_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- testdata/: models as the exporters write them ------------------------------------------

struct SeedModel {
  std::string name;                                        // testdata/NAME.onnxtxt
  std::string domain;                                      // the exporter's domain
  std::pair<std::string, std::string> node;                // the deformable convolution -> DeformConv-19
  std::vector<std::pair<std::string, std::string>> at_19;  // what else an ai.onnx import of 19 changes
  std::vector<std::string> dims;                           // compare.js --dim values
};

// `text` with each edit's `from` (any run of spaces in it matching any whitespace) replaced.
std::string replaced(std::string text, const std::vector<std::pair<std::string, std::string>>& edits) {
  for (const auto& [from, to] : edits) {
    std::string pattern;
    for (char c : from) {
      if (c == ' ' || c == '\n') {
        if (!pattern.ends_with("\\s+")) pattern += "\\s+";
      } else {
        if (std::string_view("[](){}.*+?^$|\\").find(c) != std::string_view::npos) pattern += '\\';
        pattern += c;
      }
    }
    std::smatch found;
    if (!std::regex_search(text, found, std::regex(pattern))) throw std::runtime_error("test edit not found: " + from);
    text.replace(static_cast<size_t>(found.position(0)), static_cast<size_t>(found.length(0)), to);
  }
  return text;
}

void PrintTo(const SeedModel& seed, std::ostream* out) { *out << seed.name; }

class DeformConvSeedModel : public ::testing::TestWithParam<SeedModel> {};

TEST_P(DeformConvSeedModel, EveryPathMatchesDeformConv19) {
  const SeedModel& seed = GetParam();
  const std::string text = read_file(family_file("deform-conv", "testdata") / (seed.name + ".onnxtxt"));
  const fs::path original = family_file("deform-conv", "testdata") / (seed.name + ".onnx");
  ASSERT_EQ(read_file(original), serialize(parse_model_text(text))) << "regenerate rules/deform-conv/testdata/" << seed.name << ".onnx with text-to-onnx";
  const int own = static_cast<int>(opset_import(read_model(original), ""));
  const std::string imports = fmt::format("\"\": {}, \"{}\": 1", own, seed.domain);
  auto with_import = [&](int opset) {
    auto edits = seed.at_19;
    edits.insert(edits.begin(), {imports, fmt::format("\"\": {}, \"{}\": 1", opset, seed.domain)});
    return replaced(text, edits);
  };
  TempDir dir;
  auto reference_edits = seed.at_19;
  reference_edits.insert(reference_edits.begin(), {{imports, "\"\": 19"}, seed.node});
  const fs::path reference = write_model_text(replaced(text, reference_edits), dir / "reference.onnx");

  std::vector<std::pair<fs::path, std::string>> rewritten;  // model, how
  rewritten.emplace_back(rewrite(original, dir / "own.onnx", std::nullopt, path_for(own)), fmt::format("opset {}", own));
  if (own > 11) rewritten.emplace_back(rewrite(original, dir / "opset11.onnx", 11, Path::kGather), "--opset 11");
  if (own < 16 && seed.at_19.empty()) {  // the same network at an opset with GridSample
    const fs::path raised = write_model_text(with_import(17), dir / "import17.onnx");
    rewritten.emplace_back(rewrite(raised, dir / "grid.onnx", std::nullopt, Path::kGridSample), "import 17");
  }
  const fs::path raised = write_model_text(with_import(19), dir / "import19.onnx");
  rewritten.emplace_back(rewrite(raised, dir / "remapped.onnx", std::nullopt, Path::kDeformConv), "import 19");

  std::vector<std::string> options{"--trials", "2"};
  for (const auto& dim : seed.dims) options.insert(options.end(), {"--dim", dim});
  for (const auto& [model, how] : rewritten) {
    const OrtComparison comparison = ort_compare(reference, model, options);
    EXPECT_TRUE(comparison.ok) << how << ": " << comparison.output;
    report_numbers(fmt::format("testdata {} {} vs DeformConv-19", seed.name, how), comparison);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Testdata, DeformConvSeedModel,
    ::testing::Values(
        SeedModel{"deform-conv2d-torchvision-3input", "custom",
                  {"custom.deform_conv2d (input, conv2_weight, offset)", "DeformConv (input, conv2_weight, offset)"}, {}, {}},
        SeedModel{"deform-conv2d-torchvision-5input", "custom",
                  {"custom.deform_conv2d <stride_h = 2, stride_w = 2, pad_h = 1, pad_w = 2, dilation_h = 1, dilation_w = 2,\n"
                   "                               groups = 2, offset_groups = 2, use_mask = 1> (input, weight, offset, mask, bias)",
                   "DeformConv <strides = [2, 2], pads = [1, 2, 1, 2], dilations = [1, 2], group = 2, offset_group = 2> "
                   "(input, weight, offset, bias, mask)"},
                  {},
                  {"batch=2", "height=9", "width=7"}},
        SeedModel{"mmcv-deform-conv2d", "mmcv",
                  {"mmcv.MMCVDeformConv2d <stride = [1, 1], padding = [1, 1], dilation = [1, 1], groups = 1, deform_groups = 1,\n"
                   "                                bias = 0, im2col_step = 32> (input, offset, weight)",
                   "DeformConv <pads = [1, 1, 1, 1]> (input, weight, offset)"},
                  {},
                  {}},
        SeedModel{"mmcv-modulated-deform-conv2d", "mmcv",
                  {"mmcv.MMCVModulatedDeformConv2d <stride = [1, 1], padding = [1, 1], dilation = [1, 1], groups = 1,\n"
                   "                                         deform_groups = 1> (input, offset, mask, weight, bias)",
                   "DeformConv <pads = [1, 1, 1, 1]> (input, weight, offset, bias, mask)"},
                  {{"Split <axis = 1, split = [9, 9, 9]>", "Split <axis = 1, num_outputs = 3>"}},
                  {}},
        SeedModel{"mmdeploy-deform-conv2d", "mmdeploy",
                  {"mmdeploy.MMCVDeformConv2d <stride = [1, 1], padding = [1, 1, 2, 2], dilation = [1, 1], groups = 1,\n"
                   "                                    deform_groups = 1> (input, offset, weight)",
                   "DeformConv <pads = [1, 2, 1, 2]> (input, weight, offset)"},
                  {},
                  {}}),
    [](const auto& info) {
      std::string name = info.param.name;
      for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

// ---- What the rules decline, and why -------------------------------------------------------

struct Explained {
  std::multiset<std::string> ops;  // after the rewrite
  std::string explanation;         // --explain for the deformable convolution
};

Explained rewrite_explained(const std::string& text, const std::string& op, std::optional<int> opset = std::nullopt) {
  RewriteOptions options;
  options.max_opset = opset;
  options.explain = op;
  const Rewritten rewritten = rewrite_text(text, builtin_rules(), options);
  Explained result{{}, rewritten.explain};
  for (const auto& node : rewritten.model.graph().node()) {
    result.ops.insert((node.domain().empty() ? "" : node.domain() + ".") + node.op_type());
  }
  return result;
}

std::string with_node(const std::string& opsets, const std::string& inputs, const std::string& node) {
  return fmt::format("<ir_version: 8, opset_import: [{}]>\ndcn ({}) => (float[1, 2, 4, 4] y) {{\n  {}\n}}\n", opsets, inputs, node);
}

const char* kInputs = "float[1, 2, 6, 6] input, float[2, 2, 3, 3] weight, float[1, 18, 4, 4] offset, float[1, 9, 4, 4] mask";

TEST(DeformConvDeclines, UnknownKernelSizeLeavesOnlyDeformConv) {
  const std::string inputs = "float[1, 2, 6, 6] input, float[M, C, KH, KW] weight, float[1, 18, 4, 4] offset";
  const std::string text = with_node("\"\": 17, \"custom\": 1", inputs, "y = custom.deform_conv2d (input, weight, offset)");
  // Capped below 19, the decompositions decline and the op stays.
  for (int opset : {17, 13}) {
    const Explained result = rewrite_explained(text, "deform_conv2d", opset);
    EXPECT_EQ(result.ops, std::multiset<std::string>{"custom.deform_conv2d"}) << opset;
    EXPECT_NE(result.explanation.find("the kernel size is unknown (the weight has no static shape)"), std::string::npos)
        << result.explanation;
  }
  // Uncapped, the model's import is raised to 19, as no other rule fits: DeformConv reads the
  // kernel size from the weight at run time.
  EXPECT_EQ(rewrite_explained(text, "deform_conv2d").ops, std::multiset<std::string>{"DeformConv"});
}

TEST(DeformConvDeclines, UseMaskWithoutMask) {
  const Explained result = rewrite_explained(
      with_node("\"\": 19, \"custom\": 1", kInputs, "y = custom.deform_conv2d <use_mask = 1> (input, weight, offset)"), "deform_conv2d");
  EXPECT_EQ(result.ops.count("custom.deform_conv2d"), 1u);
  EXPECT_NE(result.explanation.find("use_mask = 1, but the mask input is absent"), std::string::npos) << result.explanation;
}

TEST(DeformConvDeclines, InconsistentShapes) {
  const Explained offsets = rewrite_explained(
      with_node("\"\": 17, \"custom\": 1", "float[1, 2, 6, 6] input, float[2, 2, 3, 3] weight, float[1, 16, 4, 4] offset",
                "y = custom.deform_conv2d <offset_groups = 1> (input, weight, offset)"),
      "deform_conv2d");
  EXPECT_EQ(offsets.ops.count("custom.deform_conv2d"), 1u);
  EXPECT_NE(offsets.explanation.find("offset has 16 channels, 1 offset groups of a 3x3 kernel need 18"), std::string::npos)
      << offsets.explanation;

  const Explained output = rewrite_explained(
      with_node("\"\": 19, \"custom\": 1", "float[1, 2, 6, 6] input, float[2, 2, 3, 3] weight, float[1, 18, 3, 4] offset",
                "y = custom.deform_conv2d (input, weight, offset)"),
      "deform_conv2d");
  EXPECT_EQ(output.ops.count("custom.deform_conv2d"), 1u);
  EXPECT_NE(output.explanation.find("offset is 3 along height, the output is 4"), std::string::npos) << output.explanation;
}

TEST(DeformConvDeclines, MmcvBiasFlagAndAmbiguousPadding) {
  const Explained biased = rewrite_explained(
      with_node("\"\": 19, \"mmcv\": 1", kInputs,
                "y = mmcv.MMCVDeformConv2d <stride = [1, 1], padding = [0, 0], dilation = [1, 1], groups = 1, deform_groups = 1, "
                "bias = 1> (input, offset, weight)"),
      "MMCVDeformConv2d");
  EXPECT_EQ(biased.ops.count("mmcv.MMCVDeformConv2d"), 1u);
  EXPECT_NE(biased.explanation.find("has_bias"), std::string::npos) << biased.explanation;

  // [1, 0, 1, 0] could be ONNX-style [top, left, bottom, right] or mmdeploy's [h, h, w, w]: not guessed.
  const Explained ambiguous = rewrite_explained(
      with_node("\"\": 19, \"mmdeploy\": 1", kInputs,
                "y = mmdeploy.MMCVDeformConv2d <stride = [1, 1], padding = [1, 0, 1, 0], dilation = [1, 1], groups = 1, "
                "deform_groups = 1> (input, offset, weight)"),
      "MMCVDeformConv2d");
  EXPECT_EQ(ambiguous.ops.count("mmdeploy.MMCVDeformConv2d"), 1u);
  EXPECT_NE(ambiguous.explanation.find("attribute padding = [1, 0, 1, 0] does not give one value per spatial axis"),
            std::string::npos)
      << ambiguous.explanation;
}

// A padding no image has (a fuzzed model once asked for 4 GiB of tap positions) is declined with
// its reason; a large but possible one has its tap positions computed at run time, not written out.
TEST(DeformConvDeclines, SizesNoImageHasAndLargePaddings) {
  const auto node = [](int64_t pad) {
    return fmt::format("y = custom.deform_conv2d <stride_h = 1, stride_w = 1, pad_h = {0}, pad_w = {0}> (input, weight, offset)", pad);
  };
  const Explained absurd = rewrite_explained(with_node("\"\": 17, \"custom\": 1", "float[1, 2, 6, 6] input, float[2, 2, 3, 3] weight, float[1, 18, N, M] offset",
                                                       node(668966911)),
                                             "deform_conv2d");
  EXPECT_EQ(absurd.ops.count("custom.deform_conv2d"), 1u);
  EXPECT_NE(absurd.explanation.find("is 668966911, above 16777216"), std::string::npos) << absurd.explanation;

  RewriteOptions options;
  const Rewritten large = rewrite_text(with_node("\"\": 17, \"custom\": 1", "float[1, 2, 6, 6] input, float[2, 2, 3, 3] weight, float[1, 18, N, M] offset",
                                                 node(20000)),
                                       builtin_rules(), options);
  const auto counts = count_ops(large.model);
  EXPECT_EQ(op_count(counts, {"custom", "deform_conv2d"}), 0);
  EXPECT_GE(op_count(counts, {"", "Range"}), 1);  // the 40004 x 3 positions of each axis, computed
  EXPECT_LT(large.bytes.size(), 64u * 1024);
}

TEST(DeformConvDeclines, DeformConvIsLoweredOnlyBelowOpset19AndFrom11) {
  const std::string text = with_node("\"\": 19", kInputs, "y = DeformConv (input, weight, offset, , mask)");
  EXPECT_EQ(rewrite_explained(text, "DeformConv").ops, std::multiset<std::string>{"DeformConv"});
  EXPECT_EQ(rewrite_explained(text, "DeformConv", 19).ops, std::multiset<std::string>{"DeformConv"});
  EXPECT_EQ(rewrite_explained(text, "DeformConv", 10).ops, std::multiset<std::string>{"DeformConv"});
  EXPECT_EQ(rewrite_explained(text, "DeformConv", 18).ops.count("Floor"), 2u);
  EXPECT_EQ(rewrite_explained(text, "DeformConv", 11).ops.count("Floor"), 2u);
}

// ---- Size: a few dozen nodes, whatever the kernel size --------------------------------------

TEST(DeformConvSize, DecompositionsOfATypical3x3Layer) {
  // A DCN v2 layer: 64 channels, 3x3, padding 1, mask and bias; static, and with symbolic N, H, W.
  for (bool symbolic_shapes : {false, true}) {
    Geometry g;
    g.channels = 64, g.height = 32, g.width = 32, g.out_channels = 64, g.pads = {1, 1, 1, 1}, g.mask = true, g.bias = true;
    g.batch = symbolic_shapes ? 0 : 1;
    g.symbolic_spatial = symbolic_shapes;
    for (const Path path : {Path::kGridSample, Path::kGather}) {
      RewriteOptions options;
      if (path == Path::kGridSample) options.skip = {"torchvision-deform-conv2d-gather"};
      const Rewritten rewritten = rewrite_text(model_text(g, Form::kTorchvision5, 17), builtin_rules(), options);
      std::multiset<std::string> ops;
      for (const auto& node : rewritten.model.graph().node()) ops.insert(node.op_type());
      std::cout << fmt::format("[deform-conv] nodes for a 3x3 DCN v2 layer, {} shapes, {}: {}\n",
                               symbolic_shapes ? "symbolic" : "static", path_name(path), ops.size());
      EXPECT_EQ(ops.count(path == Path::kGridSample ? "GridSample" : "Floor"), path == Path::kGridSample ? 1u : 2u);
      EXPECT_LE(ops.size(), symbolic_shapes ? 75u : 45u);
    }
  }
}

// ---- Precision on a realistic feature map ----------------------------------------------------

// GridSample reads positions as normalized coordinates: in float32 that adds up to about 8e-8 * W
// pixels to each position, about three times the rounding of a float32 DeformConv kernel's own
// positions. On a 96x96x64 layer the GridSample path stays within 1e-3 of ORT's DeformConv-19
// (measured 2.4e-4), the Gather path within 1e-4 (measured 3.8e-6). rules/deform-conv/README.md.
TEST(DeformConvPrecision, LargeFeatureMap) {
  Geometry g;
  g.channels = 64, g.height = 96, g.width = 96, g.out_channels = 64, g.pads = {1, 1, 1, 1}, g.mask = true, g.bias = true;
  TempDir dir;
  const fs::path model = write_model_text(model_text(g, Form::kOnnx, 19), dir / "model.onnx");
  for (const auto& [path, tolerance] : {std::pair{Path::kGridSample, "1e-3"}, {Path::kGather, "1e-4"}}) {
    const fs::path lowered = rewrite(model, dir / fmt::format("lowered-{}.onnx", path_name(path)), 18, path);
    const OrtComparison comparison =
        ort_compare(model, lowered, {"--range", "offset=-4,4", "--range", "mask=0,1", "--trials", "1", "--atol", tolerance,
                                     "--rtol", "1e-4"});
    EXPECT_TRUE(comparison.ok) << comparison.output;
    report_numbers(fmt::format("96x96x64 layer --opset 18 ({}) vs DeformConv-19", path_name(path)), comparison);
  }
}

// ---- Infinite offsets, and GridSample-20's mode name ------------------------------------------

// Offsets scaled to ±inf: every tap is outside, the output is the bias (no NaN from inf·0).
TEST(DeformConvEdges, InfiniteOffsetsSampleZeros) {
  Geometry g = every_attribute();
  std::string text = model_text(g, Form::kOnnx, 19);
  const std::string node_at = "  y = DeformConv";
  text.insert(text.find(node_at), "  huge = Constant <value = float {1e30}> ()\n  scaled = Mul (offset, huge)\n"
                                  "  infinite = Mul (scaled, huge)\n");
  text.replace(text.find("(input, weight, offset,"), 23, "(input, weight, infinite,");
  TempDir dir;
  const fs::path model = write_model_text(text, dir / "model.onnx");
  for (const Path path : {Path::kGridSample, Path::kGather}) {
    const fs::path lowered = rewrite(model, dir / fmt::format("lowered-{}.onnx", path_name(path)), 18, path);
    const OrtComparison comparison = ort_compare(model, lowered, {"--range", "mask=0,1", "--trials", "1"});
    EXPECT_TRUE(comparison.ok) << comparison.output;
    EXPECT_EQ(comparison.max_abs, 0.0);
    report_numbers(fmt::format("infinite offsets --opset 18 ({}) vs DeformConv-19", path_name(path)), comparison);
  }
}

// At opset 20 and later GridSample's bilinear mode is spelled "linear"; the GridSample form is
// used there when the DeformConv and Gather rules are skipped.
TEST(DeformConvEdges, GridSample20IsLinear) {
  const Geometry g = every_attribute();
  TempDir dir;
  const fs::path reference = write_model_text(model_text(g, Form::kOnnx, 19), dir / "reference.onnx");
  const fs::path model = write_model_text(model_text(g, Form::kTorchvision5, 21), dir / "model.onnx");
  const fs::path rewritten = dir / "rewritten.onnx";
  const CommandResult result = run_cli({"rewrite", model.string(), "-o", rewritten.string(), "--skip",
                                        "torchvision-deform-conv2d-to-deform-conv", "--skip", "torchvision-deform-conv2d-gather"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_EQ(run_cli({"check", rewritten.string()}).exit_code, 0);
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(read_file(rewritten)));
  bool linear = false;
  for (const auto& node : proto.graph().node()) {
    for (const auto& attribute : node.attribute()) linear |= node.op_type() == "GridSample" && attribute.s() == "linear";
  }
  EXPECT_TRUE(linear) << result.out;
  const OrtComparison comparison = ort_compare(reference, rewritten, compare_options(g, "-4,4"));
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers("GridSample-20 (opset 21, DeformConv rule skipped) vs DeformConv-19", comparison);
}

}  // namespace
}  // namespace onnx_rewrite
