// Rules as data: what a rule file (rules/*.rules, docs/rules.md) says, after parsing (the syntax
// tree; RuleSet, what a program holds them in, is public: onnx_rewrite/rule_set.h).
// A rule is one or more alternative patterns, constraints, computed values, and a replacement
// (ONNX text, or a C++ builder named in the file).
#pragma once

#include <climits>
#include <map>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "onnx_rewrite/builder.h"
#include "onnx_rewrite/rule_set.h"

namespace onnx_rewrite {

class Match;
struct Target;

// A domain's opset import must lie in [min, max].
struct VersionRange {
  std::string domain;  // normalized: "" for ai.onnx
  int min = 1;
  int max = INT_MAX;
  bool contains(int version) const { return version >= min && version <= max; }
  std::string describe() const;
};

struct PatternAttribute {
  std::string name;
  std::optional<onnx::AttributeProto> literal;                                         // must equal (ONNX's default counts when absent)
  std::string capture;                                                                 // else: bind the node's value to this name
  onnx::AttributeProto::AttributeType capture_type = onnx::AttributeProto::UNDEFINED;  // as declared
};

struct PatternNode {
  std::string domain;  // normalized
  std::string op_type;
  std::vector<std::string> inputs;   // pattern value names; "" = must be absent
  std::vector<std::string> outputs;  // "" or "_" = not bound
  std::vector<PatternAttribute> attributes;
  // Mul/Add written with more than two inputs: a tree of binary ops over these factors, in any
  // order and association.
  bool associative = false;
  bool commutative = false;
  // `where { y is variadic }`: the node may have more inputs than the pattern lists (QLinearConcat's
  // triples); a builder reads them from the node.
  bool variadic = false;
};

// A condition on a pattern value or a captured attribute (`where` lines).
struct Constraint {
  enum class Kind {
    kConstant,  // x is constant
    kScalar,    // x is scalar: a constant with one element
    kApprox,    // x ≈ v ± tol: a constant whose every element is within tol of v
    kEquals,    // x == literal (constant value or captured attribute)
    kIn,        // x in [...] (captured attribute)
    kOptional,  // x is optional: may be absent
    kPresent,   // x is present (input or attribute)
    kAbsent,    // x is absent
    kDtype,     // x dtype in [...]
    kRank,      // x rank in [min, max]
    kVariadic,  // y is variadic: the node computing y may have further inputs
  };
  Kind kind;
  std::string subject;
  bool on_attribute = false;
  std::vector<onnx::AttributeProto> values;  // kEquals, kIn
  double number = 0, tolerance = 0;          // kApprox
  std::vector<int32_t> dtypes;               // kDtype
  int min_rank = 0, max_rank = INT_MAX;      // kRank
  int line = 0, column = 0;
  std::string describe() const;
};

struct Pattern {
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<PatternNode> nodes;
  std::vector<Constraint> constraints;
  std::vector<VersionRange> opsets;                      // the model's imports this pattern is valid for
  std::map<std::string, onnx::AttributeProto> defaults;  // for absent captured attributes
  std::vector<size_t> order;                             // match order: anchor first, then connected nodes
  int line = 0;

  const PatternNode& anchor() const { return nodes[order.front()]; }
};

// An expression in a `let` block.
struct Expression {
  enum class Kind { kLiteral, kName, kList, kCall, kUnary, kBinary };
  Kind kind;
  onnx::AttributeProto literal;
  std::string name;  // kName, kCall (function), kUnary/kBinary (operator)
  std::vector<Expression> operands;
};

struct Let {
  std::string name;
  Expression expression;
  int line = 0;
};

class Replacement {
 public:
  virtual ~Replacement() = default;
  // Adds nodes to `builder` that compute every output of the pattern, or says why it declines
  // (e.g. a shape it needs is unknown).
  virtual BuildResult build(const Match& match, GraphBuilder& builder) const = 0;
  virtual std::string describe() const = 0;
  // What a C++ builder declared it reads (null for ONNX text, checked when the file loads).
  virtual const BuilderSignature* signature() const { return nullptr; }
};

// The checked example of a rule: a model and the main graph nodes expected after the rewrite.
struct RuleExample {
  std::string model_text;
  std::string expected_nodes_text;
  std::string expected_like;     // `expect like RULE`: the same nodes as that rule's expect
  std::optional<int> max_opset;  // rewritten as with --opset N
  bool exact_opset = false;      // `example exact opset N`: as with --to-opset N
  int line = 0;
};

struct Rule {
  std::string id;
  std::string description;
  std::string file;
  int line = 0;
  std::vector<std::string> targets;
  std::vector<std::string> fuse_targets;  // `fuses for:` targets it also serves, with --fuse only
  int priority = 0;
  std::vector<VersionRange> requires_opsets;  // what the replacement needs
  std::vector<Pattern> patterns;
  std::vector<Let> lets;
  std::shared_ptr<const Replacement> replacement;
  std::optional<RuleExample> example;

  // Whether the rule runs under `target`: it names it, or a target it builds on (with `fuse`,
  // also through `fuses for:`).
  bool serves(const Target& target, bool fuse = false) const;
};

// The rule files a --rules path names: the file, or a directory's *.rules files, sorted; throws
// InputError when there is nothing at the path.
std::vector<std::filesystem::path> rule_files(const std::string& path);

}  // namespace onnx_rewrite
