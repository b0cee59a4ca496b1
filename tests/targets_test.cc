// Targets as data (targets/*.target, docs/rules.md "Targets"): files that build on each other,
// exceptions per op and highest opsets, a target given as a file on the command line, rules
// serving targets that build on theirs, and clean errors for a bad file.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <iostream>
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
  EXPECT_NE(result.out.find("customop-one-to-add (families/registry-tutorial/registry-tutorial.rules:23): matched, but declined: "
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
  EXPECT_NE(kept.out.find("customop-one-to-add (families/registry-tutorial/registry-tutorial.rules:23): no: target with-one loads "
                          "this node as it is (the rule serves it through onnx, which does not)"),
            std::string::npos)
      << kept.out;
  EXPECT_EQ(op_types(read_model(dir / "kept.onnx").graph()), (std::vector<std::string>{"CustomOpOne", "Relu"}));
  EXPECT_EQ(run_cli({"rewrite", input.string(), "-o", (dir / "onnx.onnx").string()}).exit_code, 0);
  EXPECT_EQ(op_types(read_model(dir / "onnx.onnx").graph()), (std::vector<std::string>{"Add", "Relu"}));
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
  for (const auto& entry : fs::recursive_directory_iterator(source_dir() / "families")) {
    if (entry.path().extension() == ".onnx") produced.push_back(entry.path());
  }
  std::vector<Verdict> verdicts = ort_verdicts(produced, dir, "produced", /*optimize=*/true);
  if (const auto corpus = conformance_dir()) {
    std::vector<fs::path> cases;
    for (const auto& entry : fs::recursive_directory_iterator(*corpus)) {
      if (entry.path().extension() == ".onnx") cases.push_back(entry.path());
    }
    std::sort(cases.begin(), cases.end());
    const auto more = ort_verdicts(cases, dir, "conformance", /*optimize=*/false);
    verdicts.insert(verdicts.end(), more.begin(), more.end());
  }
  ASSERT_GT(verdicts.size(), 200u);

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
  EXPECT_GT(compared, 200);
  EXPECT_GT(optimized, 20) << "ORT's own optimized models are part of the comparison";
}

}  // namespace
}  // namespace onnx_rewrite
