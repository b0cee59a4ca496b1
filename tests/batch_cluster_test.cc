// `batch` across processes and machines (docs/batch.md): --shard splits a zoo with no
// coordinator, --report-jsonl keeps a line per finished model, --resume skips what is done,
// merge-reports joins the shards into the report one run writes, --junit for CI summaries.
#include <gtest/gtest.h>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <set>
#include <sstream>

#include <fmt/format.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

const char* kPlainModel = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] z) {
  z = Relu (x)
})";

// An op nothing covers: the target is not met.
const char* kUncoveredModel = R"(<ir_version: 8, opset_import: ["": 17, "nobody": 1]>
g (float[2, 3] x) => (float[2, 3] z) {
  z = nobody.Mystery (x)
})";

std::vector<google::protobuf::Value> parse_lines(const fs::path& path) {
  std::vector<google::protobuf::Value> lines;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(parse_json(line));
  }
  return lines;
}

// Without what differs from run to run: timings and the wall clock.
void drop_timing(google::protobuf::Value& value) {
  if (value.has_struct_value()) {
    auto* fields = value.mutable_struct_value()->mutable_fields();
    fields->erase("timing");
    for (auto& [key, member] : *fields) drop_timing(member);
  } else if (value.has_list_value()) {
    for (auto& item : *value.mutable_list_value()->mutable_values()) drop_timing(item);
  }
}

// A model file, its directories made.
void put(const char* text, const fs::path& path) {
  fs::create_directories(path.parent_path());
  write_model_text(text, path);
}

// A zoo of twelve models in nested directories: rewritten, unchanged, target not met, broken.
void write_zoo(const fs::path& zoo) {
  for (const char* name : {"a.onnx", "b.onnx", "sub/c.onnx", "sub/d.onnx", "sub/deeper/e.onnx", "f.onnx", "g.onnx", "h.onnx"}) {
    put(kCustomOpModel, zoo / name);
  }
  put(kPlainModel, zoo / "plain.onnx");
  put(kPlainModel, zoo / "sub/plain2.onnx");
  put(kUncoveredModel, zoo / "mystery.onnx");
  write_file(zoo / "sub/broken.onnx", "not a model");
}

// Every file under `root` with its bytes.
std::map<std::string, std::string> files_under(const fs::path& root) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_regular_file()) files[entry.path().lexically_relative(root).string()] = read_file(entry.path());
  }
  return files;
}

TEST(BatchShards, TwoShardsAsSeparateProcessesGiveTheOutputsAndMergedReportOfOneRun) {
  TempDir dir;
  write_zoo(dir / "zoo");
  const auto whole = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "-j", "2", "--report",
                              (dir / "one.json").string()});
  EXPECT_EQ(whole.exit_code, 1) << whole.err;  // the broken and the uncovered model
  const auto one_run = files_under(dir / "out");
  EXPECT_EQ(one_run.size(), 11u);
  fs::remove_all(dir / "out");
  for (const char* shard : {"1/2", "2/2"}) {
    const std::string lines = (dir / (std::string("shard") + shard[0] + ".jsonl")).string();
    const auto part = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "--shard", shard,
                               "--report-jsonl", lines});
    EXPECT_NE(part.out.find(std::string("(shard ") + shard + " of 12 models)"), std::string::npos) << part.out;
  }
  EXPECT_EQ(one_run, files_under(dir / "out"));

  // A partition: every model in exactly one shard, neither shard empty.
  std::set<std::string> first, second;
  for (const auto& line : parse_lines(dir / "shard1.jsonl")) first.insert(line.struct_value().fields().at("model").string_value());
  for (const auto& line : parse_lines(dir / "shard2.jsonl")) second.insert(line.struct_value().fields().at("model").string_value());
  EXPECT_FALSE(first.empty());
  EXPECT_FALSE(second.empty());
  EXPECT_EQ(first.size() + second.size(), 12u);
  for (const auto& model : first) EXPECT_FALSE(second.count(model)) << model;

  const auto merged = run_cli({"merge-reports", (dir / "shard2.jsonl").string(), (dir / "shard1.jsonl").string(), "-o",
                               (dir / "merged.json").string()});
  EXPECT_EQ(merged.exit_code, 1) << merged.err;
  EXPECT_EQ(merged.out, "merged 12 model(s) from 2 file(s): 8 rewritten, 2 unchanged, 1 target not met, 1 failed\n");
  auto expected = parse_json(read_file(dir / "one.json"));
  auto actual = parse_json(read_file(dir / "merged.json"));
  drop_timing(expected);
  drop_timing(actual);
  std::string difference;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&difference);
  EXPECT_TRUE(differencer.Compare(expected, actual)) << difference;
  EXPECT_EQ(actual.struct_value().fields().at("summary").struct_value().fields().at("rewritten").number_value(), 8);

  // One shard alone is not the batch: merged, it says what is missing and fails.
  const auto half = run_cli({"merge-reports", (dir / "shard1.jsonl").string(), "-o", (dir / "half.json").string()});
  EXPECT_EQ(half.exit_code, 1);
  EXPECT_NE(half.err.find(fmt::format("incomplete: {} of the batch's 12 models have no line", second.size())), std::string::npos)
      << half.err;
}

TEST(BatchShards, TheSplitDependsOnlyOnTheRelativePath) {
  TempDir dir;
  write_zoo(dir / "zoo");
  fs::create_directories(dir / "elsewhere");
  fs::copy(dir / "zoo", dir / "elsewhere/zoo-copy", fs::copy_options::recursive);
  const auto a = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "o1").string(), "--shard", "3/4", "--report-jsonl",
                          (dir / "a.jsonl").string()});
  const auto b = run_cli({"batch", (dir / "elsewhere/zoo-copy").string(), "-o", (dir / "o2").string(), "--shard", "3/4",
                          "--report-jsonl", (dir / "b.jsonl").string()});
  const auto relative_outputs = [](const fs::path& lines, const fs::path& out) {
    std::set<std::string> outputs;
    for (const auto& line : parse_lines(lines)) {
      outputs.insert(fs::path(line.struct_value().fields().at("output").string_value()).lexically_relative(out).string());
    }
    return outputs;
  };
  EXPECT_EQ(relative_outputs(dir / "a.jsonl", dir / "o1"), relative_outputs(dir / "b.jsonl", dir / "o2"));
}

TEST(BatchShards, AMalformedShardIsAUsageError) {
  TempDir dir;
  write_zoo(dir / "zoo");
  for (const char* shard : {"0/2", "3/2", "1/0", "2", "a/b", "1/2/3", "-1/2"}) {
    const auto result = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "--shard", shard});
    EXPECT_EQ(result.exit_code, 2) << shard;
    EXPECT_EQ(result.err, std::string("onnx-rewrite: error: --shard ") + shard + ": expected K/N with 1 <= K <= N (e.g. 2/8)\n");
  }
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(BatchResume, OnlyModelsNotDoneWithTheSameInputAndOptionsRunAgain) {
  TempDir dir;
  write_zoo(dir / "zoo");
  const std::string lines = (dir / "run.jsonl").string();
  const auto first = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "--report-jsonl", lines});
  EXPECT_EQ(first.exit_code, 1);
  EXPECT_EQ(parse_lines(lines).size(), 12u);

  // The broken model is mended, one model is changed, and the run was killed mid-line.
  put(kCustomOpModel, dir / "zoo/sub/broken.onnx");
  put(kPlainModel, dir / "zoo/b.onnx");
  write_file(lines, read_file(lines) + R"({"tool":{"name":"onnx-rew)");
  const auto again = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "--report-jsonl", lines, "--resume",
                              lines, "--report", (dir / "r.json").string()});
  EXPECT_EQ(again.exit_code, 1) << again.err;  // mystery.onnx still misses the target
  // Redone: the failed one, the changed one, and the one that missed the target (it is done:
  // only failures are retried) stays.
  EXPECT_NE(again.err.find("[1/2] "), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("[2/2] "), std::string::npos) << again.err;
  EXPECT_EQ(again.err.find("[3/"), std::string::npos) << again.err;
  EXPECT_NE(again.out.find("; 10 done by an earlier run (--resume)"), std::string::npos) << again.out;
  const auto report = parse_json(read_file(dir / "r.json")).struct_value().fields();
  const auto& summary = report.at("summary").struct_value().fields();
  EXPECT_EQ(summary.at("models").number_value(), 12);
  EXPECT_EQ(summary.at("resumed").number_value(), 10);
  EXPECT_EQ(summary.at("failed").number_value(), 0);
  EXPECT_EQ(summary.at("unchanged").number_value(), 3);
  // The cut line is left alone on its line; the next line starts on its own.
  std::vector<std::string> texts;
  std::istringstream in(read_file(lines));
  for (std::string text; std::getline(in, text);) texts.push_back(text);
  ASSERT_EQ(texts.size(), 15u) << "12 + the fragment + 2 redone";
  EXPECT_EQ(texts[12], R"({"tool":{"name":"onnx-rew)");
  for (size_t i : {13u, 14u}) EXPECT_EQ(parse_json(texts[i]).struct_value().fields().at("status").string_value().empty(), false);

  // Other options: nothing of the earlier run counts.
  const auto other = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out-ort").string(), "--target", "ort", "--resume", lines});
  EXPECT_NE(other.err.find("[12/12] "), std::string::npos) << other.err;

  // An output removed since is written again.
  fs::remove(dir / "out/a.onnx");
  const auto third = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "--resume", lines});
  EXPECT_NE(third.err.find("[1/1] rewritten " + (dir / "zoo/a.onnx").string()), std::string::npos) << third.err;
  EXPECT_TRUE(fs::exists(dir / "out/a.onnx"));
}

TEST(BatchJunit, OneTestcasePerModelWithTheReason) {
  TempDir dir;
  put(kCustomOpModel, dir / "zoo/a.onnx");
  put(kUncoveredModel, dir / "zoo/mystery.onnx");
  write_file(dir / "zoo/broken.onnx", "not a model");
  const auto result = run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "out").string(), "--junit", (dir / "j.xml").string()});
  EXPECT_EQ(result.exit_code, 1);
  const std::string xml = read_file(dir / "j.xml");
  EXPECT_EQ(xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"onnx-rewrite batch --target onnx\" tests=\"3\" "
                      "failures=\"1\" errors=\"1\"",
                      0),
            0u)
      << xml;
  EXPECT_NE(xml.find("<testcase name=\"" + (dir / "zoo/a.onnx").string() + "\" classname=\"onnx-rewrite.batch.onnx\" time=\""),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<failure message=\"target onnx not met: 1 problem\" type=\"target-not-met\">nobody.Mystery x1 (main graph): "),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<error message=\"not a valid ONNX model"), std::string::npos) << xml;
}

TEST(CheckJunit, ATestcaseForTheModelAndTarget) {
  TempDir dir;
  put(kUncoveredModel, dir / "mystery.onnx");
  put(kPlainModel, dir / "plain.onnx");
  auto result = run_cli({"check", (dir / "mystery.onnx").string(), "--junit", (dir / "j1.xml").string()});
  EXPECT_EQ(result.exit_code, 1);
  std::string xml = read_file(dir / "j1.xml");
  EXPECT_NE(xml.find("tests=\"1\" failures=\"1\" errors=\"0\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("classname=\"onnx-rewrite.check.onnx\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("nobody.Mystery x1 (main graph)"), std::string::npos) << xml;

  result = run_cli({"check", (dir / "plain.onnx").string(), "--target", "ort", "--junit", (dir / "j2.xml").string()});
  EXPECT_EQ(result.exit_code, 0);
  xml = read_file(dir / "j2.xml");
  EXPECT_NE(xml.find("tests=\"1\" failures=\"0\" errors=\"0\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("classname=\"onnx-rewrite.check.ort\" time=\""), std::string::npos) << xml;
  EXPECT_EQ(xml.find("<failure"), std::string::npos) << xml;

  // An unreadable model: exit 3 as always, and the JUnit file says why.
  result = run_cli({"check", (dir / "missing.onnx").string(), "--junit", (dir / "j3.xml").string()});
  EXPECT_EQ(result.exit_code, 3);
  xml = read_file(dir / "j3.xml");
  EXPECT_NE(xml.find("errors=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<error message=\"no such file"), std::string::npos) << xml;
}

}  // namespace
}  // namespace onnx_rewrite
