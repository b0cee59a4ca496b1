// The command line contract (docs/cli.md): exit codes, one-line errors naming the file, no
// output file on failure, never a crash or a hang whatever the bytes, and every subcommand.
#include <gtest/gtest.h>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <fmt/format.h>

#include <unistd.h>

#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "verify/opset.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

const char* kUnknownOpModel = R"(<ir_version: 8, opset_import: ["": 17, "acme": 1]>
g (float[2, 3] x) => (float[2, 3] z) {
  t = acme.Frobnicate (x)
  z = Relu (t)
})";

bool one_error_line(const CommandResult& result, const std::string& prefix) {
  const std::string& err = result.err;
  return err.rfind(prefix, 0) == 0 && err.find('\n') == err.size() - 1;
}

// The CLI run from `directory` (for paths relative to it).
CommandResult run_cli_in(const fs::path& directory, const std::vector<std::string>& args) {
  std::string command = "cd '" + directory.string() + "' && exec '" + cli_path().string() + "'";
  for (const auto& arg : args) command += " '" + arg + "'";
  return run_command({"sh", "-c", command});
}

// A model importing ai.onnx `version` (any int64) around one Relu, or `op`.
onnx::ModelProto opset_model(int64_t version, const std::string& op = "Relu") {
  onnx::ModelProto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y) { y = Relu (x) })");
  model.mutable_opset_import(0)->set_version(version);
  model.mutable_graph()->mutable_node(0)->set_op_type(op);
  return model;
}

// ---- Usage ------------------------------------------------------------------------------------

TEST(Cli, VersionAndHelpForEverySubcommand) {
  const auto version = run_cli({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("onnx-rewrite 0.", 0), 0u) << version.out;
  for (const char* command : {"rewrite", "check", "verify", "inspect", "rules", "batch"}) {
    const auto help = run_cli({command, "--help"});
    EXPECT_EQ(help.exit_code, 0) << command;
    EXPECT_NE(help.out.find("Usage:"), std::string::npos) << command;
  }
}

TEST(Cli, UsageErrorsExitWith2AndOneLine) {
  TempDir dir;
  const auto model = write_model_text(kCustomOpModel, dir / "m.onnx");
  const std::vector<std::vector<std::string>> misuses = {
      {},
      {"frobnicate"},
      {"rewrite", model.string()},
      {"rewrite", model.string(), "-o", (dir / "o.onnx").string(), "--in-place"},
      {"rewrite", model.string(), "-o", (dir / "o.onnx").string(), "--target", "tvm"},
      {"rewrite", model.string(), "-o", (dir / "o.onnx").string(), "--only", "no-such-rule"},
      {"rewrite", model.string(), "-o", (dir / "o.onnx").string(), "--opset", "zero"},
      // Beyond the version tables (issue #34: it ran, wrote the model and exited 1).
      {"rewrite", model.string(), "-o", (dir / "o.onnx").string(), "--to-opset", "99"},
      {"rewrite", model.string(), "-o", (dir / "missing-dir" / "o.onnx").string()},
      {"check", model.string(), "--bogus"},
      {"batch", dir.path().string()},
  };
  for (const auto& args : misuses) {
    const auto result = run_cli(args);
    EXPECT_EQ(result.exit_code, 2) << ::testing::PrintToString(args) << result.err;
    EXPECT_TRUE(one_error_line(result, "onnx-rewrite: error: ")) << ::testing::PrintToString(args) << "\n" << result.err;
  }
  EXPECT_FALSE(fs::exists(dir / "o.onnx"));
}

TEST(Cli, PathErrorsNameTheFileTheyAreAbout) {
  TempDir dir;
  const auto model = write_model_text(kCustomOpModel, dir / "m.onnx");
  const auto expect_error = [](const std::vector<std::string>& args, const std::string& line) {
    const auto result = run_cli(args);
    EXPECT_EQ(result.exit_code, 2) << result.err;
    EXPECT_EQ(result.err, "onnx-rewrite: error: " + line + "\n");
  };
  const fs::path missing = dir / "missing-dir";
  expect_error({"rewrite", model.string(), "-o", (missing / "o.onnx").string()},
               (missing / "o.onnx").string() + ": output directory '" + missing.string() + "' does not exist");
  expect_error({"rewrite", model.string(), "-o", (dir / "o.onnx").string(), "--report", (missing / "r.json").string()},
               (missing / "r.json").string() + ": report directory '" + missing.string() + "' does not exist");
  expect_error({"batch", model.string(), "-o", (dir / "o").string(), "--report", (missing / "r.json").string()},
               (missing / "r.json").string() + ": report directory '" + missing.string() + "' does not exist");
  expect_error({"rewrite", model.string(), "-o", dir.path().string()}, dir.path().string() + ": the output is a directory");
  expect_error({"rewrite", model.string(), "-o", model.string()}, model.string() + ": -o would replace the input model; nothing was written");
  EXPECT_FALSE(fs::exists(dir / "o.onnx"));
  // batch creates OUT_DIR, unless something is in the way.
  const auto blocked = run_cli({"batch", model.string(), "-o", (model / "out").string()});
  EXPECT_EQ(blocked.exit_code, 2);
  EXPECT_TRUE(one_error_line(blocked, "onnx-rewrite: error: " + (model / "out").string() + ": cannot create the output directory"))
      << blocked.err;
}

TEST(Cli, AnUnknownSubcommandIsNamedWithTheKnownOnes) {
  const auto result = run_cli({"frob", "m.onnx"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.err, "onnx-rewrite: error: unknown subcommand 'frob' (known: rewrite, check, verify, inspect, rules, targets, batch, merge-reports) (see --help)\n");
}

TEST(Cli, RepeatableOptionsTakeOneValueEach) {
  // `--only ID MODEL` once read MODEL as a second rule id and failed "model is required".
  TempDir dir;
  const auto model = write_model_text(kCustomOpModel, dir / "m.onnx");
  write_file(dir / "mine.rules", "");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"rewrite", "--only", "customop-one-to-add", model.string(), "-o", (dir / "a.onnx").string()},
           {"rewrite", "--skip", "no-rule-at-all-but-skip-checks-ids", model.string(), "-o", (dir / "b.onnx").string()},
           {"rewrite", "--rules", (dir / "mine.rules").string(), model.string(), "-o", (dir / "c.onnx").string()},
           {"rewrite", "--only", "customop-one-to-add", "--only", "customop-one-to-add", model.string(), "-o", (dir / "d.onnx").string()},
           {"batch", "--rules", (dir / "mine.rules").string(), model.string(), "-o", (dir / "out").string()},
           {"inspect", "--rules", (dir / "mine.rules").string(), model.string()}}) {
    const auto result = run_cli(args);
    const bool skip = args[1] == "--skip";
    EXPECT_EQ(result.exit_code, skip ? 2 : 0) << ::testing::PrintToString(args) << result.err;
    if (skip) {
      EXPECT_EQ(result.err, "onnx-rewrite: error: --skip no-rule-at-all-but-skip-checks-ids: no rule has that id\n");
    }
  }
  onnx::ModelProto written;
  ASSERT_TRUE(written.ParseFromString(read_file(dir / "a.onnx")));
  ASSERT_EQ(written.graph().node_size(), 2);
  EXPECT_EQ(written.graph().node(0).op_type(), "Add");
  EXPECT_TRUE(fs::exists(dir / "c.onnx"));
  EXPECT_TRUE(fs::exists(dir / "d.onnx"));
  EXPECT_TRUE(fs::exists(dir / "out/m.onnx"));
  // Two values after one flag: the second is the model, and a third word is no argument at all.
  const auto two = run_cli({"rewrite", "--only", "customop-one-to-add", model.string(), "extra", "-o", (dir / "e.onnx").string()});
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_FALSE(fs::exists(dir / "e.onnx"));
}

// ---- Bad input --------------------------------------------------------------------------------

class BadInput : public ::testing::Test {
 protected:
  // Runs `rewrite` on `bytes` and checks the contract: exit 3, one line naming the file, no output.
  void expect_refused(const std::string& bytes, const std::string& why, const std::string& name = "bad.onnx") {
    const fs::path input = dir_ / name;
    write_file(input, bytes);
    const fs::path output = dir_ / "out.onnx";
    const auto result = run_cli({"rewrite", input.string(), "-o", output.string()});
    EXPECT_EQ(result.exit_code, 3) << why << ": " << result.err;
    EXPECT_TRUE(one_error_line(result, "onnx-rewrite: error: " + input.string() + ": ")) << why << ": " << result.err;
    EXPECT_FALSE(fs::exists(output)) << why;
    EXPECT_EQ(read_file(input), bytes) << why << ": the input is never modified";
    for (const auto& entry : fs::directory_iterator(dir_.path())) {
      EXPECT_EQ(entry.path().filename().string().find(".onnx-rewrite-"), std::string::npos) << "temporary file left";
    }
  }
  TempDir dir_;
};

TEST_F(BadInput, IsRefusedWithExit3AndNoOutput) {
  const std::string valid = serialize(parse_model_text(kCustomOpModel));
  expect_refused("", "empty file");
  std::mt19937 random(7);
  std::string noise(4096, '\0');
  for (auto& c : noise) c = static_cast<char>(random());
  expect_refused(noise, "random bytes");
  expect_refused("<ir_version: 8>\ngraph (float x) => (float y) { y = Relu (x) }\n", "ONNX text instead of protobuf");
  expect_refused(valid.substr(0, valid.size() / 2), "truncated model");
  expect_refused(valid.substr(0, 3), "truncated to 3 bytes");
}

TEST_F(BadInput, MissingFilesAndDirectoriesAreRefused) {
  const auto missing = run_cli({"rewrite", (dir_ / "nope.onnx").string(), "-o", (dir_ / "out.onnx").string()});
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_EQ(missing.err, "onnx-rewrite: error: " + (dir_ / "nope.onnx").string() + ": no such file\n");
  fs::create_directory(dir_ / "adir.onnx");
  const auto directory = run_cli({"check", (dir_ / "adir.onnx").string()});
  EXPECT_EQ(directory.exit_code, 3);
  EXPECT_EQ(directory.err, "onnx-rewrite: error: " + (dir_ / "adir.onnx").string() + ": is a directory, not a model file\n");
  EXPECT_FALSE(fs::exists(dir_ / "out.onnx"));
}

TEST_F(BadInput, MissingExternalDataIsCalledMissingWhateverThePathLooksLike) {
  // A model path without a directory part ("m.onnx") once made every missing data file look
  // like a symbolic link out of the model's directory.
  fs::create_directories(dir_ / "sub");
  write_file(dir_ / "sub/m.onnx", external_data_model("nothere.bin"));
  for (const char* command : {"rewrite", "batch"}) {
    for (const auto& [cwd, path] : std::vector<std::pair<fs::path, std::string>>{
             {dir_ / "sub", "m.onnx"}, {dir_ / "sub", "./m.onnx"}, {dir_.path(), "sub/m.onnx"}, {"/", (dir_ / "sub/m.onnx").string()}}) {
      const bool batch = std::string(command) == "batch";
      std::vector<std::string> args{command, path, "-o", (dir_ / (batch ? "out" : "out.onnx")).string()};
      const auto result = run_cli_in(cwd, args);
      const std::string error = "tensor 'y' (main graph): external data file 'nothere.bin' is missing";
      if (batch) {
        EXPECT_EQ(result.exit_code, 1) << path;
        EXPECT_NE(result.out.find("failed: " + path + ": " + error + "\n"), std::string::npos) << result.out;
      } else {
        EXPECT_EQ(result.exit_code, 3) << command << " " << path;
        EXPECT_EQ(result.err, "onnx-rewrite: error: " + path + ": " + error + "\n") << command << " in " << cwd;
      }
    }
  }
  EXPECT_FALSE(fs::exists(dir_ / "out.onnx"));
  EXPECT_FALSE(fs::exists(dir_ / "out/m.onnx"));
  // Present, it is found and carried along to another directory, all paths relative.
  write_file(dir_ / "sub/nothere.bin", std::string(24, '\0'));
  fs::create_directories(dir_ / "sub/out");
  const auto rewritten = run_cli_in(dir_ / "sub", {"rewrite", "m.onnx", "-o", "out/m.onnx"});
  EXPECT_EQ(rewritten.exit_code, 0) << rewritten.err;
  EXPECT_EQ(read_file(dir_ / "sub/out/nothere.bin"), std::string(24, '\0'));
}

TEST_F(BadInput, ErrorLinesShowControlBytesEscaped) {
  // A newline in a data file's name must not break the one-line error.
  expect_refused(external_data_model("no\nsuch.bin"), "newline in a location");
  const auto result = run_cli({"rewrite", (dir_ / "bad.onnx").string(), "--dry-run"});
  EXPECT_EQ(result.err, "onnx-rewrite: error: " + (dir_ / "bad.onnx").string() +
                            ": tensor 'y' (main graph): external data file 'no\\x0asuch.bin' is missing\n");
  // Cut at its NUL, this location would name w.bin, which is there.
  write_file(dir_ / "w.bin", std::string(24, '\0'));
  expect_refused(external_data_model(std::string("w.bin") + '\0' + "x"), "NUL in a location");
}

TEST_F(BadInput, BitFlipsNeverCrashOrHang) {
  const std::string valid = serialize(parse_model_text(kCustomOpModel));
  std::mt19937 random(11);
  for (int trial = 0; trial < 40; ++trial) {
    std::string flipped = valid;
    const size_t bit = random() % (flipped.size() * 8);
    flipped[bit / 8] = static_cast<char>(flipped[bit / 8] ^ (1 << (bit % 8)));
    const fs::path input = dir_ / "flipped.onnx";
    const fs::path output = dir_ / "flipped-out.onnx";
    fs::remove(output);
    write_file(input, flipped);
    const auto result = run_command({"timeout", "30", cli_path().string(), "rewrite", input.string(), "-o", output.string()});
    ASSERT_TRUE(result.exit_code == 0 || result.exit_code == 1 || result.exit_code == 3)
        << "bit " << bit << ": exit " << result.exit_code << " " << result.err;
    if (result.exit_code == 3) {
      EXPECT_TRUE(one_error_line(result, "onnx-rewrite: error: ")) << result.err;
      EXPECT_FALSE(fs::exists(output));
    } else {
      onnx::ModelProto written;
      EXPECT_TRUE(written.ParseFromString(read_file(output))) << "a flip that still parses gives a correct run";
    }
  }
}

TEST_F(BadInput, BrokenRuleFilesGiveFileLineColumn) {
  const auto model = write_model_text(kCustomOpModel, dir_ / "m.onnx");
  write_file(dir_ / "broken.rules", "rule x\n  targets: onnx\n  pattern (a) => (b) {\n    b = Relu (a\n  }\nend\n");
  const auto result = run_cli({"rewrite", model.string(), "-o", (dir_ / "out.onnx").string(), "--rules", (dir_ / "broken.rules").string()});
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_TRUE(one_error_line(result, "onnx-rewrite: error: " + (dir_ / "broken.rules").string() + ":5:3: the pattern is not valid ONNX text"))
      << result.err;
  EXPECT_FALSE(fs::exists(dir_ / "out.onnx"));
}

// ---- rewrite ----------------------------------------------------------------------------------

TEST(Rewrite, SummaryReportAndExitCodeWhenTheTargetIsMet) {
  TempDir dir;
  const auto model = write_model_text(kCustomOpModel, dir / "m.onnx");
  const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--report", (dir / "r.json").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("rule customop-one-to-add: 1 match"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("test.customop.CustomOpOne      1 -> 0"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("target onnx: met"), std::string::npos) << result.out;
  const auto report = parse_json(read_file(dir / "r.json")).struct_value().fields();
  EXPECT_EQ(report.at("status").string_value(), "rewritten");
  EXPECT_EQ(report.at("rules").list_value().values(0).struct_value().fields().at("matches").number_value(), 1);
  EXPECT_TRUE(report.at("check").struct_value().fields().at("ok").bool_value());
  EXPECT_EQ(run_cli({"check", (dir / "out.onnx").string()}).exit_code, 0);
}

TEST(Rewrite, TargetNotMetExits1ListsTheNodesAndStillWrites) {
  TempDir dir;
  const auto model = write_model_text(kUnknownOpModel, dir / "m.onnx");
  const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string()});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("acme.Frobnicate x1 (main graph): domain acme is not loadable by target onnx"), std::string::npos)
      << result.err;
  EXPECT_EQ(read_file(dir / "out.onnx"), read_file(model)) << "no rule applied: an exact copy";
}

TEST(Rewrite, DryRunWritesNothingAndInPlaceReplacesTheInput) {
  TempDir dir;
  const auto model = write_model_text(kCustomOpModel, dir / "m.onnx");
  const std::string before = read_file(model);
  const auto dry = run_cli({"rewrite", model.string(), "--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_NE(dry.out.find("dry run, nothing written"), std::string::npos);
  EXPECT_EQ(read_file(model), before);
  const auto in_place = run_cli({"rewrite", model.string(), "--in-place"});
  EXPECT_EQ(in_place.exit_code, 0) << in_place.err;
  onnx::ModelProto written;
  ASSERT_TRUE(written.ParseFromString(read_file(model)));
  EXPECT_EQ(written.graph().node(0).op_type(), "Add");
}

TEST(Rewrite, AMissingReportDirectoryIsAUsageErrorBeforeAnythingIsWritten) {
  TempDir dir;
  const auto model = write_model_text(kCustomOpModel, dir / "m.onnx");
  const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--report",
                               (dir / "no/such/r.json").string()});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_TRUE(one_error_line(result, "onnx-rewrite: error: " + (dir / "no/such/r.json").string() + ": report directory '" +
                                         (dir / "no/such").string() + "' does not exist"))
      << result.err;
  EXPECT_FALSE(fs::exists(dir / "out.onnx")) << "the model is not written when its report can't be";
}

TEST(Inspect, JsonStaysValidWhateverBytesTheModelsNamesHold) {
  // Protobuf strings from other writers may hold invalid UTF-8; JSON may not.
  TempDir dir;
  onnx::ModelProto proto = parse_model_text(kUnknownOpModel);
  proto.mutable_graph()->mutable_node(0)->set_op_type("Frob\xff\xfenicate");
  write_file(dir / "m.onnx", serialize(proto));
  const auto result = run_cli({"inspect", (dir / "m.onnx").string(), "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto ops = parse_json(result.out).struct_value().fields().at("ops").list_value();
  std::set<std::string> names;
  for (const auto& op : ops.values()) names.insert(op.struct_value().fields().at("op_type").string_value());
  EXPECT_TRUE(names.count("Frob\uFFFD\uFFFDnicate")) << result.out;
}

// ---- check, inspect, rules --------------------------------------------------------------------

// check answers "and now?": the rules `rewrite` would use for each op the target can't load,
// the rules of other targets when only those cover it, or that none does.
TEST(Check, NamesTheRulesCoveringEachUnloadableOp) {
  const auto mmcv = family_file("deform-conv", "testdata/mmcv-deform-conv2d.onnx");
  const auto text = run_cli({"check", mmcv.string()});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.out.find("mmcv.MMCVDeformConv2d x1 (main graph): domain mmcv is not loadable by target onnx; "
                          "`rewrite --target onnx` covers it: mmcv-deform-conv2d-to-deform-conv"),
            std::string::npos)
      << text.out;

  const auto json = run_cli({"check", mmcv.string(), "--json"});
  const auto report = parse_json(json.out);
  const auto& entry = report.struct_value().fields().at("result").struct_value().fields().at("unloadable")
                          .list_value().values(0).struct_value().fields();
  const auto& rules = entry.at("rules").list_value();
  ASSERT_GT(rules.values_size(), 0) << json.out;
  EXPECT_EQ(rules.values(0).struct_value().fields().at("id").string_value(), "mmcv-deform-conv2d-to-deform-conv");
  EXPECT_TRUE(rules.values(0).struct_value().fields().at("serves_target").bool_value());
  EXPECT_TRUE(rules.values(0).struct_value().fields().at("needs_opset").has_null_value());

  // Under --opset, a rule whose replacement needs more does not cover the node; check says so,
  // and so does a rewrite that could not rewrite it.
  const auto limited = run_cli({"check", mmcv.string(), "--opset", "10"});
  EXPECT_NE(limited.out.find("; only rules needing a higher opset than --opset 10 cover it: mmcv-deform-conv2d-to-deform-conv (ai.onnx 19), "
                             "mmcv-deform-conv2d-grid-sample (ai.onnx 16), mmcv-deform-conv2d-gather (ai.onnx 11)"),
            std::string::npos)
      << limited.out;
  const auto limited_json = parse_json(run_cli({"check", mmcv.string(), "--opset", "10", "--json"}).out);
  EXPECT_EQ(limited_json.struct_value().fields().at("result").struct_value().fields().at("unloadable").list_value().values(0)
                .struct_value().fields().at("rules").list_value().values(0).struct_value().fields().at("needs_opset").number_value(),
            19);

  TempDir dir;
  const auto rewritten = run_cli({"rewrite", mmcv.string(), "-o", (dir / "out.onnx").string(), "--to-opset", "10"});
  EXPECT_EQ(rewritten.exit_code, 1) << rewritten.err;
  EXPECT_NE(rewritten.err.find("; the rules for this op need a higher opset than 10: mmcv-deform-conv2d-to-deform-conv (ai.onnx 19)"),
            std::string::npos)
      << rewritten.err;

  const auto custom = write_model_text(kUnknownOpModel, dir / "custom.onnx");
  const auto none = run_cli({"check", custom.string()});
  EXPECT_NE(none.out.find("acme.Frobnicate x1 (main graph): domain acme is not loadable by target onnx; no rule covers it"),
            std::string::npos)
      << none.out;

  // Rule files given to check count as they would for rewrite.
  std::ofstream(dir / "frob.rules") << R"(rule frob-as-identity
  description: acme::Frobnicate is the identity
  targets: onnx
  pattern (x) => (y) {
    y = acme.Frobnicate (x)
  }
  replace (x) => (y) {
    y = Identity (x)
  }
  example {
    <ir_version: 8, opset_import: ["": 17, "acme": 1]>
    g (float[2] x) => (float[2] y) { y = acme.Frobnicate (x) }
  }
  expect {
    y = Identity (x)
  }
end
)";
  const auto given = run_cli({"check", custom.string(), "--rules", (dir / "frob.rules").string()});
  EXPECT_NE(given.out.find("acme.Frobnicate x1 (main graph): domain acme is not loadable by target onnx; "
                           "`rewrite --target onnx` covers it: frob-as-identity"),
            std::string::npos)
      << given.out << given.err;
}

TEST(Check, ListsWhatTheTargetCantLoadAndTheOpsetLimit) {
  TempDir dir;
  const auto custom = write_model_text(kUnknownOpModel, dir / "custom.onnx");
  const auto result = run_cli({"check", custom.string(), "--json"});
  EXPECT_EQ(result.exit_code, 1);
  const auto fields = parse_json(result.out).struct_value().fields();
  const auto& check = fields.at("result").struct_value().fields();
  EXPECT_FALSE(check.at("ok").bool_value());
  const auto& entry = check.at("unloadable").list_value().values(0).struct_value().fields();
  EXPECT_EQ(entry.at("domain").string_value(), "acme");
  EXPECT_EQ(entry.at("op_type").string_value(), "Frobnicate");
  EXPECT_EQ(entry.at("count").number_value(), 1);
  EXPECT_EQ(entry.at("where").string_value(), "main graph");

  const auto standard = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y) { y = Relu (x) })",
                                         dir / "standard.onnx");
  EXPECT_EQ(run_cli({"check", standard.string()}).exit_code, 0);
  const auto capped = run_cli({"check", standard.string(), "--opset", "13"});
  EXPECT_EQ(capped.exit_code, 1);
  EXPECT_NE(capped.out.find("the model imports ai.onnx opset 17, above --opset 13"), std::string::npos) << capped.out;

  const auto too_new = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y) { y = Gelu (x) })",
                                        dir / "gelu17.onnx");
  const auto gelu = run_cli({"check", too_new.string()});
  EXPECT_EQ(gelu.exit_code, 1) << "Gelu exists from opset 20";
  EXPECT_NE(gelu.out.find("Gelu does not exist (or is deprecated) at ai.onnx opset 17"), std::string::npos) << gelu.out;
}

TEST(Check, OpsetVersionsAreReadWhole) {
  // 2^32 + 13 is not 13, and 2^62 is not 0: both are above --opset 13.
  TempDir dir;
  for (const int64_t version : {(int64_t{1} << 32) + 13, int64_t{1} << 62}) {
    write_file(dir / "m.onnx", serialize(opset_model(version)));
    const auto capped = run_cli({"check", (dir / "m.onnx").string(), "--opset", "13", "--json"});
    EXPECT_EQ(capped.exit_code, 1) << version;
    const auto check = parse_json(capped.out).struct_value().fields().at("result").struct_value().fields();
    ASSERT_EQ(check.at("opset_problems").list_value().values_size(), 2) << capped.out;
    EXPECT_EQ(check.at("opset_problems").list_value().values(0).string_value(),
              "the model imports ai.onnx opset " + std::to_string(version) + ", which is no opset version");
    EXPECT_EQ(check.at("opset_problems").list_value().values(1).string_value(),
              "the model imports ai.onnx opset " + std::to_string(version) + ", above --opset 13");
    EXPECT_EQ(check.at("unloadable").list_value().values_size(), 0) << "Relu exists at every opset: " << capped.out;
    // Without --opset too: no runtime loads it.
    const auto plain = run_cli({"check", (dir / "m.onnx").string()});
    EXPECT_EQ(plain.exit_code, 1);
    EXPECT_NE(plain.out.find("which is no opset version"), std::string::npos) << plain.out;
  }
  write_file(dir / "m.onnx", serialize(opset_model(-5)));
  const auto negative = run_cli({"check", (dir / "m.onnx").string()});
  EXPECT_EQ(negative.exit_code, 1);
  EXPECT_NE(negative.out.find("Relu does not exist (or is deprecated) at ai.onnx opset -5"), std::string::npos) << negative.out;
}

TEST(Rewrite, AnOpsetVersionBeyondAnyOpsetIsBadInputAndANewerOneANote) {
  TempDir dir;
  const auto input = dir / "m.onnx";
  const auto output = dir / "out.onnx";
  write_file(input, serialize(opset_model((int64_t{1} << 32) + 13)));
  const auto wrapped = run_cli({"rewrite", input.string(), "-o", output.string(), "--opset", "13"});
  EXPECT_EQ(wrapped.exit_code, 3);
  EXPECT_EQ(wrapped.err, "onnx-rewrite: error: " + input.string() + ": the model imports ai.onnx opset 4294967309, which is no opset version\n");
  EXPECT_FALSE(fs::exists(output));
  const int newer = OpRegistry::builtin().table("")->highest_version() + 1;
  write_file(input, serialize(opset_model(newer)));
  const auto rewritten = run_cli({"rewrite", input.string(), "-o", output.string()});
  EXPECT_EQ(rewritten.exit_code, 0) << rewritten.err;
  EXPECT_NE(rewritten.out.find(fmt::format("note: ai.onnx opset {} is newer than the tables", newer)), std::string::npos)
      << rewritten.out;
}

TEST(Check, AFunctionBodyIsCheckedAtTheModelsImport) {
  // ONNX Runtime reads the body at the model's ai.onnx 10, where Round does not exist.
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 6, opset_import: ["": 10, "local": 1]>
g (float[8] x) => (float[8] y) {
  y = local.R (x)
}
<domain: "local", opset_import: ["": 11]>
R (X) => (Y) {
  Y = Round (X)
})",
                                      dir / "m.onnx");
  const auto check = run_cli({"check", input.string(), "--target", "ort"});
  EXPECT_EQ(check.exit_code, 1) << check.out << check.err;
  EXPECT_NE(check.out.find("Round does not exist (or is deprecated) at ai.onnx opset 10"), std::string::npos) << check.out;
}

TEST(Check, AnImportNewerThanTheTablesIsANoteAndItsNodesAreCheckedAgainstTheNewestTable) {
  TempDir dir;
  const int newest = OpRegistry::builtin().table("")->highest_version();
  const int newer = newest + 6;
  const std::string note = fmt::format("note: ai.onnx opset {} is newer than the tables: nodes were checked against ai.onnx opset {}",
                                       newer, newest);
  write_file(dir / "m.onnx", serialize(opset_model(newer)));
  const auto relu = run_cli({"check", (dir / "m.onnx").string()});
  EXPECT_EQ(relu.exit_code, 0);
  EXPECT_NE(relu.out.find(note), std::string::npos) << relu.out;
  // An op the tables don't know may be newer than them: not flagged.
  write_file(dir / "m.onnx", serialize(opset_model(newer, "SomeFutureOp")));
  const auto future = run_cli({"check", (dir / "m.onnx").string()});
  EXPECT_EQ(future.exit_code, 0) << future.out;
  EXPECT_NE(future.out.find(note), std::string::npos) << future.out;
  // One removed long ago stays removed.
  write_file(dir / "m.onnx", serialize(opset_model(newer, "Scatter")));
  const auto scatter = run_cli({"check", (dir / "m.onnx").string(), "--json"});
  EXPECT_EQ(scatter.exit_code, 1) << scatter.out;
  const auto check = parse_json(scatter.out).struct_value().fields().at("result").struct_value().fields();
  EXPECT_EQ(check.at("unloadable").list_value().values(0).struct_value().fields().at("reason").string_value(),
            fmt::format("Scatter does not exist (or is deprecated) at ai.onnx opset {}", newer));
  EXPECT_EQ(check.at("notes").list_value().values_size(), 1) << scatter.out;
  // Within the tables: no note.
  write_file(dir / "m.onnx", serialize(opset_model(newest)));
  EXPECT_EQ(run_cli({"check", (dir / "m.onnx").string()}).out.find("note:"), std::string::npos);
}

TEST(Check, ContribOpsAreLoadableForOrtOnlyAndFunctionsForOrtOnly) {
  TempDir dir;
  const auto model = write_model_text(R"(<ir_version: 8, opset_import: ["": 17, "com.microsoft": 1, "local": 1]>
g (float[2] x) => (float[2] y) {
  t = com.microsoft.Gelu (x)
  y = local.Twice (t)
}
<domain: "local", opset_import: ["": 17]>
Twice (a) => (b) { b = Add (a, a) })",
                                      dir / "m.onnx");
  const auto onnx_check = run_cli({"check", model.string(), "--target", "onnx"});
  EXPECT_EQ(onnx_check.exit_code, 1);
  EXPECT_NE(onnx_check.out.find("com.microsoft.Gelu"), std::string::npos);
  EXPECT_NE(onnx_check.out.find("local.Twice x1 (main graph): calls a model-local function"), std::string::npos) << onnx_check.out;
  EXPECT_EQ(run_cli({"check", model.string(), "--target", "ort"}).exit_code, 0);
}

TEST(Inspect, DescribesOpsCustomOpsCoveringRulesAndWeights) {
  TempDir dir;
  const auto model = write_model_text(R"(<ir_version: 8, opset_import: ["": 17, "test.customop": 1], producer_name: "pytorch">
g (float[2, 3] x) => (float[2, 3] z) <float[2, 3] w = {1, 2, 3, 4, 5, 6}> {
  t = test.customop.CustomOpOne (x, w)
  z = Relu (t)
})",
                                      dir / "m.onnx");
  const auto text = run_cli({"inspect", model.string()});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("test.customop.CustomOpOne x1: customop-one-to-add [onnx, ort]"), std::string::npos) << text.out;
  const auto json = run_cli({"inspect", model.string(), "--json"});
  ASSERT_EQ(json.exit_code, 0);
  const auto fields = parse_json(json.out).struct_value().fields();
  EXPECT_EQ(fields.at("producer_name").string_value(), "pytorch");
  EXPECT_EQ(fields.at("initializers").struct_value().fields().at("count").number_value(), 1);
  bool found = false;
  for (const auto& op : fields.at("ops").list_value().values()) {
    const auto& entry = op.struct_value().fields();
    if (entry.at("op_type").string_value() != "CustomOpOne") continue;
    found = true;
    EXPECT_TRUE(entry.at("custom").bool_value());
    EXPECT_EQ(entry.at("rules").list_value().values(0).string_value(), "customop-one-to-add [onnx, ort]");
  }
  EXPECT_TRUE(found);
}

// `rules --test`: a user's rule checked without our test suite.
TEST(Rules, TestRunsEachRulesExampleAgainstItsExpect) {
  TempDir dir;
  auto rule = [](const std::string& id, const std::string& replacement, const std::string& expect) {
    return "rule " + id + R"(
  description: test
  targets: onnx
  pattern (x) => (y) { y = my.Op (x) }
  replace (x) => (y) { )" + replacement + R"( }
  example {
    <ir_version: 8, opset_import: ["": 17, "my": 1]>
    g (float[2] x) => (float[2] y) { y = my.Op (x) }
  }
  expect { )" + expect + R"( }
end
)";
  };
  write_file(dir / "good.rules", rule("as-identity", "y = Identity (x)", "y = Identity (x)"));
  const auto good = run_cli({"rules", "--test", (dir / "good.rules").string()});
  EXPECT_EQ(good.exit_code, 0) << good.out << good.err;
  EXPECT_EQ(good.out, "PASS as-identity\n1 rule tested, 0 failed\n");

  write_file(dir / "bad.rules", rule("as-neg", "y = Neg (x)", "y = Identity (x)"));
  const auto bad = run_cli({"rules", "--test", (dir / "good.rules").string(), "--test", (dir / "bad.rules").string()});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.out, "PASS as-identity\nFAIL as-neg (" + (dir / "bad.rules").string() +
                         ":6): its example rewrites to other nodes than its expect\n  expected:\n    y = Identity(x)\n"
                         "  got:\n    y = Neg(x)\n2 rules tested, 1 failed\n");

  // A built-in family's file tests as it is, in place of the compiled-in copy.
  const auto family = run_cli({"rules", "--test", family_file("trt-instance-norm", "trt-instance-norm.rules").string(), "--json"});
  EXPECT_EQ(family.exit_code, 0) << family.out << family.err;
  const auto tested = parse_json(family.out);
  ASSERT_EQ(tested.list_value().values_size(), 2) << family.out;
  EXPECT_TRUE(tested.list_value().values(0).struct_value().fields().at("passed").bool_value());

  const auto empty = run_cli({"rules", "--test", dir.path().string() + "/nothing"});
  EXPECT_EQ(empty.exit_code, 3) << empty.err;
}

TEST(Rules, ListsBuiltinAndUserRules) {
  TempDir dir;
  write_file(dir / "mine.rules", R"(
rule my-rule
  description: my rule
  targets: onnx
  pattern (x) => (y) { y = my.Op (x) }
  replace (x) => (y) { y = Identity (x) }
  example {
    <ir_version: 8, opset_import: ["": 17, "my": 1]>
    g (float[2] x) => (float[2] y) { y = my.Op (x) }
  }
  expect { y = Identity (x) }
end
)");
  const auto result = run_cli({"rules", "--rules", (dir / "mine.rules").string(), "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  std::set<std::string> ids;
  const auto listed = parse_json(result.out);
  for (const auto& rule : listed.list_value().values()) ids.insert(rule.struct_value().fields().at("id").string_value());
  EXPECT_TRUE(ids.count("my-rule"));
  EXPECT_TRUE(ids.count("customop-one-to-add"));
  const auto only_mine = run_cli({"rules", "--rules", (dir / "mine.rules").string(), "--no-builtin-rules"});
  EXPECT_NE(only_mine.out.find("1 rules"), std::string::npos) << only_mine.out;
}

// ---- Graph-only models ------------------------------------------------------------------------

TEST(GraphOnly, InspectAndCheckReadAModelWhoseWeightsFilesAreMissingAndSaySo) {
  // A graph-only download (the .onnx without its data files) was refused although neither
  // command reads a weight; rewrite keeps refusing, since it must write them.
  TempDir dir;
  write_file(dir / "m.onnx", external_data_model("model.onnx_data"));
  const std::string note = "note: the external-data file 'model.onnx_data' is missing: the weights were not needed here, "
                           "but the model can't run (or be rewritten) without them";
  const auto inspect = run_cli({"inspect", (dir / "m.onnx").string()});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("external data: model.onnx_data (missing)"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find(note), std::string::npos) << inspect.out;
  const auto inspect_json = run_cli({"inspect", (dir / "m.onnx").string(), "--json"});
  EXPECT_EQ(inspect_json.exit_code, 0) << inspect_json.err;
  const auto fields = parse_json(inspect_json.out).struct_value().fields();
  const auto& file = fields.at("initializers").struct_value().fields().at("external_files").list_value().values(0).struct_value().fields();
  EXPECT_EQ(file.at("location").string_value(), "model.onnx_data");
  EXPECT_TRUE(file.at("missing").bool_value());
  EXPECT_EQ(file.at("bytes").kind_case(), google::protobuf::Value::kNullValue);
  EXPECT_EQ("note: " + fields.at("notes").list_value().values(0).string_value(), note);

  const auto check = run_cli({"check", (dir / "m.onnx").string()});
  EXPECT_EQ(check.exit_code, 1) << "CustomOpOne is not loadable: " << check.err;
  EXPECT_NE(check.out.find("test.customop.CustomOpOne x1"), std::string::npos) << check.out;
  EXPECT_NE(check.out.find(note), std::string::npos) << check.out;
  const auto check_json = run_cli({"check", (dir / "m.onnx").string(), "--json"});
  const auto notes = parse_json(check_json.out).struct_value().fields().at("result").struct_value().fields().at("notes").list_value();
  ASSERT_EQ(notes.values_size(), 1) << check_json.out;
  EXPECT_EQ("note: " + notes.values(0).string_value(), note);

  const auto rewrite = run_cli({"rewrite", (dir / "m.onnx").string(), "-o", (dir / "out.onnx").string()});
  EXPECT_EQ(rewrite.exit_code, 3);
  EXPECT_EQ(rewrite.err, "onnx-rewrite: error: " + (dir / "m.onnx").string() +
                             ": tensor 'y' (main graph): external data file 'model.onnx_data' is missing\n");
  EXPECT_FALSE(fs::exists(dir / "out.onnx"));
  // Everything else about the data is still checked.
  write_file(dir / "m.onnx", external_data_model("../model.onnx_data"));
  EXPECT_EQ(run_cli({"inspect", (dir / "m.onnx").string()}).exit_code, 3);
}

// ---- Errors in JSON ---------------------------------------------------------------------------

// The error object of docs/cli.md: {"file", "message", "exit_code"}.
void expect_error_object(const google::protobuf::Value& value, const std::optional<std::string>& file, const std::string& message,
                         int exit_code) {
  const auto& error = value.struct_value().fields();
  if (file) {
    EXPECT_EQ(error.at("file").string_value(), *file);
  } else {
    EXPECT_EQ(error.at("file").kind_case(), google::protobuf::Value::kNullValue);
  }
  EXPECT_EQ(error.at("message").string_value(), message);
  EXPECT_EQ(error.at("exit_code").number_value(), exit_code);
}

TEST(JsonErrors, CheckAndInspectPrintAnErrorObjectBesidesTheErrorLine) {
  TempDir dir;
  const fs::path missing = dir / "nope.onnx";
  for (const char* command : {"check", "inspect"}) {
    const auto result = run_cli({command, missing.string(), "--json"});
    EXPECT_EQ(result.exit_code, 3);
    EXPECT_EQ(result.err, "onnx-rewrite: error: " + missing.string() + ": no such file\n");
    const auto fields = parse_json(result.out).struct_value().fields();
    EXPECT_EQ(fields.at("model").string_value(), missing.string());
    expect_error_object(fields.at("error"), missing.string(), "no such file", 3);
  }
  const auto model = write_model_text(kCustomOpModel, dir / "m.onnx");
  const auto target = run_cli({"check", model.string(), "--target", "tvm", "--json"});
  EXPECT_EQ(target.exit_code, 2);
  const auto fields = parse_json(target.out).struct_value().fields();
  EXPECT_EQ(target.err, "onnx-rewrite: error: " + fields.at("error").struct_value().fields().at("message").string_value() + "\n");
  expect_error_object(fields.at("error"), std::nullopt, fields.at("error").struct_value().fields().at("message").string_value(), 2);
}

TEST(JsonErrors, AFailedRewriteWritesTheErrorObjectAsItsReportAndNoModel) {
  TempDir dir;
  write_file(dir / "bad.onnx", "not a model");
  const auto result = run_cli({"rewrite", (dir / "bad.onnx").string(), "-o", (dir / "out.onnx").string(), "--report",
                               (dir / "r.json").string()});
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_FALSE(fs::exists(dir / "out.onnx"));
  const auto report = parse_json(read_file(dir / "r.json")).struct_value().fields();
  EXPECT_EQ(report.at("model").string_value(), (dir / "bad.onnx").string());
  EXPECT_EQ(report.at("output").string_value(), (dir / "out.onnx").string());
  EXPECT_EQ(report.at("status").string_value(), "failed");
  const std::string message = report.at("error").struct_value().fields().at("message").string_value();
  EXPECT_EQ(result.err, "onnx-rewrite: error: " + (dir / "bad.onnx").string() + ": " + message + "\n");
  expect_error_object(report.at("error"), (dir / "bad.onnx").string(), message, 3);

  // A usage error after the options were read: exit 2, no file in the object.
  const auto model = write_model_text(kCustomOpModel, dir / "m.onnx");
  const auto usage = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--only", "no-such-rule", "--report",
                              (dir / "r.json").string()});
  EXPECT_EQ(usage.exit_code, 2);
  expect_error_object(parse_json(read_file(dir / "r.json")).struct_value().fields().at("error"), std::nullopt,
                      "--only no-such-rule: no rule has that id", 2);
  EXPECT_FALSE(fs::exists(dir / "out.onnx"));
}

// ---- Outputs and reports commit together ------------------------------------------------------

// The CLI without the capabilities that let root ignore file permissions (see batch_test.cc).
std::optional<CommandResult> run_cli_unprivileged(const std::vector<std::string>& args) {
  std::vector<std::string> argv;
  if (::geteuid() == 0) {
    if (!fs::exists("/usr/bin/setpriv")) return std::nullopt;
    argv = {"/usr/bin/setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"};
  }
  argv.push_back(cli_path().string());
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

TEST(Commit, AReportThatCantBeWrittenLeavesNoModel) {
  // It exited 3 with the output model written.
  TempDir dir;
  const auto model = write_model_text(kCustomOpModel, dir / "m.onnx");
  fs::create_directories(dir / "readonly");
  fs::permissions(dir / "readonly", fs::perms::owner_read | fs::perms::owner_exec);
  const auto result = run_cli_unprivileged(
      {"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--report", (dir / "readonly/r.json").string()});
  fs::permissions(dir / "readonly", fs::perms::owner_all);
  if (!result) GTEST_SKIP() << "running as root without setpriv: permissions can't be made to matter";
  EXPECT_EQ(result->exit_code, 3);
  EXPECT_EQ(result->err, "onnx-rewrite: error: " + (dir / "readonly/r.json").string() + ": cannot create a file there: Permission denied\n");
  EXPECT_FALSE(fs::exists(dir / "out.onnx"));
  EXPECT_TRUE(fs::is_empty(dir / "readonly"));
}

TEST(Commit, AReportPathThatCantHoldAReportIsRefusedBeforeAnyWork) {
  TempDir dir;
  const auto model = write_model_text(kCustomOpModel, dir / "m.onnx");
  const std::string before = read_file(model);
  fs::create_directories(dir / "r.json");
  const auto directory = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--report", (dir / "r.json").string()});
  EXPECT_EQ(directory.exit_code, 2);
  EXPECT_EQ(directory.err, "onnx-rewrite: error: " + (dir / "r.json").string() + ": the report is a directory\n");
  const auto input = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--report", model.string()});
  EXPECT_EQ(input.exit_code, 2);
  EXPECT_EQ(input.err, "onnx-rewrite: error: " + model.string() + ": --report would replace the input model; nothing was written\n");
  EXPECT_EQ(read_file(model), before);
  EXPECT_FALSE(fs::exists(dir / "out.onnx"));
}

TEST(Commit, TwoProcessesNeverShareADataFileOfOneNameButOtherBytes) {
  // Two models whose weights are both `weights.bin`, with other bytes, written into one directory
  // at the same time: both checked that no weights.bin was there, both wrote one, and both exited
  // 0 with one model reading the other's weights. Exactly one may succeed, with its own bytes.
  TempDir dir;
  const int64_t floats = int64_t{1} << 22;  // 16 MiB each: copying takes long enough to race
  for (const char* name : {"a", "b"}) {
    fs::create_directories(dir / name);
    onnx::ModelProto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[4194304] x) => (float[4194304] y) { y = Add (x, w) })");
    auto* weight = model.mutable_graph()->add_initializer();
    weight->set_name("w");
    weight->set_data_type(onnx::TensorProto::FLOAT);
    weight->add_dims(floats);
    weight->set_data_location(onnx::TensorProto::EXTERNAL);
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"location", "weights.bin"}, {"offset", "0"},
                                     {"length", std::to_string(floats * 4)}}) {
      auto* entry = weight->add_external_data();
      entry->set_key(key);
      entry->set_value(value);
    }
    write_file(dir / name / "m.onnx", serialize(model));
    write_file(dir / name / "weights.bin", std::string(static_cast<size_t>(floats * 4), name[0]));
  }
  const std::string conflict = "external data 'weights.bin' would replace a different file already in ";
  for (int trial = 0; trial < 12; ++trial) {
    const fs::path out = dir / ("out" + std::to_string(trial));
    fs::create_directories(out);
    CommandResult results[2];
    std::thread first([&] { results[0] = run_cli({"rewrite", (dir / "a/m.onnx").string(), "-o", (out / "a.onnx").string()}); });
    std::thread second([&] { results[1] = run_cli({"rewrite", (dir / "b/m.onnx").string(), "-o", (out / "b.onnx").string()}); });
    first.join();
    second.join();
    const int winners = (results[0].exit_code == 0) + (results[1].exit_code == 0);
    ASSERT_EQ(winners, 1) << "trial " << trial << ": " << results[0].err << results[1].err;
    const int winner = results[0].exit_code == 0 ? 0 : 1;
    const CommandResult& loser = results[1 - winner];
    EXPECT_EQ(loser.exit_code, 3);
    EXPECT_NE(loser.err.find(conflict + out.string()), std::string::npos) << loser.err;
    EXPECT_TRUE(fs::exists(out / (winner == 0 ? "a.onnx" : "b.onnx")));
    EXPECT_FALSE(fs::exists(out / (winner == 0 ? "b.onnx" : "a.onnx")));
    EXPECT_EQ(read_file(out / "weights.bin"), read_file(dir / (winner == 0 ? "a" : "b") / "weights.bin")) << "trial " << trial;
    fs::remove_all(out);
  }
}

// ---- batch ------------------------------------------------------------------------------------

TEST(Batch, RewritesATreeKeepsGoingPastFailuresAndReports) {
  TempDir dir;
  fs::create_directories(dir / "zoo/vision/deep");
  write_model_text(kCustomOpModel, dir / "zoo/a.onnx");
  write_model_text(kCustomOpModel, dir / "zoo/vision/deep/b.onnx");
  write_model_text(kUnknownOpModel, dir / "zoo/vision/c.onnx");
  write_file(dir / "zoo/vision/broken.onnx", "not a model");
  write_file(dir / "zoo/notes.txt", "ignored");
  const auto result = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "-j", "2", "--report",
                               (dir / "batch.json").string()});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.out.find("batch: 4 model(s): 2 rewritten, 0 unchanged, 1 target not met, 1 failed"), std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("failed: " + (dir / "zoo/vision/broken.onnx").string()), std::string::npos) << result.out;
  EXPECT_TRUE(fs::exists(dir / "out/a.onnx"));
  EXPECT_TRUE(fs::exists(dir / "out/vision/deep/b.onnx"));
  EXPECT_TRUE(fs::exists(dir / "out/vision/c.onnx")) << "written even though the target is not met";
  EXPECT_FALSE(fs::exists(dir / "out/vision/broken.onnx"));
  EXPECT_FALSE(fs::exists(dir / "out/notes.txt"));
  const auto report = parse_json(read_file(dir / "batch.json")).struct_value().fields();
  EXPECT_EQ(report.at("summary").struct_value().fields().at("failed").number_value(), 1);
  EXPECT_EQ(report.at("models").list_value().values_size(), 4);
  EXPECT_NE(result.out.find("failed: " + (dir / "zoo/vision/broken.onnx").string() + ": not a valid ONNX model"), std::string::npos)
      << "the path is said once: " << result.out;
  // Plain lines (not a terminal), one per model.
  EXPECT_NE(result.err.find("rewritten " + (dir / "zoo/a.onnx").string()), std::string::npos) << result.err;
}

TEST(Batch, LinksThatLoopOrLeadNowhereFailAloneAndTheRestIsRewritten) {
  TempDir dir;
  fs::create_directories(dir / "zoo");
  write_model_text(kCustomOpModel, dir / "zoo/a.onnx");
  fs::create_symlink("loop.onnx", dir / "zoo/loop.onnx");
  fs::create_symlink("nowhere.onnx", dir / "zoo/dangling.onnx");
  const auto result = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string()});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.out.find("batch: 3 model(s): 1 rewritten, 0 unchanged, 0 target not met, 2 failed"), std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("failed: " + (dir / "zoo/loop.onnx").string() + ": cannot read: Too many levels of symbolic links"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("failed: " + (dir / "zoo/dangling.onnx").string() + ": cannot read: No such file"), std::string::npos)
      << result.out;
  EXPECT_TRUE(fs::exists(dir / "out/a.onnx"));
}

}  // namespace
}  // namespace onnx_rewrite
