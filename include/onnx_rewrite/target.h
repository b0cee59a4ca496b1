// The verify stage: what a runtime target loads, and which nodes of a model it would refuse.
// Targets are data (targets/NAME.target, docs/rules.md "Targets"): the domains a runtime loads,
// each checked against its op table (targets/DOMAIN.ops), with exceptions per op, a highest
// opset per domain, whether model-local functions run, and where its tables come from. A target
// file may build on another.
#pragma once

#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "onnx_rewrite/model.h"

namespace onnx_rewrite {

struct Target {
  // An exception to the op tables: the runtime does (or does not) load `op` at imports of its
  // domain in [min, max] (ONNX Runtime registers LayerNormalization in ai.onnx from version 1).
  // Its domain may be one no op table describes (TensorRT's plugins).
  struct OpException {
    std::string domain;  // normalized
    std::string op;
    int64_t min = 1, max = INT64_MAX;
    bool loads = true;
  };

  // What the runtime requires of a node of `op` beyond having the op (TensorRT: "`axes` must be
  // an initializer"). Nothing here checks it: `check` notes it where such nodes are.
  struct Caveat {
    std::string domain;  // normalized
    std::string op;
    std::string text;
  };

  std::string name;
  std::string description;
  std::string source;                         // the published tables and the runtime version it follows
  bool load_tested = false;                   // does the test suite hold it to the runtime itself?
  std::string file;                           // where it was read from
  std::vector<std::string> lineage;           // this target's name, then what it builds on, nearest first
  std::vector<std::string> domains;           // normalized; each has an op table in targets/
  std::map<std::string, int64_t> max_opsets;  // normalized domain -> highest import loaded
  std::vector<OpException> exceptions;        // the last one that applies wins
  std::vector<Caveat> caveats;
  bool local_functions = false;  // does the runtime run calls to model-local functions?
  bool simplify = false;         // is --simplify on unless --no-simplify says otherwise?

  // Whether `name` is this target or one it builds on: rules for it serve this target too.
  bool builds_on(std::string_view name) const;
  // Why the runtime would refuse a node of `op` in `domain` under an import of `version`;
  // nullopt when it loads it (or when the import is newer than the op tables and the op is
  // unknown to them: check_model notes those).
  std::optional<std::string> refuses(std::string_view domain, std::string_view op, int64_t version) const;
  // The highest ai.onnx import the runtime loads, if the target caps it.
  std::optional<int> max_onnx_opset() const;
  // What the runtime restricts in nodes of `op` it loads, if the target says.
  const Caveat* caveat(std::string_view domain, std::string_view op) const;
  // Whether a rewrite simplifies when not told (--simplify / --no-simplify): as the target says,
  // or when --only names a simplification rule, which runs only in the simplification run.
  bool simplifies(const std::set<std::string>& only) const;
};

// The targets compiled in (targets/*.target) and any read from files on this run.
const std::vector<const Target*>& all_targets();
// A target by name, or by the path of a .target file (read, checked and remembered; it may build
// on the compiled-in ones). Throws UsageError for an unknown name, InputError for a bad file.
const Target& find_target(const std::string& name_or_file);
// Parses a target file; `lookup` finds what it builds on. Throws InputError("file:line", what).
Target parse_target(const std::string& name, const std::string& file, std::string_view text,
                    const std::function<const Target*(const std::string&)>& lookup);

// Nodes of one (domain, op_type) the target can't load, in one kind of place.
struct Unloadable {
  std::string domain;  // as written in the model ("" = ai.onnx)
  std::string op_type;
  std::string aten_operator;  // for org.pytorch.aten::ATen, which op it dispatches to
  std::string place;          // "main graph", "subgraph", "function DOMAIN.NAME"
  std::string reason;
  int count = 0;
};

struct CheckReport {
  std::vector<Unloadable> unloadable;
  std::vector<std::string> opset_problems;  // imports above --opset or the target's highest
  std::vector<std::string> notes;           // things we could not verify
  bool ok() const { return unloadable.empty() && opset_problems.empty(); }
};

// `exact` (--to-opset): an ai.onnx import below max_opset is a problem too.
CheckReport check_model(const Model& model, const Target& target, std::optional<int> max_opset, bool exact = false);

}  // namespace onnx_rewrite
