// The last clean-up of --simplify: what a runtime does to a main graph as it loads it, done
// offline so that every runtime and converter sees the simple form. The folds themselves are the
// canonicalize-* rules, which --simplify runs for every target.
#pragma once

#include <onnx/onnx_pb.h>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/model.h"

namespace onnx_rewrite {

// In the main graph: Constant nodes become initializers of the same name, initializers and
// value_info nobody reads go, and small initializers equal in type, shape and bytes become one
// (the first, by position). Graph inputs, outputs and their names are never touched, nor
// anything a training graph may read. Counts what it did in `result.rules` under
// "simplify-*" ids; returns whether it changed anything.
bool simplify_main_graph(Model& model, RewriteResult& result);

}  // namespace onnx_rewrite
