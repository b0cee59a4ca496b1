// A structural check of a model: every value read is defined before (in its graph or an
// enclosing one), no value is defined twice in a graph, every output is computed. Run after each
// round of rewrites, so that a wrong rule is an error instead of a silently broken model.
#pragma once

#include <optional>
#include <string>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

// The first problem found, or nullopt.
std::optional<std::string> structural_problem(const onnx::ModelProto& model);

}  // namespace onnx_rewrite
