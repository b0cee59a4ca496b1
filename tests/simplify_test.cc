// --simplify's clean-up of the main graph (src/engine/simplify.cc) and its place in a run: Constant
// nodes as initializers, duplicate and unused initializers, common subexpressions, stale
// value_info; what it must never touch (graph inputs and outputs, training graphs, random ops,
// IR 3); and that the result computes what the original does in ONNX Runtime.
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

Rewritten simplified(const onnx::ModelProto& model, RewriteOptions options = {}) {
  options.simplify = true;
  return rewrite_proto(model, builtin_rules(), options);
}

// The written model (the payloads of deferred initializers included).
onnx::ModelProto written(const Rewritten& rewritten) {
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(rewritten.bytes));
  return model;
}

const onnx::TensorProto* initializer(const onnx::ModelProto& model, const std::string& name) {
  for (const auto& tensor : model.graph().initializer()) {
    if (tensor.name() == name) return &tensor;
  }
  return nullptr;
}

int count_op(const onnx::ModelProto& model, const std::string& op) {
  int n = 0;
  for (const auto& node : model.graph().node()) n += node.op_type() == op;
  return n;
}

// Both in ONNX Runtime on the same random inputs: bit for bit (nothing here computes differently).
void expect_same_numbers(const onnx::ModelProto& original, const Rewritten& rewritten, const std::vector<std::string>& extra = {}) {
  TempDir dir;
  write_file(dir / "original.onnx", serialize(original));
  write_file(dir / "simplified.onnx", rewritten.bytes);
  std::vector<std::string> args{"--rtol", "0", "--atol", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto comparison = ort_compare(dir / "original.onnx", dir / "simplified.onnx", args);
  EXPECT_TRUE(comparison.ok) << comparison.output;
}

TEST(SimplifyConstants, ConstantNodesBecomeInitializersOfTheSameName) {
  const auto original = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y, int64[2] shape) {
  k = Constant <value = float[3] {1.5, -2.0, 0.25}> ()
  f = Constant <value_float = 3.0> ()
  shape = Constant <value_ints = [3, 2]> ()
  a = Mul (x, k)
  y = Add (a, f)
})");
  const auto rewritten = simplified(original);
  const auto model = written(rewritten);
  // A Constant writing a graph output stays a node: the output must be computed by a node.
  EXPECT_EQ(op_types(model.graph()), (std::vector<std::string>{"Constant", "Mul", "Add"}));
  ASSERT_NE(initializer(model, "k"), nullptr);
  EXPECT_EQ(initializer(model, "k")->data_type(), onnx::TensorProto::FLOAT);
  EXPECT_EQ(initializer(model, "k")->dims_size(), 1);
  ASSERT_NE(initializer(model, "f"), nullptr);
  EXPECT_EQ(initializer(model, "f")->dims_size(), 0);  // value_float: a scalar
  EXPECT_EQ(initializer(model, "shape"), nullptr);
  EXPECT_EQ(rewritten.result.rules.at("simplify-constant-nodes").matches, 2);
  expect_same_numbers(original, rewritten);
}

TEST(SimplifyConstants, IrVersion3KeepsConstantNodes) {
  // Below IR 4 an initializer must also be a graph input, which a Constant's value is not.
  const auto original = parse_model_text(R"(<ir_version: 3, opset_import: ["": 8]>
g (float[3] x) => (float[3] y) {
  k = Constant <value = float[3] {1.0, 2.0, 3.0}> ()
  y = Mul (x, k)
})");
  const auto model = written(simplified(original));
  EXPECT_EQ(count_op(model, "Constant"), 1);
  EXPECT_EQ(model.graph().initializer_size(), 0);
}

// Weights of one shape are told apart by their payloads (deferred: read from the source bytes),
// never by their headers: ResNet-18's same-shaped convolution weights once merged into one.
TEST(SimplifyInitializers, DuplicatesMergeOnlyWhenTheirBytesAreEqual) {
  const auto original = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y)
  <float[3] a = {1.0, 2.0, 3.0}, float[3] b = {1.0, 2.0, 3.0}, float[3] c = {1.0, 2.0, 4.0}, int64[3] d = {1, 2, 3}> {
  p = Mul (x, a)
  q = Mul (p, b)
  r = Mul (q, c)
  s = Cast <to = 7> (r)
  t = Add (s, d)
  y = Cast <to = 1> (t)
})");
  const auto rewritten = simplified(original);
  const auto model = written(rewritten);
  EXPECT_NE(initializer(model, "a"), nullptr);
  EXPECT_EQ(initializer(model, "b"), nullptr);  // a's bytes: its reader reads a
  EXPECT_NE(initializer(model, "c"), nullptr);  // one element differs
  EXPECT_NE(initializer(model, "d"), nullptr);  // another type
  EXPECT_EQ(model.graph().node(1).input(1), "a");
  EXPECT_EQ(rewritten.result.rules.at("simplify-duplicate-initializers").matches, 1);
  expect_same_numbers(original, rewritten, {"--float-range", "-3,3"});
}

TEST(SimplifyInitializers, UnusedOnesGoButOverridableInputsAndTrainingGraphsKeepTheirs) {
  auto original = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[3] x, float[3] bias) => (float[3] y) <float[3] unused = {1.0, 2.0, 3.0}, float[3] bias = {0.5, 0.5, 0.5}> {
  y = Add (x, x)
})");
  const auto model = written(simplified(original));
  EXPECT_EQ(initializer(model, "unused"), nullptr);
  EXPECT_NE(initializer(model, "bias"), nullptr);  // also a graph input: a default the caller may override
  // A training graph may read any initializer by name: nothing goes.
  original.add_training_info()->mutable_algorithm()->set_name("train");
  const auto trained = written(simplified(original));
  EXPECT_NE(initializer(trained, "unused"), nullptr);
}

TEST(SimplifyValueInfo, WhatDescribesNoValueAnyMoreGoes) {
  auto original = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[3] x) => (float[3] y) {
  dead = Neg (x)
  a = Identity (x)
  y = Abs (a)
})");
  for (const char* name : {"dead", "a"}) {
    auto* info = original.mutable_graph()->add_value_info();
    info->set_name(name);
    info->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  const auto model = written(simplified(original));
  EXPECT_EQ(op_types(model.graph()), (std::vector<std::string>{"Abs"}));
  EXPECT_EQ(model.graph().value_info_size(), 0);
}

// torch writes a Shape (x) -> Gather for every x.size(i): the chains merge in one pass.
TEST(SimplifySubexpressions, EqualChainsMergeAndTheirReadersFollow) {
  const auto original = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[N, 4] x, bool c) => (float[N, 4] y, int64[1] n2) {
  i = Constant <value = int64[1] {0}> ()
  four = Constant <value = int64[1] {4}> ()
  s1 = Shape (x)
  n1 = Gather <axis = 0> (s1, i)
  s2 = Shape (x)
  n2 = Gather <axis = 0> (s2, i)
  s3 = Shape (x)
  n3 = Gather <axis = 0> (s3, i)
  t = Concat <axis = 0> (n1, four)
  t3 = Concat <axis = 0> (n3, four)
  w = Expand (x, t)
  v = If (c) <then_branch = th () => (float[N, 4] o) { o = Expand (x, t3) }, else_branch = el () => (float[N, 4] o) { o = Identity (x) }>
  y = Add (w, v)
})");
  const auto rewritten = simplified(original);
  const auto model = written(rewritten);
  // n2 writes a graph output: its Gather stays (reading the one Shape left); n3 and t3 merge
  // into n1 and t.
  EXPECT_EQ(count_op(model, "Shape"), 1);
  EXPECT_EQ(count_op(model, "Gather"), 2);
  EXPECT_EQ(count_op(model, "Concat"), 1);
  for (const auto& node : model.graph().node()) {
    for (const auto& input : node.input()) EXPECT_TRUE(input != "n3" && input != "t3") << "a reader of a merged value still reads it";
    if (node.op_type() != "If") continue;
    EXPECT_EQ(node.attribute(0).g().node(0).input(1), "t") << "the branch reads the merged value by name";
  }
  expect_same_numbers(original, rewritten, {"--dim", "N=3"});
}

TEST(SimplifySubexpressions, RandomOpsAndOtherAttributesStayApart) {
  const auto original = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y) {
  r1 = RandomUniformLike <seed = 1.0> (x)
  r2 = RandomUniformLike <seed = 1.0> (x)
  s1 = Softmax <axis = 0> (x)
  s2 = Softmax <axis = 1> (x)
  c1 = Clip (x)
  c2 = Clip (x)
  a = Add (r1, r2)
  b = Add (s1, s2)
  d = Add (c1, c2)
  e = Add (a, b)
  y = Add (e, d)
})");
  const auto model = written(simplified(original));
  EXPECT_EQ(count_op(model, "RandomUniformLike"), 2);
  EXPECT_EQ(count_op(model, "Softmax"), 2);
  EXPECT_EQ(count_op(model, "Clip"), 1);
}

// y = Identity (a), y a graph output: a's producer writes y itself and a's readers read y.
TEST(SimplifyGraphOutputs, TheProducerComputesTheOutputUnderItsName) {
  const auto original = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[3] x) => (float[3] y, float[3] z, float[3] w, float[3] b) {
  a = Relu (x)
  b = Neg (a)
  y = Identity (a)
  z = Identity (a)
  w = Identity (x)
})");
  const auto rewritten = simplified(original);
  const auto model = written(rewritten);
  // z copies what y now is; w copies a graph input, whose name can't move.
  EXPECT_EQ(canonical_nodes(model, interface_names(model)), "y = Relu(x)\nb = Neg(y)\nz = Identity(y)\nw = Identity(x)\n");
  EXPECT_EQ(rewritten.result.rules.at("simplify-graph-output-identities").matches, 1);
  expect_same_numbers(original, rewritten);
}

// --target ort simplifies unless told not to; other targets when asked.
TEST(SimplifyDefaults, OnForOrtOffForOnnxUnlessTheCommandLineSays) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[3] x) => (float[3] y) {
  k = Constant <value = float[3] {1.0, 2.0, 3.0}> ()
  a = Identity (x)
  y = Mul (a, k)
})", dir / "in.onnx");
  auto constants_after = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--report", (dir / "r.json").string()});
    const auto run = run_cli(args);
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    const auto simplify = parse_json(read_file(dir / "r.json")).struct_value().fields().at("options").struct_value().fields().at("simplify");
    const auto model = read_model(dir / "out.onnx");
    return std::pair{count_op(model, "Constant") + count_op(model, "Identity"), simplify.bool_value()};
  };
  EXPECT_EQ(constants_after({"--target", "ort"}), std::pair(0, true));
  EXPECT_EQ(constants_after({"--target", "ort", "--no-simplify"}), std::pair(2, false));
  EXPECT_EQ(constants_after({"--target", "onnx"}), std::pair(2, false));
  EXPECT_EQ(constants_after({"--target", "onnx", "--simplify"}), std::pair(0, true));
  const auto both = run_cli({"rewrite", input.string(), "-o", (dir / "x.onnx").string(), "--simplify", "--no-simplify"});
  EXPECT_EQ(both.exit_code, 2) << both.out << both.err;
  EXPECT_FALSE(fs::exists(dir / "x.onnx"));
}

// --only naming a simplification rule asks for the run it belongs to (it would do nothing
// otherwise); --no-simplify still says no.
TEST(SimplifyDefaults, OnlyNamingASimplificationRuleSimplifies) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[3] x) => (float[3] y) {
  c = Cast <to = 1> (x)
  y = Relu (c)
})", dir / "in.onnx");
  auto casts_after = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--only", "simplify-no-op-cast"});
    const auto run = run_cli(args);
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    return count_op(read_model(dir / "out.onnx"), "Cast");
  };
  EXPECT_EQ(casts_after({}), 0);
  EXPECT_EQ(casts_after({"--no-simplify"}), 1);
}

// The real models users bring: simplified, they compute what they did (in ONNX Runtime), with no
// more nodes than before, no Identity, Constant node or initializer nobody reads left behind.
TEST(SimplifyRealModels, ComputeWhatTheyDidWithFewerNodes) {
  ASSERT_TEST_DATA(models, "models");
  int models_seen = 0;
  for (const auto& entry : fs::directory_iterator(models_data.dir)) {
    const fs::path model_path = entry.path() / "model.onnx";
    if (!fs::exists(model_path)) continue;
    ++models_seen;
    TempDir dir;
    const fs::path output = dir / "simple.onnx";
    const auto run = run_cli({"rewrite", model_path.string(), "-o", output.string(), "--simplify", "--verify"});
    const bool ran_in_ort = run.out.find("NOT compared") == std::string::npos && run.out.find("not-compared") == std::string::npos;
    EXPECT_EQ(run.exit_code, 0) << entry.path().filename() << ":\n" << run.out << run.err;
    if (!fs::exists(output)) continue;  // unchanged models are copied; a failure said why above
    const auto before = read_model(model_path);
    const auto after = read_model(output);
    EXPECT_LE(after.graph().node_size(), before.graph().node_size()) << entry.path().filename();
    std::set<std::string> outputs;
    for (const auto& out : after.graph().output()) outputs.insert(out.name());
    for (const auto& node : after.graph().node()) {
      EXPECT_NE(node.op_type(), "Constant") << entry.path().filename();
      if (node.op_type() == "Identity") {
        EXPECT_TRUE(outputs.count(node.output(0))) << entry.path().filename() << ": an Identity left";
      }
    }
    // Nothing dead at all, whatever the model came with (a blank model had nothing dead).
    EXPECT_EQ(dead_code_left(onnx::ModelProto(), after), std::vector<std::string>{})
        << entry.path().filename() << (ran_in_ort ? "" : " (not compared in ORT: the original does not run)");
  }
  EXPECT_GE(models_seen, 12);
}

}  // namespace
}  // namespace onnx_rewrite
