// Helpers shared by the tests: models from ONNX text, temporary directories, running the CLI
// and proving numbers in ONNX Runtime (tests/ort/compare.js).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/model.h"
#include "rules/rule.h"
#include "rules/rule_example.h"

#include <google/protobuf/struct.pb.h>

namespace onnx_rewrite::testing {

namespace fs = std::filesystem;

fs::path source_dir();
fs::path build_dir();
fs::path cli_path();  // build/onnx-rewrite

// A data set the tests need, in the build tree's test-data/SET (scripts/fetch-test-data.sh SET
// fetches it; docs/testing.md). `missing` says why it is not there and how to get it;
// `opted_out` when ONNX_REWRITE_SKIP_DATA (set names, comma-separated) lists the set, which
// turns the failure of the tests that need it into a skip.
struct TestData {
  fs::path dir;
  std::string missing;
  bool opted_out = false;
};
TestData find_test_data(const std::string& set);

// Declares `const fs::path name`, the data set's directory; or ends the test there: skipped
// when the run opted out of the set, failed otherwise. For test bodies and fixtures' SetUp.
#define ASSERT_TEST_DATA(name, set)                                        \
  const auto name##_data = ::onnx_rewrite::testing::find_test_data(set);   \
  if (!name##_data.missing.empty()) {                                      \
    if (name##_data.opted_out) GTEST_SKIP() << name##_data.missing;        \
    FAIL() << name##_data.missing;                                         \
  }                                                                        \
  const ::onnx_rewrite::testing::fs::path name = name##_data.dir

// A ModelProto from ONNX textual syntax; throws std::runtime_error with the parser's message.
onnx::ModelProto parse_model_text(const std::string& text);
// Our Model from ONNX text (as if loaded from a file).
Model model_from_text(const std::string& text);
std::string serialize(const onnx::ModelProto& model);
// The op types of a graph's nodes, in node order.
std::vector<std::string> op_types(const onnx::GraphProto& graph);
void write_file(const fs::path& path, const std::string& bytes);
std::string read_file(const fs::path& path);
// Adds to `graph` a float [2, 3] initializer `name` whose 24 bytes are external data at the start
// of `location` (the data file is the caller's to write).
void add_external_initializer(onnx::GraphProto& graph, const std::string& name, const std::string& location);
// kCustomOpModel, serialized, with its input `y` an initializer of that kind.
std::string external_data_model(const std::string& location);

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// A rule file with one rule, `one`: test.customop.CustomOpOne (x, y) -> Add (x, y).
inline constexpr const char* kOneToAdd = R"(
rule one
  description: test
  targets: onnx, ort
  pattern (x, y) => (z) { z = test.customop.CustomOpOne (x, y) }
  replace (x, y) => (z) { z = Add (x, y) }
  example {
    <ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
    g (float[2] x, float[2] y) => (float[2] z) { z = test.customop.CustomOpOne (x, y) }
  }
  expect { z = Add (x, y) }
end
)";

// A rule whose replacement brings a new constant.
inline constexpr const char* kNegToSub = R"(
rule neg-to-sub
  description: test
  targets: onnx
  pattern (v) => (a) { a = Neg (v) }
  replace (v) => (a) {
    z = Constant <value = float {0}> ()
    a = Sub (z, v)
  }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] v) => (float[2] a) { a = Neg (v) }
  }
  expect {
    z = Constant <value = float {0}> ()
    a = Sub (z, v)
  }
end
)";

// A model whose one custom op the built-in rule customop-one-to-add rewrites to Add.
inline constexpr const char* kCustomOpModel = R"(<ir_version: 8, opset_import: ["": 17, "test.customop": 1]>
g (float[2, 3] x, float[2, 3] y) => (float[2, 3] z) {
  t = test.customop.CustomOpOne (x, y)
  z = Relu (t)
})";

// The model's initializers and Constant values of element type `from`, converted to `to`.
void convert_tensors(onnx::ModelProto& model, int32_t from, int32_t to);
// The model's graph inputs and outputs declared as `type`.
void declare_interface(onnx::ModelProto& model, int32_t type);
// The same model in float16 (ONNX text has no float16 literals): inputs, outputs, initializers
// and Constant nodes.
onnx::ModelProto as_float16(onnx::ModelProto model);

// A GoogleTest parameter name from any text: letters and digits kept, everything else '_'.
std::string test_name(std::string text);

// JSON (a --json output, a report) as a protobuf Value; a test failure when it doesn't parse.
google::protobuf::Value parse_json(const std::string& text);

// Writes ONNX text as a model file.
fs::path write_model_text(const std::string& text, const fs::path& path);

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CommandResult run_command(const std::vector<std::string>& argv);
CommandResult run_cli(const std::vector<std::string>& args);

// Rules from text (with the builtin rules unless `with_builtin` is false).
RuleSet rules_from_text(const std::string& text, bool with_builtin = false);

// Rewrites a model in process, as `rewrite` does: the rewritten proto (initializers as headers,
// their payload is in `bytes`), the result, the bytes
// onnx-rewrite writes, and what --explain printed for `options.explain`.
struct Rewritten {
  onnx::ModelProto model;
  RewriteResult result;
  std::string bytes;
  std::string explain;
};
Rewritten rewrite_proto(const onnx::ModelProto& proto, const RuleSet& rules, RewriteOptions options = {});
// What in `after`'s main graph nothing reads (a node none of whose outputs is read by a node at
// any depth or is a graph output; an initializer no node reads that is no graph input) and was
// not already so in `before`: dead code a rewrite left behind ("node OP -> NAME", "initializer
// NAME"). Custom-domain nodes may act unseen: not counted. rewrite_proto and rewrite_and_check
// expect none.
std::vector<std::string> dead_code_left(const onnx::ModelProto& before, const onnx::ModelProto& after);
Rewritten rewrite_text(const std::string& model_text, const RuleSet& rules, RewriteOptions options = {});

// The rules compiled into the binary (loaded once).
const RuleSet& builtin_rules();
// The IR version ONNX pairs with an opset (8 up to 18, 9 up to 20, then 10).
int ir_version_for(int opset);
onnx::ModelProto read_model(const fs::path& path);
// The model's import of a domain ("" or "ai.onnx" for the default one); 0 when absent.
int opset_import(const onnx::ModelProto& model, const std::string& domain);
// How many nodes of an op; 0 when there are none.
int op_count(const OpCounts& ops, const OpKey& op);

// `onnx-rewrite rewrite` then `onnx-rewrite check`, both for `target` (and `--opset`); both must
// succeed (failures are reported to GoogleTest, and nullopt returned).
struct CheckedRewrite {
  fs::path output;
  onnx::ModelProto model;
  OpCounts ops;
};
std::optional<CheckedRewrite> rewrite_and_check(const fs::path& input, const fs::path& output, const std::string& target,
                                                std::optional<int> max_opset = std::nullopt);

// Conformance cases (`corpus`/node/NAME) rewritten with `--opset opset` for --target onnx: each
// must import exactly `opset`, have none of the `gone` ops left, and ONNX Runtime must reproduce
// the case's expected outputs (tests/ort/conformance.js; `tolerance` as rtol and atol, 0: its
// own). Failures are reported to GoogleTest.
void expect_conformance_cases_lowered(const fs::path& corpus, const std::vector<std::string>& cases, int opset,
                                      const std::vector<std::string>& gone = {}, double tolerance = 0);

// ONNX text of a model importing ai.onnx `opset` (with the IR version it needs) and
// com.microsoft 1, around `graph`.
std::string contrib_model_text(int opset, const std::string& graph);

// Multiplies every float initializer whose name contains `part` by `factor`. Generated weights
// are small; scaled up, GELU, softmax and the normalizations work in their nonlinear range and a
// wrong rewrite shows in the outputs.
void scale_weights(onnx::ModelProto& model, const std::string& part, float factor);

// ---- ONNX Runtime ---------------------------------------------------------------------------

struct OrtComparison {
  int exit_code = -1;   // 0 within tolerance, 1 mismatch, 2 error
  bool ok = false;
  double max_abs = 0;   // largest absolute difference over all outputs and trials
  double mean_abs = 0;  // mean absolute difference over the trials, of the output where it is largest
  std::string output;   // what compare.js printed
};

// Runs tests/ort/compare.js: does `candidate` compute what `expected` computes (A = expected)?
// `extra` are compare.js options (--dim N=2, --shape x=1,3,8,8, --trials 3, --rtol 1e-4 ...);
// without `--level`, ORT runs both models with graph optimizations disabled.
OrtComparison ort_compare(const fs::path& expected, const fs::path& candidate, const std::vector<std::string>& extra = {});
// Prints a comparison's largest difference, for the test log ("[ numbers  ] WHAT: max_abs 1.2e-07"):
// the figures families quote on their pages.
void report_numbers(const std::string& what, const OrtComparison& comparison);
// A file of a rule family's folder (its naive references, test models).
fs::path family_file(const std::string& family, const std::string& name);
// compare.js with a naive reference module (--reference MODULE.js --params JSON).
OrtComparison ort_compare_reference(const fs::path& model, const fs::path& reference_module, const std::string& params_json,
                                    const std::vector<std::string>& extra = {});
// Whether ONNX Runtime loads the model (tests/ort/load.js); the message when not.
std::pair<bool, std::string> ort_loads(const fs::path& model);

}  // namespace onnx_rewrite::testing
