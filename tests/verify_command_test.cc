// Proving a user's own model (docs/cli.md, "verify"): `verify ORIGINAL REWRITTEN`, `rewrite
// --verify` and `batch --verify` run both models in ONNX Runtime and compare every output;
// `--input-shape` fixes graph inputs' dims before matching. The Node.js driver runs npm's
// onnxruntime-node, as the rest of the suite does; the Python driver runs against a stand-in for
// pip's onnxruntime (tests/support/fake_onnxruntime), which can't be installed here.
#include <gtest/gtest.h>

#include <google/protobuf/struct.pb.h>

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <set>

#include "onnx_rewrite/target.h"
#include "onnx_rewrite/tensor.h"
#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

const char* kReluModel = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y) { y = Relu (x) })";

// A rule that changes the numbers: Relu(x) -> Abs(x), wrong for every negative x.
constexpr const char* kReluToAbs = R"(
rule relu-to-abs
  description: wrong on purpose
  targets: onnx, ort
  pattern (x) => (y) { y = Relu (x) }
  replace (x) => (y) { y = Abs (x) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) { y = Relu (x) }
  }
  expect { y = Abs (x) }
end
)";

// A rule that keeps the numbers: Neg(x) -> Sub(0, x) (test_support.h's kNegToSub).
const char* kNegModel = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y) { y = Neg (x) })";

std::string field(const google::protobuf::Value& value, const std::string& key) {
  const auto& fields = value.struct_value().fields();
  auto found = fields.find(key);
  return found == fields.end() ? "(absent)" : found->second.has_string_value() ? found->second.string_value() : "(not a string)";
}
// Copies, so that they may be kept from a temporary document.
google::protobuf::Value member(const google::protobuf::Value& value, const std::string& key) {
  const auto& fields = value.struct_value().fields();
  auto found = fields.find(key);
  return found == fields.end() ? google::protobuf::Value() : found->second;
}
double number(const google::protobuf::Value& value, const std::string& key) { return member(value, key).number_value(); }
google::protobuf::Value first_output(const google::protobuf::Value& verify) { return member(verify, "outputs").list_value().values(0); }
std::vector<std::string> flags(const google::protobuf::Value& output) {
  std::vector<std::string> names;
  const auto list = member(output, "flags");
  for (const auto& flag : list.list_value().values()) names.push_back(flag.string_value());
  return names;
}

// The names in a directory, hidden ones included.
std::set<std::string> listing(const fs::path& directory) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) names.insert(entry.path().filename().string());
  return names;
}

// `verify --json` of two models given as ONNX text, in `dir`.
CommandResult verify_texts(const TempDir& dir, const onnx::ModelProto& original, const onnx::ModelProto& rewritten,
                           const std::vector<std::string>& extra = {}) {
  write_file(dir / "a.onnx", serialize(original));
  write_file(dir / "b.onnx", serialize(rewritten));
  std::vector<std::string> args{"verify", (dir / "a.onnx").string(), (dir / "b.onnx").string(), "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args);
}

google::protobuf::Value verify_object(const CommandResult& result) { return member(parse_json(result.out), "verify"); }

// `y = Relu (x)`'s weights-free twin with its one input in external data: z = Add (x, w), w in `location`.
void write_external_data_model(const fs::path& path, const std::string& location, const std::string& op = "Neg") {
  onnx::ModelProto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] z) {
  t = )" + op + R"( (x)
  z = Add (t, w)
})");
  add_external_initializer(*model.mutable_graph(), "w", location);
  write_file(path, serialize(model));
  const float values[6] = {0.5f, -1, 2, -3, 4, -5};
  write_file(path.parent_path() / location, std::string(reinterpret_cast<const char*>(values), sizeof values));
}

// A .npy (format 1.0) of float32 values.
std::string npy_float32(const std::vector<int64_t>& dims, const std::vector<float>& values) {
  std::string shape = "(";
  for (int64_t dim : dims) shape += std::to_string(dim) + ", ";
  shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header + std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// ---- verify against the suite's own harness, on real models ------------------------------------

// `rewrite --target ort --verify` on every real model (scripts/fetch-test-data.sh models) gives the
// verdict the suite's harness (tests/ort/compare.js) gives the same two models on inputs of the
// same shapes: a match where the harness finds the same numbers, not-compared where the original
// does not run on them (Silero VAD checks its inputs), and never a mismatch the harness misses.
TEST(VerifyCommand, ReproducesTheHarnessVerdictsOnTheRealModels) {
  ASSERT_TEST_DATA(models, "models");
  TempDir dir;
  int matched = 0, not_compared = 0;
  for (const auto& entry : fs::directory_iterator(models)) {
    const std::string name = entry.path().filename().string();
    const auto original = entry.path() / "model.onnx";
    const auto rewritten = dir / (name + ".onnx");
    const auto report = dir / (name + ".json");
    const auto run = run_cli({"rewrite", original.string(), "-o", rewritten.string(), "--target", "ort", "--verify",
                              "--report", report.string()});
    ASSERT_EQ(run.exit_code, 0) << name << ": " << run.out << run.err;
    const auto verify = member(parse_json(read_file(report)), "verify");
    const std::string status = field(verify, "status");
    if (status == "identical") continue;  // the output is the input byte for byte: nothing to run
    std::vector<std::string> shapes;
    const auto inputs = member(verify, "inputs");  // kept: the loops below refer into it
    for (const auto& input : inputs.list_value().values()) {
      std::string dims;
      const auto shape = member(input, "shape");
      for (const auto& dim : shape.list_value().values()) {
        dims += (dims.empty() ? "" : ",") + std::to_string(static_cast<int64_t>(dim.number_value()));
      }
      shapes.insert(shapes.end(), {"--shape", field(input, "name") + "=" + dims});
    }
    const auto harness = ort_compare(original, rewritten, shapes);
    if (status == "match") {
      ++matched;
      EXPECT_TRUE(harness.ok) << name << ": verify matched, the harness did not:\n" << harness.output;
    } else {
      ++not_compared;
      EXPECT_EQ(status, "not-compared") << name << ": " << run.out;
      EXPECT_NE(field(verify, "reason").find("the original does not run"), std::string::npos) << name;
      EXPECT_EQ(harness.exit_code, 2) << name << ": the harness ran the original:\n" << harness.output;
    }
  }
  std::cout << "[ verdicts ] " << matched << " matched, " << not_compared << " not compared\n";
  EXPECT_GE(matched, 8);  // every model whose original runs on inputs made from its declared shapes
}

// ---- verify: what is compared, and how --------------------------------------------------------

TEST(VerifyCommand, AModelAgainstItselfMatches) {
  TempDir dir;
  const auto result = verify_texts(dir, parse_model_text(kReluModel), parse_model_text(kReluModel));
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  const auto verify = verify_object(result);
  EXPECT_EQ(field(verify, "status"), "match");
  EXPECT_EQ(field(member(verify, "runtime"), "name"), "onnxruntime-node");
  EXPECT_EQ(number(verify, "seed"), 1);
  const auto input = member(verify, "inputs").list_value().values(0);
  EXPECT_EQ(field(input, "name"), "x");
  EXPECT_EQ(field(first_output(verify), "status"), "match");
  EXPECT_EQ(number(first_output(verify), "max_abs"), 0);
  // The text: a line per output, then the verdict.
  const auto text = run_cli({"verify", (dir / "a.onnx").string(), (dir / "b.onnx").string()});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("    y float [2, 3]: match, max abs 0"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  verify: match in onnxruntime-node 1.30.0: 1 output within tolerance (seed 1: x float [2, 3] random)"),
            std::string::npos)
      << text.out;
}

TEST(VerifyCommand, OtherNumbersAreExit4NamingTheOutput) {
  TempDir dir;
  const auto result = verify_texts(dir, parse_model_text(kReluModel), rewrite_text(kReluModel, rules_from_text(kReluToAbs)).model);
  EXPECT_EQ(result.exit_code, 4) << result.out << result.err;
  const auto verify = verify_object(result);
  EXPECT_EQ(field(verify, "status"), "mismatch");
  const auto output = first_output(verify);
  EXPECT_EQ(field(output, "status"), "mismatch");
  EXPECT_GT(number(output, "over_tolerance"), 0);
  EXPECT_GT(number(output, "max_abs"), 0.1);
  EXPECT_EQ(result.err.rfind("onnx-rewrite: error: " + (dir / "b.onnx").string() +
                                 ": the rewritten model computes other numbers than the original: 1 of 1 output differs: 'y' (",
                             0),
            0u)
      << result.err;
  // Another seed draws other inputs, but the same verdict.
  const auto seeded = run_cli({"verify", (dir / "a.onnx").string(), (dir / "b.onnx").string(), "--json", "--seed", "7"});
  EXPECT_EQ(seeded.exit_code, 4);
  EXPECT_EQ(number(verify_object(seeded), "seed"), 7);
}

TEST(VerifyCommand, AnOutputMissingFromTheRewriteIsAMismatch) {
  TempDir dir;
  const auto result = verify_texts(dir, parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y, float[2] z) { y = Relu (x)  z = Neg (x) })"),
                                   parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y) { y = Relu (x) })"));
  EXPECT_EQ(result.exit_code, 4) << result.out << result.err;
  const auto outputs = member(verify_object(result), "outputs").list_value();
  ASSERT_EQ(outputs.values_size(), 2);
  EXPECT_EQ(field(outputs.values(0), "status"), "match");
  EXPECT_EQ(field(outputs.values(1), "status"), "missing");
}

TEST(VerifyCommand, ARewrittenModelOnnxRuntimeRefusesIsExit4WithItsMessage) {
  TempDir dir;
  // The output declared int64, computed as float: ONNX Runtime refuses the model at load.
  const auto result = verify_texts(dir, parse_model_text(kReluModel), parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (int64[2, 3] y) { y = Relu (x) })"));
  EXPECT_EQ(result.exit_code, 4) << result.out << result.err;
  const auto verify = verify_object(result);
  EXPECT_EQ(field(verify, "status"), "rewritten-failed");
  EXPECT_NE(field(verify, "rewritten_error").find("Type Error"), std::string::npos) << result.out;
  EXPECT_EQ(result.err.rfind("onnx-rewrite: error: " + (dir / "b.onnx").string() + ": ONNX Runtime does not load the rewritten model: ", 0), 0u)
      << result.err;
}

TEST(VerifyCommand, AnOriginalOnnxRuntimeCantLoadIsNotComparedWhileTheRewriteMustRun) {
  TempDir dir;
  const auto original = parse_model_text(kCustomOpModel);
  const auto rewritten = rewrite_text(kCustomOpModel, builtin_rules()).model;
  const auto result = verify_texts(dir, original, rewritten);
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  const auto verify = verify_object(result);
  EXPECT_EQ(field(verify, "status"), "not-compared");
  EXPECT_NE(field(verify, "reason").find("the original does not load in ONNX Runtime"), std::string::npos) << result.out;
  EXPECT_NE(field(verify, "original_error").find("test.customop:CustomOpOne"), std::string::npos) << result.out;
  EXPECT_EQ(field(first_output(verify), "status"), "not-compared");
  EXPECT_EQ(member(first_output(verify), "max_abs").kind_case(), google::protobuf::Value::KIND_NOT_SET) << "nothing compared, no figures";
  // ... but a rewrite that does not load either is still a failure.
  const auto both = verify_texts(dir, original, original);
  EXPECT_EQ(both.exit_code, 4) << both.out << both.err;
  EXPECT_EQ(field(verify_object(both), "status"), "rewritten-failed");
}

TEST(VerifyCommand, InputsThatDontFitTheOriginalProveNothingButTheRewriteMustLoad) {
  // Six elements reshaped: the default 2 x 2 is four, so the original does not run on it.
  const auto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[n, m] x) => (float[6] y) { s = Constant <value = int64[1] {6}> ()  y = Reshape (x, s) })");
  TempDir dir;
  const auto unfit = verify_texts(dir, model, model);
  EXPECT_EQ(unfit.exit_code, 0) << unfit.out << unfit.err;
  const auto verify = verify_object(unfit);
  EXPECT_EQ(field(verify, "status"), "not-compared");
  EXPECT_NE(field(verify, "reason").find("the original does not run on these inputs ("), std::string::npos) << unfit.out;
  EXPECT_NE(field(verify, "reason").find("nor does the rewritten model; give inputs that fit it (--input-shape, --inputs)"), std::string::npos)
      << unfit.out;
  EXPECT_EQ(verify_texts(dir, model, model, {"--input-shape", "x=2,3"}).exit_code, 0);
  EXPECT_EQ(field(verify_object(verify_texts(dir, model, model, {"--input-shape", "x=2,3"})), "status"), "match");
  // A rewrite ONNX Runtime does not even load is wrong whatever the inputs.
  auto unloadable = model;
  unloadable.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  EXPECT_EQ(verify_texts(dir, model, unloadable).exit_code, 4);
}

TEST(VerifyCommand, Float16IsJudgedAtItsOwnPrecision) {
  // x * 1.00390625: 0.4 % off, within float16's rtol (1e-2) but not float32's (1e-4).
  const char* scaled = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y) { c = Constant <value = float {SCALE}> () y = Mul (x, c) })";
  const auto model = [&](const char* scale) {
    std::string text = scaled;
    text.replace(text.find("SCALE"), 5, scale);
    return parse_model_text(text);
  };
  TempDir dir;
  const auto half = verify_texts(dir, as_float16(model("1")), as_float16(model("1.00390625")));
  EXPECT_EQ(half.exit_code, 0) << half.out << half.err;
  const auto output = first_output(verify_object(half));
  EXPECT_EQ(field(output, "dtype"), "float16");
  EXPECT_EQ(number(output, "rtol"), 1e-2);
  EXPECT_GT(number(output, "max_abs"), 0) << "the two do differ";
  const auto single = verify_texts(dir, model("1"), model("1.00390625"));
  EXPECT_EQ(single.exit_code, 4) << single.out;
  EXPECT_EQ(number(first_output(verify_object(single)), "rtol"), 1e-4);
  // Asked for, a tolerance holds for every float type.
  EXPECT_EQ(verify_texts(dir, model("1"), model("1.00390625"), {"--rtol", "1e-2"}).exit_code, 0);
  EXPECT_EQ(verify_texts(dir, as_float16(model("1")), as_float16(model("1.00390625")), {"--rtol", "1e-4", "--atol", "0"}).exit_code, 4);
}

TEST(VerifyCommand, QuantizedOutputsMayDifferByOneStep) {
  const auto model = [](int zero_point) {
    return parse_model_text(fmt::format(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[4, 8] x) => (int8[4, 8] q) {{
  s = Constant <value = float {{0.1}}> ()
  z = Constant <value = int8 {{{}}}> ()
  q = QuantizeLinear (x, s, z)
}})", zero_point));
  };
  TempDir dir;
  const auto one = verify_texts(dir, model(0), model(1));
  EXPECT_EQ(one.exit_code, 0) << one.out << one.err;
  EXPECT_EQ(number(first_output(verify_object(one)), "max_abs"), 1);
  EXPECT_EQ(number(first_output(verify_object(one)), "atol"), 1);
  EXPECT_EQ(verify_texts(dir, model(0), model(2)).exit_code, 4);
  EXPECT_EQ(verify_texts(dir, model(0), model(1), {"--atol", "0"}).exit_code, 4);
}

TEST(VerifyCommand, NaNWhereTheOriginalIsFiniteIsAMismatchAndNaNOnBothSidesIsNot) {
  // sqrt(x) - sqrt(x): NaN where x < 0, else 0.
  const char* nan_where_negative = R"(<ir_version: 8, opset_import: ["": 17]>
g (float[4, 8] x) => (float[4, 8] y) { r = Relu (x)  s = Sqrt (x)  d = Sub (s, s)  y = Add (r, d) })";
  TempDir dir;
  const auto differing = verify_texts(dir, parse_model_text(kReluModel), parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y) { r = Relu (x)  s = Sqrt (x)  d = Sub (s, s)  y = Add (r, d) })"));
  EXPECT_EQ(differing.exit_code, 4) << differing.out << differing.err;
  const auto output = first_output(verify_object(differing));
  EXPECT_EQ(number(member(output, "nan"), "original"), 0);
  EXPECT_GT(number(member(output, "nan"), "rewritten"), 0);
  EXPECT_EQ(number(output, "over_tolerance"), number(member(output, "nan"), "rewritten"));
  EXPECT_EQ(flags(output), std::vector<std::string>{"non-finite"});

  const auto same = verify_texts(dir, parse_model_text(nan_where_negative), parse_model_text(nan_where_negative));
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  const auto both = first_output(verify_object(same));
  EXPECT_GT(number(member(both, "nan"), "original"), 0);
  EXPECT_EQ(number(member(both, "nan"), "original"), number(member(both, "nan"), "rewritten"));
  EXPECT_EQ(flags(both), std::vector<std::string>{"non-finite"});
  const auto text = run_cli({"verify", (dir / "a.onnx").string(), (dir / "b.onnx").string()});
  EXPECT_NE(text.out.find("non-finite values ("), std::string::npos) << text.out;
}

TEST(VerifyCommand, AnOutputConstantOnBothSidesIsFlagged) {
  // Zeros shaped like x: the same whatever x holds.
  const auto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2, 3] x) => (float[2, 3] y) { s = Shape (x)  y = ConstantOfShape (s) })");
  TempDir dir;
  const auto result = verify_texts(dir, model, model);
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_EQ(flags(first_output(verify_object(result))), std::vector<std::string>{"constant"});
  const auto text = run_cli({"verify", (dir / "a.onnx").string(), (dir / "b.onnx").string()});
  EXPECT_NE(text.out.find("; constant on both sides"), std::string::npos) << text.out;
  // A varying output is not.
  EXPECT_TRUE(flags(first_output(verify_object(verify_texts(dir, parse_model_text(kReluModel), parse_model_text(kReluModel))))).empty());
}

TEST(VerifyCommand, TheUsersOwnInputsFromNpyAndPbFiles) {
  // Relu and Abs agree on x >= 0 only: random inputs tell them apart, the files here don't.
  TempDir dir;
  const auto original = parse_model_text(kReluModel);
  const auto rewritten = rewrite_text(kReluModel, rules_from_text(kReluToAbs)).model;
  const std::vector<float> non_negative{0, 0.5f, 1, 2, 3, 4};
  write_file(dir / "x.npy", npy_float32({2, 3}, non_negative));
  onnx::TensorProto tensor = make_tensor(onnx::TensorProto::FLOAT, {2, 3}, {non_negative.begin(), non_negative.end()});
  write_file(dir / "x.pb", tensor.SerializeAsString());
  EXPECT_EQ(verify_texts(dir, original, rewritten).exit_code, 4);
  for (const char* file : {"x.npy", "x.pb"}) {
    SCOPED_TRACE(file);
    const auto result = verify_texts(dir, original, rewritten, {"--inputs", "x=" + (dir / file).string()});
    EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
    EXPECT_EQ(field(member(verify_object(result), "inputs").list_value().values(0), "file"), (dir / file).string());
  }
  // What can't be fed is named.
  write_file(dir / "wide.npy", npy_float32({3, 2}, non_negative));
  write_file(dir / "junk.npy", "\x93NUMPY but not really");
  const auto wrong = [&](const std::string& inputs, int code, const std::string& message) {
    const auto result = verify_texts(dir, original, rewritten, {"--inputs", inputs});
    EXPECT_EQ(result.exit_code, code) << inputs << ": " << result.err;
    EXPECT_NE(result.err.find(message), std::string::npos) << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  };
  wrong("z=" + (dir / "x.npy").string(), 2, "the model has no input of that name (inputs: x)");
  wrong("x=" + (dir / "wide.npy").string(), 2, "input 'x': " + (dir / "wide.npy").string() + " has shape [3, 2], the model declares [2, 3]");
  wrong("x=" + (dir / "junk.npy").string(), 3, (dir / "junk.npy").string() + ": not a .npy file onnx-rewrite reads");
  wrong("x=" + (dir / "absent.npy").string(), 3, (dir / "absent.npy").string() + ": cannot read");
}

TEST(VerifyCommand, SymbolicDimsDefaultTo2OrWhatInputShapeSays) {
  const auto model = parse_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[batch, seq, 4] x, float[batch, 4] m) => (float[batch, seq, 4] y) {
  one = Constant <value = int64[1] {1}> ()
  u = Unsqueeze (m, one)
  y = Add (x, u)
})");
  TempDir dir;
  const auto shapes = [](const CommandResult& result) {
    std::vector<std::vector<double>> all;
    const auto inputs = member(verify_object(result), "inputs");
    for (const auto& input : inputs.list_value().values()) {
      all.emplace_back();
      const auto shape = member(input, "shape");
      for (const auto& dim : shape.list_value().values()) all.back().push_back(dim.number_value());
    }
    return all;
  };
  const auto defaults = verify_texts(dir, model, model);
  EXPECT_EQ(defaults.exit_code, 0) << defaults.out << defaults.err;
  EXPECT_EQ(shapes(defaults), (std::vector<std::vector<double>>{{2, 2, 4}, {2, 4}}));
  // x's batch fixes m's too: one name is one size.
  const auto fixed = verify_texts(dir, model, model, {"--input-shape", "x=3,5,4"});
  EXPECT_EQ(fixed.exit_code, 0) << fixed.out << fixed.err;
  EXPECT_EQ(shapes(fixed), (std::vector<std::vector<double>>{{3, 5, 4}, {3, 4}}));
}

// ---- rewrite --verify -----------------------------------------------------------------------

TEST(RewriteVerify, AWrongRuleIsCaughtAndLeavesNoOutput) {
  TempDir in, out;
  write_external_data_model(in / "m.onnx", "weights.bin", "Relu");
  write_file(in / "wrong.rules", kReluToAbs);
  const auto result = run_cli({"rewrite", (in / "m.onnx").string(), "-o", (out / "m.onnx").string(), "--rules", (in / "wrong.rules").string(),
                               "--verify", "--report", (out / "report.json").string(), "--html", (out / "page.html").string()});
  EXPECT_EQ(result.exit_code, 4) << result.out << result.err;
  EXPECT_EQ(result.err, "onnx-rewrite: error: " + (out / "m.onnx").string() +
                            ": the rewritten model computes other numbers than the original: 1 of 1 output differs: 'z' (" +
                            result.err.substr(result.err.find("'z' (") + 5));
  EXPECT_NE(result.err.find("; nothing was written\n"), std::string::npos) << result.err;
  EXPECT_NE(result.out.find("m.onnx (not written: it failed its verification)"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("    z float [2, 3]: MISMATCH, "), std::string::npos) << result.out;
  // No model, no data file, no hidden verification directory, no page: only the report.
  EXPECT_EQ(listing(out.path()), std::set<std::string>{"report.json"});
  const auto report = parse_json(read_file(out / "report.json"));
  EXPECT_EQ(field(report, "status"), "verify-failed");
  EXPECT_EQ(number(member(report, "error"), "exit_code"), 4);
  EXPECT_EQ(field(member(report, "verify"), "status"), "mismatch");
  EXPECT_EQ(field(first_output(member(report, "verify")), "name"), "z");
  EXPECT_EQ(member(member(report, "options"), "verify").struct_value().fields().count("seed"), 1u);
  // The same rewrite without --verify writes its wrong model: the check above is what stopped it.
  EXPECT_EQ(run_cli({"rewrite", (in / "m.onnx").string(), "-o", (out / "m.onnx").string(), "--rules", (in / "wrong.rules").string()}).exit_code, 0);
  EXPECT_TRUE(fs::exists(out / "m.onnx"));
}

TEST(RewriteVerify, TheWrittenModelWithItsDataFilesIsWhatWasVerified) {
  TempDir in, out;
  write_external_data_model(in / "m.onnx", "weights.bin");
  write_file(in / "neg.rules", kNegToSub);
  const auto result = run_cli({"rewrite", (in / "m.onnx").string(), "-o", (out / "m.onnx").string(), "--rules", (in / "neg.rules").string(),
                               "--verify", "--report", (out / "report.json").string(), "--html", (out / "page.html").string()});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_EQ(listing(out.path()), (std::set<std::string>{"m.onnx", "weights.bin", "report.json", "page.html"}));
  EXPECT_EQ(read_file(out / "weights.bin"), read_file(in / "weights.bin"));
  const auto verify = member(parse_json(read_file(out / "report.json")), "verify");
  EXPECT_EQ(field(verify, "status"), "match");
  EXPECT_GT(number(member(parse_json(read_file(out / "report.json")), "timing"), "verify_seconds"), 0);
  EXPECT_NE(read_file(out / "page.html").find("<h2>Verified in ONNX Runtime</h2>"), std::string::npos);
  // And the written model computes what the input does, by the suite's own comparison.
  EXPECT_TRUE(ort_compare(in / "m.onnx", out / "m.onnx").ok);
  // In place and beside the input (the data file shared), too.
  EXPECT_EQ(run_cli({"rewrite", (in / "m.onnx").string(), "--in-place", "--rules", (in / "neg.rules").string(), "--verify"}).exit_code, 0);
  EXPECT_EQ(listing(in.path()), (std::set<std::string>{"m.onnx", "weights.bin", "neg.rules"}));
}

TEST(RewriteVerify, DryRunVerifiesInAPrivateDirectoryAndWritesNothing) {
  TempDir dir;
  write_model_text(kReluModel, dir / "m.onnx");
  write_file(dir / "wrong.rules", kReluToAbs);
  const auto wrong = run_cli({"rewrite", (dir / "m.onnx").string(), "--dry-run", "--verify", "--rules", (dir / "wrong.rules").string()});
  EXPECT_EQ(wrong.exit_code, 4) << wrong.out << wrong.err;
  write_model_text(kNegModel, dir / "n.onnx");
  write_file(dir / "neg.rules", kNegToSub);
  const auto right = run_cli({"rewrite", (dir / "n.onnx").string(), "--dry-run", "--verify", "--rules", (dir / "neg.rules").string()});
  EXPECT_EQ(right.exit_code, 0) << right.out << right.err;
  EXPECT_NE(right.out.find("verify: match"), std::string::npos) << right.out;
  EXPECT_EQ(listing(dir.path()), (std::set<std::string>{"m.onnx", "n.onnx", "wrong.rules", "neg.rules"}));
}

TEST(RewriteVerify, AnUnchangedModelAndOpsOnnxRuntimeLacksAreNotRun) {
  TempDir dir;
  write_model_text(kReluModel, dir / "m.onnx");
  const auto unchanged = run_cli({"rewrite", (dir / "m.onnx").string(), "-o", (dir / "o.onnx").string(), "--verify"});
  EXPECT_EQ(unchanged.exit_code, 0) << unchanged.err;
  EXPECT_NE(unchanged.out.find("verify: nothing to run: the output is the input, byte for byte"), std::string::npos) << unchanged.out;
  // A custom op no rule covers stays: the target is not met (exit 1, the output written), and
  // ONNX Runtime is not asked to load what it can't.
  write_model_text(R"(<ir_version: 8, opset_import: ["": 17, "acme": 1]>
g (float[2, 3] x) => (float[2, 3] z) { t = acme.Frobnicate (x)  z = Neg (t) })",
                   dir / "acme.onnx");
  write_file(dir / "neg.rules", kNegToSub);
  const auto left = run_cli({"rewrite", (dir / "acme.onnx").string(), "-o", (dir / "acme-out.onnx").string(), "--rules",
                             (dir / "neg.rules").string(), "--verify"});
  EXPECT_EQ(left.exit_code, 1) << left.out << left.err;
  EXPECT_NE(left.out.find("verify: NOT compared: the rewritten model keeps what ONNX Runtime does not load: acme.Frobnicate"), std::string::npos)
      << left.out;
  EXPECT_TRUE(fs::exists(dir / "acme-out.onnx"));
}

// BERTs as torch exports them and as ONNX Runtime fuses them: token_type_ids index a table of 2
// rows (a Gather, or EmbedLayerNormalization's segment embedding), and the attention mask is
// scaled by the lowest float (or taken by Attention as 0/1), so only 0 and 1 keep it finite; the
// inputs made for them respect both, and both ways, fusing and de-fusing, are proven.
TEST(RewriteVerify, BertsFusedForAndDefusedFromOnnxRuntimeMatchOnInputsTheyTake) {
  TempDir dir;
  const auto bert = [&](const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> argv{(build_dir() / "gen-bert").string(), "--out", (dir / name).string(), "--layers", "2", "--hidden", "32",
                                  "--heads", "4", "--intermediate", "64", "--vocab", "100", "--max-pos", "64"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto generate = run_command(argv);
    EXPECT_EQ(generate.exit_code, 0) << generate.err;
    return dir / name;
  };
  const auto expect_match = [&](const fs::path& input, const std::string& target, const std::string& made, int made_count) {
    SCOPED_TRACE(input.string() + " --target " + target);
    const fs::path output = dir / ("out-" + input.filename().string());
    const auto result = run_cli({"rewrite", input.string(), "-o", output.string(), "--target", target, "--verify", "--report",
                                 (dir / "report.json").string()});
    ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
    const auto ops = count_ops(read_model(output));
    EXPECT_EQ(op_count(ops, {"com.microsoft", made}), made_count);
    const auto verify = member(parse_json(read_file(dir / "report.json")), "verify");
    EXPECT_EQ(field(verify, "status"), "match");
    EXPECT_TRUE(flags(first_output(verify)).empty()) << "finite and varying: " << result.out;
  };
  expect_match(bert("bert.onnx", {}), "ort", "SkipLayerNormalization", 4);
  // ONNX Runtime's own fusion of the layout it recognises, then back to standard ONNX.
  const fs::path legacy = bert("legacy.onnx", {"--opset", "12", "--legacy-export"});
  const auto optimize = run_command({"node", (source_dir() / "tests" / "ort" / "optimize.js").string(), legacy.string(),
                                     (dir / "fused.onnx").string(), "--level", "extended"});
  ASSERT_EQ(optimize.exit_code, 0) << optimize.err;
  ASSERT_GT(op_count(count_ops(read_model(dir / "fused.onnx")), {"com.microsoft", "EmbedLayerNormalization"}), 0);
  expect_match(dir / "fused.onnx", "onnx", "Attention", 0);
}

TEST(RewriteVerify, EveryFamilysTestModelsPassForEveryTarget) {
  std::vector<fs::path> models;
  for (const auto& family : fs::directory_iterator(source_dir() / "rules")) {
    if (!fs::is_directory(family.path() / "testdata")) continue;
    for (const auto& entry : fs::directory_iterator(family.path() / "testdata")) {
      if (entry.path().extension() == ".onnx") models.push_back(entry.path());
    }
  }
  for (const auto& entry : fs::directory_iterator(source_dir() / "testdata")) {
    if (entry.path().extension() == ".onnx") models.push_back(entry.path());
  }
  ASSERT_FALSE(models.empty());
  TempDir dir;
  int compared = 0;
  for (const auto& model : models) {
    for (const Target* target : all_targets()) {
      SCOPED_TRACE(model.string() + " --target " + target->name);
      const auto result = run_cli({"rewrite", model.string(), "-o", (dir / "out.onnx").string(), "--target", target->name, "--verify",
                                   "--report", (dir / "report.json").string()});
      EXPECT_NE(result.exit_code, 4) << result.out << result.err;
      EXPECT_NE(result.exit_code, 2) << result.err;
      const auto verify = member(parse_json(read_file(dir / "report.json")), "verify");
      const std::string status = field(verify, "status");
      EXPECT_TRUE(status == "match" || status == "not-compared" || status == "identical") << status;
      compared += status == "match";
    }
  }
  EXPECT_GT(compared, 0) << "at least the models ONNX Runtime runs as they are are compared";
}

// ---- --input-shape ----------------------------------------------------------------------------

// Causal self-attention as torch.onnx.export writes it for dynamic batch and sequence
// (dynamic_axes): the mask tril(ones(seq, seq)) sized by Shape -> Gather -> Unsqueeze -> Concat,
// Trilu-14, masked_fill as Where (with the lowest float, as Hugging Face's models do), Softmax over the last axis, then back through a Reshape whose
// shape is computed the same way.
const char* kExportedAttention = R"(<ir_version: 7, opset_import: ["": 14]>
g (float[batch, seq, 4] x) => (float[batch, seq, 4] y) {
  shape = Shape (x)
  i0 = Constant <value = int64 {0}> ()
  i1 = Constant <value = int64 {1}> ()
  b = Gather <axis = 0> (shape, i0)
  t = Gather <axis = 0> (shape, i1)
  axes = Constant <value = int64[1] {0}> ()
  bu = Unsqueeze (b, axes)
  tu = Unsqueeze (t, axes)
  square = Concat <axis = 0> (tu, tu)
  ones = ConstantOfShape <value = float[1] {1}> (square)
  mask = Trilu <upper = 0> (ones)
  zero = Constant <value = float {0}> ()
  masked = Equal (mask, zero)
  xt = Transpose <perm = [0, 2, 1]> (x)
  scores = MatMul (x, xt)
  lowest = Constant <value = float {-3.4e38}> ()
  filled = Where (masked, lowest, scores)
  probabilities = Softmax <axis = -1> (filled)
  attended = MatMul (probabilities, x)
  four = Constant <value = int64[1] {4}> ()
  flat_shape = Concat <axis = 0> (bu, tu, four)
  y = Reshape (attended, flat_shape)
})";

TEST(InputShape, FixedShapesDecideWhatSymbolicOnesLeaveOpen) {
  TempDir dir;
  write_model_text(kExportedAttention, dir / "m.onnx");
  // Dynamic: Trilu-14's mask at opset 13 is computed from the sizes at run time (Range).
  const auto dynamic = run_cli({"rewrite", (dir / "m.onnx").string(), "-o", (dir / "dynamic.onnx").string(), "--opset", "13", "--verify"});
  EXPECT_EQ(dynamic.exit_code, 0) << dynamic.out << dynamic.err;
  EXPECT_NE(dynamic.out.find("verify: match"), std::string::npos) << dynamic.out;
  EXPECT_EQ(op_count(count_ops(read_model(dir / "dynamic.onnx")), {"", "Range"}), 2);
  // Fixed, the mask is a constant, and the result computes what the model does at those shapes.
  const auto fixed = run_cli({"rewrite", (dir / "m.onnx").string(), "-o", (dir / "fixed.onnx").string(), "--opset", "13", "--input-shape",
                              "x=2,5,4", "--verify", "--report", (dir / "report.json").string()});
  EXPECT_EQ(fixed.exit_code, 0) << fixed.out << fixed.err;
  EXPECT_NE(fixed.out.find("rule trilu-14-lowering: 1 match"), std::string::npos) << fixed.out;
  EXPECT_NE(fixed.out.find("verify: match"), std::string::npos) << fixed.out;
  const auto written = read_model(dir / "fixed.onnx");
  EXPECT_EQ(opset_import(written, ""), 13);
  EXPECT_EQ(op_count(count_ops(written), {"", "Trilu"}), 0);
  EXPECT_EQ(op_count(count_ops(written), {"", "Range"}), 0);
  // The written model keeps the fixed dims, on its output too, and says where they came from.
  for (const auto* info : {&written.graph().input(0), &written.graph().output(0)}) {
    const auto& dims = info->type().tensor_type().shape().dim();
    ASSERT_EQ(dims.size(), 3);
    EXPECT_EQ(dims[0].dim_value(), 2);
    EXPECT_EQ(dims[1].dim_value(), 5);
    EXPECT_EQ(dims[2].dim_value(), 4);
  }
  bool recorded = false;
  for (const auto& entry : written.metadata_props()) recorded = recorded || (entry.key() == "onnx_rewrite.input_shapes" && entry.value() == "x=2,5,4");
  EXPECT_TRUE(recorded);
  const auto options = member(parse_json(read_file(dir / "report.json")), "options");
  EXPECT_EQ(member(member(options, "input_shapes"), "x").list_value().values_size(), 3);
  // check sees the fixed shapes as well.
  EXPECT_EQ(run_cli({"check", (dir / "m.onnx").string(), "--input-shape", "x=2,5,4"}).exit_code, 0);
}

TEST(InputShape, WhatDoesNotFitTheModelIsAUsageErrorNamingModelAndInput) {
  TempDir dir;
  const auto model = write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[batch, 3] x, float[batch] m) => (float[batch, 3] y) { y = Relu (x) })",
                                      dir / "m.onnx");
  const std::string name = model.string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"z=2,3", name + ": --input-shape z=2,3: the model has no input of that name (inputs: m, x)"},
      {"x=2,3,1", name + ": --input-shape x=2,3,1: the model declares it with rank 2 ([batch, 3])"},
      {"x=2,4", name + ": --input-shape x=2,4: dim 1 is 3 in the model ([batch, 3])"},
      {"x=0,3", name + ": --input-shape x=0,3: every dim must be 1 or more"},
  };
  for (const auto& [shape, message] : cases) {
    for (const char* command : {"rewrite", "check"}) {
      SCOPED_TRACE(std::string(command) + " " + shape);
      std::vector<std::string> args{command, name, "--input-shape", shape};
      if (std::string(command) == "rewrite") args.insert(args.end(), {"-o", (dir / "o.onnx").string()});
      const auto result = run_cli(args);
      EXPECT_EQ(result.exit_code, 2);
      EXPECT_EQ(result.err, "onnx-rewrite: error: " + message + "\n");
    }
  }
  // Two sizes for one symbolic dim.
  const auto conflict = run_cli({"rewrite", name, "-o", (dir / "o.onnx").string(), "--input-shape", "x=2,3", "--input-shape", "m=4"});
  EXPECT_EQ(conflict.exit_code, 2);
  EXPECT_EQ(conflict.err, "onnx-rewrite: error: " + name + ": --input-shape x=2,3: 'batch' is 2 here but 4 in --input-shape m\n");
  // Not a shape at all: the option itself.
  for (const char* text : {"x", "x=2,a", "=2"}) {
    const auto result = run_cli({"rewrite", name, "-o", (dir / "o.onnx").string(), "--input-shape", text});
    EXPECT_EQ(result.exit_code, 2) << text;
    EXPECT_EQ(result.err.rfind("onnx-rewrite: error: --input-shape: ", 0), 0u) << result.err;
  }
  EXPECT_FALSE(fs::exists(dir / "o.onnx"));
  // One input fixed fixes the symbol everywhere: m's batch too.
  ASSERT_EQ(run_cli({"rewrite", name, "-o", (dir / "o.onnx").string(), "--input-shape", "x=2,3"}).exit_code, 0);
  const auto written = read_model(dir / "o.onnx");
  EXPECT_EQ(written.graph().input(1).type().tensor_type().shape().dim(0).dim_value(), 2);
}

// ---- batch --verify -------------------------------------------------------------------------

TEST(BatchVerify, AModelThatFailsItsVerificationIsThatModelsFailure) {
  TempDir in, out;
  write_model_text(kReluModel, in / "relu.onnx");
  write_model_text(kNegModel, in / "neg.onnx");
  // One rules file, right for Neg and wrong for Relu.
  write_file(in / "rules.txt", std::string(kReluToAbs) + kNegToSub);
  const auto result = run_cli({"batch", in.path().string(), "-o", out.path().string(), "--rules", (in / "rules.txt").string(), "--verify",
                               "--report", (out / "report.json").string(), "-j", "2"});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("1 failed verification"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("  verify failed: " + (in / "relu.onnx").string() + ": "), std::string::npos) << result.out;
  EXPECT_EQ(listing(out.path()), (std::set<std::string>{"neg.onnx", "report.json"}));
  const auto report = parse_json(read_file(out / "report.json"));
  EXPECT_EQ(number(member(report, "summary"), "verify-failed"), 1);
  EXPECT_EQ(number(member(report, "summary"), "rewritten"), 1);
  const auto models = member(report, "models");
  for (const auto& model : models.list_value().values()) {
    const bool relu = field(model, "model").find("relu") != std::string::npos;
    EXPECT_EQ(field(model, "status"), relu ? "verify-failed" : "rewritten");
    EXPECT_EQ(field(member(model, "verify"), "status"), relu ? "mismatch" : "match");
  }
}

// ---- the runtime drivers ------------------------------------------------------------------------

// A Python that has numpy and onnx (the stand-in's needs): python3 on PATH, else the system's.
std::string python_for_the_fake() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    if (run_command({python, "-c", "import numpy, onnx"}).exit_code == 0) return python;
  }
  return "";
}

CommandResult run_cli_with_env(const std::vector<std::string>& environment, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"env"};
  argv.insert(argv.end(), environment.begin(), environment.end());
  argv.push_back(cli_path().string());
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

TEST(RuntimeDriver, ThePythonDriverSpeaksTheSameProtocol) {
  const std::string python = python_for_the_fake();
  ASSERT_FALSE(python.empty()) << "no Python with numpy and onnx (apt install python3-numpy python3-onnx) to run the stand-in onnxruntime";
  const std::vector<std::string> environment{"ONNX_REWRITE_PYTHON=" + python,
                                             "PYTHONPATH=" + (source_dir() / "tests" / "support" / "fake_onnxruntime").string()};
  TempDir in, out;
  write_external_data_model(in / "m.onnx", "weights.bin");
  write_file(in / "neg.rules", kNegToSub);
  const auto matched = run_cli_with_env(environment, {"rewrite", (in / "m.onnx").string(), "-o", (out / "m.onnx").string(), "--rules",
                                                      (in / "neg.rules").string(), "--verify", "--runtime", "python"});
  EXPECT_EQ(matched.exit_code, 0) << matched.out << matched.err;
  EXPECT_NE(matched.out.find("verify: match in onnxruntime 0.0.0-fake"), std::string::npos) << matched.out;
  EXPECT_TRUE(fs::exists(out / "weights.bin"));

  TempDir dir;
  write_model_text(kReluModel, dir / "a.onnx");
  write_file(dir / "b.onnx", serialize(rewrite_text(kReluModel, rules_from_text(kReluToAbs)).model));
  const auto differs = run_cli_with_env(environment, {"verify", (dir / "a.onnx").string(), (dir / "b.onnx").string(), "--runtime", "python"});
  EXPECT_EQ(differs.exit_code, 4) << differs.out << differs.err;
  EXPECT_NE(differs.out.find("y float [2, 3]: MISMATCH"), std::string::npos) << differs.out;

  // A custom op the runtime refuses: not compared, the rewrite run all the same.
  write_model_text(kCustomOpModel, dir / "custom.onnx");
  write_file(dir / "custom-out.onnx", serialize(rewrite_text(kCustomOpModel, builtin_rules()).model));
  const auto custom = run_cli_with_env(environment, {"verify", (dir / "custom.onnx").string(), (dir / "custom-out.onnx").string(), "--runtime",
                                                     "python", "--json"});
  EXPECT_EQ(custom.exit_code, 0) << custom.out << custom.err;
  EXPECT_NE(field(verify_object(custom), "original_error").find("test.customop:CustomOpOne(-1) is not a registered function/op"),
            std::string::npos)
      << custom.out;
}

TEST(RuntimeDriver, ADriverThatDiesOnTheOriginalStillRunsTheRewriteInAnother) {
  const std::string python = python_for_the_fake();
  ASSERT_FALSE(python.empty()) << "no Python with numpy and onnx to run the stand-in onnxruntime";
  TempDir dir;
  write_model_text(R"(<ir_version: 8, opset_import: ["": 17, "test": 1]>
g (float[2] x) => (float[2] y) { t = test.Crash (x)  y = Relu (x) })",
                   dir / "a.onnx");
  write_model_text(R"(<ir_version: 8, opset_import: ["": 17]>
g (float[2] x) => (float[2] y) { y = Relu (x) })",
                   dir / "b.onnx");
  const auto result = run_cli_with_env({"ONNX_REWRITE_PYTHON=" + python, "PYTHONPATH=" + (source_dir() / "tests/support/fake_onnxruntime").string()},
                                       {"verify", (dir / "a.onnx").string(), (dir / "b.onnx").string(), "--runtime", "python", "--json"});
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  const auto verify = verify_object(result);
  EXPECT_EQ(field(verify, "status"), "not-compared");
  EXPECT_NE(field(verify, "original_error").find("was killed by signal 11"), std::string::npos) << result.out;
  EXPECT_EQ(field(first_output(verify), "status"), "not-compared");
}

TEST(RuntimeDriver, NoRuntimeIsAUsageErrorSayingWhatToInstall) {
  TempDir dir, empty;
  write_model_text(kReluModel, dir / "m.onnx");
  const std::vector<std::string> environment{"PATH=" + empty.path().string(), "ONNX_REWRITE_PYTHON=no-such-python3"};
  const auto result = run_cli_with_env(environment, {"verify", (dir / "m.onnx").string(), (dir / "m.onnx").string()});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.err,
            "onnx-rewrite: error: no ONNX Runtime to run the models in: no node on PATH; no no-such-python3 on PATH; install one: `npm install "
            "onnxruntime-node` (in this directory, or set ONNX_REWRITE_NPM_PREFIX to the prefix it went to) or `pip install onnxruntime`\n");
  // rewrite --verify finds out before any work: nothing written.
  const auto rewrite = run_cli_with_env(environment, {"rewrite", (dir / "m.onnx").string(), "-o", (dir / "o.onnx").string(), "--verify"});
  EXPECT_EQ(rewrite.exit_code, 2);
  EXPECT_FALSE(fs::exists(dir / "o.onnx"));
  // Options of --verify need it.
  const auto alone = run_cli({"rewrite", (dir / "m.onnx").string(), "-o", (dir / "o.onnx").string(), "--seed", "3"});
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("--seed requires --verify"), std::string::npos) << alone.err;
}

}  // namespace
}  // namespace onnx_rewrite
