// The verify stage: what a runtime target loads (targets/*.target), and which nodes of a model
// it would refuse.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "onnx_rewrite/model.h"

namespace onnx_rewrite {

struct Target {
  std::string name;
  std::string description;
  std::vector<std::string> domains;  // normalized; each has an op table in targets/
  bool local_functions = false;      // does the runtime run calls to model-local functions?
};

// The targets compiled in from targets/*.target; throws UsageError for an unknown name.
const Target& find_target(const std::string& name);
const std::vector<Target>& all_targets();

// Nodes of one (domain, op_type) the target can't load, in one kind of place.
struct Unloadable {
  std::string domain;  // as written in the model ("" = ai.onnx)
  std::string op_type;
  std::string aten_operator;  // for org.pytorch.aten::ATen, which op it dispatches to
  std::string place;   // "main graph", "subgraph", "function DOMAIN.NAME"
  std::string reason;
  int count = 0;
};

struct CheckReport {
  std::vector<Unloadable> unloadable;
  std::vector<std::string> opset_problems;  // imports above --opset
  std::vector<std::string> notes;           // things we could not verify
  bool ok() const { return unloadable.empty() && opset_problems.empty(); }
};

CheckReport check_model(const Model& model, const Target& target, std::optional<int> max_opset);

}  // namespace onnx_rewrite
