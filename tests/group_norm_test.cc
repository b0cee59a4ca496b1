// Group normalization (rules/group-norm.rules, src/builders/group_norm.cc): the mygroupnorm
// custom op and ai.onnx GroupNormalization-18/-21, rewritten by the CLI, checked loadable for
// their target and run in ONNX Runtime against torch semantics (tests/ort/reference/group_norm.js)
// and against ONNX Runtime's own GroupNormalization kernels.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <optional>
#include <random>

#include "onnx_rewrite/builder.h"
#include "onnx_rewrite/engine.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

constexpr double kTolerance = 1e-4;

fs::path reference_module() { return source_dir() / "tests" / "ort" / "reference" / "group_norm.js"; }

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

void report(const std::string& what, const OrtComparison& comparison) {
  std::cout << fmt::format("[ numbers  ] {}: max_abs {:.2e}\n", what, comparison.max_abs);
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
};

std::ostream& operator<<(std::ostream& out, const MyGroupNormCase& c) { return out << c.name; }

// A model as torch.onnx.export writes the tutorial op: y = DOMAIN.mygroupnorm (x, num_groups, scale, bias).
std::string mygroupnorm_model(const MyGroupNormCase& c, const std::vector<double>& scale, const std::vector<double>& bias) {
  const std::string shape = joined(c.dims);
  std::string inputs = fmt::format("float[{}] input", shape);
  std::string initializers = fmt::format("float[{}] scale = {{{}}}, float[{}] bias = {{{}}}", c.channels, joined(scale),
                                         c.channels, joined(bias));
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
      "g ({}) => (float[{}] y) <{}> {{\n{}{}  y = {}.mygroupnorm{} ({}, num_groups, scale, bias)\n}}\n",
      ir_version_for(c.opset), c.opset, c.domain, inputs, shape, initializers, constants, untyped, c.domain, epsilon, x);
}

// The same computation with ONNX Runtime's own GroupNormalization-21 kernel.
std::string group_normalization_21_model(const MyGroupNormCase& c, const std::vector<double>& scale,
                                         const std::vector<double>& bias) {
  const std::string shape = joined(c.dims);
  return fmt::format(
      "<ir_version: 10, opset_import: [\"\": 21]>\n"
      "g (float[{}] input) => (float[{}] y) <float[{}] scale = {{{}}}, float[{}] bias = {{{}}}> {{\n"
      "  y = GroupNormalization <epsilon = {}, num_groups = {}> (input, scale, bias)\n}}\n",
      shape, shape, c.channels, joined(scale), c.channels, joined(bias), c.epsilon.value_or(1e-5), c.groups);
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
  EXPECT_EQ(opset_import(rewritten->model, c.domain), 0);
  EXPECT_EQ(opset_import(rewritten->model, ""), c.max_opset.value_or(c.opset));

  std::vector<std::string> run = dim_arguments(c.values);
  const std::string groups = c.given == GroupsGiven::kGraphInput ? "\"num_groups\"" : std::to_string(c.groups);
  if (c.given == GroupsGiven::kGraphInput) {
    run.push_back("--range");
    run.push_back(fmt::format("num_groups={},{}", c.groups, c.groups));
  }
  const std::string params = fmt::format(R"({{"x": "input", "output": "y", "numGroups": {}, "scale": [{}], "bias": [{}], "epsilon": {}}})",
                                         groups, joined(scale), joined(bias), c.epsilon.value_or(1e-5));
  const auto against_reference = ort_compare_reference(rewritten->output, reference_module(), params, run);
  EXPECT_TRUE(against_reference.ok) << against_reference.output;
  report(c.name + " vs torch reference", against_reference);

  if (c.given != GroupsGiven::kGraphInput) {
    const auto kernel = write_model_text(group_normalization_21_model(c, scale, bias), dir / "kernel.onnx");
    const auto against_kernel = ort_compare(kernel, rewritten->output, run);
    EXPECT_TRUE(against_kernel.ok) << against_kernel.output;
    report(c.name + " vs ORT GroupNormalization-21", against_kernel);
  }
}

std::vector<MyGroupNormCase> mygroupnorm_cases() {
  using G = GroupsGiven;
  const std::string decomposed = "InstanceNormalization";
  const std::string gn21 = "GroupNormalization";
  return {
      {"opset9_rank4_constant", "mydomain", 9, {"N", "6", "H", "W"}, {{"N", 2}, {"H", 5}, {"W", 7}}, 6, 3, 1e-3,
       G::kFloatConstant, true, "onnx", {}, decomposed},
      {"opset9_rank3_g1_pytorch_domain", "org.pytorch.mydomain", 9, {"2", "4", "5"}, {}, 4, 1, {}, G::kFloatInitializer,
       true, "ort", {}, decomposed},
      {"opset9_rank4_untyped", "mydomain", 9, {"N", "6", "H", "W"}, {{"N", 3}, {"H", 4}, {"W", 3}}, 6, 3, {},
       G::kFloatConstant, false, "onnx", {}, decomposed},
      {"opset13_rank5_g_eq_c_int", "mydomain", 13, {"N", "4", "3", "H", "2"}, {{"N", 2}, {"H", 3}}, 4, 4, 1e-5,
       G::kIntInitializer, true, "onnx", {}, decomposed},
      {"opset13_untyped_groups_input", "mydomain", 13, {"N", "8", "L"}, {{"N", 2}, {"L", 6}}, 8, 2, 1e-4, G::kGraphInput,
       false, "onnx", {}, decomposed},
      {"opset17_rank4_int_constant", "org.pytorch.mydomain", 17, {"1", "8", "4", "4"}, {}, 8, 2, {}, G::kIntConstant,
       true, "onnx", {}, decomposed},
      {"opset17_rank4_n3_ort", "mydomain", 17, {"3", "12", "2", "5"}, {}, 12, 4, 1e-4, G::kFloatInitializer, true, "ort",
       {}, decomposed},
      {"opset18_rank3_g_eq_c_groups_input", "mydomain", 18, {"N", "6", "L"}, {{"N", 2}, {"L", 9}}, 6, 6, 1e-3,
       G::kGraphInput, true, "onnx", {}, decomposed},
      {"opset18_rank5_g1", "mydomain", 18, {"2", "3", "2", "3", "4"}, {}, 3, 1, {}, G::kIntConstant, true, "onnx", {},
       decomposed},
      {"opset21_rank4", "mydomain", 21, {"N", "6", "H", "W"}, {{"N", 2}, {"H", 3}, {"W", 4}}, 6, 2, {},
       G::kFloatInitializer, true, "onnx", {}, gn21},
      {"opset21_rank5_g1_pytorch_domain", "org.pytorch.mydomain", 21, {"N", "4", "2", "3", "W"}, {{"N", 1}, {"W", 5}}, 4,
       1, 1e-3, G::kIntConstant, true, "ort", {}, gn21},
      {"opset21_rank3_g_eq_c", "mydomain", 21, {"2", "5", "L"}, {{"L", 7}}, 5, 5, 1e-5, G::kFloatConstant, true, "onnx",
       {}, gn21},
      {"opset21_groups_input_decomposed", "mydomain", 21, {"N", "6", "L"}, {{"N", 2}, {"L", 4}}, 6, 3, {},
       G::kGraphInput, true, "onnx", {}, decomposed},
      {"opset21_capped_to_17", "mydomain", 21, {"N", "6", "H", "W"}, {{"N", 2}, {"H", 3}, {"W", 3}}, 6, 2, 1e-3,
       G::kIntInitializer, true, "onnx", 17, decomposed},
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
TEST(MyGroupNormSanity, DeclinesGroupsThatDontDivideTheChannels) {
  TempDir dir;
  for (const auto& [groups, reason] : {std::pair{"4.0", "6 channels don't split into 4 groups"},
                                       std::pair{"2.5", "num_groups is 2.5, not a whole number"}}) {
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
      report(fmt::format("testdata/mygroupnorm-opset9 --target {} ({})", target, batch), comparison);
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
};

class GroupNormalization18 : public ::testing::TestWithParam<GroupNormalization18Case> {};

TEST_P(GroupNormalization18, DecomposedAsOnnxRuntimeComputesIt) {
  const auto& c = GetParam();
  const auto scale = weights(static_cast<size_t>(c.groups), 0.5, 1.5, 3);
  const auto bias = weights(static_cast<size_t>(c.groups), -0.5, 0.5, 4);
  const std::string shape = joined(c.dims);
  TempDir dir;
  const auto input = write_model_text(
      fmt::format("<ir_version: 8, opset_import: [\"\": {}]>\n"
                  "g (float[{}] x) => (float[{}] y) <float[{}] scale = {{{}}}, float[{}] bias = {{{}}}> {{\n"
                  "  y = GroupNormalization <{}num_groups = {}> (x, scale, bias)\n}}\n",
                  c.opset, shape, shape, c.groups, joined(scale), c.groups, joined(bias),
                  c.epsilon ? fmt::format("epsilon = {}, ", *c.epsilon) : "", c.groups),
      dir / "gn18.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", c.target, {});
  ASSERT_TRUE(rewritten);
  EXPECT_FALSE(rewritten->ops.count({"", "GroupNormalization"}));
  EXPECT_EQ(opset_import(rewritten->model, ""), c.opset);

  const auto run = dim_arguments(c.values);
  const std::string params = fmt::format(R"({{"numGroups": {}, "scale": [{}], "bias": [{}], "epsilon": {}, "perGroup": true}})",
                                         c.groups, joined(scale), joined(bias), c.epsilon.value_or(1e-5));
  const auto against_reference = ort_compare_reference(rewritten->output, reference_module(), params, run);
  EXPECT_TRUE(against_reference.ok) << against_reference.output;
  report(c.name + " vs per-group reference", against_reference);
  // ONNX Runtime still runs GroupNormalization-18 itself.
  const auto against_kernel = ort_compare(input, rewritten->output, run);
  EXPECT_TRUE(against_kernel.ok) << against_kernel.output;
  report(c.name + " vs ORT GroupNormalization-18", against_kernel);
}

INSTANTIATE_TEST_SUITE_P(Cases, GroupNormalization18,
                         ::testing::Values(
                             GroupNormalization18Case{"rank3", 18, {"N", "6", "L"}, {{"N", 2}, {"L", 5}}, 3, 1e-3, "onnx"},
                             GroupNormalization18Case{"rank4_g1", 18, {"2", "4", "H", "W"}, {{"H", 3}, {"W", 3}}, 1, {}, "ort"},
                             GroupNormalization18Case{"rank5_g_eq_c_opset20", 20, {"1", "4", "2", "3", "2"}, {}, 4, 1e-5, "onnx"}),
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
};

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

  auto run = dim_arguments(c.values);
  run.insert(run.end(), {"--rtol", fmt::format("{}", c.tolerance), "--atol", fmt::format("{}", c.tolerance)});
  const auto comparison = ort_compare(input, rewritten->output, run);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report(c.name + " vs ORT GroupNormalization-21", comparison);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GroupNormalization21Lowering,
    ::testing::Values(LoweringCase{"rank4_opset20", "float", {"N", "6", "H", "W"}, {{"N", 2}, {"H", 4}, {"W", 3}}, 6, 3, "", 20},
                      LoweringCase{"rank3_g1_opset17", "float", {"3", "5", "L"}, {{"L", 8}}, 5, 1, ", epsilon = 1e-3", 17},
                      LoweringCase{"rank5_g_eq_c_opset13", "float", {"N", "4", "2", "2", "3"}, {{"N", 2}}, 4, 4, "", 13},
                      LoweringCase{"rank4_opset9", "float", {"2", "8", "3", "3"}, {}, 8, 2, ", epsilon = 1e-4", 9},
                      // stash_type 1 (float): statistics of double input in float, as the kernel does
                      LoweringCase{"double_opset18", "double", {"2", "6", "5"}, {}, 6, 3, "", 18},
                      // float16: statistics in float; the last rounding to half may differ by one unit
                      // (the ONNX function body scales in float16, ONNX Runtime's kernel in float)
                      LoweringCase{"float16_opset18", "float16", {"2", "6", "5"}, {}, 6, 3, "", 18, 2e-3}),
    [](const auto& info) { return info.param.name; });

// The ONNX backend cases of GroupNormalization-21, lowered, reproduce their expected outputs.
TEST(GroupNormalization21Lowering, ConformanceCasesKeepTheirOutputs) {
  const auto corpus = conformance_dir();
  if (!corpus) GTEST_SKIP() << "no conformance corpus";
  TempDir dir;
  std::vector<std::string> jobs;
  for (const std::string name : {"test_group_normalization_epsilon", "test_group_normalization_example"}) {
    for (int opset : {18, 17}) {
      const fs::path output = dir / fmt::format("{}-{}.onnx", name, opset);
      const auto rewritten = rewrite_and_check(*corpus / "node" / name / "model.onnx", output, "onnx", opset);
      ASSERT_TRUE(rewritten);
      EXPECT_EQ(opset_import(rewritten->model, ""), opset);
      EXPECT_FALSE(rewritten->ops.count({"", "GroupNormalization"}));
      jobs.push_back(fmt::format(R"({{"case": "{}", "model": "{}", "rtol": 1e-4, "atol": 1e-4}})",
                                 (*corpus / "node" / name).string(), output.string()));
    }
  }
  write_file(dir / "jobs.json", "[" + fmt::format("{}", fmt::join(jobs, ",")) + "]");
  const auto result = run_command({"node", (source_dir() / "tests" / "ort" / "conformance.js").string(), "--jobs",
                                   (dir / "jobs.json").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("4 cases: 4 pass"), std::string::npos) << result.out << result.err;
}

}  // namespace
}  // namespace onnx_rewrite
