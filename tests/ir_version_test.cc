// `--ir-version N` (docs/cli.md): a model written as an older IR loads in ONNX Runtime and
// computes the same; what the older IR can't hold is refused with the reason (exit 1, as for an
// opset that can't be reached), never written half right.
#include <gtest/gtest.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

const char* kIr10Opset17 = R"(<ir_version: 10, opset_import: ["": 17]>
g (float[N, 4] x) => (float[N, 4] y) {
  s = Sigmoid (x)
  y = Mul (x, s)
})";

TEST(IrVersion, AnIr10ModelAtOpset17IsWrittenAsIr8AndComputesTheSame) {
  TempDir dir;
  const auto input = write_model_text(kIr10Opset17, dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--ir-version", "8", "--report",
                               (dir / "r.json").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("  IR version: 10 -> 8\n"), std::string::npos) << result.out;
  const auto out = read_model(dir / "out.onnx");
  EXPECT_EQ(out.ir_version(), 8);
  EXPECT_EQ(out.graph().node_size(), 2);
  const auto report = parse_json(read_file(dir / "r.json")).struct_value().fields();
  EXPECT_EQ(report.at("ir_version").struct_value().fields().at("before").number_value(), 10);
  EXPECT_EQ(report.at("ir_version").struct_value().fields().at("after").number_value(), 8);
  EXPECT_TRUE(ort_compare(input, dir / "out.onnx", {"--dim", "N=3"}).ok);

  // Without the option, or asking for the IR it has, nothing changes.
  for (const std::vector<std::string>& extra : {std::vector<std::string>{}, std::vector<std::string>{"--ir-version", "10"}}) {
    std::vector<std::string> args{"rewrite", input.string(), "-o", (dir / "same.onnx").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_EQ(run_cli(args).exit_code, 0);
    EXPECT_EQ(read_file(dir / "same.onnx"), read_file(input));
  }
}

struct Refusal {
  std::string name;
  std::string model;  // ONNX text
  std::string ir;
  std::string reason;
  std::string target = "onnx";
};

class IrVersionRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(IrVersionRefusal, NamesWhatTheOlderIrLacks) {
  const auto& c = GetParam();
  TempDir dir;
  const auto input = write_model_text(c.model, dir / "in.onnx");
  const auto result =
      run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--ir-version", c.ir, "--target", c.target});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.err.find(c.reason), std::string::npos) << result.err;
  // The output is written as the model was (exit 1: the target is not met, see docs/cli.md).
  EXPECT_EQ(read_model(dir / "out.onnx").ir_version(), read_model(input).ir_version());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, IrVersionRefusal,
    ::testing::Values(
        Refusal{"opset_21_needs_ir_10", R"(<ir_version: 10, opset_import: ["": 21]>
g (float[2] x) => (float[2] y) { y = Relu (x) })",
                "8", "IR version 10 can't be written as 8: its ai.onnx opset 21 needs IR 10 or later"},
        Refusal{"functions_need_ir_8", R"(<ir_version: 8, opset_import: ["": 13, "local": 1]>
g (float[2] x) => (float[2] y) { y = local.twice (x) }
<domain: "local", opset_import: ["": 13]>
twice (v) => (r) { r = Add (v, v) })",
                "7", "it has model-local functions, which need IR 8", "ort"},  // ort keeps functions (onnx inlines them)
        Refusal{"int4_needs_ir_10", R"(<ir_version: 10, opset_import: ["": 17]>
g (float[2] x) => (float[2] y) { y = Cast <to = 22> (x) })",  // ONNX 1.12's text has no int4 type name
                "8", "which needs IR 10"}),
    [](const auto& info) { return info.param.name; });

TEST(IrVersion, FieldsNewerThanOnnx112AreNotDroppedSilently) {
  TempDir dir;
  onnx::ModelProto model = parse_model_text(kIr10Opset17);
  // A node's metadata_props (NodeProto field 9 from IR 10): unknown to ONNX 1.12's classes.
  std::string node = model.graph().node(0).SerializeAsString();
  node += std::string("\x4a\x06\x0a\x01k\x12\x01v", 8);
  model.mutable_graph()->mutable_node(0)->ParseFromString(node);
  write_file(dir / "in.onnx", serialize(model));
  const auto result = run_cli({"rewrite", (dir / "in.onnx").string(), "-o", (dir / "out.onnx").string(), "--ir-version", "8"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("it holds fields of IR 10 that this build (ONNX 1.12, IR 8) can't tell the meaning of"), std::string::npos)
      << result.err;
}

// `--opset N` alone also writes the IR version ONNX released with opset N, where the model allows:
// a runtime that stops at opset 11 (ONNX Runtime 1.0..1.2) reads IR 6 at most.
TEST(IrVersion, AnOpsetAloneLowersTheIrToTheOnesReleasedWithIt) {
  TempDir dir;
  const auto input = write_model_text(kIr10Opset17, dir / "in.onnx");
  auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--opset", "11", "--report",
                         (dir / "r.json").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("  IR version: 10 -> 6\n"), std::string::npos) << result.out;
  EXPECT_EQ(read_model(dir / "out.onnx").ir_version(), 6);
  EXPECT_EQ(opset_import(read_model(dir / "out.onnx"), ""), 11);
  const auto report = parse_json(read_file(dir / "r.json")).struct_value().fields();
  EXPECT_EQ(report.at("ir_version").struct_value().fields().at("after").number_value(), 6);
  EXPECT_TRUE(ort_compare(input, dir / "out.onnx", {"--dim", "N=3"}).ok);

  // An explicit --ir-version wins.
  result = run_cli({"rewrite", input.string(), "-o", (dir / "eight.onnx").string(), "--opset", "11", "--ir-version", "8"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(read_model(dir / "eight.onnx").ir_version(), 8);

  // Never raised: an IR 5 model at opset 10 stays as it is under --opset 11.
  const auto old_model = write_model_text(R"(<ir_version: 5, opset_import: ["": 10]>
g (float[2] x) => (float[2] y) { y = Relu (x) })", dir / "old.onnx");
  result = run_cli({"rewrite", old_model.string(), "-o", (dir / "old_out.onnx").string(), "--opset", "11"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(read_file(dir / "old_out.onnx"), read_file(old_model));
}

// What the implied IR can't hold keeps the model's IR with a note, not a failure: only
// --ir-version N insists.
TEST(IrVersion, AnImpliedIrTheModelCantBeWrittenAsIsANote) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 13, "local": 1]>
g (float[2] x) => (float[2] y) { y = local.twice (x) }
<domain: "local", opset_import: ["": 13]>
twice (v) => (r) { r = Add (v, v) })", dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--opset", "13", "--target", "ort"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("note: IR version 8 kept, although runtimes of opset 13 read IR 7: it has model-local functions, "
                            "which need IR 8 (--ir-version insists)"),
            std::string::npos)
      << result.out;
  EXPECT_EQ(read_model(dir / "out.onnx").ir_version(), 8);
}

}  // namespace
}  // namespace onnx_rewrite
