// The driver: applies rules everywhere in a model to a fixed point, then cleans up imports.
// load -> index -> match -> rewrite -> clean up -> (verify: target.h) -> write.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "onnx_rewrite/model.h"
#include "onnx_rewrite/rule_set.h"
#include "onnx_rewrite/verify.h"

namespace onnx_rewrite {

// --input-shape NAME=D0,D1,...: graph inputs' dims, by input name.
using InputShapes = std::map<std::string, std::vector<int64_t>>;

struct RewriteOptions {
  std::string target = "onnx";
  std::optional<int> max_opset;   // --opset: highest ai.onnx opset the runtime loads
  bool exact_opset = false;       // --to-opset: max_opset is also the least (lower imports are raised)
  std::set<std::string> only;     // --only: rule ids (empty = all)
  std::set<std::string> skip;     // --skip
  bool inline_functions = false;  // inline calls to model-local functions first
  bool fuse = false;              // --fuse: also rules that fuse for the target on request (`fuses for:`)
  bool canonicalize = true;       // --no-canonicalize: false skips the canonicalize-* rules
  // --simplify: fold what the model already decides (the canonicalize-* rules, for any target),
  // drop Identity and dead nodes, Constant nodes as initializers, unused and duplicate
  // initializers (engine/simplify.h). The CLI's default is the target's (`simplify yes`).
  bool simplify = false;
  int max_rounds = 16;
  std::string explain;  // --explain: op type or node name
  std::ostream* explain_out = nullptr;
  std::ostream* progress_out = nullptr;  // a terminal: a line of rounds and matches once a model takes over a second
  int record_matches = 0;                // per rule, keep the first N matches' nodes (--html)
  std::optional<int64_t> ir_version;     // --ir-version: write this IR version, if the model allows
  InputShapes input_shapes;              // --input-shape: fixed before matching (apply_input_shapes), kept in the output
  // Work on a second thread for graphs of this many nodes (default: a big graph, as loading,
  // indexing and writing judge it: kBigGraphNodes, src/graph/two_threads.h):
  // matching ahead of each round's walk in such a graph (main graph, subgraph or function body:
  // engine/match_ahead.h); collecting names and checking a round's result while the next
  // starts, when the main graph is that big.
  int second_thread_from = 50'000;
};

struct RuleStats {
  int matches = 0;
  int nodes_removed = 0;  // nodes the matches covered
  int nodes_added = 0;
};

using OpKey = std::pair<std::string, std::string>;  // (domain, op_type); domain "" = ai.onnx
using OpCounts = std::map<OpKey, int>;

// Nodes per (domain, op_type) in every graph, subgraph and function.
OpCounts count_ops(const onnx::ModelProto& model);

// One match as it was rewritten: the nodes it covered and the nodes that replaced them.
struct RecordedMatch {
  std::string rule;
  std::string place;  // "main graph", "function 'f'", ...
  std::vector<onnx::NodeProto> before, after;
};

struct RewriteResult {
  std::map<std::string, RuleStats> rules;  // by rule id, rules that fired
  OpCounts before, after;
  int rounds = 0;
  // Per round, the last one confirming that nothing fires: at how many nodes rules were tried.
  // After the first, a round tries only nodes near what the one before changed.
  std::vector<int> nodes_tried;
  int functions_inlined = 0;
  int function_imports_raised = 0;                           // model-local functions whose too-low ai.onnx import was raised
  std::map<std::string, std::pair<int, int>> opset_changes;  // domain -> (before, after); 0 = absent
  std::vector<std::string> notes;                            // e.g. why --opset could not be reached
  std::vector<RecordedMatch> recorded;                       // options.record_matches per rule, in the order applied
  std::optional<std::pair<int64_t, int64_t>> ir_change;      // IR version (before, after) when options.ir_version changed it
  std::optional<std::string> ir_version_problem;             // why options.ir_version could not be written
  bool input_shapes_fixed = false;                           // options.input_shapes changed a declared dim
  bool changed() const {
    return !rules.empty() || functions_inlined > 0 || function_imports_raised > 0 || !opset_changes.empty() || ir_change.has_value() ||
           input_shapes_fixed;
  }
};

// Fixes the dims of the graph inputs `shapes` names (a feed input, not an initializer), as if the
// model had been exported with them; a symbolic dim such an input declares (`batch`) is fixed
// wherever the graph's inputs, outputs and value_info declare it, since one name is one size.
// Returns whether a declaration changed. Throws UsageError naming `model_name` and the input for
// an unknown input, a rank or a static dim other than the model declares, a dim below 1, or two
// sizes for one symbolic dim.
bool apply_input_shapes(onnx::GraphProto& graph, const InputShapes& shapes, const std::string& model_name);

// Rewrites `model` in place, its input shapes fixed first (options.input_shapes). Throws
// InputError when rules keep firing past max_rounds, UsageError for input shapes that don't fit. `input`:
// check_input of the model as given, if the caller has it (on big graphs a pass worth saving).
RewriteResult rewrite_model(Model& model, const RuleSet& rules, const RewriteOptions& options, const InputCheck* input = nullptr);

// Records in the model's metadata_props what `result` did to it, under keys "onnx_rewrite.*"
// (tool and version, target, ai.onnx opset, rules with match counts, functions inlined),
// replacing an earlier rewrite's record and keeping every other entry.
void record_provenance(Model& model, const RewriteResult& result, const RewriteOptions& options);

}  // namespace onnx_rewrite
