// `batch` and the trust it must keep (docs/cli.md, "batch"): every output under OUT_DIR at the
// entry's own relative path whatever symbolic links the inputs or OUT_DIR hold, no entry skipped
// silently, the report committed or nothing written.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <optional>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// The model as the rule leaves it: CustomOpOne became Add.
bool rewritten_model(const fs::path& path) {
  onnx::ModelProto model;
  return !fs::is_symlink(path) && model.ParseFromString(read_file(path)) && model.graph().node_size() == 2 &&
         model.graph().node(0).op_type() == "Add";
}

// Every file and link under `root`, relative to it, sorted.
std::vector<std::string> tree(const fs::path& root) {
  std::vector<std::string> entries;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    entries.push_back(fs::path(it->path()).lexically_relative(root).string() + (it->is_symlink() ? "@" : ""));
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

// The CLI without the capabilities that let root ignore file permissions, so that a directory
// mode 000 is unreadable to it also when the tests run as root (containers); nullopt when that
// can't be arranged.
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

// ---- Symbolic links among the inputs ------------------------------------------------------------

TEST(BatchLinks, ALinkedModelIsWrittenAtTheLinksOwnPathAndNothingOutsideOutDirChanges) {
  // The output path once came from where the link leads: in/m.onnx -> ../other/data/m.onnx was
  // written to OUT/../other/data/m.onnx, over an unrelated file, with exit 0.
  TempDir dir;
  fs::create_directories(dir / "zoo/in");
  fs::create_directories(dir / "zoo/other/data");
  fs::create_directories(dir / "results/other/data");
  write_model_text(kCustomOpModel, dir / "zoo/other/data/m.onnx");
  write_model_text(kCustomOpModel, dir / "zoo/other/data/a.onnx");
  fs::create_symlink("../other/data/m.onnx", dir / "zoo/in/m.onnx");
  fs::create_symlink(dir / "zoo/other/data/a.onnx", dir / "zoo/in/abs.onnx");  // an absolute link
  write_file(dir / "results/other/data/m.onnx", "an unrelated file");
  const std::string original = read_file(dir / "zoo/other/data/m.onnx");

  const auto result = run_cli({"batch", (dir / "zoo/in").string(), "-o", (dir / "results/out").string()});
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("batch: 2 model(s): 2 rewritten"), std::string::npos) << result.out;
  EXPECT_EQ(read_file(dir / "results/other/data/m.onnx"), "an unrelated file");
  EXPECT_EQ(tree(dir / "results"), (std::vector<std::string>{"other", "other/data", "other/data/m.onnx", "out", "out/abs.onnx",
                                                             "out/m.onnx"}));
  EXPECT_TRUE(rewritten_model(dir / "results/out/m.onnx"));
  EXPECT_TRUE(rewritten_model(dir / "results/out/abs.onnx"));
  EXPECT_EQ(read_file(dir / "zoo/other/data/m.onnx"), original) << "the input is never modified";
}

TEST(BatchLinks, AHuggingFaceSnapshotIsWrittenWithItsWeightsUnderOutDir) {
  // snap/model.onnx -> ../blobs/HASH once wrote OUT/../blobs/HASH, and the weights' link into
  // the blobs was refused as leading out of the model's directory.
  TempDir dir;
  fs::create_directories(dir / "hub/blobs");
  fs::create_directories(dir / "hub/snap");
  fs::create_directories(dir / "fixed");
  write_file(dir / "hub/blobs/1f0e", external_data_model("model.onnx_data"));
  std::string weights(24, '\0');
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>(i);
  write_file(dir / "hub/blobs/9a7c", weights);
  fs::create_symlink("../blobs/1f0e", dir / "hub/snap/model.onnx");
  fs::create_symlink("../blobs/9a7c", dir / "hub/snap/model.onnx_data");

  const auto result = run_cli({"batch", (dir / "hub/snap").string(), "-o", (dir / "fixed/hub").string()});
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_EQ(tree(dir / "fixed"), (std::vector<std::string>{"hub", "hub/model.onnx", "hub/model.onnx_data"}));
  EXPECT_TRUE(rewritten_model(dir / "fixed/hub/model.onnx"));
  EXPECT_FALSE(fs::is_symlink(dir / "fixed/hub/model.onnx_data"));
  EXPECT_EQ(read_file(dir / "fixed/hub/model.onnx_data"), weights);
  EXPECT_EQ(run_cli({"check", (dir / "fixed/hub/model.onnx").string()}).exit_code, 0);
  EXPECT_EQ(tree(dir / "hub"), (std::vector<std::string>{"blobs", "blobs/1f0e", "blobs/9a7c", "snap", "snap/model.onnx@",
                                                         "snap/model.onnx_data@"}));
}

TEST(BatchLinks, LinkedDirectoriesAreFollowedAndALoopIsAFailedItem) {
  // A linked directory was skipped without a word.
  TempDir dir;
  fs::create_directories(dir / "models/deep");
  fs::create_directories(dir / "zoo/sub");
  write_model_text(kCustomOpModel, dir / "zoo/a.onnx");
  write_model_text(kCustomOpModel, dir / "models/deep/b.onnx");
  fs::create_directory_symlink("../models", dir / "zoo/linked");
  fs::create_directory_symlink("..", dir / "zoo/sub/up");  // leads back to zoo: a loop

  const auto result = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "--report", (dir / "r.json").string()});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("batch: 3 model(s): 2 rewritten, 0 unchanged, 0 target not met, 1 failed"), std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("failed: " + (dir / "zoo/sub/up").string() + ": leads to '" + (dir / "zoo").string() +
                            "', a directory it is in: not followed (a loop)"),
            std::string::npos)
      << result.out;
  EXPECT_EQ(tree(dir / "out"), (std::vector<std::string>{"a.onnx", "linked", "linked/deep", "linked/deep/b.onnx"}));
  EXPECT_TRUE(rewritten_model(dir / "out/linked/deep/b.onnx"));
  const auto report = parse_json(read_file(dir / "r.json")).struct_value().fields();
  EXPECT_EQ(report.at("summary").struct_value().fields().at("failed").number_value(), 1);
}

TEST(BatchLinks, NothingIsWrittenOutsideOutDirThroughLinksAlreadyInIt) {
  // OUT_DIR from an earlier run may hold links: writing through them would land elsewhere.
  TempDir dir;
  fs::create_directories(dir / "zoo/sub");
  fs::create_directories(dir / "out");
  fs::create_directories(dir / "elsewhere");
  write_model_text(kCustomOpModel, dir / "zoo/a.onnx");
  write_model_text(kCustomOpModel, dir / "zoo/sub/b.onnx");
  write_file(dir / "elsewhere/a.onnx", "not to be replaced");
  fs::create_symlink("../elsewhere/a.onnx", dir / "out/a.onnx");
  fs::create_directory_symlink("../elsewhere", dir / "out/sub");

  const auto result = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string()});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("failed: " + (dir / "zoo/sub/b.onnx").string() + ": " + (dir / "out/sub/b.onnx").string() + ": '" +
                            (dir / "out/sub").string() + "' is a symbolic link leading out of " + (dir / "out").string()),
            std::string::npos)
      << result.out;
  EXPECT_EQ(tree(dir / "elsewhere"), std::vector<std::string>{"a.onnx"});
  EXPECT_EQ(read_file(dir / "elsewhere/a.onnx"), "not to be replaced");
  EXPECT_TRUE(rewritten_model(dir / "out/a.onnx")) << "the link in OUT_DIR is replaced by the output";
}

// ---- Entries that can't be read -----------------------------------------------------------------

TEST(BatchUnreadable, ASubdirectoryThatCantBeListedIsAFailedItem) {
  // It was skipped silently, and the batch exited 0.
  TempDir dir;
  fs::create_directories(dir / "zoo/locked");
  write_model_text(kCustomOpModel, dir / "zoo/a.onnx");
  write_model_text(kCustomOpModel, dir / "zoo/locked/b.onnx");
  fs::permissions(dir / "zoo/locked", fs::perms::none);
  const auto result = run_cli_unprivileged(
      {"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "--report", (dir / "r.json").string()});
  fs::permissions(dir / "zoo/locked", fs::perms::owner_all);
  if (!result) GTEST_SKIP() << "running as root without setpriv: permissions can't be made to matter";
  EXPECT_EQ(result->exit_code, 1) << result->out << result->err;
  EXPECT_NE(result->out.find("batch: 2 model(s): 1 rewritten, 0 unchanged, 0 target not met, 1 failed"), std::string::npos)
      << result->out;
  EXPECT_NE(result->out.find("failed: " + (dir / "zoo/locked").string() + ": cannot read the directory: Permission denied"),
            std::string::npos)
      << result->out;
  EXPECT_NE(result->err.find("failed " + (dir / "zoo/locked").string()), std::string::npos) << result->err;
  EXPECT_TRUE(fs::exists(dir / "out/a.onnx"));
  const auto report = parse_json(read_file(dir / "r.json")).struct_value().fields();
  const auto& models = report.at("models").list_value();
  ASSERT_EQ(models.values_size(), 2);
  const auto& failed = models.values(1).struct_value().fields();
  EXPECT_EQ(failed.at("model").string_value(), (dir / "zoo/locked").string());
  EXPECT_EQ(failed.at("status").string_value(), "failed");
  const auto& error = failed.at("error").struct_value().fields();
  EXPECT_EQ(error.at("message").string_value(), "cannot read the directory: Permission denied");
  EXPECT_EQ(error.at("file").string_value(), (dir / "zoo/locked").string());
  EXPECT_EQ(error.at("exit_code").number_value(), 3);
}

// ---- The report ---------------------------------------------------------------------------------

TEST(BatchReport, AReportThatCantBeWrittenStopsTheBatchBeforeAnyModelIsWritten) {
  TempDir dir;
  fs::create_directories(dir / "zoo");
  fs::create_directories(dir / "readonly");
  write_model_text(kCustomOpModel, dir / "zoo/a.onnx");
  fs::permissions(dir / "readonly", fs::perms::owner_read | fs::perms::owner_exec);
  const auto result = run_cli_unprivileged(
      {"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "--report", (dir / "readonly/r.json").string()});
  fs::permissions(dir / "readonly", fs::perms::owner_all);
  if (!result) GTEST_SKIP() << "running as root without setpriv: permissions can't be made to matter";
  EXPECT_EQ(result->exit_code, 3) << result->out << result->err;
  EXPECT_EQ(result->err, "onnx-rewrite: error: " + (dir / "readonly/r.json").string() + ": cannot create a file there: Permission denied\n");
  EXPECT_FALSE(fs::exists(dir / "out/a.onnx"));
  EXPECT_TRUE(fs::is_empty(dir / "readonly"));
}

TEST(BatchReport, FailuresAreErrorObjectsPerModelAndForTheWholeBatch) {
  TempDir dir;
  fs::create_directories(dir / "zoo");
  write_model_text(kCustomOpModel, dir / "zoo/a.onnx");
  write_file(dir / "zoo/broken.onnx", "not a model");
  const auto result = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "--report", (dir / "r.json").string()});
  EXPECT_EQ(result.exit_code, 1);
  const auto models = parse_json(read_file(dir / "r.json")).struct_value().fields().at("models").list_value();
  ASSERT_EQ(models.values_size(), 2);
  const auto& broken = models.values(1).struct_value().fields();
  EXPECT_EQ(broken.at("status").string_value(), "failed");
  const auto& error = broken.at("error").struct_value().fields();
  EXPECT_EQ(error.at("file").string_value(), (dir / "zoo/broken.onnx").string());
  EXPECT_EQ(error.at("message").string_value().rfind("not a valid ONNX model", 0), 0u) << error.at("message").string_value();
  EXPECT_EQ(error.at("exit_code").number_value(), 3);

  // The batch as a whole fails (a broken rule file): the report says so, and nothing is written.
  write_file(dir / "broken.rules", "rule x\n");
  const auto whole = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out2").string(), "--rules",
                              (dir / "broken.rules").string(), "--report", (dir / "r2.json").string()});
  EXPECT_EQ(whole.exit_code, 3) << whole.err;
  const auto report = parse_json(read_file(dir / "r2.json")).struct_value().fields();
  EXPECT_EQ(report.at("target").string_value(), "onnx");
  EXPECT_FALSE(report.count("summary"));
  const auto& whole_error = report.at("error").struct_value().fields();
  EXPECT_EQ(whole_error.at("file").string_value(), (dir / "broken.rules").string() + ":2:1") << "as the error line names it";
  EXPECT_EQ(whole_error.at("exit_code").number_value(), 3);
  EXPECT_EQ(whole.err, "onnx-rewrite: error: " + whole_error.at("file").string_value() + ": " + whole_error.at("message").string_value() + "\n");
  EXPECT_FALSE(fs::exists(dir / "out2"));
}

}  // namespace
}  // namespace onnx_rewrite
