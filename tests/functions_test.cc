// Model-local functions (src/inline.cc): inlining, recursively, with attribute references
// resolved (the call's values, else the function's defaults), fresh names for everything a body
// defines (subgraphs too), omitted optional inputs and outputs, functions whose opset imports
// differ from the caller's; and rules that fire inside function bodies and If/Loop bodies.
// Numbers: ONNX Runtime runs the original model (it inlines local functions itself) or a
// hand-written equivalent, against the inlined model.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <functional>
#include <set>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/error.h"
#include "engine/inline.h"
#include "onnx_rewrite/model_io.h"
#include "onnx_rewrite/verify.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

constexpr int kFunctionAttributeProtoField = 11;  // FunctionProto.attribute_proto (IR 9): defaults

// Every name is defined once in its graph and never again in a subgraph of it (ONNX forbids
// shadowing; sibling subgraphs may reuse a name): inlined copies must not collide with each
// other or with the caller.
void expect_names_defined_once(const onnx::GraphProto& graph, std::set<std::string> outer = {}) {
  std::set<std::string> here;
  auto define = [&](const std::string& name) {
    if (name.empty()) return;
    EXPECT_FALSE(outer.count(name)) << "'" << name << "' shadows a name of an enclosing graph";
    EXPECT_TRUE(here.insert(name).second) << "'" << name << "' is defined more than once";
  };
  for (const auto& input : graph.input()) define(input.name());
  for (const auto& tensor : graph.initializer()) define(tensor.name());
  for (const auto& node : graph.node()) {
    for (const auto& output : node.output()) define(output);
  }
  outer.insert(here.begin(), here.end());
  for (const auto& node : graph.node()) {
    for (const auto& attribute : node.attribute()) {
      if (attribute.has_g()) expect_names_defined_once(attribute.g(), outer);
      for (const auto& sub : attribute.graphs()) expect_names_defined_once(sub, outer);
    }
  }
}

struct Inlined {
  Model model;
  int calls = 0;
  std::vector<std::string> notes;
};

Inlined inline_text(const std::string& text) {
  Inlined result{model_from_text(text), 0, {}};
  result.calls = inline_local_functions(result.model, &result.notes);
  return result;
}

// ONNX Runtime computes the same on both models (the first is the expected side).
void expect_same_numbers(const onnx::ModelProto& expected, const onnx::ModelProto& inlined, const std::vector<std::string>& run,
                         const std::string& what) {
  TempDir dir;
  write_file(dir / "expected.onnx", serialize(expected));
  write_file(dir / "inlined.onnx", serialize(inlined));
  const auto comparison = ort_compare(dir / "expected.onnx", dir / "inlined.onnx", run);
  EXPECT_TRUE(comparison.ok) << comparison.output;
  std::cout << fmt::format("[ numbers  ] {}: max_abs {:.2e}\n", what, comparison.max_abs);
}

// ---- what ONNX text can't spell: hyphenated domains, function attribute defaults ------------

void rename_domain(onnx::ModelProto& model, const std::string& from, const std::string& to) {
  auto rename_imports = [&](auto& imports) {
    for (auto& import : imports) {
      if (import.domain() == from) import.set_domain(to);
    }
  };
  rename_imports(*model.mutable_opset_import());
  for (auto& function : *model.mutable_functions()) {
    if (function.domain() == from) function.set_domain(to);
    rename_imports(*function.mutable_opset_import());
  }
  std::function<void(google::protobuf::RepeatedPtrField<onnx::NodeProto>&)> nodes = [&](auto& list) {
    for (auto& node : list) {
      if (node.domain() == from) node.set_domain(to);
      for (auto& attribute : *node.mutable_attribute()) {
        if (attribute.has_g()) nodes(*attribute.mutable_g()->mutable_node());
      }
    }
  };
  nodes(*model.mutable_graph()->mutable_node());
  for (auto& function : *model.mutable_functions()) nodes(*function.mutable_node());
}

// Gives attribute `value.name()` of the function a default: it moves from `attribute` (names)
// to `attribute_proto`, which ONNX 1.12 keeps as an unknown field.
void set_attribute_default(onnx::FunctionProto& function, const onnx::AttributeProto& value) {
  auto& names = *function.mutable_attribute();
  for (int i = names.size() - 1; i >= 0; --i) {
    if (names.Get(i) == value.name()) names.DeleteSubrange(i, 1);
  }
  function.GetReflection()->MutableUnknownFields(&function)->AddLengthDelimited(kFunctionAttributeProtoField,
                                                                                 value.SerializeAsString());
}

onnx::AttributeProto float_attribute(const std::string& name, float value) {
  onnx::AttributeProto attribute;
  attribute.set_name(name);
  attribute.set_type(onnx::AttributeProto::FLOAT);
  attribute.set_f(value);
  return attribute;
}

// ---- testdata/onnxscript-selu: torch.onnx.export with an onnxscript Selu --------------------

const fs::path kSeluText = source_dir() / "testdata" / "onnxscript-selu.onnxtxt";
const fs::path kSeluModel = source_dir() / "testdata" / "onnxscript-selu.onnx";

// The text names the domain custom_onnx_script: the model has onnxscript's custom-onnx-script.
onnx::ModelProto onnxscript_selu() {
  onnx::ModelProto model = parse_model_text(read_file(kSeluText));
  rename_domain(model, "custom_onnx_script", "custom-onnx-script");
  return model;
}

// ONNX Runtime's own Selu.
onnx::ModelProto standard_selu(float alpha, float gamma) {
  return parse_model_text(fmt::format(R"(
    <ir_version: 8, opset_import: ["": 15]>
    g (float[batch, 3, 4] input) => (float[batch, 3, 4] output) {{
      output = Selu <alpha = {:.6f}, gamma = {:.6f}> (input)
    }})", alpha, gamma));
}

TEST(OnnxscriptSeluTestdata, ModelIsGeneratedFromItsText) {
  const std::string generated = serialize(onnxscript_selu());
  if (std::getenv("ONNX_REWRITE_REGENERATE_TESTDATA")) write_file(kSeluModel, generated);
  EXPECT_EQ(read_file(kSeluModel), generated)
      << "regenerate: ONNX_REWRITE_REGENERATE_TESTDATA=1 build/tests/functions_test --gtest_filter='OnnxscriptSeluTestdata.*'";
}

TEST(OnnxscriptSeluTestdata, TargetOnnxInlinesByDefault) {
  TempDir dir;
  const auto output = dir / "out.onnx";
  const auto result = run_cli({"rewrite", kSeluModel.string(), "-o", output.string(), "--target", "onnx"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_EQ(run_cli({"check", output.string(), "--target", "onnx"}).exit_code, 0);
  onnx::ModelProto inlined;
  ASSERT_TRUE(inlined.ParseFromString(read_file(output)));
  EXPECT_EQ(inlined.functions_size(), 0);
  EXPECT_EQ(opset_import(inlined, "custom-onnx-script"), 0);
  EXPECT_EQ(opset_import(inlined, ""), 15);
  expect_names_defined_once(inlined.graph());
  expect_same_numbers(standard_selu(1.67326f, 1.0507f), inlined, {"--dim", "batch=2", "--float-range", "-3,3"},
                      "onnxscript Selu inlined vs ORT Selu");
  expect_same_numbers(onnxscript_selu(), inlined, {"--dim", "batch=2", "--float-range", "-3,3"},
                      "onnxscript Selu inlined vs ORT running the function");
}

// The onnxscript custom-op tutorial writes its body under `opset14`, though CastLike exists only
// from 15: the function's import is raised (no other node changes meaning), with a note, and
// the call then inlines instead of leaving a function no strict runtime loads.
TEST(OnnxscriptSeluTestdata, AFunctionImportTooLowForItsOpsIsRaised) {
  TempDir dir;
  onnx::ModelProto model = onnxscript_selu();
  model.mutable_functions(0)->mutable_opset_import(0)->set_version(14);
  ASSERT_EQ(model.functions(0).opset_import(0).domain(), "");
  write_file(dir / "in.onnx", serialize(model));
  const auto result = run_cli({"rewrite", (dir / "in.onnx").string(), "-o", (dir / "out.onnx").string()});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("note: function custom-onnx-script.Selu uses CastLike, which needs ai.onnx 15, but imported ai.onnx 14: "
                            "its import is raised to 15"),
            std::string::npos)
      << result.out;
  const auto inlined = read_model(dir / "out.onnx");
  EXPECT_EQ(inlined.functions_size(), 0);
  expect_same_numbers(onnxscript_selu(), inlined, {"--dim", "batch=2", "--float-range", "-3,3"},
                      "onnxscript Selu (import 14) inlined vs ORT running the function");

  // Kept for ort, with the import mended.
  const auto kept = run_cli({"rewrite", (dir / "in.onnx").string(), "-o", (dir / "kept.onnx").string(), "--target", "ort"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  EXPECT_EQ(read_model(dir / "kept.onnx").functions(0).opset_import(0).version(), 15);
}

TEST(OnnxscriptSeluTestdata, TargetOrtKeepsTheCallUnlessAsked) {
  TempDir dir;
  const auto kept = dir / "kept.onnx";
  const auto result = run_cli({"rewrite", kSeluModel.string(), "-o", kept.string(), "--target", "ort"});
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_EQ(read_file(kept), read_file(kSeluModel)) << "nothing to do for ort: an exact copy";
  const auto inlined = dir / "inlined.onnx";
  const auto asked = run_cli({"rewrite", kSeluModel.string(), "-o", inlined.string(), "--target", "ort", "--inline-functions"});
  EXPECT_EQ(asked.exit_code, 0) << asked.out << asked.err;
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(read_file(inlined)));
  EXPECT_EQ(model.functions_size(), 0);
  // and the call itself is not loadable for --target onnx
  EXPECT_EQ(run_cli({"check", kSeluModel.string(), "--target", "onnx"}).exit_code, 1);
  EXPECT_EQ(run_cli({"check", kSeluModel.string(), "--target", "ort"}).exit_code, 0);
}

// onnxscript functions declaring defaults (`def Selu(X, alpha: float = 1.67326, gamma: float =
// 1.0507)`): a call that leaves an attribute out gets the default.
TEST(AttributeReferences, DefaultsComeFromAttributeProto) {
  onnx::ModelProto model = onnxscript_selu();
  auto& call = *model.mutable_graph()->mutable_node(0);
  call.clear_attribute();
  *call.add_attribute() = float_attribute("alpha", 2.0f);  // gamma left to its default
  set_attribute_default(*model.mutable_functions(0), float_attribute("gamma", 0.75f));
  set_attribute_default(*model.mutable_functions(0), float_attribute("alpha", 9.0f));  // overridden by the call
  Model loaded = parse_model(serialize(model), "selu-defaults.onnx");
  std::vector<std::string> notes;
  EXPECT_EQ(inline_local_functions(loaded, &notes), 1);
  EXPECT_TRUE(notes.empty());
  expect_same_numbers(standard_selu(2.0f, 0.75f), loaded.proto, {"--dim", "batch=2", "--float-range", "-3,3"},
                      "Selu with a default gamma vs ORT Selu");
}

// ---- nesting, attribute references, collisions -----------------------------------------------

// Scaled(a) = LeakyRelu_alpha(a) + a, through a nested function in another domain; the main
// graph defines `t`, the name Scaled uses inside.
const char* kNested = R"(
  <ir_version: 8, opset_import: ["": 17, "local": 1, "inner": 1]>
  g (float[N, 4] x) => (float[N, 4] y, float[N, 4] t, float[N, 4] z) {
    t = local.Scaled <alpha = 2.0> (x)
    y = local.Scaled <alpha = 0.5> (t)
    z = local.Scaled (x)
  }
  <domain: "local", opset_import: ["": 17, "inner": 1]>
  Scaled <alpha> (a) => (b) {
    t = inner.Leaky <alpha: float = @alpha> (a)
    b = Add (t, a)
  }
  <domain: "inner", opset_import: ["": 17]>
  Leaky <alpha> (u) => (v) {
    v = LeakyRelu <alpha: float = @alpha> (u)
  }
)";

TEST(Nesting, InlinesRecursivelyWithFreshNames) {
  auto inlined = inline_text(kNested);
  EXPECT_EQ(inlined.calls, 6);  // three calls of Scaled, each with its Leaky
  EXPECT_EQ(inlined.model.proto.functions_size(), 0);
  EXPECT_EQ(opset_import(inlined.model.proto, "local"), 0);
  EXPECT_EQ(opset_import(inlined.model.proto, "inner"), 0);
  const auto ops = count_ops(inlined.model.proto);
  EXPECT_EQ(op_count(ops, {"", "LeakyRelu"}), 3);
  EXPECT_EQ(op_count(ops, {"", "Add"}), 3);
  expect_names_defined_once(inlined.model.proto.graph());
  // alpha 2.0, 0.5 as given; the call without alpha leaves LeakyRelu's own default (0.01).
  std::vector<float> alphas;
  bool defaulted = false;
  for (const auto& node : inlined.model.proto.graph().node()) {
    if (node.op_type() != "LeakyRelu") continue;
    if (node.attribute_size() == 0) defaulted = true;
    for (const auto& attribute : node.attribute()) alphas.push_back(attribute.f());
  }
  EXPECT_EQ(alphas, (std::vector<float>{2.0f, 0.5f}));
  EXPECT_TRUE(defaulted);
  expect_same_numbers(parse_model_text(kNested), inlined.model.proto, {"--dim", "N=3"}, "nested functions vs ORT");
}

// Calls nested 10,000 deep (f0 calls f1, ..., f9999 is a Relu): no recursion follows the depth.
TEST(Nesting, TenThousandDeepCallsInlineWithoutExhaustingTheStack) {
  constexpr int kDepth = 10000;
  std::string text = "<ir_version: 8, opset_import: [\"\": 17, \"local\": 1]>\ng (float[2] x) => (float[2] y) { y = local.f0 (x) }\n";
  for (int i = 0; i < kDepth; ++i) {
    const std::string body = i + 1 < kDepth ? "y = local.f" + std::to_string(i + 1) + " (x)" : "y = Relu (x)";
    text += "<domain: \"local\", opset_import: [\"\": 17, \"local\": 1]>\nf" + std::to_string(i) + " (x) => (y) { " + body + " }\n";
  }
  const auto inlined = inline_text(text);
  EXPECT_EQ(inlined.calls, kDepth);
  ASSERT_EQ(inlined.model.proto.graph().node_size(), 1);
  EXPECT_EQ(inlined.model.proto.graph().node(0).op_type(), "Relu");
  EXPECT_EQ(inlined.model.proto.functions_size(), 0);
}

TEST(Nesting, RecursionIsAnError) {
  Model model = model_from_text(R"(
    <ir_version: 8, opset_import: ["": 17, "local": 1]>
    g (float[2] x) => (float[2] y) {
      y = local.Loops (x)
    }
    <domain: "local", opset_import: ["": 17, "local": 1]>
    Loops (a) => (b) {
      b = local.Loops (a)
    }
  )");
  EXPECT_THROW(inline_local_functions(model), InputError);
}

// A chain F0 -> F1 -> ... -> F(n-1) -> Relu, built in memory (ONNX's text parser recurses).
onnx::ModelProto function_chain(int length) {
  onnx::ModelProto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17, "local": 1]>
g (float[2] x) => (float[2] y) { y = local.F0 (x) })");
  for (int i = 0; i < length; ++i) {
    onnx::FunctionProto& function = *model.add_functions();
    function.set_domain("local");
    function.set_name("F" + std::to_string(i));
    function.add_input("a");
    function.add_output("b");
    for (const auto& [domain, version] : {std::pair<std::string, int>{"", 17}, {"local", 1}}) {
      auto* import = function.add_opset_import();
      import->set_domain(domain);
      import->set_version(version);
    }
    onnx::NodeProto& node = *function.add_node();
    node.set_op_type(i + 1 < length ? "F" + std::to_string(i + 1) : "Relu");
    if (i + 1 < length) node.set_domain("local");
    node.add_input("a");
    node.add_output("b");
  }
  return model;
}

// A chain deeper than any fixed limit is no recursion: 100,000 functions each calling the next
// are inlined, without recursion on the call stack (it crashed the release build before), and
// with names that don't grow with the depth.
TEST(Nesting, ADeepChainIsInlinedAndOnlyACycleIsRecursion) {
  const onnx::ModelProto chain = function_chain(100000);
  EXPECT_EQ(input_problem(chain), std::nullopt) << "a chain is not a cycle";
  Model model = parse_model(serialize(chain), "chain.onnx");
  EXPECT_EQ(inline_local_functions(model), 100000);
  ASSERT_EQ(model.proto.graph().node_size(), 1);
  EXPECT_EQ(model.proto.graph().node(0).op_type(), "Relu");
  EXPECT_LE(model.proto.graph().node(0).name().size(), 300u);
  EXPECT_EQ(output_problem(model.proto), std::nullopt);

  Model short_chain = parse_model(serialize(function_chain(65)), "chain65.onnx");
  EXPECT_EQ(inline_local_functions(short_chain), 65) << "65 deep was refused as 'calls itself' before";

  onnx::ModelProto cycle = function_chain(1000);
  cycle.mutable_functions(999)->mutable_node(0)->set_op_type("F500");
  cycle.mutable_functions(999)->mutable_node(0)->set_domain("local");
  const auto problem = input_problem(cycle);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("model-local function local.F500 calls itself (local.F500 -> "), std::string::npos) << *problem;
  Model cyclic = parse_model(serialize(cycle), "cycle.onnx");
  EXPECT_THROW(inline_local_functions(cyclic), InputError);
}

// A call with more outputs than its function declares is refused as input (ONNX Runtime refuses
// it too): inlining it gave an output computed by nothing, with exit 0 and "target met".
TEST(Nesting, ACallWithMoreOutputsThanItsFunctionIsRefused) {
  TempDir dir;
  const auto input = write_model_text(R"(<ir_version: 8, opset_import: ["": 17, "local": 1]>
g (float[2] x) => (float[2] y, float[2] z) { y, z = local.F (x) }
<domain: "local", opset_import: ["": 17]>
F (a) => (b) { b = Relu (a) })",
                                      dir / "m.onnx");
  for (const auto& command : {std::vector<std::string>{"rewrite", input.string(), "-o", (dir / "out.onnx").string()},
                              std::vector<std::string>{"check", input.string()}}) {
    const auto result = run_cli(command);
    EXPECT_EQ(result.exit_code, 3) << result.out;
    EXPECT_EQ(result.err, "onnx-rewrite: error: " + input.string() +
                              ": main graph: node 'F -> y' calls model-local function local.F with 1 input(s) and 2 "
                              "output(s); it declares 1 and 1\n");
  }
  EXPECT_FALSE(fs::exists(dir / "out.onnx"));
}

// ---- subgraphs ----------------------------------------------------------------------------------

// A body whose If branches read the function's input and a value it computes; the caller
// defines `sq` and `out` too, the names the body uses.
const char* kBranchy = R"(
  <ir_version: 8, opset_import: ["": 17, "local": 1]>
  g (float[N, 4] x, bool flag) => (float[N, 4] y1, float[N, 4] y2, float[N, 4] out) {
    sq = Neg (x)
    out = Mul (sq, x)
    y1 = local.Branchy (x, flag)
    y2 = local.Branchy (out, flag)
  }
  <domain: "local", opset_import: ["": 17]>
  Branchy (x, flag) => (y) {
    sq = Mul (x, x)
    y = If (flag) <then_branch = then_g () => (float[N, 4] out) { out = Add (sq, x) },
                   else_branch = else_g () => (float[N, 4] out) { out = Sub (sq, x) }>
  }
)";

TEST(Subgraphs, BodiesWithIfKeepTheirReferences) {
  auto inlined = inline_text(kBranchy);
  EXPECT_EQ(inlined.calls, 2);
  EXPECT_EQ(inlined.model.proto.functions_size(), 0);
  expect_names_defined_once(inlined.model.proto.graph());
  for (const char* flag : {"0,0", "1,1"}) {
    expect_same_numbers(parse_model_text(kBranchy), inlined.model.proto, {"--dim", "N=2", "--range", fmt::format("flag={}", flag)},
                        fmt::format("function with If (flag {}) vs ORT", flag[0]));
  }
}

// Calls inside the main graph's own If branches are inlined where they are.
TEST(Subgraphs, CallsInsideIfBranchesAreInlined) {
  const char* text = R"(
    <ir_version: 8, opset_import: ["": 17, "local": 1]>
    g (float[N, 4] x, bool flag) => (float[N, 4] y) {
      y = If (flag) <then_branch = then_g () => (float[N, 4] r) { r = local.Scaled <alpha = 3.0> (x) },
                     else_branch = else_g () => (float[N, 4] r) { r = local.Scaled (x) }>
    }
    <domain: "local", opset_import: ["": 17]>
    Scaled <alpha> (a) => (b) {
      t = LeakyRelu <alpha: float = @alpha> (a)
      b = Add (t, a)
    }
  )";
  auto inlined = inline_text(text);
  EXPECT_EQ(inlined.calls, 2);
  EXPECT_EQ(inlined.model.proto.functions_size(), 0);
  const auto& branches = inlined.model.proto.graph().node(0).attribute();
  for (const auto& branch : branches) EXPECT_EQ(branch.g().node_size(), 2) << branch.name();
  expect_names_defined_once(inlined.model.proto.graph());
  for (const char* flag : {"0,0", "1,1"}) {
    expect_same_numbers(parse_model_text(text), inlined.model.proto, {"--dim", "N=2", "--range", fmt::format("flag={}", flag)},
                        fmt::format("call in If branch (flag {}) vs ORT", flag[0]));
  }
}

// ---- optional inputs and outputs ---------------------------------------------------------------

TEST(OptionalArguments, OmittedInputsStayAbsentAndOutputsGetFreshNames) {
  const char* text = R"(
    <ir_version: 8, opset_import: ["": 17, "local": 1]>
    g (float[N, 4] x, float lo, float hi) => (float[N, 4] y1, float[N, 4] y2, float[N, 4] c2) {
      y1 = local.Clamp (x, lo)
      y2, c2 = local.Clamp (x, , hi)
    }
    <domain: "local", opset_import: ["": 17]>
    Clamp (x, lo, hi) => (y, moved) {
      y = Clip (x, lo, hi)
      diff = Sub (y, x)
      moved = Abs (diff)
    }
  )";
  auto inlined = inline_text(text);
  ASSERT_EQ(inlined.calls, 2);
  const auto& nodes = inlined.model.proto.graph().node();
  std::vector<const onnx::NodeProto*> clips;
  for (const auto& node : nodes) {
    if (node.op_type() == "Clip") clips.push_back(&node);
  }
  ASSERT_EQ(clips.size(), 2u);
  EXPECT_EQ(clips[0]->input_size(), 2);  // Clip (x, lo): the trailing hi was omitted
  EXPECT_EQ(clips[1]->input(1), "");     // Clip (x, , hi)
  EXPECT_EQ(clips[1]->input(2), "hi");
  expect_names_defined_once(inlined.model.proto.graph());
  // ONNX Runtime refuses the original (a call with fewer outputs than the function): compare with
  // what the calls mean, written out.
  const auto expected = parse_model_text(R"(
    <ir_version: 8, opset_import: ["": 17]>
    g (float[N, 4] x, float lo, float hi) => (float[N, 4] y1, float[N, 4] y2, float[N, 4] c2) {
      y1 = Clip (x, lo)
      y2 = Clip (x, , hi)
      d = Sub (y2, x)
      c2 = Abs (d)
    })");
  expect_same_numbers(expected, inlined.model.proto, {"--dim", "N=3", "--range", "lo=-0.5,-0.2", "--range", "hi=0.2,0.5"},
                      "omitted optional inputs/outputs vs written out");
}

// A function that returns an input as is (or one value twice) gets an Identity for it.
TEST(OptionalArguments, PassThroughOutputsAreCopied) {
  auto inlined = inline_text(R"(
    <ir_version: 8, opset_import: ["": 17, "local": 1]>
    g (float[N, 4] x) => (float[N, 4] a, float[N, 4] b, float[N, 4] c) {
      a, b, c = local.Both (x)
    }
    <domain: "local", opset_import: ["": 17]>
    Both (x) => (x, d, d) {
      d = Add (x, x)
    }
  )");
  ASSERT_EQ(inlined.calls, 1);
  const auto expected = parse_model_text(R"(
    <ir_version: 8, opset_import: ["": 17]>
    g (float[N, 4] x) => (float[N, 4] a, float[N, 4] b, float[N, 4] c) {
      b = Add (x, x)
      a = Identity (x)
      c = Identity (b)
    })");
  EXPECT_EQ(canonical_nodes(inlined.model.proto, interface_names(expected)), canonical_nodes(expected, interface_names(expected)));
  expect_same_numbers(expected, inlined.model.proto, {"--dim", "N=2"}, "pass-through outputs vs written out");
}

// ---- functions importing another ai.onnx version than their caller -----------------------------

TEST(Opsets, BodyThatMeansTheSameAtTheCallersOpsetIsInlined) {
  const char* text = R"(
    <ir_version: 8, opset_import: ["": 17, "local": 1]>
    g (float[N, 4] x) => (float[N, 4] y) {
      y = local.ReluPlus (x)
    }
    <domain: "local", opset_import: ["": 13]>
    ReluPlus (a) => (b) {
      r = Relu (a)
      b = Add (r, a)
    }
  )";
  auto inlined = inline_text(text);
  EXPECT_EQ(inlined.calls, 1);
  EXPECT_EQ(opset_import(inlined.model.proto, ""), 17);
  EXPECT_TRUE(inlined.notes.empty());
  expect_same_numbers(parse_model_text(text), inlined.model.proto, {"--dim", "N=2"}, "ai.onnx 13 body at 17 vs ORT");
}

TEST(Opsets, BodyThatWouldChangeMeaningStaysACall) {
  // ReduceMean takes axes as an input from opset 18; the caller is at 17.
  const char* text = R"(
    <ir_version: 8, opset_import: ["": 17, "local": 1]>
    g (float[N, 4] x) => (float[N, 1] y) {
      y = local.RowMean (x)
    }
    <domain: "local", opset_import: ["": 18]>
    RowMean (a) => (b) {
      axes = Constant <value = int64[1] {1}> ()
      b = ReduceMean (a, axes)
    }
  )";
  auto inlined = inline_text(text);
  EXPECT_EQ(inlined.calls, 0);
  EXPECT_EQ(inlined.model.proto.functions_size(), 1);
  EXPECT_EQ(opset_import(inlined.model.proto, "local"), 1);
  ASSERT_EQ(inlined.notes.size(), 1u);
  EXPECT_NE(inlined.notes[0].find("local.RowMean"), std::string::npos) << inlined.notes[0];
  EXPECT_NE(inlined.notes[0].find("ReduceMean"), std::string::npos) << inlined.notes[0];
  // For --target onnx the call is what is left unloadable.
  TempDir dir;
  const auto input = write_model_text(text, dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "-o", (dir / "out.onnx").string(), "--target", "onnx"});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.err.find("local.RowMean"), std::string::npos) << result.err;
}

// A kept function still gets the calls inside it inlined, judged by its own imports.
TEST(Opsets, KeptFunctionInlinesWhatItCalls) {
  const char* text = R"(
    <ir_version: 8, opset_import: ["": 17, "local": 1]>
    g (float[N, 4] x) => (float[N, 1] y) {
      y = local.RowMeanPlus (x)
    }
    <domain: "local", opset_import: ["": 18, "local": 1]>
    RowMeanPlus (a) => (b) {
      axes = Constant <value = int64[1] {1}> ()
      m = ReduceMean (a, axes)
      b = local.Twice (m)
    }
    <domain: "local", opset_import: ["": 18]>
    Twice (u) => (v) {
      v = Add (u, u)
    }
  )";
  auto inlined = inline_text(text);
  EXPECT_EQ(inlined.calls, 1);
  ASSERT_EQ(inlined.model.proto.functions_size(), 1);
  const auto& kept = inlined.model.proto.functions(0);
  EXPECT_EQ(kept.name(), "RowMeanPlus");
  for (const auto& node : kept.node()) EXPECT_NE(node.op_type(), "Twice");
  EXPECT_EQ(kept.node_size(), 3);
}

// ---- rules inside function bodies, If and Loop bodies ------------------------------------------

// The tutorial's custom ops in a function body, an If branch and a Loop body.
const char* kCustomOpsEverywhere = R"(
  <ir_version: 8, opset_import: ["": 17, "local": 1, "test.customop": 1]>
  g (float[4] x, bool flag) => (float[4] y, float[4] w, float[4] acc) {
    y = local.AddRound (x)
    w = If (flag) <then_branch = then_g () => (float[4] r) { r = test.customop.CustomOpTwo (x) },
                   else_branch = else_g () => (float[4] r) { r = test.customop.CustomOpOne (x, x) }>
    trip = Constant <value = int64 {3}> ()
    acc = Loop (trip, , x) <body = body (int64 i, bool c, float[4] s) => (bool c_out, float[4] s_out) {
      c_out = Identity (c)
      s_out = test.customop.CustomOpOne (s, x)
    }>
  }
  <domain: "local", opset_import: ["": 17, "test.customop": 1]>
  AddRound (a) => (b) {
    s = test.customop.CustomOpOne (a, a)
    b = test.customop.CustomOpTwo (s)
  }
)";

// What the model means, in standard ops.
const char* kCustomOpsMeaning = R"(
  <ir_version: 8, opset_import: ["": 17]>
  g (float[4] x, bool flag) => (float[4] y, float[4] w, float[4] acc) {
    s = Add (x, x)
    y = Round (s)
    w = If (flag) <then_branch = then_g () => (float[4] r) { r = Round (x) },
                   else_branch = else_g () => (float[4] r) { r = Add (x, x) }>
    trip = Constant <value = int64 {3}> ()
    acc = Loop (trip, , x) <body = body (int64 i, bool c, float[4] s) => (bool c_out, float[4] s_out) {
      c_out = Identity (c)
      s_out = Add (s, x)
    }>
  }
)";

TEST(RulesInside, FunctionBodiesAndControlFlowBodies) {
  TempDir dir;
  const auto input = write_model_text(kCustomOpsEverywhere, dir / "in.onnx");
  for (const std::string target : {"ort", "onnx"}) {
    const auto output = dir / (target + ".onnx");
    const auto result = run_cli({"rewrite", input.string(), "-o", output.string(), "--target", target});
    ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
    EXPECT_EQ(run_cli({"check", output.string(), "--target", target}).exit_code, 0);
    onnx::ModelProto rewritten;
    ASSERT_TRUE(rewritten.ParseFromString(read_file(output)));
    const auto ops = count_ops(rewritten);
    EXPECT_EQ(op_count(ops, {"test.customop", "CustomOpOne"}), 0);
    EXPECT_EQ(op_count(ops, {"test.customop", "CustomOpTwo"}), 0);
    EXPECT_EQ(opset_import(rewritten, "test.customop"), 0);
    // ort runs local functions: the call stays, its body rewritten (and its imports with it)
    EXPECT_EQ(rewritten.functions_size(), target == "ort" ? 1 : 0);
    if (target == "ort") {
      for (const auto& import : rewritten.functions(0).opset_import()) EXPECT_NE(import.domain(), "test.customop");
    }
    for (const char* flag : {"0,0", "1,1"}) {
      expect_same_numbers(parse_model_text(kCustomOpsMeaning), rewritten,
                          {"--range", fmt::format("flag={}", flag), "--float-range", "-5,5"},
                          fmt::format("custom ops in function/If/Loop bodies --target {} (flag {})", target, flag[0]));
    }
  }
}

// A model calling function local.R, whose body is CustomOpTwo (Round, ai.onnx >= 11).
std::string custom_op_two_in_function(int model_opset, int function_opset) {
  return fmt::format(R"(<ir_version: 6, opset_import: ["": {}, "local": 1]>
g (float[8] x) => (float[8] y) {{
  y = local.R (x)
}}
<domain: "local", opset_import: ["": {}, "test.customop": 1]>
R (X) => (Y) {{
  Y = test.customop.CustomOpTwo (X)
}})",
                     model_opset, function_opset);
}

TEST(RulesInside, ARaiseInsideAFunctionRaisesTheModelsImportToo) {
  // ONNX Runtime reads a function body at the model's ai.onnx import: Round (opset 11) in a body
  // whose import alone said 11 would not load in a model importing 10.
  TempDir dir;
  const auto input = write_model_text(custom_op_two_in_function(10, 10), dir / "in.onnx");
  const auto output = dir / "out.onnx";
  const auto result = run_cli({"rewrite", input.string(), "-o", output.string(), "--target", "ort"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  onnx::ModelProto rewritten;
  ASSERT_TRUE(rewritten.ParseFromString(read_file(output)));
  EXPECT_EQ(opset_import(rewritten, ""), 11);
  ASSERT_EQ(rewritten.functions_size(), 1);
  for (const auto& import : rewritten.functions(0).opset_import()) {
    if (import.domain().empty()) {
      EXPECT_EQ(import.version(), 11);
    }
  }
  const auto reference = parse_model_text(R"(<ir_version: 6, opset_import: ["": 11]>
g (float[8] x) => (float[8] y) {
  y = Round (x)
})");
  expect_same_numbers(reference, rewritten, {"--float-range", "-5,5"}, "Round in a function, model raised to 11");
}

// CustomOpTwo at opset 10 in the main graph beside a call of local.F; rewriting it as Round
// raises ai.onnx to 11.
std::string custom_op_two_beside_function(int main_opset, const std::string& main_op, const std::string& function_body) {
  return fmt::format(R"(<ir_version: 6, opset_import: ["": {0}, "local": 1, "test.customop": 1]>
g (float[8] x) => (float[8] y, float[8] z) {{
  y = {1} (x)
  z = local.F (x)
}}
<domain: "local", opset_import: ["": {0}]>
F (X) => (Y) {{
{2}
}})",
                     main_opset, main_op, function_body);
}

TEST(RulesInside, ARaiseInTheMainGraphMovesFunctionImportsAlong) {
  TempDir dir;
  const auto input = write_model_text(custom_op_two_beside_function(10, "test.customop.CustomOpTwo", "  Y = Relu (X)"), dir / "in.onnx");
  const auto output = dir / "out.onnx";
  const auto result = run_cli({"rewrite", input.string(), "-o", output.string(), "--target", "ort"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  onnx::ModelProto rewritten;
  ASSERT_TRUE(rewritten.ParseFromString(read_file(output)));
  EXPECT_EQ(op_count(count_ops(rewritten), {"", "Round"}), 1);
  EXPECT_EQ(opset_import(rewritten, ""), 11);
  ASSERT_EQ(rewritten.functions_size(), 1);
  EXPECT_EQ(rewritten.functions(0).opset_import(0).version(), 11);
  expect_same_numbers(parse_model_text(custom_op_two_beside_function(11, "Round", "  Y = Relu (X)")), rewritten,
                      {"--float-range", "-5,5"}, "CustomOpTwo beside a function");
}

TEST(RulesInside, AFunctionNodeThatWouldChangeMeaningBlocksTheRaiseAndTheNoteSaysSo) {
  TempDir dir;
  const std::string body = "  Y = Clip <min = 0.0, max = 6.0> (X)";
  const auto input = write_model_text(custom_op_two_beside_function(10, "test.customop.CustomOpTwo", body), dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "--dry-run", "--target", "ort"});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;  // CustomOpTwo stays: ORT can't load it
  EXPECT_NE(result.out.find("no rule applies"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("note: customop-two-to-round: matched, but needs ai.onnx 11, and raising it from 10 would change the "
                            "model: Clip-11 changed its meaning"),
            std::string::npos)
      << result.out;
}

TEST(RulesInside, AFunctionImportingAnotherVersionIsReadAtTheModels) {
  // Nothing in the body means something else at 13 than at 11: rewritten for 13, import moved.
  TempDir dir;
  const auto input = write_model_text(custom_op_two_in_function(13, 11), dir / "in.onnx");
  const auto output = dir / "out.onnx";
  const auto result = run_cli({"rewrite", input.string(), "-o", output.string(), "--target", "ort"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  onnx::ModelProto rewritten;
  ASSERT_TRUE(rewritten.ParseFromString(read_file(output)));
  ASSERT_EQ(rewritten.functions_size(), 1);
  EXPECT_EQ(op_count(count_ops(rewritten), {"", "Round"}), 1);
  EXPECT_EQ(rewritten.functions(0).opset_import(0).domain(), "");
  EXPECT_EQ(rewritten.functions(0).opset_import(0).version(), 13);
  EXPECT_EQ(run_cli({"check", output.string(), "--target", "ort"}).exit_code, 0);
}

TEST(RulesInside, ARewriteInTheMainGraphWithoutARaiseLeavesFunctionImportsAlone) {
  const std::string text = R"(<ir_version: 8, opset_import: ["": 13, "local": 1, "test.customop": 1]>
g (float[8] x) => (float[8] y, float[1, 8] z) {
  y = test.customop.CustomOpTwo (x)
  z = local.F (x)
}
<domain: "local", opset_import: ["": 11]>
F (X) => (Y) {
  Y = Unsqueeze <axes = [0]> (X)
})";
  TempDir dir;
  const auto input = write_model_text(text, dir / "in.onnx");
  const auto output = dir / "out.onnx";
  const auto result = run_cli({"rewrite", input.string(), "-o", output.string(), "--target", "ort"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  onnx::ModelProto rewritten;
  ASSERT_TRUE(rewritten.ParseFromString(read_file(output)));
  EXPECT_EQ(op_count(count_ops(rewritten), {"", "Round"}), 1);
  ASSERT_EQ(rewritten.functions_size(), 1);
  EXPECT_EQ(rewritten.functions(0).opset_import(0).version(), 11);  // Unsqueeze-11 would mean something else at 13
}

TEST(RulesInside, AFunctionBodyThatMeansSomethingElseAtTheModelsImportIsLeftAlone) {
  // Unsqueeze-11 takes its axes as an attribute, Unsqueeze-13 as an input.
  std::string text = custom_op_two_in_function(13, 11);
  text.replace(text.find("  Y = test.customop.CustomOpTwo (X)"), std::string("  Y = test.customop.CustomOpTwo (X)").size(),
               "  u = Unsqueeze <axes = [0]> (X)\n  Y = test.customop.CustomOpTwo (u)");
  text.replace(text.find("(float[8] y)"), std::string("(float[8] y)").size(), "(float[1, 8] y)");
  TempDir dir;
  const auto input = write_model_text(text, dir / "in.onnx");
  const auto result = run_cli({"rewrite", input.string(), "--dry-run", "--target", "ort", "--explain", "CustomOpTwo"});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;  // the custom op stays
  EXPECT_NE(result.out.find("the function imports ai.onnx 11 and the model ai.onnx 13, and its body would mean something else "
                            "at 13: Unsqueeze-13 changed its meaning"),
            std::string::npos)
      << result.out;
}

TEST(RulesInside, ACallOfALocalFunctionNamedLikeACustomOpMeansTheFunction) {
  // The model defines mydomain.mygroupnorm itself; the group-norm rule must not replace the call.
  const std::string text = R"(<ir_version: 8, opset_import: ["": 17, "mydomain": 1]>
g (float[2, 4, 3] x) => (float[2, 4, 3] y) <float[1] groups = {2.0}, float[4] scale = {1.0, 1.0, 1.0, 1.0},
                                             float[4] bias = {0.0, 0.0, 0.0, 0.0}> {
  y = mydomain.mygroupnorm (x, groups, scale, bias)
}
<domain: "mydomain", opset_import: ["": 17]>
mygroupnorm (X, G, S, B) => (Y) {
  Y = Add (X, X)
})";
  TempDir dir;
  const auto input = write_model_text(text, dir / "in.onnx");
  const auto output = dir / "out.onnx";
  const auto result = run_cli({"rewrite", input.string(), "-o", output.string(), "--target", "ort", "--explain", "mygroupnorm"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("it calls a function the model defines"), std::string::npos) << result.out;
  EXPECT_EQ(read_file(output), read_file(input));
}

}  // namespace
}  // namespace onnx_rewrite
