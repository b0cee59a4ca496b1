// Group normalization (rules/group-norm/group-norm.rules, rules/group-norm/group_norm.cc): the mygroupnorm
// custom op and ai.onnx GroupNormalization-18/-21, rewritten by the CLI, checked loadable for
// their target and run in ONNX Runtime against torch semantics (rules/group-norm/group_norm.js)
// and against ONNX Runtime's own GroupNormalization kernels.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <random>

#include "onnx_rewrite/builder.h"
#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/tensor.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

constexpr double kTolerance = 1e-4;

fs::path reference_module() { return family_file("group-norm", "group_norm.js"); }

// Weights for test models, rounded so that the text and the JSON given to the reference agree.
std::vector<double> weights(size_t count, double low, double high, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<double> uniform(low, high);
  std::vector<double> values;
  for (size_t i = 0; i < count; ++i) values.push_back(std::round(uniform(generator) * 1e4) / 1e4);
  return values;
}

std::string joined(const std::vector<double>& values) { return fmt::format("{}", fmt::join(values, ", ")); }
std::string joined(const std::vector<std::string>& values) { return fmt::format("{}", fmt::join(values, ", ")); }

std::vector<std::string> dim_arguments(const std::map<std::string, int>& dims) {
  std::vector<std::string> arguments;
  for (const auto& [name, value] : dims) {
    arguments.push_back("--dim");
    arguments.push_back(fmt::format("{}={}", name, value));
  }
  return arguments;
}

// ---- mygroupnorm --------------------------------------------------------------------------

enum class GroupsGiven { kFloatInitializer, kIntInitializer, kFloatConstant, kIntConstant, kGraphInput };

struct MyGroupNormCase {
  std::string name;
  std::string domain = "mydomain";
  int opset = 17;
  std::vector<std::string> dims;      // x's dims, symbolic ones by name
  std::map<std::string, int> values;  // of the symbolic dims, for the run
  int channels = 0;
  int groups = 0;
  std::optional<double> epsilon;      // absent: the 1e-5 default
  GroupsGiven given = GroupsGiven::kFloatInitializer;
  bool x_typed = true;                // false: x comes from a node without value_info
  std::string target = "onnx";
  std::optional<int> max_opset;
  std::string expected_op;            // what the rewrite must produce
  std::string type = "float";         // of x, scale, bias and y
  std::string x_range;                // "lo,hi" for x; empty: [-1, 1)
};

std::ostream& operator<<(std::ostream& out, const MyGroupNormCase& c) { return out << c.name; }

// A model as torch.onnx.export writes the tutorial op: y = DOMAIN.mygroupnorm (x, num_groups, scale, bias).
std::string mygroupnorm_model(const MyGroupNormCase& c, const std::vector<double>& scale, const std::vector<double>& bias) {
  const std::string shape = joined(c.dims);
  std::string inputs = fmt::format("{}[{}] input", c.type, shape);
  std::string initializers = fmt::format("{0}[{1}] scale = {{{2}}}, {0}[{1}] bias = {{{3}}}", c.type, c.channels,
                                         joined(scale), joined(bias));
  std::string constants;
  switch (c.given) {
    case GroupsGiven::kFloatInitializer: initializers += fmt::format(", float[1] num_groups = {{{}.0}}", c.groups); break;
    case GroupsGiven::kIntInitializer: initializers += fmt::format(", int64[1] num_groups = {{{}}}", c.groups); break;
    case GroupsGiven::kFloatConstant:
      constants = fmt::format("  num_groups = Constant <value = float[1] {{{}.0}}> ()\n", c.groups);
      break;
    case GroupsGiven::kIntConstant: constants = fmt::format("  num_groups = Constant <value = int64[1] {{{}}}> ()\n", c.groups); break;
    case GroupsGiven::kGraphInput: inputs += ", float[1] num_groups"; break;
  }
  const std::string x = c.x_typed ? "input" : "x";
  const std::string untyped = c.x_typed ? "" : "  x = Identity (input)\n";
  const std::string epsilon = c.epsilon ? fmt::format(" <epsilon = {}>", *c.epsilon) : "";
  return fmt::format(
      "<ir_version: {}, opset_import: [\"\": {}, \"{}\": 1]>\n"
      "g ({}) => ({}[{}] y) <{}> {{\n{}{}  y = {}.mygroupnorm{} ({}, num_groups, scale, bias)\n}}\n",
      ir_version_for(c.opset), c.opset, c.domain, inputs, c.type, shape, initializers, constants, untyped, c.domain, epsilon,
      x);
}

// The same computation with ONNX Runtime's own GroupNormalization-21 kernel (statistics of
// double in double, as torch takes them).
std::string group_normalization_21_model(const MyGroupNormCase& c, const std::vector<double>& scale,
                                         const std::vector<double>& bias) {
  const std::string shape = joined(c.dims);
  return fmt::format(
      "<ir_version: 10, opset_import: [\"\": 21]>\n"
      "g ({0}[{1}] input) => ({0}[{1}] y) <{0}[{2}] scale = {{{3}}}, {0}[{2}] bias = {{{4}}}> {{\n"
      "  y = GroupNormalization <epsilon = {5}, num_groups = {6}{7}> (input, scale, bias)\n}}\n",
      c.type, shape, c.channels, joined(scale), joined(bias), c.epsilon.value_or(1e-5), c.groups,
      c.type == "double" ? ", stash_type = 11" : "");
}

class MyGroupNorm : public ::testing::TestWithParam<MyGroupNormCase> {};

TEST_P(MyGroupNorm, ComputesTorchGroupNormInOnnxRuntime) {
  const MyGroupNormCase& c = GetParam();
  const auto scale = weights(static_cast<size_t>(c.channels), 0.5, 1.5, 7u + static_cast<unsigned>(c.channels));
  const auto bias = weights(static_cast<size_t>(c.channels), -0.5, 0.5, 11u + static_cast<unsigned>(c.channels));
  TempDir dir;
  const auto input = write_model_text(mygroupnorm_model(c, scale, bias), dir / "mygroupnorm.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "rewritten.onnx", c.target, c.max_opset);
  ASSERT_TRUE(rewritten);

  // What was meant to happen, and nothing else: the op is gone with its domain; the opset stays
  // (or is the --opset cap).
  EXPECT_FALSE(rewritten->ops.count({c.domain, "mygroupnorm"}));
  EXPECT_EQ(op_count(rewritten->ops, {"", c.expected_op}), 1) << c.expected_op;
  if (c.type == "double") {
    EXPECT_FALSE(rewritten->ops.count({"", "InstanceNormalization"}));
  }
  EXPECT_EQ(opset_import(rewritten->model, c.domain), 0);
  EXPECT_EQ(opset_import(rewritten->model, ""), c.max_opset.value_or(c.opset));

  std::vector<std::string> run = dim_arguments(c.values);
  if (!c.x_range.empty()) run.insert(run.end(), {"--range", "input=" + c.x_range});
  const std::string groups = c.given == GroupsGiven::kGraphInput ? "\"num_groups\"" : std::to_string(c.groups);
  if (c.given == GroupsGiven::kGraphInput) {
    run.push_back("--range");
    run.push_back(fmt::format("num_groups={},{}", c.groups, c.groups));
  }
  const std::string params = fmt::format(R"({{"x": "input", "output": "y", "numGroups": {}, "scale": [{}], "bias": [{}], "epsilon": {}}})",
                                         groups, joined(scale), joined(bias), c.epsilon.value_or(1e-5));
  const auto against_reference = ort_compare_reference(rewritten->output, reference_module(), params, run);
  EXPECT_TRUE(against_reference.ok) << against_reference.output;
  report_numbers(c.name + " vs torch reference", against_reference);

  if (c.given != GroupsGiven::kGraphInput) {
    const auto kernel = write_model_text(group_normalization_21_model(c, scale, bias), dir / "kernel.onnx");
    const auto against_kernel = ort_compare(kernel, rewritten->output, run);
    EXPECT_TRUE(against_kernel.ok) << against_kernel.output;
    report_numbers(c.name + " vs ORT GroupNormalization-21", against_kernel);
  }
}

std::vector<MyGroupNormCase> mygroupnorm_cases() {
  using G = GroupsGiven;
  const std::string decomposed = "InstanceNormalization";
  const std::string spelled_out = "Sqrt";  // double statistics in standard ops (one Sqrt)
  const std::string gn21 = "GroupNormalization";
  return {
      {"opset9_rank4_constant", "mydomain", 9, {"N", "6", "H", "W"}, {{"N", 2}, {"H", 5}, {"W", 7}}, 6, 3, 1e-3,
       G::kFloatConstant, true, "onnx", {}, decomposed, "float", ""},
      {"opset9_rank3_g1_pytorch_domain", "org.pytorch.mydomain", 9, {"2", "4", "5"}, {}, 4, 1, {}, G::kFloatInitializer,
       true, "ort", {}, decomposed, "float", ""},
      {"opset9_rank4_untyped", "mydomain", 9, {"N", "6", "H", "W"}, {{"N", 3}, {"H", 4}, {"W", 3}}, 6, 3, {},
       G::kFloatConstant, false, "onnx", {}, decomposed, "float", ""},
      {"opset13_rank5_g_eq_c_int", "mydomain", 13, {"N", "4", "3", "H", "2"}, {{"N", 2}, {"H", 3}}, 4, 4, 1e-5,
       G::kIntInitializer, true, "onnx", {}, decomposed, "float", ""},
      {"opset13_untyped_groups_input", "mydomain", 13, {"N", "8", "L"}, {{"N", 2}, {"L", 6}}, 8, 2, 1e-4, G::kGraphInput,
       false, "onnx", {}, decomposed, "float", ""},
      {"opset17_rank4_int_constant", "org.pytorch.mydomain", 17, {"1", "8", "4", "4"}, {}, 8, 2, {}, G::kIntConstant,
       true, "onnx", {}, decomposed, "float", ""},
      {"opset17_rank4_n3_ort", "mydomain", 17, {"3", "12", "2", "5"}, {}, 12, 4, 1e-4, G::kFloatInitializer, true, "ort",
       {}, decomposed, "float", ""},
      {"opset18_rank3_g_eq_c_groups_input", "mydomain", 18, {"N", "6", "L"}, {{"N", 2}, {"L", 9}}, 6, 6, 1e-3,
       G::kGraphInput, true, "onnx", {}, decomposed, "float", ""},
      {"opset18_rank5_g1", "mydomain", 18, {"2", "3", "2", "3", "4"}, {}, 3, 1, {}, G::kIntConstant, true, "onnx", {},
       decomposed, "float", ""},
      {"opset21_rank4", "mydomain", 21, {"N", "6", "H", "W"}, {{"N", 2}, {"H", 3}, {"W", 4}}, 6, 2, {},
       G::kFloatInitializer, true, "onnx", {}, gn21, "float", ""},
      {"opset21_rank5_g1_pytorch_domain", "org.pytorch.mydomain", 21, {"N", "4", "2", "3", "W"}, {{"N", 1}, {"W", 5}}, 4,
       1, 1e-3, G::kIntConstant, true, "ort", {}, gn21, "float", ""},
      {"opset21_rank3_g_eq_c", "mydomain", 21, {"2", "5", "L"}, {{"L", 7}}, 5, 5, 1e-5, G::kFloatConstant, true, "onnx",
       {}, gn21, "float", ""},
      {"opset21_groups_input_decomposed", "mydomain", 21, {"N", "6", "L"}, {{"N", 2}, {"L", 4}}, 6, 3, {},
       G::kGraphInput, true, "onnx", {}, decomposed, "float", ""},
      {"opset21_capped_to_17", "mydomain", 21, {"N", "6", "H", "W"}, {{"N", 2}, {"H", 3}, {"W", 3}}, 6, 2, 1e-3,
       G::kIntInitializer, true, "onnx", 17, decomposed, "float", ""},
      // double: torch takes the statistics in double. Inputs far from zero (|mean| >> std) fail
      // at 1e-4 when they are taken in float; ONNX Runtime has no double InstanceNormalization.
      {"double_opset21_far_from_zero", "mydomain", 21, {"2", "6", "5"}, {}, 6, 3, {}, G::kIntInitializer, true, "onnx",
       {}, gn21, "double", "1000,1001"},
      {"double_opset21_capped_to_17_ort", "mydomain", 21, {"2", "4", "3", "3"}, {}, 4, 2, 1e-5, G::kIntConstant, true,
       "ort", 17, spelled_out, "double", "1000,1001"},
      {"double_opset13_rank4_far_from_zero", "mydomain", 13, {"N", "6", "H", "W"}, {{"N", 2}, {"H", 3}, {"W", 4}}, 6, 2,
       1e-3, G::kFloatConstant, true, "ort", {}, spelled_out, "double", "1000,1001"},
      {"double_opset18_untyped_groups_input", "org.pytorch.mydomain", 18, {"N", "8", "L"}, {{"N", 3}, {"L", 5}}, 8, 4,
       {}, G::kGraphInput, false, "onnx", {}, spelled_out, "double", "-100,100"},
      {"double_opset9_rank3_g1", "mydomain", 9, {"2", "3", "7"}, {}, 3, 1, {}, G::kFloatInitializer, true, "onnx", {},
       spelled_out, "double", ""},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, MyGroupNorm, ::testing::ValuesIn(mygroupnorm_cases()),
                         [](const auto& info) { return info.param.name; });

// A check that the comparison can fail: the rewritten model against torch with another epsilon.
TEST(MyGroupNormSanity, ReferenceNoticesAWrongEpsilon) {
  MyGroupNormCase c;
  c.dims = {"2", "4", "6"};
  c.channels = 4;
  c.groups = 2;
  c.epsilon = 1e-3;
  const auto scale = weights(4, 0.5, 1.5, 1);
  const auto bias = weights(4, -0.5, 0.5, 2);
  TempDir dir;
  const auto input = write_model_text(mygroupnorm_model(c, scale, bias), dir / "in.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", "onnx", {});
  ASSERT_TRUE(rewritten);
  const std::string params = fmt::format(R"({{"x": "input", "numGroups": 2, "scale": [{}], "bias": [{}], "epsilon": 1e-5}})",
                                         joined(scale), joined(bias));
  const auto comparison = ort_compare_reference(rewritten->output, reference_module(), params, {"--float-range", "-0.1,0.1"});
  EXPECT_EQ(comparison.exit_code, 1) << comparison.output;
}

// What the decomposition can't do, it declines with a reason: the node stays, the check fails.
TEST(MyGroupNormSanity, DeclinesGroupCountsItCantDecompose) {
  TempDir dir;
  for (const auto& [groups, reason] : {std::pair{"4.0", "6 channels don't split into 4 groups"},
                                       std::pair{"2.5", "num_groups is 2.5, not a whole number"},
                                       std::pair{"1e30", "e+30, above 1048576"},
                                       std::pair{"2000000", "num_groups is 2000000, above 1048576"}}) {
    const auto input = write_model_text(fmt::format(R"(
      <ir_version: 8, opset_import: ["": 17, "mydomain": 1]>
      g (float[2, 6, 4] x) => (float[2, 6, 4] y) <float[1] num_groups = {{{}}}, float[6] scale = {{1, 1, 1, 1, 1, 1}},
                                                  float[6] bias = {{0, 0, 0, 0, 0, 0}}> {{
        y = mydomain.mygroupnorm (x, num_groups, scale, bias)
      }})", groups), dir / "in.onnx");
    const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--explain", "mygroupnorm"});
    EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
    EXPECT_NE(result.out.find(reason), std::string::npos) << result.out;
    EXPECT_NE(result.err.find("mydomain.mygroupnorm"), std::string::npos) << result.err;
  }
}

// ---- constant scale and bias come already reshaped (toolkit's reshaped()) ----------------------

TEST(MyGroupNormAffine, ConstantScaleAndBiasComeReshapedUnlessThatCopiesASharedWeight) {
  struct Case {
    int channels;
    int nodes;          // mygroupnorm nodes reading the same scale and bias
    bool graph_inputs;  // scale and bias are graph inputs, not constants
    int reshapes;       // each node keeps 2 (x into groups and back), plus 2 unless folded
  };
  for (const auto& c : {Case{32, 1, false, 2},    // read only by the node: folded, the original goes
                        Case{4, 2, false, 4},     // shared but 16 bytes: copied
                        Case{32, 2, false, 8},    // shared and 128 bytes: left to Reshape
                        Case{4, 1, true, 4}}) {   // not a constant
    auto filled = [&](int number) { return fmt::format("{}", fmt::join(std::vector<int>(static_cast<size_t>(c.channels), number), ", ")); };
    const std::string weights =
        c.graph_inputs ? "" : fmt::format(", float[{0}] scale = {{{1}}}, float[{0}] bias = {{{2}}}", c.channels, filled(2), filled(1));
    const std::string inputs = c.graph_inputs ? fmt::format(", float[{0}] scale, float[{0}] bias", c.channels) : "";
    std::string nodes, outputs;
    for (int i = 0; i < c.nodes; ++i) {
      nodes += fmt::format("  y{} = mydomain.mygroupnorm (x, num_groups, scale, bias)\n", i);
      outputs += fmt::format("{}float[2, {}, 3] y{}", i ? ", " : "", c.channels, i);
    }
    const auto rewritten = rewrite_text(fmt::format("<ir_version: 8, opset_import: [\"\": 17, \"mydomain\": 1]>\n"
                                                    "g (float[2, {}, 3] x{}) => ({}) <int64[1] num_groups = {{2}}{}> {{\n{}}}\n",
                                                    c.channels, inputs, outputs, weights, nodes),
                                        builtin_rules());
    const std::string name = fmt::format("{} channels, {} node(s){}", c.channels, c.nodes, c.graph_inputs ? ", graph inputs" : "");
    EXPECT_EQ(op_count(rewritten.result.after, {"", "Reshape"}), c.reshapes) << name;
    int per_channel = 0, originals = 0;
    for (const auto& initializer : rewritten.model.graph().initializer()) {
      if (initializer.dims_size() == 2 && initializer.dims(0) == c.channels && initializer.dims(1) == 1) ++per_channel;
      if (initializer.name() == "scale" || initializer.name() == "bias") ++originals;
    }
    const bool folded = c.reshapes == 2 * c.nodes;
    EXPECT_EQ(per_channel, folded ? 2 : 0) << name;  // a round makes equal constants once
    EXPECT_EQ(originals, c.graph_inputs || folded ? 0 : 2) << name;
    // A Reshape left in place takes the shape as the decomposition wrote it.
    const bool channel_shape = std::any_of(rewritten.model.graph().initializer().begin(), rewritten.model.graph().initializer().end(),
                                           [](const onnx::TensorProto& tensor) {
                                             const auto values = decode_tensor(tensor);
                                             return values && values->integers == std::vector<int64_t>{-1, 1};
                                           });
    EXPECT_EQ(channel_shape, !folded) << name;
  }
}

TEST(MyGroupNormAffine, AWeightThatIsAlsoAGraphInputIsNotCopied) {
  // Below IR 4 every initializer is also a graph input: it stays, so a reshaped copy would be a
  // second one (128 bytes each here).
  const auto rewritten = rewrite_text(R"(
    <ir_version: 3, opset_import: ["": 8, "mydomain": 1]>
    g (float[2, 32, 3] x, float[1] num_groups, float[32] scale, float[32] bias) => (float[2, 32, 3] y)
      <float[1] num_groups = {2}, float[32] scale = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
       float[32] bias = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}> {
      y = mydomain.mygroupnorm (x, num_groups, scale, bias)
    })",
                                      builtin_rules());
  EXPECT_EQ(op_count(rewritten.result.after, {"mydomain", "mygroupnorm"}), 0);
  EXPECT_EQ(op_count(rewritten.result.after, {"", "Reshape"}), 4);  // x into groups and back, scale, bias
}

TEST(MyGroupNormAffine, AScaleWhosePayloadDoesNotFitItsShapeStaysAReshape) {
  // A malformed initializer (8 bytes for 4 floats) is not copied into a new constant: the
  // Reshape reads it as it is, and the runtime says what is wrong with it.
  onnx::ModelProto model = parse_model_text(R"(
    <ir_version: 8, opset_import: ["": 17, "mydomain": 1]>
    g (float[2, 4, 3] x) => (float[2, 4, 3] y) <int64[1] num_groups = {2}, float[4] scale = {1, 1, 1, 1}, float[4] bias = {0, 0, 0, 0}> {
      y = mydomain.mygroupnorm (x, num_groups, scale, bias)
    })");
  for (auto& initializer : *model.mutable_graph()->mutable_initializer()) {
    if (initializer.name() != "scale") continue;
    initializer.clear_float_data();
    initializer.set_raw_data(std::string(8, '\0'));
  }
  const auto rewritten = rewrite_proto(model, builtin_rules());
  EXPECT_EQ(op_count(rewritten.result.after, {"", "Reshape"}), 3);  // x into groups and back, the scale
  EXPECT_EQ(op_count(rewritten.result.after, {"mydomain", "mygroupnorm"}), 0);
}

// ---- the README example: testdata/mygroupnorm-opset9 (Conv -> mygroupnorm -> Relu) --------

TEST(MyGroupNormTestdata, ModelIsGeneratedFromItsText) {
  TempDir dir;
  const auto generated = dir / "generated.onnx";
  const auto made = run_command({(build_dir() / "text-to-onnx").string(),
                                 (source_dir() / "testdata" / "mygroupnorm-opset9.onnxtxt").string(), generated.string()});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(read_file(generated), read_file(source_dir() / "testdata" / "mygroupnorm-opset9.onnx"))
      << "regenerate: build/text-to-onnx testdata/mygroupnorm-opset9.onnxtxt testdata/mygroupnorm-opset9.onnx";
}

// The same export with the custom op replaced by ONNX Runtime's GroupNormalization-21 kernel.
onnx::ModelProto with_group_normalization_21(onnx::ModelProto model) {
  model.set_ir_version(10);
  model.clear_opset_import();
  model.add_opset_import()->set_version(21);
  for (auto& node : *model.mutable_graph()->mutable_node()) {
    if (node.op_type() != "mygroupnorm") continue;
    node.clear_domain();
    node.set_op_type("GroupNormalization");
    node.add_attribute()->CopyFrom(attr("num_groups", int64_t{4}));
    node.mutable_input()->DeleteSubrange(1, 1);  // num_groups becomes the attribute
  }
  return model;
}

TEST(MyGroupNormTestdata, RewrittenExportMatchesOnnxRuntimeKernel) {
  const fs::path seed = source_dir() / "testdata" / "mygroupnorm-opset9.onnx";
  TempDir dir;
  const fs::path kernel = dir / "kernel.onnx";
  write_file(kernel, serialize(with_group_normalization_21(read_model(seed))));
  for (const std::string target : {"onnx", "ort"}) {
    const auto rewritten = rewrite_and_check(seed, dir / (target + ".onnx"), target, {});
    ASSERT_TRUE(rewritten);
    EXPECT_EQ(opset_import(rewritten->model, ""), 9);
    EXPECT_EQ(opset_import(rewritten->model, "mydomain"), 0);
    EXPECT_EQ(op_count(rewritten->ops, {"", "Conv"}), 1);
    EXPECT_EQ(op_count(rewritten->ops, {"", "Relu"}), 1);
    for (const char* batch : {"batch=1", "batch=3"}) {
      const auto comparison = ort_compare(kernel, rewritten->output, {"--dim", batch});
      EXPECT_TRUE(comparison.ok) << comparison.output;
      report_numbers(fmt::format("testdata/mygroupnorm-opset9 --target {} ({})", target, batch), comparison);
    }
  }
}

// ---- ai.onnx GroupNormalization-18: per-group scale and bias, deprecated ------------------

struct GroupNormalization18Case {
  std::string name;
  int opset;
  std::vector<std::string> dims;
  std::map<std::string, int> values;
  int groups;
  std::optional<double> epsilon;
  std::string target;
  std::string type = "float";  // of x, scale, bias and y
  std::string x_range;         // "lo,hi" for x; empty: [-1, 1)
};

std::ostream& operator<<(std::ostream& out, const GroupNormalization18Case& c) { return out << c.name; }

class GroupNormalization18 : public ::testing::TestWithParam<GroupNormalization18Case> {};

TEST_P(GroupNormalization18, DecomposedAsOnnxRuntimeComputesIt) {
  const auto& c = GetParam();
  const auto scale = weights(static_cast<size_t>(c.groups), 0.5, 1.5, 3);
  const auto bias = weights(static_cast<size_t>(c.groups), -0.5, 0.5, 4);
  const std::string shape = joined(c.dims);
  TempDir dir;
  const auto input = write_model_text(
      fmt::format("<ir_version: 8, opset_import: [\"\": {0}]>\n"
                  "g ({1}[{2}] x) => ({1}[{2}] y) <{1}[{3}] scale = {{{4}}}, {1}[{3}] bias = {{{5}}}> {{\n"
                  "  y = GroupNormalization <{6}num_groups = {3}> (x, scale, bias)\n}}\n",
                  c.opset, c.type, shape, c.groups, joined(scale), joined(bias),
                  c.epsilon ? fmt::format("epsilon = {}, ", *c.epsilon) : ""),
      dir / "gn18.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", c.target, {});
  ASSERT_TRUE(rewritten);
  EXPECT_FALSE(rewritten->ops.count({"", "GroupNormalization"}));
  // double: no InstanceNormalization (ONNX Runtime has no double kernel for it)
  EXPECT_EQ(op_count(rewritten->ops, {"", "InstanceNormalization"}), c.type == "double" ? 0 : 1);
  EXPECT_EQ(opset_import(rewritten->model, ""), c.opset);

  auto run = dim_arguments(c.values);
  if (!c.x_range.empty()) run.insert(run.end(), {"--range", "x=" + c.x_range});
  const std::string params = fmt::format(R"({{"numGroups": {}, "scale": [{}], "bias": [{}], "epsilon": {}, "perGroup": true}})",
                                         c.groups, joined(scale), joined(bias), c.epsilon.value_or(1e-5));
  const auto against_reference = ort_compare_reference(rewritten->output, reference_module(), params, run);
  EXPECT_TRUE(against_reference.ok) << against_reference.output;
  report_numbers(c.name + " vs per-group reference", against_reference);
  // ONNX Runtime still runs GroupNormalization-18 itself.
  const auto against_kernel = ort_compare(input, rewritten->output, run);
  EXPECT_TRUE(against_kernel.ok) << against_kernel.output;
  report_numbers(c.name + " vs ORT GroupNormalization-18", against_kernel);
}

INSTANTIATE_TEST_SUITE_P(Cases, GroupNormalization18,
                         ::testing::Values(
                             GroupNormalization18Case{"rank3", 18, {"N", "6", "L"}, {{"N", 2}, {"L", 5}}, 3, 1e-3, "onnx",
                                                      "float", ""},
                             GroupNormalization18Case{"rank4_g1", 18, {"2", "4", "H", "W"}, {{"H", 3}, {"W", 3}}, 1, {}, "ort",
                                                      "float", ""},
                             GroupNormalization18Case{"rank5_g_eq_c_opset20", 20, {"1", "4", "2", "3", "2"}, {}, 4, 1e-5,
                                                      "onnx", "float", ""},
                             // double (the GroupNormalization-18 model itself loads in ONNX Runtime)
                             GroupNormalization18Case{"double_rank4_ort", 18, {"N", "6", "H", "W"}, {{"N", 2}, {"H", 3}, {"W", 4}},
                                                      2, {}, "ort", "double", "1000,1001"},
                             GroupNormalization18Case{"double_rank3_g_eq_c_opset20", 20, {"3", "4", "L"}, {{"L", 5}}, 4, 1e-3,
                                                      "onnx", "double", ""}),
                         [](const auto& info) { return info.param.name; });

// ---- ai.onnx GroupNormalization-21 lowered for older runtimes (--opset) -------------------

struct LoweringCase {
  std::string name;
  std::string type;                  // element type of x, scale, bias
  std::vector<std::string> dims;
  std::map<std::string, int> values;
  int channels;
  int groups;
  std::string attributes;            // beyond num_groups
  int max_opset;
  double tolerance = kTolerance;
  std::string x_range;               // "lo,hi" for x; empty: [-1, 1)
};

std::ostream& operator<<(std::ostream& out, const LoweringCase& c) { return out << c.name; }

class GroupNormalization21Lowering : public ::testing::TestWithParam<LoweringCase> {};

TEST_P(GroupNormalization21Lowering, MatchesOnnxRuntimeKernel) {
  const auto& c = GetParam();
  const std::string shape = joined(c.dims);
  TempDir dir;
  // scale and bias are inputs: random per trial (and ONNX text has no float16 literals)
  const auto input = write_model_text(
      fmt::format("<ir_version: 10, opset_import: [\"\": 21]>\n"
                  "g ({}[{}] x, {}[{}] scale, {}[{}] bias) => ({}[{}] y) {{\n"
                  "  y = GroupNormalization <num_groups = {}{}> (x, scale, bias)\n}}\n",
                  c.type, shape, c.type, c.channels, c.type, c.channels, c.type, shape, c.groups, c.attributes),
      dir / "gn21.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", "onnx", c.max_opset);
  ASSERT_TRUE(rewritten);
  EXPECT_FALSE(rewritten->ops.count({"", "GroupNormalization"}));
  EXPECT_EQ(opset_import(rewritten->model, ""), c.max_opset);

  // stash_type double: statistics in standard ops (ONNX Runtime has no double InstanceNormalization)
  const bool double_statistics = c.attributes.find("stash_type = 11") != std::string::npos;
  EXPECT_EQ(op_count(rewritten->ops, {"", "InstanceNormalization"}), double_statistics ? 0 : 1);

  auto run = dim_arguments(c.values);
  run.insert(run.end(), {"--rtol", fmt::format("{}", c.tolerance), "--atol", fmt::format("{}", c.tolerance)});
  if (!c.x_range.empty()) run.insert(run.end(), {"--range", "x=" + c.x_range});
  const auto comparison = ort_compare(input, rewritten->output, run);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers(c.name + " vs ORT GroupNormalization-21", comparison);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GroupNormalization21Lowering,
    ::testing::Values(LoweringCase{"rank4_opset20", "float", {"N", "6", "H", "W"}, {{"N", 2}, {"H", 4}, {"W", 3}}, 6, 3, "", 20,
                                   kTolerance, ""},
                      LoweringCase{"rank3_g1_opset17", "float", {"3", "5", "L"}, {{"L", 8}}, 5, 1, ", epsilon = 1e-3", 17,
                                   kTolerance, ""},
                      LoweringCase{"rank5_g_eq_c_opset13", "float", {"N", "4", "2", "2", "3"}, {{"N", 2}}, 4, 4, "", 13,
                                   kTolerance, ""},
                      LoweringCase{"rank4_opset9", "float", {"2", "8", "3", "3"}, {}, 8, 2, ", epsilon = 1e-4", 9,
                                   kTolerance, ""},
                      // stash_type 1 (float): statistics of double input in float, as the kernel does
                      LoweringCase{"double_opset18", "double", {"2", "6", "5"}, {}, 6, 3, "", 18, kTolerance, ""},
                      // float16: statistics in float; the last rounding to half may differ by one unit
                      // (the ONNX function body scales in float16, ONNX Runtime's kernel in float)
                      LoweringCase{"float16_opset18", "float16", {"2", "6", "5"}, {}, 6, 3, "", 18, 2e-3, ""},
                      // stash_type 11: statistics in double, from a double or a float x; far from zero
                      // (|mean| >> std) float statistics would fail
                      LoweringCase{"double_stash_double_opset17", "double", {"N", "6", "H", "W"}, {{"N", 2}, {"H", 3}, {"W", 2}},
                                   6, 2, ", stash_type = 11", 17, kTolerance, "1000,1001"},
                      LoweringCase{"double_stash_double_opset18_g1", "double", {"2", "4", "L"}, {{"L", 6}}, 4, 1,
                                   ", epsilon = 1e-3, stash_type = 11", 18, kTolerance, "1000,1001"},
                      LoweringCase{"float_stash_double_opset13", "float", {"3", "6", "5"}, {}, 6, 3, ", stash_type = 11", 13,
                                   kTolerance, ""}),
    [](const auto& info) { return info.param.name; });

// The ONNX backend cases of GroupNormalization-21, lowered, reproduce their expected outputs.
TEST(GroupNormalization21Lowering, ConformanceCasesKeepTheirOutputs) {
  ASSERT_TEST_DATA(corpus, "conformance");
  for (int opset : {18, 17}) {
    SCOPED_TRACE(opset);
    expect_conformance_cases_lowered(corpus, {"test_group_normalization_epsilon", "test_group_normalization_example"}, opset,
                                     {"GroupNormalization"}, 1e-4);
  }
}

// ---- double statistics in standard ops, spelled for the opset --------------------------------

// ONNX Runtime has no double InstanceNormalization: double statistics become ReduceMean/Sub/Mul/
// Div/Sqrt, with ReduceMean's axes an attribute before opset 18 and an input from 18.
TEST(GroupNormDouble, StatisticsAreStandardOpsSpelledForTheOpset) {
  for (const int opset : {13, 18}) {
    const std::string model_text = fmt::format(R"(
      <ir_version: 8, opset_import: ["": {}, "mydomain": 1]>
      g (double[N, 4, 6] x, double[4] scale, double[4] bias) => (double[N, 4, 6] y) <int64[1] num_groups = {{2}}> {{
        y = mydomain.mygroupnorm <epsilon = 0.25> (x, num_groups, scale, bias)
      }})", opset);
    const std::string mean = opset < 18 ? "ReduceMean <keepdims = 1, axes = [2]> (grouped)"
                                        : "ReduceMean <keepdims = 1> (grouped, axis)";
    const std::string variance = opset < 18 ? "ReduceMean <keepdims = 1, axes = [2]> (squares)"
                                            : "ReduceMean <keepdims = 1> (squares, axis)";
    const std::string axis = opset < 18 ? "" : "axis = Constant <value = int64[1] {2}> ()\n";
    const std::string expected = fmt::format(R"({{
      shape = Constant <value = int64[3] {{0, 2, -1}}> ()
      grouped = Reshape (x, shape)
      {}mean = {}
      centered = Sub (grouped, mean)
      squares = Mul (centered, centered)
      variance = {}
      epsilon = Constant <value = double {{0.25}}> ()
      shifted = Add (variance, epsilon)
      deviation = Sqrt (shifted)
      normalized = Div (centered, deviation)
      x_shape = Shape (x)
      channel_shape = Constant <value = int64[2] {{-1, 1}}> ()
      restored = Reshape (normalized, x_shape)
      scale_c = Reshape (scale, channel_shape)
      scaled = Mul (restored, scale_c)
      bias_c = Reshape (bias, channel_shape)
      y = Add (scaled, bias_c)
    }})", axis, mean, variance);
    RewriteOptions options;
    options.target = "onnx";
    const auto before = parse_model_text(model_text);
    const auto rewritten = rewrite_text(model_text, builtin_rules(), options);
    ASSERT_TRUE(rewritten.result.rules.count("mygroupnorm-decomposition")) << opset;
    const auto kept = interface_names(before);
    EXPECT_EQ(canonical_nodes(rewritten.model, kept), canonical_nodes_text(expected, before, kept)) << "opset " << opset;
  }
}

// ---- inside model-local functions (--target ort keeps them; their values are untyped) --------

struct FunctionCase {
  std::string name;
  int opset;                           // of the model and of the function
  std::string type;                    // of the model's x, scale, bias and y
  std::string body;                    // the function's nodes, (X, NG, S, B) => (Y)
  int groups;
  double epsilon;
  bool per_group;                      // GroupNormalization-18: scale and bias of length G
  std::optional<int> max_opset;
  std::map<std::string, int> expected_ops;  // ai.onnx ops of the rewritten function
  std::string x_range;                 // "lo,hi" for x; empty: [-1, 1)
};

std::ostream& operator<<(std::ostream& out, const FunctionCase& c) { return out << c.name; }

class GroupNormInFunction : public ::testing::TestWithParam<FunctionCase> {};

TEST_P(GroupNormInFunction, RewrittenInPlaceAndComputesTheSame) {
  const auto& c = GetParam();
  constexpr int kChannels = 6;
  const int affine_length = c.per_group ? c.groups : kChannels;
  TempDir dir;
  const auto input = write_model_text(
      fmt::format("<ir_version: {0}, opset_import: [\"\": {1}, \"local\": 1, \"mydomain\": 1]>\n"
                  "g ({2}[N, {3}, 5] x, float[1] num_groups, {2}[{4}] scale, {2}[{4}] bias) => ({2}[N, {3}, 5] y) {{\n"
                  "  y = local.GN (x, num_groups, scale, bias)\n}}\n"
                  "<domain: \"local\", opset_import: [\"\": {1}, \"mydomain\": 1]>\n"
                  "GN (X, NG, S, B) => (Y) {{\n{5}\n}}\n",
                  ir_version_for(c.opset), c.opset, c.type, kChannels, affine_length, c.body),
      dir / "function.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", "ort", c.max_opset);
  ASSERT_TRUE(rewritten);
  // The function stays, its body rewritten: nothing of the group norm op is left.
  EXPECT_EQ(rewritten->model.functions_size(), 1);
  EXPECT_EQ(op_count(rewritten->ops, {"local", "GN"}), 1);
  EXPECT_FALSE(rewritten->ops.count({"mydomain", "mygroupnorm"}));
  EXPECT_FALSE(rewritten->ops.count({"", "GroupNormalization"}));
  for (const auto& [op, count] : c.expected_ops) EXPECT_EQ(op_count(rewritten->ops, {"", op}), count) << op;

  std::vector<std::string> run{"--dim", "N=2", "--range", fmt::format("num_groups={0},{0}", c.groups)};
  if (!c.x_range.empty()) run.insert(run.end(), {"--range", "x=" + c.x_range});
  const std::string params =
      fmt::format(R"({{"numGroups": {}, "scale": "scale", "bias": "bias", "epsilon": {}, "perGroup": {}}})", c.groups,
                  c.epsilon, c.per_group);
  const auto against_reference = ort_compare_reference(rewritten->output, reference_module(), params, run);
  EXPECT_TRUE(against_reference.ok) << against_reference.output;
  report_numbers(c.name + " vs reference", against_reference);
  // ONNX Runtime runs ai.onnx GroupNormalization itself (the custom op it can't load).
  if (c.body.find("mygroupnorm") == std::string::npos) {
    const auto against_original = ort_compare(input, rewritten->output, run);
    EXPECT_TRUE(against_original.ok) << against_original.output;
    report_numbers(c.name + " vs ORT on the original", against_original);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GroupNormInFunction,
    ::testing::Values(
        // units and zeros of X's unknown type: CastLike
        FunctionCase{"mygroupnorm_opset17_constant_groups", 17, "float",
                     "  ng = Constant <value = int64[1] {3}> ()\n"
                     "  Y = mydomain.mygroupnorm <epsilon = 0.001> (X, ng, S, B)",
                     3, 1e-3, false, {}, {{"InstanceNormalization", 1}, {"CastLike", 2}}, ""},
        FunctionCase{"mygroupnorm_opset21_groups_input", 21, "float", "  Y = mydomain.mygroupnorm (X, NG, S, B)", 2, 1e-5,
                     false, {}, {{"InstanceNormalization", 1}, {"CastLike", 2}, {"ConstantOfShape", 2}}, ""},
        // per group: no type needed
        FunctionCase{"group_normalization_18", 18, "float",
                     "  Y = GroupNormalization <epsilon = 0.001, num_groups = 3> (X, S, B)", 3, 1e-3, true, {},
                     {{"InstanceNormalization", 1}, {"CastLike", 0}}, ""},
        // stash_type: Cast to it, CastLike back to X's unknown type
        FunctionCase{"group_normalization_21_capped_to_15", 21, "float",
                     "  Y = GroupNormalization <num_groups = 2> (X, S, B)", 2, 1e-5, false, 15,
                     {{"InstanceNormalization", 1}, {"Cast", 1}, {"CastLike", 1}}, ""},
        FunctionCase{"group_normalization_21_stash_double_capped_to_17", 21, "double",
                     "  Y = GroupNormalization <epsilon = 0.001, num_groups = 3, stash_type = 11> (X, S, B)", 3, 1e-3,
                     false, 17, {{"InstanceNormalization", 0}, {"Sqrt", 1}, {"Cast", 1}, {"CastLike", 1}}, "1000,1001"}),
    [](const auto& info) { return info.param.name; });

// Below opset 15 (no CastLike) units and zeros of an unknown type can't be made: declined, with
// the reason, and the node stays.
TEST(GroupNormInFunction, DeclinesWithoutCastLike) {
  TempDir dir;
  const auto input = write_model_text(R"(
    <ir_version: 7, opset_import: ["": 13, "local": 1, "mydomain": 1]>
    g (float[2, 6, 5] x, float[6] scale, float[6] bias) => (float[2, 6, 5] y) {
      y = local.GN (x, scale, bias)
    }
    <domain: "local", opset_import: ["": 13, "mydomain": 1]>
    GN (X, S, B) => (Y) {
      ng = Constant <value = int64[1] {3}> ()
      Y = mydomain.mygroupnorm (X, ng, S, B)
    })", dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--target", "ort",
                               "--explain", "mygroupnorm"});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("the element type of x (and of scale) is unknown: making InstanceNormalization's units and "
                            "zeros of that type needs CastLike (ai.onnx >= 15; this graph imports 13)"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.err.find("mydomain.mygroupnorm"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace onnx_rewrite
