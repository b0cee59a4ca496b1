// What a rewrite leaves to be seen (docs/cli.md): the record in the model (provenance), the
// report's run fields, the --html page (rendered in headless Chromium), and what `inspect` shows.
#include <gtest/gtest.h>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

const char* kTwoCustomOpsModel = R"(<ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
g (float[2, 3] x, float[2, 3] y) => (float[2, 3] z) {
  t = test.customop.CustomOpOne (x, y)
  u = test.customop.CustomOpOne (t, y)
  z = Relu (u)
})";

std::map<std::string, std::string> metadata(const fs::path& path) {
  std::map<std::string, std::string> entries;
  const onnx::ModelProto model = read_model(path);
  for (const auto& entry : model.metadata_props()) entries[entry.key()] = entry.value();
  return entries;
}

TEST(Provenance, ARewrittenModelRecordsWhatWasDoneAndKeepsItsOwnMetadata) {
  TempDir dir;
  onnx::ModelProto model = parse_model_text(kTwoCustomOpsModel);
  auto* own = model.add_metadata_props();
  own->set_key("author");
  own->set_value("someone");
  write_file(dir / "in.onnx", serialize(model));
  auto result = run_cli({"rewrite", (dir / "in.onnx").string(), "-o", (dir / "out.onnx").string(), "--target", "ort"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto entries = metadata(dir / "out.onnx");
  EXPECT_EQ(entries["author"], "someone");
  EXPECT_EQ(entries["onnx_rewrite.tool"], std::string("onnx-rewrite ") + ONNX_REWRITE_VERSION);
  EXPECT_EQ(entries["onnx_rewrite.target"], "ort");
  EXPECT_EQ(entries["onnx_rewrite.opset"], "17");
  EXPECT_EQ(entries["onnx_rewrite.rules"], "customop-one-to-add:2");
  EXPECT_EQ(entries.size(), 5u);

  // Rewritten again by another run: its record replaces the first, nothing is duplicated.
  write_model_text(R"(<ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
g (float[2, 3] x) => (float[2, 3] z) {
  z = test.customop.CustomOpOne (x, x)
})", dir / "other.onnx");
  onnx::ModelProto again = read_model(dir / "out.onnx");
  *again.mutable_graph() = read_model(dir / "other.onnx").graph();
  write_file(dir / "again.onnx", serialize(again));
  result = run_cli({"rewrite", (dir / "again.onnx").string(), "-o", (dir / "again-out.onnx").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  entries = metadata(dir / "again-out.onnx");
  EXPECT_EQ(entries["onnx_rewrite.target"], "onnx");
  EXPECT_EQ(entries["onnx_rewrite.rules"], "customop-one-to-add:1");
  EXPECT_EQ(read_model(dir / "again-out.onnx").metadata_props_size(), 5);
}

TEST(Provenance, NoRecordWithNoProvenanceOrWhenNothingChanged) {
  TempDir dir;
  write_model_text(kTwoCustomOpsModel, dir / "in.onnx");
  auto result = run_cli({"rewrite", (dir / "in.onnx").string(), "-o", (dir / "out.onnx").string(), "--no-provenance"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(read_model(dir / "out.onnx").metadata_props_size(), 0);
  EXPECT_EQ(read_model(dir / "out.onnx").graph().node(0).op_type(), "Add");

  // The output is rewritten already: nothing applies, and the copy is exact, record included.
  result = run_cli({"rewrite", (dir / "out.onnx").string(), "-o", (dir / "copy.onnx").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(read_file(dir / "copy.onnx"), read_file(dir / "out.onnx"));

  // Batch records it too, and honours --no-provenance.
  fs::create_directories(dir / "zoo");
  write_model_text(kTwoCustomOpsModel, dir / "zoo/m.onnx");
  ASSERT_EQ(run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "b1").string()}).exit_code, 0);
  EXPECT_EQ(metadata(dir / "b1/m.onnx")["onnx_rewrite.rules"], "customop-one-to-add:2");
  ASSERT_EQ(run_cli({"batch", (dir / "zoo").string(), "-o", (dir / "b2").string(), "--no-provenance"}).exit_code, 0);
  EXPECT_TRUE(metadata(dir / "b2/m.onnx").empty());
}

TEST(Report, CarriesTheToolTheOptionsTimingAndNodeTotalsAndSaysWhenItWasADryRun) {
  TempDir dir;
  write_model_text(kTwoCustomOpsModel, dir / "in.onnx");
  auto result = run_cli({"rewrite", (dir / "in.onnx").string(), "--dry-run", "--target", "ort", "--opset", "17", "--skip",
                         "mygroupnorm-decomposition", "--report", (dir / "r.json").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto report = parse_json(read_file(dir / "r.json")).struct_value().fields();
  EXPECT_TRUE(report.at("dry_run").bool_value());
  EXPECT_EQ(report.at("tool").struct_value().fields().at("version").string_value(), ONNX_REWRITE_VERSION);
  const auto& options = report.at("options").struct_value().fields();
  EXPECT_EQ(options.at("target").string_value(), "ort");
  EXPECT_EQ(options.at("opset").number_value(), 17);
  EXPECT_EQ(options.at("skip").list_value().values(0).string_value(), "mygroupnorm-decomposition");
  const auto& nodes = report.at("nodes").struct_value().fields();
  EXPECT_EQ(nodes.at("before").number_value(), 3);
  EXPECT_EQ(nodes.at("after").number_value(), 3);
  const auto& timing = report.at("timing").struct_value().fields();
  EXPECT_GT(timing.at("total_seconds").number_value(), 0);
  EXPECT_NEAR(timing.at("total_seconds").number_value(),
              timing.at("load_seconds").number_value() + timing.at("rewrite_seconds").number_value() +
                  timing.at("write_seconds").number_value() + timing.at("verify_seconds").number_value(),
              1e-6);
  EXPECT_FALSE(fs::exists(dir / "out.onnx"));

  result = run_cli({"rewrite", (dir / "in.onnx").string(), "-o", (dir / "out.onnx").string(), "--report", (dir / "r2.json").string()});
  EXPECT_FALSE(parse_json(read_file(dir / "r2.json")).struct_value().fields().at("dry_run").bool_value());
}

// ---- --html ---------------------------------------------------------------------------------------

bool has_program(const std::string& name) {
  return run_command({"/bin/sh", "-c", "command -v " + name}).exit_code == 0;
}

TEST(Html, ThePageShowsTheOpTableAndEachRulesMatchesBeforeAndAfter) {
  ASSERT_TRUE(has_program("dot")) << "Graphviz's dot is not installed (scripts/bootstrap.sh installs it)";
  TempDir dir;
  write_model_text(kTwoCustomOpsModel, dir / "in.onnx");
  const auto result = run_cli({"rewrite", (dir / "in.onnx").string(), "-o", (dir / "out.onnx").string(), "--html",
                               (dir / "page.html").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string html = read_file(dir / "page.html");
  EXPECT_NE(html.find("<tr class=\"changed\"><td>test.customop.CustomOpOne</td><td class=\"n\">2</td><td class=\"n\">0</td></tr>"),
            std::string::npos);
  EXPECT_NE(html.find("<tr class=\"changed\"><td>ai.onnx.Add</td><td class=\"n\">0</td><td class=\"n\">2</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("<h2 id=\"customop-one-to-add\">"), std::string::npos);
  EXPECT_NE(html.find("match 2 of 2, in main graph"), std::string::npos);
  size_t pictures = 0;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++pictures;
  EXPECT_EQ(pictures, 4u) << "two matches, before and after";
  EXPECT_EQ(html.find("<?xml"), std::string::npos) << "SVG inline, without its prolog";
  // The pictures hold the ops: CustomOpOne before, Add after.
  const size_t first_after = html.find("<h3>after");
  EXPECT_NE(html.find(">CustomOpOne<"), std::string::npos);
  EXPECT_NE(html.find(">Add<", first_after), std::string::npos);

  // Rendered by a browser: the screenshot holds far more than an empty page's.
  ASSERT_TRUE(has_program("chromium")) << "chromium is not installed (ONNX_REWRITE_TESTS=1 scripts/bootstrap.sh installs it)";
  write_file(dir / "empty.html", "<!DOCTYPE html><html><body></body></html>");
  const auto screenshot = [&](const std::string& page, const std::string& png) {
    return run_command({"chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,1000",
                        "--screenshot=" + (dir / png).string(), "file://" + (dir / page).string()});
  };
  screenshot("empty.html", "empty.png");
  screenshot("page.html", "page.png");
  ASSERT_TRUE(fs::exists(dir / "page.png")) << "chromium wrote no screenshot";
  EXPECT_GT(fs::file_size(dir / "page.png"), 8 * fs::file_size(dir / "empty.png"));
  const auto dom = run_command({"chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", "file://" + (dir / "page.html").string()});
  size_t rendered = 0;
  for (size_t at = dom.out.find("<svg"); at != std::string::npos; at = dom.out.find("<svg", at + 1)) ++rendered;
  EXPECT_EQ(rendered, 4u);
}

TEST(Html, WithoutGraphvizItIsAUsageErrorBeforeAnyWork) {
  TempDir dir;
  write_model_text(kTwoCustomOpsModel, dir / "in.onnx");
  const auto result = run_command({"/usr/bin/env", "PATH=/nonexistent", cli_path().string(), "rewrite", (dir / "in.onnx").string(),
                                   "-o", (dir / "out.onnx").string(), "--html", (dir / "page.html").string()});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.err, "onnx-rewrite: error: --html needs Graphviz's `dot` on PATH (Debian: apt install graphviz)\n");
  EXPECT_FALSE(fs::exists(dir / "out.onnx"));
  EXPECT_FALSE(fs::exists(dir / "page.html"));
}

// ---- inspect --------------------------------------------------------------------------------------

// The weight `w` is listed among the inputs too (as IR < 4 requires); a Constant node holds a weight; a sparse
// initializer; an If with two branches; a function; a training_info graph.
onnx::ModelProto inspected_model() {
  onnx::ModelProto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17, "local": 1]>
g (float[N, 3] x, bool c, float[3] w) => (float[N, 3] y, float[] s) {
  k = Constant <value = float[4] {1, 2, 3, 4}> ()
  a = Add (x, w)
  y = local.twice (a)
  s = If (c) <then_branch = t () => (float[] o) { o = ReduceSum (k) }, else_branch = e () => (float[] o) { o = ReduceMax (k) }>
}
<domain: "local", opset_import: ["": 17]>
twice (v) => (r) {
  r = Add (v, v)
})");
  auto* weight = model.mutable_graph()->add_initializer();
  weight->set_name("w");
  weight->set_data_type(onnx::TensorProto::FLOAT);
  weight->add_dims(3);
  for (float v : {1.f, 2.f, 3.f}) weight->add_float_data(v);
  auto* sparse = model.mutable_graph()->add_sparse_initializer();
  sparse->add_dims(8);
  sparse->mutable_values()->set_name("sp");
  sparse->mutable_values()->set_data_type(onnx::TensorProto::FLOAT);
  sparse->mutable_values()->add_dims(1);
  sparse->mutable_values()->add_float_data(5);
  sparse->mutable_indices()->set_data_type(onnx::TensorProto::INT64);
  sparse->mutable_indices()->add_dims(1);
  sparse->mutable_indices()->add_int64_data(2);
  auto* training = model.add_training_info();
  auto* node = training->mutable_algorithm()->add_node();
  node->set_op_type("Identity");
  node->add_input("w");
  node->add_output("w_next");
  auto* binding = training->add_update_binding();
  binding->set_key("w");
  binding->set_value("w_next");
  return model;
}

TEST(Inspect, ShowsInputsOutputsNodeTotalsAndTheWeightsOutsideInitializers) {
  TempDir dir;
  write_file(dir / "m.onnx", serialize(inspected_model()));
  auto result = run_cli({"inspect", (dir / "m.onnx").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const char* line : {"  inputs (2):\n    x: float [N, 3]\n    c: bool []\n",  // w is a weight, not an input
                           "  outputs (2):\n    y: float [N, 3]\n    s: float (rank unknown)\n",
                           "  nodes: 8 (main graph 4, subgraphs 2, functions 1, training 1)\n",
                           "  weights in Constant nodes: 1, ",
                           "  sparse initializers: 1, ",
                           "  training_info[0]: initialization 0 node(s), algorithm 1 node(s), 1 update binding(s)\n"}) {
    EXPECT_NE(result.out.find(line), std::string::npos) << line << "\n--- in ---\n" << result.out;
  }
  result = run_cli({"inspect", (dir / "m.onnx").string(), "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto json = parse_json(result.out).struct_value().fields();
  const auto& inputs = json.at("inputs").list_value();
  ASSERT_EQ(inputs.values_size(), 2);
  const auto& x = inputs.values(0).struct_value().fields();
  EXPECT_EQ(x.at("type").string_value(), "float");
  EXPECT_EQ(x.at("shape").list_value().values(0).string_value(), "N");
  EXPECT_EQ(x.at("shape").list_value().values(1).number_value(), 3);
  const auto& nodes = json.at("nodes").struct_value().fields();
  EXPECT_EQ(nodes.at("total").number_value(), 8);
  EXPECT_EQ(nodes.at("subgraphs").number_value(), 2);
  EXPECT_EQ(json.at("constant_nodes").struct_value().fields().at("count").number_value(), 1);
  EXPECT_GT(json.at("constant_nodes").struct_value().fields().at("bytes").number_value(), 16);
  EXPECT_EQ(json.at("sparse_initializers").struct_value().fields().at("count").number_value(), 1);
  const auto& training = json.at("training_info").list_value();
  ASSERT_EQ(training.values_size(), 1);
  EXPECT_EQ(training.values(0).struct_value().fields().at("algorithm_nodes").number_value(), 1);
}

}  // namespace
}  // namespace onnx_rewrite
