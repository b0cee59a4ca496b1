// Operator version histories (targets/*.ops) and what they allow: whether an op exists at an
// opset version, and whether an opset import can be raised or lowered without changing what
// the model's nodes mean.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

// "" and "ai.onnx" name the same domain; we use "".
std::string normalize_domain(std::string_view domain);
std::string display_domain(std::string_view domain);  // "ai.onnx" for ""

// A (domain, op type) seen through views, for hot lookups that must not allocate; the domain
// is normalized.
struct OpView {
  std::string_view domain;
  std::string_view op_type;
  static OpView of(const onnx::NodeProto& node) {
    return {node.domain() == "ai.onnx" ? std::string_view() : std::string_view(node.domain()), node.op_type()};
  }
  // What a call of the function is: its (domain, name).
  static OpView of(const onnx::FunctionProto& function) {
    return {function.domain() == "ai.onnx" ? std::string_view() : std::string_view(function.domain()), function.name()};
  }
  bool operator==(const OpView&) const = default;
};
struct OpViewHash {
  size_t operator()(const OpView& key) const {
    return std::hash<std::string_view>()(key.op_type) * 31 + std::hash<std::string_view>()(key.domain);
  }
};

// Stand-ins in `added_types` for sequence, optional and map types, which have no element type id.
constexpr int32_t kSequenceTypes = 1000;
constexpr int32_t kOptionalTypes = 1001;
constexpr int32_t kMapTypes = 1002;

// How an op version differs from the one before it (targets/README.md).
struct OpVersionStep {
  int version = 0;
  bool breaking = true;                                               // a plain version number: not safe to cross
  bool deprecated = false;                                            // the op no longer exists from this version on
  bool relaxed = false;                                               // accepts more; every node valid before means the same
  std::vector<int32_t> added_types;                                   // types(...)
  std::vector<std::pair<std::string, std::string>> added_attributes;  // attr(name=default)
  std::vector<int> added_inputs;                                      // input(k)
};

class OpTable {
 public:
  // Parses one domain's table; throws std::runtime_error("line N: ...").
  static OpTable parse(std::string_view text);

  bool knows(const std::string& op_type) const { return ops_.count(op_type) != 0; }
  // The version of the op in effect at `opset` (its since_version); nullopt if it does not exist there.
  std::optional<int> since_version(const std::string& op_type, int opset) const;
  // The first version of the op (even one deprecated from the start); nullopt for an unknown op.
  std::optional<int> introduced(const std::string& op_type) const;
  // Why `node` would mean something else (or not exist) if its domain's import moved from
  // `from` to `to`; nullopt when the move is safe. `model_types` are the element types the
  // model declares anywhere (new types added by a version only matter if the model uses them).
  // `constant` gives the value of an input fed by an initializer or a Constant node (null when
  // not known): some nodes mean the same across a step only for some values of an input.
  using ConstantOf = std::function<const onnx::TensorProto*(const std::string&)>;
  std::optional<std::string> move_blocker(const onnx::NodeProto& node, int from, int to, const std::set<int32_t>& model_types,
                                          const ConstantOf& constant = {}) const;
  // The types part of move_blocker alone: for nodes a rewrite built for `to`, which mean what
  // they should there but may take element types only `from` has.
  std::optional<std::string> type_blocker(const onnx::NodeProto& node, int from, int to, const std::set<int32_t>& model_types) const;
  int highest_version() const { return highest_; }
  std::vector<std::string> op_types() const;

 private:
  std::map<std::string, std::vector<OpVersionStep>, std::less<>> ops_;
  int highest_ = 0;
};

// The tables of every domain we know, from the embedded targets/ directory.
class OpRegistry {
 public:
  static const OpRegistry& builtin();
  const OpTable* table(std::string_view domain) const;

 private:
  std::map<std::string, OpTable, std::less<>> tables_;
};

// Why `model` can't be written as IR `version` — an ai.onnx import, an element type, functions,
// training info, sparse tensors or (from IR 9 on) fields ONNX 1.12 doesn't know that the older IR
// lacks — or nullopt. Raising the IR never is blocked (from 3).
std::optional<std::string> ir_version_blocker(const onnx::ModelProto& model, int64_t version);

}  // namespace onnx_rewrite
