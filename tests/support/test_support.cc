#include "test_support.h"

#include <cctype>

#include <google/protobuf/util/json_util.h>

#include "onnx_rewrite/tensor.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include <onnx/defs/parser.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <onnx/defs/attr_proto_util.h>
#include <onnx/defs/printer.h>

#include "onnx_rewrite/model_io.h"
#include "graph/scope.h"

namespace onnx_rewrite::testing {

fs::path source_dir() { return ONNX_REWRITE_SOURCE_DIR; }
fs::path build_dir() { return ONNX_REWRITE_BUILD_DIR; }
fs::path cli_path() { return build_dir() / "onnx-rewrite"; }

TestData find_test_data(const std::string& set) {
  const fs::path root = build_dir() / "test-data";
  TestData data;
  data.dir = root / set;
  // The stamp is written once the set is whole: a fetch cut short leaves none.
  if (fs::is_directory(data.dir) && fs::exists(root / (set + ".stamp"))) return data;
  const char* skip = std::getenv("ONNX_REWRITE_SKIP_DATA");
  std::istringstream names(skip ? skip : "");
  for (std::string name; std::getline(names, name, ',');) data.opted_out = data.opted_out || name == set;
  data.missing = data.opted_out ? fmt::format("test data set '{}' is missing, and ONNX_REWRITE_SKIP_DATA leaves it out", set)
                                : fmt::format("test data set '{}' is missing (no {}): run scripts/fetch-test-data.sh {} (or set "
                                              "ONNX_REWRITE_SKIP_DATA={} to skip the tests that need it)",
                                              set, data.dir.string(), set, set);
  return data;
}

onnx::ModelProto parse_model_text(const std::string& text) {
  onnx::ModelProto model;
  const auto status = onnx::OnnxParser::Parse(model, text.c_str());
  if (!status.IsOK()) throw std::runtime_error("bad ONNX text in a test: " + status.ErrorMessage());
  return model;
}

void add_external_initializer(onnx::GraphProto& graph, const std::string& name, const std::string& location) {
  auto* weight = graph.add_initializer();
  weight->set_name(name);
  weight->set_data_type(onnx::TensorProto::FLOAT);
  weight->add_dims(2);
  weight->add_dims(3);
  weight->set_data_location(onnx::TensorProto::EXTERNAL);
  for (const auto& [key, value] : {std::pair{"location", location}, {"offset", "0"}, {"length", "24"}}) {
    auto* entry = weight->add_external_data();
    entry->set_key(key);
    entry->set_value(value);
  }
}

std::string external_data_model(const std::string& location) {
  onnx::ModelProto model = parse_model_text(kCustomOpModel);
  model.mutable_graph()->mutable_input()->RemoveLast();
  add_external_initializer(*model.mutable_graph(), "y", location);
  return serialize(model);
}

std::string serialize(const onnx::ModelProto& model) {
  std::string bytes;
  model.SerializeToString(&bytes);
  return bytes;
}

std::vector<std::string> op_types(const onnx::GraphProto& graph) {
  std::vector<std::string> types;
  for (const auto& node : graph.node()) types.push_back(node.op_type());
  return types;
}

Model model_from_text(const std::string& text) { return parse_model(serialize(parse_model_text(text)), "test.onnx"); }

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "onnx-rewrite-test-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

fs::path write_model_text(const std::string& text, const fs::path& path) {
  write_file(path, serialize(parse_model_text(text)));
  return path;
}

CommandResult run_command(const std::vector<std::string>& argv) {
  TempDir scratch;
  const fs::path out_path = scratch / "out";
  const fs::path err_path = scratch / "err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    std::vector<char*> args;
    for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = read_file(out_path);
  result.err = read_file(err_path);
  return result;
}

CommandResult run_cli(const std::vector<std::string>& args) {
  std::vector<std::string> argv{cli_path().string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

RuleSet rules_from_text(const std::string& text, bool with_builtin) {
  RuleSet rules;
  if (with_builtin) rules.load_builtin();
  rules.load_text(text, "test.rules");
  return rules;
}

namespace {

std::set<std::string> dead_in(const onnx::ModelProto& model) {
  std::set<std::string> read;
  std::vector<const onnx::GraphProto*> graphs{&model.graph()};
  for (size_t g = 0; g < graphs.size(); ++g) {
    for (const auto& node : graphs[g]->node()) {
      read.insert(node.input().begin(), node.input().end());
      for (const auto& attribute : node.attribute()) {
        if (attribute.has_g()) graphs.push_back(&attribute.g());
        for (const auto& graph : attribute.graphs()) graphs.push_back(&graph);
      }
    }
  }
  for (const auto& output : model.graph().output()) read.insert(output.name());
  for (const auto& input : model.graph().input()) read.insert(input.name());
  for (const auto& info : model.training_info()) {  // a training graph may read anything
    for (const auto& part : {&info.initialization(), &info.algorithm()}) {
      for (const auto& node : part->node()) read.insert(node.input().begin(), node.input().end());
    }
  }
  std::set<std::string> dead;
  for (const auto& node : model.graph().node()) {
    const bool standard = node.domain().empty() || node.domain() == "ai.onnx" || node.domain() == "ai.onnx.ml";
    if (!standard || std::any_of(node.output().begin(), node.output().end(), [&](const std::string& o) { return read.count(o); })) continue;
    dead.insert(fmt::format("node {} -> {}", node.op_type(), node.output_size() ? node.output(0) : ""));
  }
  for (const auto& initializer : model.graph().initializer()) {
    if (!read.count(initializer.name())) dead.insert("initializer " + initializer.name());
  }
  return dead;
}

}  // namespace

std::vector<std::string> dead_code_left(const onnx::ModelProto& before, const onnx::ModelProto& after) {
  const auto was = dead_in(before);
  std::vector<std::string> left;
  for (const auto& item : dead_in(after)) {
    if (!was.count(item)) left.push_back(item);
  }
  return left;
}

Rewritten rewrite_proto(const onnx::ModelProto& proto, const RuleSet& rules, RewriteOptions options) {
  std::ostringstream explain;
  options.explain_out = &explain;
  Model model = parse_model(serialize(proto), "test.onnx");
  Rewritten rewritten;
  rewritten.result = rewrite_model(model, rules, options);
  rewritten.model = model.proto;
  rewritten.bytes = serialize_model(model);
  rewritten.explain = explain.str();
  EXPECT_EQ(dead_code_left(proto, rewritten.model), std::vector<std::string>{}) << "the rewrite left dead code behind";
  return rewritten;
}

Rewritten rewrite_text(const std::string& model_text, const RuleSet& rules, RewriteOptions options) {
  return rewrite_proto(parse_model_text(model_text), rules, std::move(options));
}

const RuleSet& builtin_rules() {
  static const RuleSet rules = [] {
    RuleSet loaded;
    loaded.load_builtin();
    return loaded;
  }();
  return rules;
}

int ir_version_for(int opset) { return opset <= 18 ? 8 : opset <= 20 ? 9 : 10; }

onnx::ModelProto read_model(const fs::path& path) {
  onnx::ModelProto model;
  if (!model.ParseFromString(read_file(path))) throw std::runtime_error("not a model: " + path.string());
  return model;
}

std::string contrib_model_text(int opset, const std::string& graph) {
  return "<ir_version: " + std::to_string(ir_version_for(opset)) + ", opset_import: [\"\": " + std::to_string(opset) +
         ", \"com.microsoft\": 1]>\n" + graph;
}

void scale_weights(onnx::ModelProto& model, const std::string& part, float factor) {
  for (auto& tensor : *model.mutable_graph()->mutable_initializer()) {
    if (tensor.data_type() != onnx::TensorProto::FLOAT || tensor.name().find(part) == std::string::npos) continue;
    std::string& raw = *tensor.mutable_raw_data();
    for (size_t i = 0; i + 4 <= raw.size(); i += 4) {
      float value;
      std::memcpy(&value, raw.data() + i, 4);
      value *= factor;
      std::memcpy(raw.data() + i, &value, 4);
    }
  }
}

int opset_import(const onnx::ModelProto& model, const std::string& domain) {
  for (const auto& import : model.opset_import()) {
    const bool standard = import.domain().empty() || import.domain() == "ai.onnx";
    if (import.domain() == domain || (standard && (domain.empty() || domain == "ai.onnx"))) return static_cast<int>(import.version());
  }
  return 0;
}

int op_count(const OpCounts& ops, const OpKey& op) {
  auto it = ops.find(op);
  return it == ops.end() ? 0 : it->second;
}

std::optional<CheckedRewrite> rewrite_and_check(const fs::path& input, const fs::path& output, const std::string& target,
                                                std::optional<int> max_opset) {
  std::vector<std::string> rewrite{"rewrite", input.string(), "-o", output.string(), "--target", target};
  std::vector<std::string> check{"check", output.string(), "--target", target};
  if (max_opset) {
    for (auto* args : {&rewrite, &check}) {
      args->push_back("--opset");
      args->push_back(std::to_string(*max_opset));
    }
  }
  const auto rewritten = run_cli(rewrite);
  EXPECT_EQ(rewritten.exit_code, 0) << rewritten.out << rewritten.err;
  if (rewritten.exit_code != 0) return std::nullopt;
  const auto checked = run_cli(check);
  EXPECT_EQ(checked.exit_code, 0) << checked.out << checked.err;
  CheckedRewrite result{output, read_model(output), {}};
  result.ops = count_ops(result.model);
  EXPECT_EQ(dead_code_left(read_model(input), result.model), std::vector<std::string>{}) << "the rewrite left dead code behind";
  return result;
}

void expect_conformance_cases_lowered(const fs::path& corpus, const std::vector<std::string>& cases, int opset,
                                      const std::vector<std::string>& gone, double tolerance) {
  TempDir dir;
  std::vector<std::string> jobs;
  for (const auto& name : cases) {
    SCOPED_TRACE(name);
    const fs::path model = corpus / "node" / name / "model.onnx";
    ASSERT_TRUE(fs::exists(model)) << model;
    ASSERT_GT(opset_import(read_model(model), ""), opset) << "the case must be above the opset it is lowered to";
    const fs::path output = dir / (name + ".onnx");
    const auto rewritten = rewrite_and_check(model, output, "onnx", opset);
    ASSERT_TRUE(rewritten);
    EXPECT_EQ(opset_import(rewritten->model, ""), opset);
    for (const auto& op : gone) EXPECT_EQ(op_count(rewritten->ops, {"", op}), 0) << op;
    const std::string tolerances = tolerance > 0 ? fmt::format(R"(, "rtol": {0}, "atol": {0})", tolerance) : "";
    jobs.push_back(fmt::format(R"({{"case": "{}", "model": "{}"{}}})", (corpus / "node" / name).string(), output.string(), tolerances));
  }
  write_file(dir / "jobs.json", "[" + fmt::format("{}", fmt::join(jobs, ",")) + "]");
  const auto result = run_command({"node", (source_dir() / "tests" / "ort" / "conformance.js").string(), "--jobs",
                                   (dir / "jobs.json").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string all_pass = fmt::format("{0} cases: {0} pass", jobs.size());
  EXPECT_NE(result.err.find(all_pass), std::string::npos) << result.out << result.err;
}

namespace {

std::vector<std::string> node_command(const std::string& script) {
  return {"node", (source_dir() / "tests" / "ort" / script).string()};
}

// The expected side runs op by op unless a test asks otherwise: ORT's own fusions must not
// stand in for the semantics being checked.
void add_default_level(std::vector<std::string>& argv, const std::vector<std::string>& extra) {
  if (std::find(extra.begin(), extra.end(), "--level") == extra.end()) {
    argv.push_back("--level");
    argv.push_back("disabled");
  }
}

OrtComparison parse_comparison(const CommandResult& result) {
  OrtComparison comparison;
  comparison.exit_code = result.exit_code;
  comparison.ok = result.exit_code == 0;
  comparison.output = result.out + result.err;
  // The largest of a figure over the outputs ("Infinity" or "NaN" when compare.js says so).
  auto largest = [&](const std::regex& figure) {
    double value = 0;
    for (auto it = std::sregex_iterator(result.out.begin(), result.out.end(), figure); it != std::sregex_iterator(); ++it) {
      try {
        value = std::max(value, std::stod((*it)[1].str()));
      } catch (...) {
        value = INFINITY;
      }
    }
    return value;
  };
  static const std::regex max_abs(R"re("max_abs"\s*:\s*"?([-+0-9.eEInfinityNa]+))re");
  static const std::regex mean_abs(R"re("mean_abs"\s*:\s*"?([-+0-9.eEInfinityNa]+))re");
  comparison.max_abs = largest(max_abs);
  comparison.mean_abs = largest(mean_abs);
  return comparison;
}

}  // namespace

OrtComparison ort_compare(const fs::path& expected, const fs::path& candidate, const std::vector<std::string>& extra) {
  auto argv = node_command("compare.js");
  argv.push_back(expected.string());
  argv.push_back(candidate.string());
  add_default_level(argv, extra);
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("--json");
  return parse_comparison(run_command(argv));
}

void report_numbers(const std::string& what, const OrtComparison& comparison) {
  std::cout << fmt::format("[ numbers  ] {}: max_abs {:.2e}\n", what, comparison.max_abs);
}

fs::path family_file(const std::string& family, const std::string& name) { return source_dir() / "rules" / family / name; }

OrtComparison ort_compare_reference(const fs::path& model, const fs::path& reference_module, const std::string& params_json,
                                    const std::vector<std::string>& extra) {
  auto argv = node_command("compare.js");
  argv.push_back(model.string());
  argv.push_back("--reference");
  argv.push_back(reference_module.string());
  argv.push_back("--params");
  argv.push_back(params_json);
  add_default_level(argv, extra);
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("--json");
  return parse_comparison(run_command(argv));
}

std::pair<bool, std::string> ort_loads(const fs::path& model) {
  auto argv = node_command("load.js");
  argv.push_back(model.string());
  const auto result = run_command(argv);
  return {result.exit_code == 0, result.out + result.err};
}

google::protobuf::Value parse_json(const std::string& text) {
  google::protobuf::Value value;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &value);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << text;
  return value;
}

std::string test_name(std::string text) {
  for (char& c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return text;
}

void convert_tensors(onnx::ModelProto& model, int32_t from, int32_t to) {
  auto convert = [&](onnx::TensorProto& tensor) {
    if (tensor.data_type() != from) return;
    const auto values = decode_tensor(tensor);
    const std::string name = tensor.name();
    tensor = make_tensor(to, values->dims, values->numbers);
    tensor.set_name(name);
  };
  auto& graph = *model.mutable_graph();
  for (auto& tensor : *graph.mutable_initializer()) convert(tensor);
  for (auto& node : *graph.mutable_node()) {
    for (auto& attribute : *node.mutable_attribute()) {
      if (attribute.has_t()) convert(*attribute.mutable_t());
    }
  }
}

void declare_interface(onnx::ModelProto& model, int32_t type) {
  auto& graph = *model.mutable_graph();
  for (auto* infos : {graph.mutable_input(), graph.mutable_output()}) {
    for (auto& info : *infos) info.mutable_type()->mutable_tensor_type()->set_elem_type(type);
  }
}

onnx::ModelProto as_float16(onnx::ModelProto model) {
  declare_interface(model, onnx::TensorProto::FLOAT16);
  convert_tensors(model, onnx::TensorProto::FLOAT, onnx::TensorProto::FLOAT16);
  return model;
}

}  // namespace onnx_rewrite::testing
