// `batch` and the trust it must keep (docs/cli.md, "batch"): the report committed or nothing
// written, failures as error objects.
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

const char* kCustomOpModel = R"(<ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
g (float[2, 3] x, float[2, 3] y) => (float[2, 3] z) {
  t = test.customop.CustomOpOne (x, y)
  z = Relu (t)
})";

google::protobuf::Value parse_json(const std::string& text) {
  google::protobuf::Value value;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &value);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << text;
  return value;
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
