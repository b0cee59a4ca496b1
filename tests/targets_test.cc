// Targets as data (targets/*.target, docs/rules.md "Targets"): files that build on each other,
// exceptions per op and highest opsets, a target given as a file on the command line, rules
// serving targets that build on theirs, and clean errors for a bad file. The tensorrt and
// openvino targets, built from those runtimes' published tables, on the seed's custom ops.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <sstream>

#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model_io.h"
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
  EXPECT_EQ(names, (std::vector<std::string>{"onnx", "onnx-opset13", "openvino", "ort", "tensorrt"}));
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
  EXPECT_NE(run_cli({"rewrite", "--help"}).out.find("onnx, onnx-opset13, openvino, ort, tensorrt"), std::string::npos);
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

// `check --opset N` names, per op, the nodes that keep the import above N and why.
TEST(Targets, CheckOpsetNamesTheNodesThatKeepTheImportUp) {
  TempDir dir;
  const auto model = write_model_text(R"(<ir_version: 10, opset_import: ["": 21]>
g (float[2, 3] x, float[2, 3] y) => (float[2, 3] a, bool[2, 3] b, bool[2, 3] c) {
  a = Gelu (x)
  b = GreaterOrEqual (x, y)
  c = GreaterOrEqual (y, x)
})", dir / "m.onnx");
  const auto result = run_cli({"check", model.string(), "--opset", "11"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.out.find("  the model imports ai.onnx opset 21, above --opset 11\n"
                            "    Gelu x1 (main graph) keeps it there as it is: Gelu does not exist at opset 11\n"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("    GreaterOrEqual x2 (main graph) keeps it there as it is: GreaterOrEqual does not exist at opset 11\n"),
            std::string::npos)
      << result.out;
  // Both lower with rules: rewrite --opset 11 meets it.
  const auto lowered = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--opset", "11"});
  EXPECT_EQ(lowered.exit_code, 0) << lowered.out << lowered.err;
  EXPECT_EQ(run_cli({"check", (dir / "out.onnx").string(), "--opset", "11"}).exit_code, 0);
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
  EXPECT_EQ(parse_error("inherits onnx\nsource\n"), "t.target:2: expected 'source TEXT'");
  EXPECT_EQ(parse_error("inherits onnx\nload-tested maybe\n"), "t.target:2: expected 'load-tested yes' or 'load-tested no'");
  EXPECT_EQ(parse_error("inherits onnx\ncaveat ai.onnx Resize\n"), "t.target:2: expected 'caveat DOMAIN OP TEXT'");
}

// Where a target's tables come from is said once, in its file, and carried by what builds on it;
// whether the suite holds it to the runtime is each file's own word. Exceptions may name domains
// no op table describes (a runtime's plugins), and caveats are what the runtime asks of a node.
TEST(Targets, SourcesCaveatsAndExceptionsOfOtherDomains) {
  TempDir dir;
  write_file(dir / "warp-base.target", "inherits ort\nop acme Warp >= 1\ncaveat acme Warp   input 4-D  \ncaveat ai.onnx TopK sorted 1\n");
  write_file(dir / "warp-capped.target", "inherits warp-base\nmax-opset ai.onnx 17\n");
  const Target& base = find_target((dir / "warp-base.target").string());
  const Target& capped = find_target((dir / "warp-capped.target").string());
  EXPECT_NE(find_target("ort").source.find("ONNX Runtime ~1.30"), std::string::npos) << find_target("ort").source;
  EXPECT_EQ(capped.source, find_target("ort").source);
  EXPECT_TRUE(find_target("ort").load_tested);
  EXPECT_FALSE(base.load_tested) << "each file's own word";
  EXPECT_FALSE(capped.refuses("acme", "Warp", 1));
  EXPECT_EQ(capped.refuses("acme", "Bend", 1), "domain acme is not loadable by target warp-capped");
  ASSERT_NE(capped.caveat("acme", "Warp"), nullptr);
  EXPECT_EQ(capped.caveat("acme", "Warp")->text, "input 4-D");
  ASSERT_NE(capped.caveat("", "TopK"), nullptr);
  EXPECT_EQ(capped.caveat("", "TopK")->text, "sorted 1");
  EXPECT_EQ(capped.caveat("", "Relu"), nullptr);
  EXPECT_EQ(find_target("ort").caveat("", "TopK"), nullptr);

  // `check` notes a caveat where the model has such nodes, and nowhere else.
  const auto model = write_model_text(R"(<ir_version: 8, opset_import: ["": 13]>
g (float[2, 3] x, int64[1] k) => (float[2, 1] v, int64[2, 1] i) {
  v, i = TopK (x, k)
})", dir / "topk.onnx");
  const auto noted = run_cli({"check", model.string(), "--target", (dir / "warp-base.target").string()});
  EXPECT_EQ(noted.exit_code, 0) << noted.out << noted.err;
  EXPECT_NE(noted.out.find("  note: ai.onnx.TopK x1 (main graph): target warp-base restricts it: sorted 1 (not checked here)"),
            std::string::npos)
      << noted.out;
  EXPECT_EQ(run_cli({"check", model.string(), "--target", "ort"}).out.find("restricts"), std::string::npos);
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
  EXPECT_NE(result.out.find("customop-one-to-add (rules/registry-tutorial/registry-tutorial.rules:23): matched, but declined: "
                            "the replacement's ai.onnx.Add can't be loaded: target no-add does not load Add at ai.onnx opset 17"),
            std::string::npos)
      << result.out;
}

// A target that loads an op the target it builds on refuses keeps such nodes: the rules serving it
// through that one are there to make them loadable there (docs/rules.md, "Targets").
TEST(Targets, RulesServingWhatATargetBuildsOnLeaveWhatItLoads) {
  TempDir dir;
  write_file(dir / "with-one.target", "inherits onnx\nop test.customop CustomOpOne >= 1\n");
  const auto input = write_model_text(kCustomOpModel, dir / "in.onnx");
  const std::string target = (dir / "with-one.target").string();
  const auto kept =
      run_cli({"rewrite", input.string(), "-o", (dir / "kept.onnx").string(), "--target", target, "--explain", "CustomOpOne"});
  EXPECT_EQ(kept.exit_code, 0) << kept.out << kept.err;
  EXPECT_NE(kept.out.find("customop-one-to-add (rules/registry-tutorial/registry-tutorial.rules:23): no: target with-one loads "
                          "this node as it is (the rule serves it through onnx, which does not)"),
            std::string::npos)
      << kept.out;
  EXPECT_EQ(op_types(read_model(dir / "kept.onnx").graph()), (std::vector<std::string>{"CustomOpOne", "Relu"}));
  EXPECT_EQ(run_cli({"rewrite", input.string(), "-o", (dir / "onnx.onnx").string()}).exit_code, 0);
  EXPECT_EQ(op_types(read_model(dir / "onnx.onnx").graph()), (std::vector<std::string>{"Add", "Relu"}));
}

// ---- tensorrt and openvino: targets built from the runtimes' published tables ------------------

// `targets` says which table and version each comes from, and that nothing here loads models in
// those runtimes.
TEST(RuntimeTargets, TheListingNamesTheirSourcesAndThatTheyAreNotLoadTested) {
  const auto listed = run_cli({"targets"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  auto block = [&](const std::string& name) {
    const auto start = listed.out.find(name + "\n    ");
    if (start == std::string::npos) return std::string();
    const auto end = listed.out.find("\n", listed.out.find("load-tested", start));
    return listed.out.substr(start, end - start);
  };
  const std::string tensorrt = block("tensorrt");
  EXPECT_NE(tensorrt.find("builds on onnx; imports ai.onnx <= 24; model-local functions run"), std::string::npos) << tensorrt;
  EXPECT_NE(tensorrt.find("    source: onnx/onnx-tensorrt docs/operators.md @ 6bde659 (TensorRT 10.16, opsets 9..24)"), std::string::npos)
      << tensorrt;
  EXPECT_NE(tensorrt.find("    not load-tested here"), std::string::npos) << tensorrt;
  const std::string openvino = block("openvino");
  EXPECT_NE(openvino.find("imports ai.onnx <= 23; model-local functions inlined first"), std::string::npos) << openvino;
  EXPECT_NE(openvino.find("    source: openvinotoolkit/openvino src/frontends/onnx/docs/supported_ops.md @ 0ae60f0 (master after 2026.2"),
            std::string::npos)
      << openvino;
  EXPECT_NE(openvino.find("    not load-tested here"), std::string::npos) << openvino;
  EXPECT_NE(block("ort").find("    load-tested: the test suite loads models in the runtime"), std::string::npos) << block("ort");

  const auto json = run_cli({"targets", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto list = parse_json(json.out);
  std::map<std::string, std::pair<std::string, bool>> sources;
  for (const auto& entry : list.list_value().values()) {
    const auto& fields = entry.struct_value().fields();
    sources[fields.at("name").string_value()] = {fields.at("source").string_value(), fields.at("load_tested").bool_value()};
  }
  EXPECT_EQ(sources["tensorrt"], std::make_pair(find_target("tensorrt").source, false));
  EXPECT_EQ(sources["openvino"], std::make_pair(find_target("openvino").source, false));
  EXPECT_TRUE(sources["ort"].second);
}

// What each table refuses or adds, op by op, where the two runtimes differ from plain ONNX.
TEST(RuntimeTargets, TheTablesDecideOpByOp) {
  const Target& tensorrt = find_target("tensorrt");
  const Target& openvino = find_target("openvino");
  // Marked N by TensorRT, translated by OpenVINO.
  EXPECT_EQ(tensorrt.refuses("", "Unique", 17), "target tensorrt does not load Unique at ai.onnx opset 17");
  EXPECT_FALSE(openvino.refuses("", "Unique", 17));
  // No OpenVINO translator; TensorRT has one.
  EXPECT_EQ(openvino.refuses("", "LpPool", 17), "target openvino does not load LpPool at ai.onnx opset 17");
  EXPECT_FALSE(tensorrt.refuses("", "LpPool", 17));
  EXPECT_EQ(openvino.refuses("", "DeformConv", 19), "target openvino does not load DeformConv at ai.onnx opset 19");
  EXPECT_FALSE(tensorrt.refuses("", "DeformConv", 19));
  // Added to OpenVINO after 2026.2.
  EXPECT_EQ(openvino.refuses("", "RMSNormalization", 23), "target openvino does not load RMSNormalization at ai.onnx opset 23");
  EXPECT_FALSE(tensorrt.refuses("", "RMSNormalization", 23));
  // Both read GroupNormalization-18, which ONNX deprecated.
  EXPECT_TRUE(find_target("onnx").refuses("", "GroupNormalization", 18));
  EXPECT_FALSE(tensorrt.refuses("", "GroupNormalization", 18));
  EXPECT_FALSE(openvino.refuses("", "GroupNormalization", 18));
  // ai.onnx.ml: none in TensorRT, Normalizer alone in OpenVINO.
  EXPECT_EQ(tensorrt.refuses("ai.onnx.ml", "Normalizer", 1), "domain ai.onnx.ml is not loadable by target tensorrt");
  EXPECT_FALSE(openvino.refuses("ai.onnx.ml", "Normalizer", 1));
  EXPECT_EQ(openvino.refuses("ai.onnx.ml", "LabelEncoder", 2), "domain ai.onnx.ml is not loadable by target openvino");
  // Contrib ops: OpenVINO translates some, TensorRT none; TensorRT's plugins by name, in both
  // domains exporters write, and only those with dynamic shapes.
  EXPECT_FALSE(openvino.refuses("com.microsoft", "SkipLayerNormalization", 1));
  EXPECT_EQ(openvino.refuses("com.microsoft", "Inverse", 1), "domain com.microsoft is not loadable by target openvino");
  EXPECT_EQ(tensorrt.refuses("com.microsoft", "SkipLayerNormalization", 1), "domain com.microsoft is not loadable by target tensorrt");
  EXPECT_FALSE(tensorrt.refuses("", "EfficientNMS_TRT", 11));
  EXPECT_FALSE(tensorrt.refuses("TRT", "EfficientNMS_TRT", 1));
  EXPECT_FALSE(tensorrt.refuses("", "BatchedNMSDynamic_TRT", 13));
  EXPECT_EQ(tensorrt.refuses("", "BatchedNMS_TRT", 13), "ai.onnx has no op BatchedNMS_TRT");
  EXPECT_EQ(openvino.refuses("TRT", "EfficientNMS_TRT", 1), "domain TRT is not loadable by target openvino");
  EXPECT_FALSE(openvino.refuses("org.openvinotoolkit", "DeformableConv2D", 1));
}

// The seed's custom ops: `check` names them for both runtimes, and `rewrite` for the runtime makes
// models `check` passes, except com.microsoft::Inverse, which neither runtime has and no rule
// turns into standard ops (rules/aten).
TEST(RuntimeTargets, TheSeedsCustomOpsAreNamedAndTheirRewritesPass) {
  TempDir dir;
  const fs::path group_norm = source_dir() / "testdata" / "mygroupnorm-opset9.onnx";
  // Scenario 2: torchvision's deform_conv2d through the tutorial's placeholder symbolic (opset 9).
  const fs::path deform_conv = write_model_text(R"(<ir_version: 4, opset_import: ["": 9, "custom": 1]>
g (float[4, 3, 10, 10] input, float[4, 18, 8, 8] offset, float[5, 3, 3, 3] weight) => (float[4, 5, 8, 8] y) {
  y = custom.deform_conv2d (input, weight, offset)
})", dir / "deform_conv.onnx");
  // Scenario 4: torch.inverse registered to ONNX Runtime's contrib op.
  const fs::path inverse = write_model_text(R"(<ir_version: 7, opset_import: ["": 13, "com.microsoft": 1]>
g (float[2, 3, 3] x) => (float[2, 3, 3] y) {
  y = com.microsoft.Inverse (x)
})", dir / "inverse.onnx");
  for (const std::string target : {"tensorrt", "openvino"}) {
    SCOPED_TRACE(target);
    const auto unmet_norm = run_cli({"check", group_norm.string(), "--target", target});
    EXPECT_EQ(unmet_norm.exit_code, 1);
    EXPECT_NE(unmet_norm.out.find(fmt::format("  mydomain.mygroupnorm x1 (main graph): domain mydomain is not loadable by target {}; "
                                              "`rewrite --target {}` covers it: ",
                                              target, target)),
              std::string::npos)
        << unmet_norm.out;
    const auto unmet_deform = run_cli({"check", deform_conv.string(), "--target", target});
    EXPECT_EQ(unmet_deform.exit_code, 1);
    EXPECT_NE(unmet_deform.out.find(
                  fmt::format("  custom.deform_conv2d x1 (main graph): domain custom is not loadable by target {}", target)),
              std::string::npos)
        << unmet_deform.out;
    const auto unmet_inverse = run_cli({"check", inverse.string(), "--target", target});
    EXPECT_EQ(unmet_inverse.exit_code, 1);
    EXPECT_NE(unmet_inverse.out.find(fmt::format("  com.microsoft.Inverse x1 (main graph): domain com.microsoft is not loadable by "
                                                 "target {}; no rule covers it",
                                                 target)),
              std::string::npos)
        << unmet_inverse.out;

    for (const auto& model : {group_norm, deform_conv}) {
      const fs::path out = dir / (target + "-" + model.filename().string());
      const auto rewritten = run_cli({"rewrite", model.string(), "-o", out.string(), "--target", target});
      EXPECT_EQ(rewritten.exit_code, 0) << rewritten.out << rewritten.err;
      EXPECT_NE(rewritten.out.find(fmt::format("target {}: met", target)), std::string::npos) << rewritten.out;
      const auto checked = run_cli({"check", out.string(), "--target", target});
      EXPECT_EQ(checked.exit_code, 0) << checked.out;
      EXPECT_NE(checked.out.find(fmt::format("target {}: every node is loadable", target)), std::string::npos) << checked.out;
    }
    const fs::path out = dir / (target + "-inverse.onnx");
    const auto stays = run_cli({"rewrite", inverse.string(), "-o", out.string(), "--target", target});
    EXPECT_EQ(stays.exit_code, 1) << stays.out << stays.err;
    EXPECT_EQ(run_cli({"check", out.string(), "--target", target}).exit_code, 1);
  }
}

// A rule for onnx serves both targets (they build on it), but leaves alone what the runtime loads
// as it is: TensorRT keeps its NMS plugin and the ai.onnx DeformConv it has, OpenVINO the contrib
// op it translates; what they don't have is rewritten as for onnx.
TEST(RuntimeTargets, RulesForOnnxKeepWhatTheRuntimeLoads) {
  TempDir dir;
  const fs::path nms = write_model_text(R"(<ir_version: 8, opset_import: ["": 11, "TRT": 1]>
g (float[1, 100, 4] boxes, float[1, 100, 3] scores) => (int32[1, 1] num, float[1, 10, 4] det_boxes, float[1, 10] det_scores,
                                                         int32[1, 10] det_classes) {
  num, det_boxes, det_scores, det_classes = TRT.EfficientNMS_TRT <background_class = -1, box_coding = 0, iou_threshold = 0.65,
      max_output_boxes = 10, plugin_version = "1", score_activation = 0, score_threshold = 0.25> (boxes, scores)
})", dir / "nms.onnx");
  EXPECT_EQ(run_cli({"check", nms.string(), "--target", "tensorrt"}).exit_code, 0);
  EXPECT_EQ(run_cli({"check", nms.string(), "--target", "openvino"}).exit_code, 1);
  const auto kept = run_cli({"rewrite", nms.string(), "-o", (dir / "nms-trt.onnx").string(), "--target", "tensorrt", "--explain",
                             "EfficientNMS_TRT"});
  EXPECT_EQ(kept.exit_code, 0) << kept.out << kept.err;
  EXPECT_NE(kept.out.find("efficient-nms-trt (rules/trt-nms/trt-nms.rules:50): no: target tensorrt loads this node as it is "
                          "(the rule serves it through onnx, which does not)"),
            std::string::npos)
      << kept.out;
  EXPECT_EQ(op_types(read_model(dir / "nms-trt.onnx").graph()), std::vector<std::string>{"EfficientNMS_TRT"});
  const auto spelled = run_cli({"rewrite", nms.string(), "-o", (dir / "nms-ov.onnx").string(), "--target", "openvino"});
  EXPECT_EQ(spelled.exit_code, 0) << spelled.out << spelled.err;
  const auto spelled_ops = op_types(read_model(dir / "nms-ov.onnx").graph());
  EXPECT_NE(std::find(spelled_ops.begin(), spelled_ops.end(), "NonMaxSuppression"), spelled_ops.end());

  // mmdeploy's instance-norm plugin is mmdeploy's, not TensorRT's: rewritten for tensorrt too.
  const fs::path norm = write_model_text(R"(<ir_version: 6, opset_import: ["": 11, "mmdeploy": 1]>
g (float[N, 4, 6] x) => (float[N, 4, 6] y) <float[4] ones = {1.0, 1.0, 1.0, 1.0}, float[4] zeros = {0.0, 0.0, 0.0, 0.0}> {
  y = mmdeploy.TRTInstanceNormalization <epsilon = 1e-5> (x, ones, zeros)
})", dir / "norm.onnx");
  const auto norm_out = run_cli({"rewrite", norm.string(), "-o", (dir / "norm-trt.onnx").string(), "--target", "tensorrt"});
  EXPECT_EQ(norm_out.exit_code, 0) << norm_out.out << norm_out.err;
  EXPECT_EQ(op_types(read_model(dir / "norm-trt.onnx").graph()), std::vector<std::string>{"InstanceNormalization"});

  // custom::deform_conv2d at opset 19: DeformConv for TensorRT, which has it; the Gather form for
  // OpenVINO, which has no DeformConv translator.
  const fs::path deform = write_model_text(R"(<ir_version: 9, opset_import: ["": 19, "custom": 1]>
g (float[4, 3, 10, 10] input, float[4, 18, 8, 8] offset, float[5, 3, 3, 3] weight) => (float[4, 5, 8, 8] y) {
  y = custom.deform_conv2d (input, weight, offset)
})", dir / "deform19.onnx");
  EXPECT_EQ(run_cli({"rewrite", deform.string(), "-o", (dir / "deform-trt.onnx").string(), "--target", "tensorrt"}).exit_code, 0);
  EXPECT_EQ(op_types(read_model(dir / "deform-trt.onnx").graph()), std::vector<std::string>{"DeformConv"});
  const auto gathered = run_cli({"rewrite", deform.string(), "-o", (dir / "deform-ov.onnx").string(), "--target", "openvino"});
  EXPECT_EQ(gathered.exit_code, 0) << gathered.out << gathered.err;
  EXPECT_NE(gathered.out.find("rule torchvision-deform-conv2d-gather: 1 match"), std::string::npos) << gathered.out;
  const auto gathered_ops = op_types(read_model(dir / "deform-ov.onnx").graph());
  EXPECT_EQ(std::find(gathered_ops.begin(), gathered_ops.end(), "DeformConv"), gathered_ops.end());

  // com.microsoft::Gelu: OpenVINO translates it; onnx (and TensorRT) get standard ops.
  const fs::path gelu = write_model_text(R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft": 1]>
g (float[2, 8] x) => (float[2, 8] y) {
  y = com.microsoft.Gelu (x)
})", dir / "gelu.onnx");
  EXPECT_EQ(run_cli({"rewrite", gelu.string(), "-o", (dir / "gelu-ov.onnx").string(), "--target", "openvino"}).exit_code, 0);
  EXPECT_EQ(op_types(read_model(dir / "gelu-ov.onnx").graph()), std::vector<std::string>{"Gelu"});
  EXPECT_EQ(read_model(dir / "gelu-ov.onnx").graph().node(0).domain(), "com.microsoft");
  EXPECT_EQ(run_cli({"rewrite", gelu.string(), "-o", (dir / "gelu-trt.onnx").string(), "--target", "tensorrt"}).exit_code, 0);
  EXPECT_EQ(read_model(dir / "gelu-trt.onnx").graph().node(0).domain(), "");
}

// What the tables restrict per node is noted by `check`, not verified; imports above a runtime's
// opsets are flagged; model-local functions run in TensorRT and are inlined for OpenVINO.
TEST(RuntimeTargets, CaveatsOpsetsAndLocalFunctions) {
  TempDir dir;
  const fs::path reduce = write_model_text(R"(<ir_version: 8, opset_import: ["": 13]>
g (float[2, 3] x, int64[1] axes) => (float[2, 1] y) {
  y = ReduceSum <keepdims = 1> (x, axes)
})", dir / "reduce.onnx");
  const auto noted = run_cli({"check", reduce.string(), "--target", "tensorrt"});
  EXPECT_EQ(noted.exit_code, 0) << noted.out;
  EXPECT_NE(noted.out.find("  note: ai.onnx.ReduceSum x1 (main graph): target tensorrt restricts it: axes an initializer "
                           "(not checked here)"),
            std::string::npos)
      << noted.out;
  EXPECT_EQ(run_cli({"check", reduce.string(), "--target", "onnx"}).out.find("restricts"), std::string::npos);

  const fs::path at24 = write_model_text(R"(<ir_version: 10, opset_import: ["": 24]>
g (float[2, 3] x) => (float[2, 3] y) {
  y = Relu (x)
})", dir / "at24.onnx");
  EXPECT_EQ(run_cli({"check", at24.string(), "--target", "tensorrt"}).exit_code, 0);
  const auto capped = run_cli({"check", at24.string(), "--target", "openvino"});
  EXPECT_EQ(capped.exit_code, 1);
  EXPECT_NE(capped.out.find("the model imports ai.onnx opset 24; target openvino loads up to 23"), std::string::npos) << capped.out;
  const auto lowered = run_cli({"rewrite", at24.string(), "-o", (dir / "at23.onnx").string(), "--target", "openvino"});
  EXPECT_EQ(lowered.exit_code, 0) << lowered.out << lowered.err;
  EXPECT_EQ(opset_import(read_model(dir / "at23.onnx"), ""), 23);

  const fs::path selu = source_dir() / "testdata" / "onnxscript-selu.onnx";
  EXPECT_EQ(run_cli({"check", selu.string(), "--target", "tensorrt"}).exit_code, 0);
  const auto called = run_cli({"check", selu.string(), "--target", "openvino"});
  EXPECT_EQ(called.exit_code, 1);
  EXPECT_NE(called.out.find("calls a model-local function, which this target does not run"), std::string::npos) << called.out;
  const auto inlined = run_cli({"rewrite", selu.string(), "-o", (dir / "selu-ov.onnx").string(), "--target", "openvino"});
  EXPECT_EQ(inlined.exit_code, 0) << inlined.out << inlined.err;
  EXPECT_EQ(read_model(dir / "selu-ov.onnx").functions_size(), 0);
}

// ---- the ort target agrees with ONNX Runtime ---------------------------------------------------

struct Verdict {
  std::string model;
  bool loads = false;
  std::string error;
};

// ORT's verdicts on the models listed (tests/ort/load_verdicts.js), and with `optimize_into` on
// the models ORT itself optimized from them too.
std::vector<Verdict> ort_verdicts(const std::vector<fs::path>& models, const TempDir& dir, const std::string& name,
                                  bool optimize) {
  std::string list;
  for (const auto& model : models) list += model.string() + "\n";
  write_file(dir / (name + ".txt"), list);
  std::vector<std::string> argv{"node", (source_dir() / "tests" / "ort" / "load_verdicts.js").string(), (dir / (name + ".txt")).string()};
  if (optimize) {
    fs::create_directories(dir / (name + "-optimized"));
    argv.insert(argv.end(), {"--optimize-into", (dir / (name + "-optimized")).string()});
  }
  const auto result = run_command(argv);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  std::vector<Verdict> verdicts;
  std::istringstream lines(result.out);
  for (std::string line; std::getline(lines, line);) {
    google::protobuf::Struct fields;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(line, &fields).ok()) << line;
    verdicts.push_back({fields.fields().at("model").string_value(), fields.fields().at("loads").bool_value(),
                        fields.fields().at("error").string_value()});
  }
  return verdicts;
}

// `check --target ort` says a model loads exactly when ONNX Runtime loads it, as far as the op
// tables decide: on the conformance corpus, on every ort rule's output, on test models, and on
// what ORT's own optimizer writes from them (LayerNormalization in the default domain below
// opset 17 was refused before). ORT refusing a model for other reasons (a bad attribute, a type
// its kernels lack) is not the tables' business and is not compared.
TEST(OrtTarget, AgreesWithOnnxRuntimeOnWhatItLoads) {
  ASSERT_TEST_DATA(corpus, "conformance");
  TempDir dir;
  std::vector<fs::path> produced;
  for (const auto& rule : builtin_rules().rules) {
    if (!rule->serves(find_target("ort")) || !rule->example) continue;
    RewriteOptions options;
    options.target = "ort";
    options.only = {rule->id};
    options.max_opset = rule->example->max_opset;
    const auto rewritten = rewrite_text(rule->example->model_text, builtin_rules(), options);
    produced.push_back(dir / (rule->id + ".onnx"));
    write_file(produced.back(), rewritten.bytes);
    produced.push_back(dir / (rule->id + "-example.onnx"));
    write_file(produced.back(), serialize(parse_model_text(rule->example->model_text)));
  }
  for (const auto& entry : fs::recursive_directory_iterator(source_dir() / "rules")) {
    if (entry.path().extension() == ".onnx") produced.push_back(entry.path());
  }
  std::vector<Verdict> verdicts = ort_verdicts(produced, dir, "produced", /*optimize=*/true);
  std::vector<fs::path> cases;
  for (const auto& entry : fs::recursive_directory_iterator(corpus)) {
    if (entry.path().extension() == ".onnx") cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  const auto more = ort_verdicts(cases, dir, "conformance", /*optimize=*/false);
  verdicts.insert(verdicts.end(), more.begin(), more.end());
  ASSERT_GT(verdicts.size(), 2000u);

  int compared = 0, optimized = 0;
  for (const auto& verdict : verdicts) {
    CheckReport report;
    try {
      report = check_model(load_model(verdict.model, {.allow_missing_external_data = true}), find_target("ort"), std::nullopt);
    } catch (const InputError&) {
      continue;  // a file we refuse to read (the corpus holds a few); ORT's view of it is beside the point
    }
    const bool about_ops = verdict.error.find("is not a registered function/op") != std::string::npos ||
                           verdict.error.find("No opset import for domain") != std::string::npos ||
                           verdict.error.find("Unsupported") != std::string::npos;
    if (!verdict.loads && !about_ops) continue;
    ++compared;
    optimized += verdict.model.find("-optimized") != std::string::npos ? 1 : 0;
    std::string ours;
    for (const auto& entry : report.unloadable) ours += fmt::format("{}.{}: {}; ", entry.domain, entry.op_type, entry.reason);
    for (const auto& problem : report.opset_problems) ours += problem + "; ";
    EXPECT_EQ(report.ok(), verdict.loads) << verdict.model << "\n  ORT: " << (verdict.loads ? "loads" : verdict.error)
                                          << "\n  check --target ort: " << (report.ok() ? "loadable" : ours);
  }
  std::cout << compared << " models compared (" << optimized << " optimized by ORT), of " << verdicts.size() << "\n";
  EXPECT_GT(compared, 2000);
  EXPECT_GT(optimized, 20) << "ORT's own optimized models are part of the comparison";
}

}  // namespace
}  // namespace onnx_rewrite
