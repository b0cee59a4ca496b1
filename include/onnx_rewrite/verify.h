// Structural checks of a model: every value read is defined (in its graph or an enclosing one),
// no value is defined twice in a graph, every output is computed, the nodes form no cycle.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

// The first problem of a model the engine wrote, which must also be in topological order. Run
// after each round of rewrites, so that a wrong rule is an error instead of a broken model.
std::optional<std::string> structural_problem(const onnx::ModelProto& model);

// The first problem of an input model, whose nodes may come in any order (as ONNX Runtime
// takes them); a model with one is refused before any work.
std::optional<std::string> input_problem(const onnx::ModelProto& model);

// Everything input_problem finds, in a model the engine wrote (in topological order, unless
// `ordered` is false: the input's graphs were not, and the engine keeps the order of what it
// doesn't touch): the last check before a rewritten model is written, so that exit 0 never goes
// with a model `check` refuses.
std::optional<std::string> output_problem(const onnx::ModelProto& model, bool ordered = true);

// input_problem, and whether structural_problem finds nothing either: one pass over the nodes
// for a model in topological order (which passes the order-free check too).
struct InputCheck {
  std::optional<std::string> problem;
  bool ordered = false;
};
InputCheck check_input(const onnx::ModelProto& model);

// What output_problem checks beyond the node lists: calls of model-local functions, imports.
std::optional<std::string> model_problem(const onnx::ModelProto& model);

// Opset imports (of the model and its functions) outside 0..2^31-1: damage, not a newer opset.
// `check` reports them, `rewrite` refuses the model (imports are raised and lowered as ints).
std::vector<std::string> impossible_opset_imports(const onnx::ModelProto& model);

}  // namespace onnx_rewrite
