// Targets as data (targets/*.target, docs/rules.md "Targets"): files that build on each other,
// exceptions per op and highest opsets, a target given as a file on the command line, rules
// serving targets that build on theirs, and clean errors for a bad file.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "onnx_rewrite/error.h"
#include "onnx_rewrite/target.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

Target parse(const std::string& text) {
  return parse_target("t", "t.target", text, [](const std::string& name) -> const Target* {
    for (const Target* target : all_targets()) {
      if (target->name == name) return target;
    }
    return nullptr;
  });
}

std::string parse_error(const std::string& text) {
  try {
    parse(text);
  } catch (const InputError& e) {
    return e.file() + ": " + e.what();
  }
  return "";
}

TEST(Targets, TheCompiledInOnesAreListedWithWhatTheyBuildOn) {
  std::vector<std::string> names;
  for (const Target* target : all_targets()) names.push_back(target->name);
  EXPECT_EQ(names, (std::vector<std::string>{"onnx", "onnx-opset13", "ort"}));
  const Target& capped = find_target("onnx-opset13");
  EXPECT_EQ(capped.lineage, (std::vector<std::string>{"onnx-opset13", "onnx"}));
  EXPECT_EQ(capped.domains, find_target("onnx").domains);
  EXPECT_EQ(capped.max_onnx_opset(), 13);
  EXPECT_TRUE(capped.builds_on("onnx"));
  EXPECT_FALSE(find_target("onnx").builds_on("onnx-opset13"));

  const auto listed = run_cli({"targets"});
  EXPECT_EQ(listed.exit_code, 0);
  EXPECT_NE(listed.out.find("onnx-opset13\n    Standard ONNX at opset 13 or below"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("builds on onnx; imports ai.onnx <= 13"), std::string::npos) << listed.out;
  EXPECT_NE(run_cli({"rewrite", "--help"}).out.find("onnx, onnx-opset13, ort"), std::string::npos);
}

TEST(Targets, ExceptionsAndCapsDecideWhatLoads) {
  const Target target = parse(R"(inherits onnx
description ONNX without Erf, with a LayerNormalization of its own
op ai.onnx LayerNormalization 1..16
no-op ai.onnx Erf
no-op ai.onnx Gelu >= 20
max-opset ai.onnx 18
)");
  EXPECT_EQ(target.lineage, (std::vector<std::string>{"t", "onnx"}));
  EXPECT_EQ(target.description, "ONNX without Erf, with a LayerNormalization of its own");
  EXPECT_FALSE(target.refuses("", "LayerNormalization", 9)) << "the exception";
  EXPECT_FALSE(target.refuses("", "LayerNormalization", 17)) << "the table";
  EXPECT_EQ(target.refuses("", "Erf", 13), "target t does not load Erf at ai.onnx opset 13");
  EXPECT_FALSE(target.refuses("", "Relu", 13));
  EXPECT_EQ(target.refuses("com.microsoft", "Gelu", 1), "domain com.microsoft is not loadable by target t");
  EXPECT_EQ(target.max_onnx_opset(), 18);
  // The standard tables still decide what they know.
  EXPECT_EQ(find_target("onnx").refuses("", "LayerNormalization", 9), "LayerNormalization does not exist (or is deprecated) at ai.onnx opset 9");
}

TEST(Targets, ABadFileIsAnErrorNamingFileAndLine) {
  EXPECT_EQ(parse_error("inherits onnx\nmax-opset ai.onnx x\n"), "t.target:2: 'x' is not an opset version");
  EXPECT_EQ(parse_error("domain ai.onnx\ninherits onnx\n"), "t.target:2: 'inherits' must come first");
  EXPECT_EQ(parse_error("inherits nobody\n"), "t.target:1: unknown target 'nobody' to inherit");
  EXPECT_EQ(parse_error("domain not.a.domain\n"), "t.target:1: no op table for domain 'not.a.domain' (targets/*.ops)");
  EXPECT_EQ(parse_error("inherits onnx\nop ai.onnx Relu 5..2\n"),
            "t.target:2: '5..2' is not a version range (5, 1..16, >= 14, <= 16)");
  EXPECT_EQ(parse_error("frobnicate yes\n").rfind("t.target:1: unknown key 'frobnicate'", 0), 0u);
  EXPECT_EQ(parse_error("description nothing loads\n"), "t.target: the target loads no domain");
}

// A target file given on the command line: rules for what it builds on serve it, its cap lowers
// the model, and `check` holds the model to it.
TEST(Targets, AFileOnTheCommandLineBuildsOnACompiledInTarget) {
  TempDir dir;
  write_file(dir / "opset11.target", "inherits onnx\ndescription ONNX at opset 11\nmax-opset ai.onnx 11\n");
  const auto input = write_model_text(R"(
    <ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
    g (float[2, 3] x, float[2, 3] y) => (float[2, 3] z) {
      z = test.customop.CustomOpOne (x, y)
    })", dir / "in.onnx");
  const auto target = (dir / "opset11.target").string();
  const auto rewritten = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--target", target});
  EXPECT_EQ(rewritten.exit_code, 0) << rewritten.err;
  EXPECT_NE(rewritten.out.find("opset import ai.onnx: 17 -> 11"), std::string::npos) << rewritten.out;
  EXPECT_NE(rewritten.out.find("target opset11: met"), std::string::npos) << rewritten.out;
  EXPECT_EQ(opset_import(read_model(dir / "out.onnx"), ""), 11);

  const auto unmet = run_cli({"check", input.string(), "--target", target});
  EXPECT_EQ(unmet.exit_code, 1);
  EXPECT_NE(unmet.out.find("the model imports ai.onnx opset 17; target opset11 loads up to 11"), std::string::npos) << unmet.out;

  write_file(dir / "broken.target", "inherits onnx\nmax-opset ai.onnx\n");
  const auto broken = run_cli({"check", input.string(), "--target", (dir / "broken.target").string()});
  EXPECT_EQ(broken.exit_code, 3);
  EXPECT_EQ(broken.err, fmt::format("onnx-rewrite: error: {}:2: expected 'max-opset DOMAIN VERSION'\n", (dir / "broken.target").string()));
}

// A rule whose replacement uses an op the target does not load is declined, with the reason.
TEST(Targets, AReplacementTheTargetCantLoadIsDeclined) {
  TempDir dir;
  write_file(dir / "no-add.target", "inherits onnx\nno-op ai.onnx Add\n");
  const auto input = write_model_text(R"(
    <ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
    g (float[2, 3] x, float[2, 3] y) => (float[2, 3] z) {
      z = test.customop.CustomOpOne (x, y)
    })", dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "--dry-run", "--target", (dir / "no-add.target").string(),
                               "--explain", "CustomOpOne"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.out.find("customop-one-to-add (families/registry-tutorial/registry-tutorial.rules:23): matched, but declined: "
                            "the replacement's ai.onnx.Add can't be loaded: target no-add does not load Add at ai.onnx opset 17"),
            std::string::npos)
      << result.out;
}

}  // namespace
}  // namespace onnx_rewrite
