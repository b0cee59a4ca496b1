// ATen fallback nodes (rules/aten/aten.rules): org.pytorch.aten::ATen gelu / inverse / linalg_inv as
// torch.onnx.export writes them, rewritten by the CLI, checked loadable for their target and run
// in ONNX Runtime against naive references of torch's ops (tests/ort/reference/).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <onnx/defs/attr_proto_util.h>

#include "onnx_rewrite/engine.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

fs::path reference(const std::string& name) { return family_file("aten", (name + ".js")); }

// ---- gelu -----------------------------------------------------------------------------------

// How the exporter says which GELU: a prim::Constant string input (torch.onnx's ATen fallback),
// a string attribute (hand-written `g.at("gelu", x, approximate_s=...)`), or nothing ("none").
enum class Spelling { kAbsent, kAttribute, kConstantInput };

struct GeluCase {
  std::string name;
  std::string approximate;  // "none" or "tanh"
  Spelling spelling;
  int opset;
  std::string target;
  std::vector<std::pair<std::string, std::string>> expected_ops;  // (domain, op) that must appear
};

std::string gelu_model(const GeluCase& c) {
  std::string attributes = "operator = \"gelu\", overload_name = \"\"";
  std::string mode_node, mode_input;
  if (c.spelling == Spelling::kAttribute) attributes += fmt::format(", approximate = \"{}\"", c.approximate);
  if (c.spelling == Spelling::kConstantInput) {
    mode_node = fmt::format("  mode = Constant <value = \"{}\"> ()\n", c.approximate);
    mode_input = ", mode";
  }
  return fmt::format(
      "<ir_version: 8, opset_import: [\"\": {}, \"org.pytorch.aten\": 1]>\n"
      "g (float[N, 3, 16] x) => (float[N, 3, 16] y) {{\n{}  y = org.pytorch.aten.ATen <{}> (x{})\n}}\n",
      c.opset, mode_node, attributes, mode_input);
}

class AtenGelu : public ::testing::TestWithParam<GeluCase> {};

TEST_P(AtenGelu, ComputesTorchGelu) {
  const GeluCase& c = GetParam();
  TempDir dir;
  const auto input = write_model_text(gelu_model(c), dir / "gelu.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", c.target);
  ASSERT_TRUE(rewritten);
  EXPECT_FALSE(rewritten->ops.count({"org.pytorch.aten", "ATen"}));
  EXPECT_FALSE(rewritten->ops.count({"", "Constant"})) << "the mode constant goes with the node";
  for (const auto& op : c.expected_ops) EXPECT_TRUE(rewritten->ops.count(op)) << op.first << "." << op.second;
  EXPECT_EQ(opset_import(rewritten->model, "org.pytorch.aten"), 0);
  EXPECT_EQ(opset_import(rewritten->model, ""), c.opset);
  EXPECT_EQ(opset_import(rewritten->model, "com.microsoft") != 0, c.target == "ort");

  for (const char* range : {"-1,1", "-6,6"}) {
    const auto comparison = ort_compare_reference(rewritten->output, reference("gelu"),
                                                  fmt::format(R"({{"approximate": "{}"}})", c.approximate),
                                                  {"--dim", "N=2", "--float-range", range});
    EXPECT_TRUE(comparison.ok) << comparison.output;
    report_numbers(fmt::format("gelu {} on [{})", c.name, range), comparison);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AtenGelu,
    ::testing::Values(
        GeluCase{"ort_absent", "none", Spelling::kAbsent, 17, "ort", {{"com.microsoft", "Gelu"}}},
        GeluCase{"ort_constant_none", "none", Spelling::kConstantInput, 13, "ort", {{"com.microsoft", "Gelu"}}},
        GeluCase{"ort_constant_tanh", "tanh", Spelling::kConstantInput, 17, "ort", {{"com.microsoft", "FastGelu"}}},
        GeluCase{"ort_attribute_tanh", "tanh", Spelling::kAttribute, 9, "ort", {{"com.microsoft", "FastGelu"}}},
        GeluCase{"onnx_opset9_constant_none", "none", Spelling::kConstantInput, 9, "onnx", {{"", "Erf"}}},
        GeluCase{"onnx_opset13_attribute_none", "none", Spelling::kAttribute, 13, "onnx", {{"", "Erf"}}},
        GeluCase{"onnx_opset17_absent", "none", Spelling::kAbsent, 17, "onnx", {{"", "Erf"}}},
        GeluCase{"onnx_opset9_attribute_tanh", "tanh", Spelling::kAttribute, 9, "onnx", {{"", "Tanh"}}},
        GeluCase{"onnx_opset17_constant_tanh", "tanh", Spelling::kConstantInput, 17, "onnx", {{"", "Tanh"}}},
        GeluCase{"onnx_opset20_constant_none", "none", Spelling::kConstantInput, 20, "onnx", {{"", "Gelu"}}},
        GeluCase{"onnx_opset20_attribute_tanh", "tanh", Spelling::kAttribute, 20, "onnx", {{"", "Gelu"}}}),
    [](const auto& info) { return info.param.name; });

// The opset-20 rewrite keeps torch's approximation in Gelu's attribute.
TEST(AtenGelu, Gelu20KeepsTheApproximation) {
  TempDir dir;
  const auto input = write_model_text(gelu_model({"tanh", "tanh", Spelling::kConstantInput, 20, "onnx", {}}), dir / "in.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", "onnx");
  ASSERT_TRUE(rewritten);
  ASSERT_EQ(rewritten->model.graph().node_size(), 1);
  const auto& gelu = rewritten->model.graph().node(0);
  ASSERT_EQ(gelu.attribute_size(), 1);
  EXPECT_EQ(gelu.attribute(0).name(), "approximate");
  EXPECT_EQ(gelu.attribute(0).s(), "tanh");
}

// TorchScript pools equal constants: every gelu of a model may read the same mode string.
TEST(AtenGelu, AModeConstantSharedByEveryGeluIsReadNotMatched) {
  TempDir dir;
  for (const std::string target : {"onnx", "ort"}) {
    const auto input = write_model_text(R"(
      <ir_version: 8, opset_import: ["": 17, "org.pytorch.aten": 1]>
      g (float[N, 3, 16] x) => (float[N, 3, 16] y) {
        mode = Constant <value = "tanh"> ()
        h = org.pytorch.aten.ATen <operator = "gelu", overload_name = ""> (x, mode)
        y = org.pytorch.aten.ATen <operator = "gelu", overload_name = ""> (h, mode)
      })",
                                        dir / "shared.onnx");
    const auto rewritten = rewrite_and_check(input, dir / "out.onnx", target);
    ASSERT_TRUE(rewritten);
    EXPECT_FALSE(rewritten->ops.count({"org.pytorch.aten", "ATen"})) << target;
    EXPECT_FALSE(rewritten->ops.count({"", "Constant"})) << target << ": the mode goes once its last reader does";
    if (target == "ort") {
      EXPECT_EQ(op_count(rewritten->ops, {"com.microsoft", "FastGelu"}), 2);
    }
  }
}

// The two approximations differ by more than the tolerance, so the test above can tell them apart.
TEST(AtenGelu, ReferenceTellsTheApproximationsApart) {
  TempDir dir;
  const auto input = write_model_text(gelu_model({"tanh", "tanh", Spelling::kAttribute, 17, "ort", {}}), dir / "in.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", "ort");
  ASSERT_TRUE(rewritten);
  const auto comparison = ort_compare_reference(rewritten->output, reference("gelu"), R"({"approximate": "none"})",
                                                {"--dim", "N=2", "--float-range", "-6,6"});
  EXPECT_EQ(comparison.exit_code, 1) << comparison.output;
}

// Only the default overloads are meant; anything else stays, and the check says so.
TEST(AtenGelu, OtherOverloadsAndOperatorsAreLeftAlone) {
  TempDir dir;
  for (const std::string attributes : {R"(operator = "gelu", overload_name = "out")", R"(operator = "gelu_backward")"}) {
    const auto input = write_model_text(fmt::format(R"(
      <ir_version: 8, opset_import: ["": 17, "org.pytorch.aten": 1]>
      g (float[2, 3] x) => (float[2, 3] y) {{
        y = org.pytorch.aten.ATen <{}> (x)
      }})", attributes), dir / "in.onnx");
    for (const std::string target : {"onnx", "ort"}) {
      const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--target", target});
      EXPECT_EQ(result.exit_code, 1) << attributes << "\n" << result.out << result.err;
      EXPECT_NE(result.out.find("no rule applies"), std::string::npos) << result.out;
    }
  }
}

// ---- inverse / linalg_inv -------------------------------------------------------------------

struct InverseCase {
  std::string name;
  std::string op;                  // "inverse" or "linalg_inv"
  std::vector<std::string> dims;   // [..., M, M]
  int size;                        // M
};

// x + 4·I keeps random matrices well conditioned, so float32 results can be compared at 1e-4.
std::string inverse_model(const InverseCase& c) {
  std::vector<double> shift(static_cast<size_t>(c.size * c.size), 0.0);
  for (int i = 0; i < c.size; ++i) shift[static_cast<size_t>(i * c.size + i)] = 4.0;
  const std::string shape = fmt::format("{}", fmt::join(c.dims, ", "));
  return fmt::format(
      "<ir_version: 8, opset_import: [\"\": 17, \"org.pytorch.aten\": 1]>\n"
      "g (float[{}] x) => (float[{}] y) <float[{}, {}] shift = {{{}}}> {{\n"
      "  shifted = Add (x, shift)\n"
      "  y = org.pytorch.aten.ATen <operator = \"{}\", overload_name = \"\"> (shifted)\n}}\n",
      shape, shape, c.size, c.size, fmt::join(shift, ", "), c.op);
}

class AtenInverse : public ::testing::TestWithParam<InverseCase> {};

TEST_P(AtenInverse, OrtTargetComputesTheInverse) {
  const auto& c = GetParam();
  TempDir dir;
  const auto input = write_model_text(inverse_model(c), dir / "inverse.onnx");
  const auto rewritten = rewrite_and_check(input, dir / "out.onnx", "ort");
  ASSERT_TRUE(rewritten);
  EXPECT_EQ(op_count(rewritten->ops, {"com.microsoft", "Inverse"}), 1);
  EXPECT_FALSE(rewritten->ops.count({"org.pytorch.aten", "ATen"}));
  EXPECT_EQ(opset_import(rewritten->model, "org.pytorch.aten"), 0);
  std::vector<std::string> run;
  if (c.dims.front() == "N") run = {"--dim", "N=3"};
  const auto comparison = ort_compare_reference(rewritten->output, reference("matrix_inverse"), R"({"shift": 4})", run);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  report_numbers("inverse " + c.name, comparison);
}

TEST_P(AtenInverse, OnnxTargetKeepsTheNodeAndFails) {
  const auto& c = GetParam();
  TempDir dir;
  const auto input = write_model_text(inverse_model(c), dir / "inverse.onnx");
  const auto output = dir / "out.onnx";
  const auto result = run_cli({"rewrite", input.string(), "-o", output.string(), "--target", "onnx"});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.err.find("org.pytorch.aten.ATen (operator " + c.op + ") x1"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("not loadable by target onnx; rules for this op serve another target: aten-inverse-to-contrib (--target ort)"),
            std::string::npos)
      << result.err;
  EXPECT_EQ(read_file(output), read_file(input)) << "nothing else changes";
}

INSTANTIATE_TEST_SUITE_P(Cases, AtenInverse,
                         ::testing::Values(InverseCase{"matrix_3x3", "inverse", {"3", "3"}, 3},
                                           InverseCase{"batched_linalg_inv", "linalg_inv", {"2", "4", "4"}, 4},
                                           InverseCase{"symbolic_batch", "inverse", {"N", "2", "5", "5"}, 5},
                                           InverseCase{"linalg_inv_1x1", "linalg_inv", {"N", "1", "1"}, 1}),
                         [](const auto& info) { return info.param.name; });

// ---- rules/aten/testdata/aten-gelu: Linear -> gelu(tanh) -> Linear -> gelu, gelu through the ATen fallback ----

TEST(AtenTestdata, ModelIsGeneratedFromItsText) {
  TempDir dir;
  const auto generated = dir / "generated.onnx";
  const auto made = run_command({(build_dir() / "text-to-onnx").string(),
                                 (family_file("aten", "testdata") / "aten-gelu.onnxtxt").string(), generated.string()});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(read_file(generated), read_file(family_file("aten", "testdata") / "aten-gelu.onnx"))
      << "regenerate: build/text-to-onnx rules/aten/testdata/aten-gelu.onnxtxt rules/aten/testdata/aten-gelu.onnx";
}

// The export with each ATen gelu replaced by ONNX Runtime's own Gelu-20 kernel.
onnx::ModelProto with_gelu_20(onnx::ModelProto model) {
  model.set_ir_version(9);
  model.clear_opset_import();
  model.add_opset_import()->set_version(20);
  std::map<std::string, std::string> modes;  // Constant output -> its string
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (const auto& node : model.graph().node()) {
    if (node.op_type() == "Constant" && node.attribute(0).type() == onnx::AttributeProto::STRING) {
      modes[node.output(0)] = node.attribute(0).s();
      continue;
    }
    onnx::NodeProto& kept = *nodes.Add();
    kept = node;
    if (node.op_type() != "ATen") continue;
    kept.clear_domain();
    kept.set_op_type("Gelu");
    kept.clear_attribute();
    *kept.add_attribute() = onnx::MakeAttribute("approximate", modes.at(node.input(1)));
    kept.mutable_input()->DeleteSubrange(1, 1);
  }
  model.mutable_graph()->mutable_node()->Swap(&nodes);
  return model;
}

TEST(AtenTestdata, RewrittenExportMatchesOnnxRuntimeGelu) {
  const fs::path seed = family_file("aten", "testdata") / "aten-gelu.onnx";
  onnx::ModelProto original;
  ASSERT_TRUE(original.ParseFromString(read_file(seed)));
  TempDir dir;
  const fs::path kernel = dir / "kernel.onnx";
  write_file(kernel, serialize(with_gelu_20(original)));
  for (const std::string target : {"onnx", "ort"}) {
    const auto rewritten = rewrite_and_check(seed, dir / (target + ".onnx"), target);
    ASSERT_TRUE(rewritten);
    EXPECT_EQ(opset_import(rewritten->model, ""), 14);
    // ONNX Runtime's target takes each MatMul with its bias as the Gemm its loader would make.
    EXPECT_EQ(op_count(rewritten->ops, {"", target == "ort" ? "Gemm" : "MatMul"}), 2);
    const auto comparison = ort_compare(kernel, rewritten->output, {"--dim", "batch=3", "--float-range", "-4,4"});
    EXPECT_TRUE(comparison.ok) << comparison.output;
    report_numbers("rules/aten/testdata/aten-gelu --target " + target, comparison);
  }
}

}  // namespace
}  // namespace onnx_rewrite
