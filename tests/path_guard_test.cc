// Never destroy a file (docs/cli.md, "Files a command reads and writes"): a command whose paths
// name one file twice, or name a file it reads, exits 2 before anything is written. Each case
// snapshots the whole working directory (bytes, modification times, inodes, links) and checks it
// is exactly as it was afterwards.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

// Every entry under a directory: what it is, and what a write would change.
struct EntryState {
  std::string kind;  // file, directory, link -> target
  std::string bytes;
  int64_t mtime_ns = 0;
  ino_t inode = 0;
  bool operator==(const EntryState&) const = default;
};
using Snapshot = std::map<std::string, EntryState>;

Snapshot snapshot(const fs::path& root) {
  Snapshot entries;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    struct stat st {};
    ::lstat(entry.path().c_str(), &st);
    EntryState state;
    state.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    state.inode = st.st_ino;
    if (S_ISLNK(st.st_mode)) state.kind = "link -> " + fs::read_symlink(entry.path()).string();
    else if (S_ISDIR(st.st_mode)) state.kind = "directory";
    else state = {"file", read_file(entry.path()), state.mtime_ns, state.inode};
    entries[fs::relative(entry.path(), root).string()] = state;
  }
  return entries;
}

std::string describe_difference(const Snapshot& before, const Snapshot& after) {
  std::string text;
  for (const auto& [path, state] : after) {
    auto it = before.find(path);
    if (it == before.end()) text += "  new: " + path + "\n";
    else if (!(it->second == state)) text += "  changed: " + path + "\n";
  }
  for (const auto& [path, state] : before) {
    if (!after.count(path)) text += "  gone: " + path + "\n";
  }
  return text;
}

// A model whose weight `y` is external data in weights.bin, and a rule file.
class NeverDestroy : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir / "m.onnx", external_data_model("weights.bin"));
    write_file(dir / "weights.bin", std::string(24, '\x01'));
    write_file(dir / "my.rules", kOneToAdd);
    fs::create_directories(dir / "sub");
    fs::create_directories(dir / "zoo/deeper");
    write_model_text(kCustomOpModel, dir / "zoo/a.onnx");
    write_model_text(kCustomOpModel, dir / "zoo/deeper/b.onnx");
    fs::create_directory_symlink("zoo", dir / "zoo-link");
    fs::create_symlink("m.onnx", dir / "m-link.onnx");
    fs::create_hard_link(dir / "m.onnx", dir / "m-hard.onnx");
    fs::create_symlink("sub/not-yet.onnx", dir / "dangling.onnx");
    write_file(dir / "shard.jsonl", "");
  }

  // Runs the CLI in the directory: exit 2, one error line holding `message`, nothing changed.
  void expect_refused(const std::vector<std::string>& args, const std::string& message) {
    const Snapshot before = snapshot(dir.path());
    const CommandResult result = run_command(cli_in_dir(args));
    EXPECT_EQ(result.exit_code, 2) << result.err << result.out;
    EXPECT_EQ(result.err.rfind("onnx-rewrite: error: ", 0), 0u) << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_NE(result.err.find(message), std::string::npos) << "expected '" << message << "' in: " << result.err;
    const Snapshot after = snapshot(dir.path());
    EXPECT_TRUE(before == after) << "the directory changed:\n" << describe_difference(before, after);
  }

  CommandResult run_ok(const std::vector<std::string>& args) { return run_command(cli_in_dir(args)); }

  std::vector<std::string> cli_in_dir(const std::vector<std::string>& args) const {
    std::string command = "cd '" + dir.path().string() + "' && exec '" + cli_path().string() + "'";
    for (const auto& arg : args) command += " '" + arg + "'";
    return {"sh", "-c", command};
  }

  TempDir dir;
};

// ---- rewrite ----------------------------------------------------------------------------------

TEST_F(NeverDestroy, HtmlNamingTheInputModel) {
  expect_refused({"rewrite", "m.onnx", "-o", "out.onnx", "--html", "m.onnx"}, "m.onnx: --html would replace the input model");
}

TEST_F(NeverDestroy, HtmlNamingTheOutput) {
  expect_refused({"rewrite", "m.onnx", "-o", "h.onnx", "--html", "h.onnx"}, "h.onnx: --html and -o are the same file");
}

TEST_F(NeverDestroy, HtmlAndReportNamingOneFile) {
  expect_refused({"rewrite", "m.onnx", "-o", "out.onnx", "--html", "x", "--report", "x"}, "x: --html and --report are the same file");
}

TEST_F(NeverDestroy, ReportNamingTheOutput) {
  expect_refused({"rewrite", "m.onnx", "-o", "r.onnx", "--report", "r.onnx"}, "r.onnx: --report and -o are the same file");
}

TEST_F(NeverDestroy, ReportNamingTheInputThroughASymbolicLink) {
  expect_refused({"rewrite", "m.onnx", "-o", "out.onnx", "--report", "m-link.onnx"},
                 "m-link.onnx: --report would replace the input model 'm.onnx'");
}

TEST_F(NeverDestroy, ReportNamingTheInputThroughAHardLink) {
  expect_refused({"rewrite", "m.onnx", "-o", "out.onnx", "--report", "m-hard.onnx"},
                 "m-hard.onnx: --report would replace the input model 'm.onnx'");
}

TEST_F(NeverDestroy, ReportNamingTheInputThroughDotDot) {
  expect_refused({"rewrite", "m.onnx", "-o", "out.onnx", "--report", "sub/../m.onnx"},
                 "sub/../m.onnx: --report would replace the input model 'm.onnx'");
}

TEST_F(NeverDestroy, OutputNamingTheInputThroughEachKindOfPath) {
  expect_refused({"rewrite", "m.onnx", "-o", "m-link.onnx"}, "m-link.onnx: -o would replace the input model 'm.onnx'");
  expect_refused({"rewrite", "m.onnx", "-o", "m-hard.onnx"}, "m-hard.onnx: -o would replace the input model 'm.onnx'");
  expect_refused({"rewrite", "m.onnx", "-o", "sub/../m.onnx"}, "sub/../m.onnx: -o would replace the input model 'm.onnx'");
  expect_refused({"rewrite", "m.onnx", "-o", "m.onnx"}, "m.onnx: -o would replace the input model");
}

TEST_F(NeverDestroy, TwoWrittenPathsThroughDotDotAndALinkThatLeadsNowhereYet) {
  expect_refused({"rewrite", "m.onnx", "-o", "sub/not-yet.onnx", "--report", "dangling.onnx"},
                 "dangling.onnx: --report and -o 'sub/not-yet.onnx' are the same file");
  expect_refused({"rewrite", "m.onnx", "-o", "h.onnx", "--html", "sub/../h.onnx"}, "sub/../h.onnx: --html and -o 'h.onnx' are the same file");
}

TEST_F(NeverDestroy, ReportNamingAnInputDataFile) {
  expect_refused({"rewrite", "m.onnx", "-o", "sub/out.onnx", "--report", "weights.bin"},
                 "weights.bin: --report would replace a data file of the input model");
  expect_refused({"rewrite", "m.onnx", "-o", "sub/out.onnx", "--dry-run", "--html", "weights.bin"},
                 "weights.bin: --html would replace a data file of the input model");
}

TEST_F(NeverDestroy, OutputNamingAnInputDataFile) {
  expect_refused({"rewrite", "m.onnx", "-o", "weights.bin"}, "weights.bin: -o would replace a data file of the input model");
}

TEST_F(NeverDestroy, ReportNamingTheOutputsCopyOfADataFile) {
  expect_refused({"rewrite", "m.onnx", "-o", "sub/out.onnx", "--report", "sub/weights.bin"},
                 "sub/weights.bin: the output's copy of a data file and --report are the same file");
}

TEST_F(NeverDestroy, OutputOrReportNamingARuleFile) {
  expect_refused({"rewrite", "m.onnx", "-o", "my.rules", "--rules", "my.rules"}, "my.rules: -o would replace the rule file");
  expect_refused({"rewrite", "m.onnx", "-o", "out.onnx", "--rules", ".", "--report", "my.rules"},
                 "my.rules: --report would replace the rule file");
}

TEST_F(NeverDestroy, InPlaceAndDryRunReportsNamingTheInput) {
  expect_refused({"rewrite", "m.onnx", "--in-place", "--report", "m.onnx"}, "m.onnx: --report would replace the input model");
  expect_refused({"rewrite", "m.onnx", "--dry-run", "--report", "m-hard.onnx"}, "m-hard.onnx: --report would replace the input model");
}

// ---- check, merge-reports ----------------------------------------------------------------------

TEST_F(NeverDestroy, CheckJunitNamingTheInput) {
  expect_refused({"check", "m.onnx", "--junit", "m.onnx"}, "m.onnx: --junit would replace the input model");
  expect_refused({"check", "m.onnx", "--junit", "m-link.onnx"}, "m-link.onnx: --junit would replace the input model 'm.onnx'");
  expect_refused({"check", "m.onnx", "--junit", "weights.bin"}, "weights.bin: --junit would replace a data file of the input model");
}

TEST_F(NeverDestroy, MergeReportsWritingOverWhatItMerges) {
  expect_refused({"merge-reports", "shard.jsonl", "-o", "shard.jsonl"}, "shard.jsonl: -o would replace a report being merged");
  expect_refused({"merge-reports", "shard.jsonl", "-o", "r.json", "--junit", "r.json"}, "r.json: --junit and -o are the same file");
}

// ---- batch -----------------------------------------------------------------------------------

TEST_F(NeverDestroy, BatchReportNamingAnInputModel) {
  expect_refused({"batch", "zoo", "-o", "out", "--report", "zoo/a.onnx"}, "zoo/a.onnx: --report lies inside the input directory 'zoo'");
  expect_refused({"batch", "zoo/a.onnx", "-o", "out", "--report", "zoo/a.onnx"},
                 "zoo/a.onnx: --report would replace the input model");
}

TEST_F(NeverDestroy, BatchReportsInsideAnInputTreeThroughLinksAndDotDot) {
  for (const char* report : {"zoo/r.json", "zoo-link/r.json", "sub/../zoo/deeper/r.json"}) {
    SCOPED_TRACE(report);
    expect_refused({"batch", "zoo", "-o", "out", "--report-jsonl", report}, "--report-jsonl lies inside the input directory 'zoo'");
  }
}

TEST_F(NeverDestroy, BatchOutDirNamingTheInputDirectory) {
  for (const char* out_dir : {"zoo", "zoo-link", "sub/../zoo"}) {
    SCOPED_TRACE(out_dir);
    expect_refused({"batch", "zoo", "-o", out_dir}, "zoo: -o names this input directory");
  }
}

TEST_F(NeverDestroy, BatchOutputNamingAnInputFile) {
  expect_refused({"batch", "zoo/a.onnx", "-o", "zoo"}, "zoo/a.onnx: its output in -o OUT_DIR would replace the input model");
}

TEST_F(NeverDestroy, BatchReportsNamingOneFileOrAnOutput) {
  expect_refused({"batch", "zoo", "-o", "out", "--report", "r", "--junit", "r"}, "r: --junit and --report are the same file");
  expect_refused({"batch", "zoo", "-o", "out", "--report", "sub/../r", "--report-jsonl", "r"},
                 "r: --report-jsonl and --report 'sub/../r' are the same file");
  fs::create_directories(dir / "out");
  expect_refused({"batch", "zoo", "-o", "out", "--report", "out/a.onnx"}, "out/a.onnx: its output in -o OUT_DIR and --report are the same file");
}

TEST_F(NeverDestroy, BatchReportNamingADataFileOfAModelGivenAsAFile) {
  expect_refused({"batch", "m.onnx", "-o", "out", "--report", "weights.bin"}, "weights.bin: --report would replace a data file of the input model");
  EXPECT_FALSE(fs::exists(dir / "out/m.onnx"));
}

// ---- what the guard lets through --------------------------------------------------------------

TEST_F(NeverDestroy, LegitimateLayoutsStillWork) {
  const auto beside = run_ok({"rewrite", "m.onnx", "-o", "out.onnx", "--report", "r.json", "--rules", "my.rules"});
  EXPECT_EQ(beside.exit_code, 0) << beside.err;
  const auto elsewhere = run_ok({"rewrite", "m.onnx", "-o", "sub/out.onnx", "--report", "sub/r.json"});
  EXPECT_EQ(elsewhere.exit_code, 0) << elsewhere.err;
  EXPECT_EQ(read_file(dir / "sub/weights.bin"), read_file(dir / "weights.bin"));
  const auto through_link = run_ok({"rewrite", "m.onnx", "-o", "dangling.onnx"});
  EXPECT_EQ(through_link.exit_code, 0) << through_link.err;
  EXPECT_TRUE(fs::is_regular_file(dir / "sub/not-yet.onnx")) << "a link at -o is written through, also one leading nowhere yet";
  EXPECT_TRUE(fs::is_symlink(dir / "dangling.onnx"));
  fs::create_directories(dir / "zoo/out");
  const auto in_tree = run_ok({"batch", "zoo", "-o", "zoo/out", "--report", "zoo/out/r.json", "--report-jsonl", "lines.jsonl",
                               "--resume", "lines.jsonl"});
  EXPECT_EQ(in_tree.exit_code, 0) << in_tree.err;
  EXPECT_TRUE(fs::exists(dir / "zoo/out/r.json"));
  EXPECT_TRUE(fs::exists(dir / "zoo/out/deeper/b.onnx"));
  const auto in_place = run_ok({"rewrite", "m-hard.onnx", "--in-place", "--report", "r.json"});
  EXPECT_EQ(in_place.exit_code, 0) << in_place.err;
}

}  // namespace
}  // namespace onnx_rewrite
