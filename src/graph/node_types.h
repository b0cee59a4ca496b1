// The element types each node reads and writes, as shape inference works them out. Whether a
// node uses a type an older op version lacks is a question about the node (a float Relu in a
// model whose shapes are int64 is no int64 Relu), answered model-wide only where a type is unknown.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "graph/scope.h"

namespace onnx_rewrite {

class NodeTypes {
 public:
  // Indexes the model as it is now; valid until its node lists change. Reads it only.
  explicit NodeTypes(const Model& model);
  ~NodeTypes();
  // The element types of the node's inputs and outputs; nullopt if one is unknown.
  std::optional<std::set<int32_t>> of(const onnx::NodeProto& node) const;

 private:
  std::vector<std::unique_ptr<Scope>> scopes_;
  std::unordered_map<const onnx::NodeProto*, const Scope*> scope_of_;
};

}  // namespace onnx_rewrite
