// The match stage: find a rule's pattern at a node, without changing anything. A match binds
// pattern values to graph values and captures attributes; a failed match says why.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "onnx_rewrite/builder.h"
#include "graph/node_set.h"
#include "rules/rule.h"
#include "graph/scope.h"

namespace onnx_rewrite {

class Match {
 public:
  const Scope* scope = nullptr;
  const Rule* rule = nullptr;
  const Pattern* pattern = nullptr;
  onnx::NodeProto* anchor = nullptr;
  std::vector<onnx::NodeProto*> nodes;                     // every graph node the match covers
  std::map<std::string, std::string> values;               // pattern value -> graph value ("" when absent)
  std::map<std::string, onnx::AttributeProto> attributes;  // captures, defaults and `let` results
  std::map<std::string, int> opsets;                       // domain -> version the replacement is built for

  // The graph value bound to a pattern value ("" when an optional input is absent).
  const std::string& value(const std::string& pattern_name) const;
  bool has_value(const std::string& pattern_name) const;
  const onnx::AttributeProto* attribute(const std::string& name) const;
  int64_t attribute_int(const std::string& name, int64_t otherwise) const;
  float attribute_float(const std::string& name, float otherwise) const;
  std::vector<int64_t> attribute_ints(const std::string& name, std::vector<int64_t> otherwise = {}) const;
  std::string attribute_string(const std::string& name, std::string otherwise = {}) const;
  const ShapeFacts& facts(const std::string& pattern_name) const { return scope->facts(value(pattern_name)); }
  std::optional<TensorValues> constant(const std::string& pattern_name) const;
  int opset(const std::string& domain = "") const;
};

// A builder read a name its signature does not declare (BuildContext): a bug in the builder, not
// a reason to decline (the engine reports it as an internal error of the rule).
class BuilderContractError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

class Matcher {
 public:
  // `claimed`: nodes already rewritten in this round, which no other match may cover.
  // `reader`: whose facts and decoded constants of the scope the searches read.
  Matcher(const Scope& scope, const NodeSet& claimed, Scope::Reader reader = Scope::Reader::kRound);
  ~Matcher();
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  // Tries `pattern` with its anchor at `node`, at `position` in the scope's index. On failure
  // returns nullopt and, if `why_not` is given, the reason from the attempt that got furthest;
  // `on_facts`, if given, says whether a type or rank condition rejected a binding on the way
  // because the shape facts don't know it (the same place may match once they do).
  std::optional<Match> match(const Rule& rule, const Pattern& pattern, onnx::NodeProto* node, int position, std::string* why_not = nullptr,
                             bool* on_facts = nullptr) const;

  class Lookups;    // the index's last answers, which the search asks for (matcher.cc)
  struct Bindings;  // what a search has bound so far (matcher.cc)
  class Prefilter;  // which patterns can't match at a node, seen from what computes its inputs (matcher.cc)

 private:
  const Scope& scope_;
  const NodeSet& claimed_;
  Scope::Reader reader_;
  std::unique_ptr<Lookups> lookups_;  // a cache: filled by const matches
  // Each search's trail, emptied by the next: most attempts fail within a step or two, and fresh
  // vectors cost an allocation each (tens of millions on a big graph).
  std::unique_ptr<Bindings> trail_;
  std::unique_ptr<Prefilter> prefilter_;
};

// Whether two attribute values are the same (ints, floats within 1e-6 relative, strings, lists).
bool same_attribute_value(const onnx::AttributeProto& a, const onnx::AttributeProto& b);
std::string attribute_value_text(const onnx::AttributeProto& attribute);
// ONNX's documented default for an attribute of a standard op, if it has one.
std::optional<onnx::AttributeProto> schema_default(const std::string& domain, const std::string& op_type, int opset,
                                                   const std::string& attribute);

}  // namespace onnx_rewrite
