// The ONNX backend corpus (the conformance data set, ground truth nobody here wrote):
// - every model loads and round-trips byte-identical, through the copy path and the splicing
//   serializer;
// - every case ONNX Runtime runs natively that a rewrite for a target changes still reproduces its
//   expected outputs (the opset matrix, tests/ort/opset_matrix.js, proves --opset rewrites).
#include <gtest/gtest.h>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "onnx_rewrite/model_io.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

const char* kCorpora[] = {"node", "pytorch-converted", "pytorch-operator", "simple", "light"};

// Every model of the corpus: (case, model). A light/ case is named by its model file.
std::vector<std::pair<fs::path, fs::path>> corpus_cases(const fs::path& root) {
  std::vector<std::pair<fs::path, fs::path>> cases;
  for (const char* corpus : kCorpora) {
    for (const auto& entry : fs::directory_iterator(root / corpus)) {
      if (entry.is_directory() && fs::exists(entry.path() / "model.onnx")) {
        cases.emplace_back(entry.path(), entry.path() / "model.onnx");
      } else if (entry.path().extension() == ".onnx") {
        cases.emplace_back(entry.path(), entry.path());
      }
    }
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

TEST(Conformance, EveryModelRoundTripsByteIdentical) {
  ASSERT_TEST_DATA(root, "conformance");
  const auto cases = corpus_cases(root);
  ASSERT_GT(cases.size(), 1800u);
  RuleSet no_rules;
  TempDir dir;
  int checked = 0;
  for (const auto& [case_path, model_path] : cases) {
    const std::string bytes = read_file(model_path);
    Model model = load_model(model_path);
    const auto result = rewrite_model(model, no_rules, {});
    ASSERT_FALSE(result.changed()) << model_path;
    write_model(model, dir / "out.onnx");
    ASSERT_EQ(read_file(dir / "out.onnx"), bytes) << model_path << ": the copy path";
    model.changed = true;
    ASSERT_EQ(serialize_model(model), bytes) << model_path << ": the splicing serializer";
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(cases.size()));
}

google::protobuf::Value parse_json(const std::string& text) {
  google::protobuf::Value value;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &value);
  if (!status.ok()) throw std::runtime_error("bad JSON: " + status.ToString());
  return value;
}

// Runs tests/ort/conformance.js; returns case -> status ("pass", "mismatch", ...).
std::map<std::string, std::string> run_in_ort(const std::vector<std::pair<fs::path, fs::path>>& jobs, const TempDir& dir,
                                              const std::string& name) {
  std::string json = "[";
  for (size_t i = 0; i < jobs.size(); ++i) {
    json += (i ? ",\n" : "") + std::string("{\"case\": \"") + jobs[i].first.string() + "\", \"model\": \"" +
            jobs[i].second.string() + "\"}";
  }
  json += "]";
  write_file(dir / (name + "-jobs.json"), json);
  const auto result = run_command({"node", (source_dir() / "tests/ort/conformance.js").string(), "--jobs",
                                   (dir / (name + "-jobs.json")).string(), "--out", (dir / (name + "-results.json")).string()});
  if (result.exit_code != 0) throw std::runtime_error("conformance.js failed: " + result.err);
  std::map<std::string, std::string> statuses;
  const auto results = parse_json(read_file(dir / (name + "-results.json")));
  for (const auto& entry : results.list_value().values()) {
    const auto& fields = entry.struct_value().fields();
    std::string status = fields.at("status").string_value();
    if (status != "pass" && fields.count("message")) status += ": " + fields.at("message").string_value();
    statuses[fields.at("case").string_value()] = status;
  }
  return statuses;
}

// Rewrites the whole corpus with `batch` (extra options appended) into dir/out.
std::map<std::string, google::protobuf::Struct> batch_rewrite(const fs::path& root, const TempDir& dir,
                                                              const std::vector<std::string>& extra) {
  std::vector<std::string> args{"batch"};
  for (const char* corpus : kCorpora) args.push_back((root / corpus).string());
  args.insert(args.end(), {"-o", (dir / "out").string(), "--report", (dir / "batch.json").string()});
  args.insert(args.end(), extra.begin(), extra.end());
  const auto result = run_cli(args);
  if (result.exit_code != 0 && result.exit_code != 1) throw std::runtime_error("batch failed: " + result.err);
  std::map<std::string, google::protobuf::Struct> reports;
  const auto report = parse_json(read_file(dir / "batch.json"));
  for (const auto& model : report.struct_value().fields().at("models").list_value().values()) {
    reports[model.struct_value().fields().at("model").string_value()] = model.struct_value();
  }
  return reports;
}

// The rewritten model of a case: batch writes each corpus under its own name in out/.
fs::path rewritten_path(const fs::path& root, const fs::path& model, const TempDir& dir) {
  const fs::path relative = fs::relative(model, root);
  auto part = relative.begin();
  const fs::path corpus = *part;
  return dir / "out" / fs::relative(model, root / corpus);
}

struct TargetRewrite {
  std::string target;
  int minimum_rewritten;  // native cases whose model the rewrite changes: what the test proves things on
};

class ConformanceInOrt : public ::testing::TestWithParam<TargetRewrite> {
 protected:
  void SetUp() override {
    ASSERT_TEST_DATA(corpus, "conformance");
    root_ = corpus;
    // The original models' verdicts, once per process (ctest runs each test in its own).
    static TempDir baseline_dir;
    static const auto baseline = run_in_ort(corpus_cases(corpus), baseline_dir, "baseline");
    baseline_ = &baseline;
  }

  fs::path root_;
  const std::map<std::string, std::string>* baseline_ = nullptr;
};

// Every case ONNX Runtime runs natively whose model the rewrite for a target changes still
// reproduces its expected outputs. A model the rewrite leaves byte-identical computes what it
// did (EveryModelRoundTripsByteIdentical): counting only the changed ones, an untouched model
// can't pass by being compared with itself. The onnx target changes none of these models (its
// rules are for custom ops; the opset matrix proves its --opset rewrites).
TEST_P(ConformanceInOrt, RewrittenCasesReproduceExpectedOutputs) {
  int natively = 0;
  for (const auto& [case_path, status] : *baseline_) natively += status == "pass";
  ASSERT_GT(natively, 1400) << "ONNX Runtime should run most of the corpus natively";
  TempDir dir;
  const auto reports = batch_rewrite(root_, dir, {"--target", GetParam().target});
  std::vector<std::pair<fs::path, fs::path>> jobs;
  for (const auto& [case_path, model_path] : corpus_cases(root_)) {
    ASSERT_TRUE(reports.count(model_path.string())) << model_path;
    const fs::path rewritten = rewritten_path(root_, model_path, dir);
    ASSERT_TRUE(fs::exists(rewritten)) << rewritten;
    if (baseline_->at(case_path.string()) != "pass" || read_file(rewritten) == read_file(model_path)) continue;
    jobs.emplace_back(case_path, rewritten);
  }
  const auto statuses = run_in_ort(jobs, dir, "rewritten");
  std::vector<std::string> failures;
  for (const auto& [case_path, model] : jobs) {
    if (statuses.at(case_path.string()) != "pass") failures.push_back(case_path.string() + ": " + statuses.at(case_path.string()));
  }
  EXPECT_TRUE(failures.empty()) << failures.size() << " case(s) no longer reproduce their outputs:\n"
                                << ::testing::PrintToString(failures);
  std::cout << "[ corpus   ] --target " << GetParam().target << ": " << jobs.size() << " of " << natively
            << " native cases rewritten, " << jobs.size() - failures.size() << " reproduce their outputs\n";
  EXPECT_GE(static_cast<int>(jobs.size()), GetParam().minimum_rewritten);
}

INSTANTIATE_TEST_SUITE_P(Targets, ConformanceInOrt,
                         ::testing::Values(TargetRewrite{"ort", 87}, TargetRewrite{"tensorrt", 99}, TargetRewrite{"openvino", 121}),
                         [](const auto& info) { return info.param.target; });

}  // namespace
}  // namespace onnx_rewrite
