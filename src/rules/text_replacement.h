// The two kinds of replacement a rule file names: ONNX text, or a registered C++ builder.
#pragma once

#include <string>
#include <vector>

#include <onnx/defs/parser.h>

#include "onnx_rewrite/builder.h"
#include "rules/rule.h"

namespace onnx_rewrite {

class TextReplacement : public Replacement {
 public:
  TextReplacement(onnx::NodeList nodes, std::vector<std::string> inputs, std::vector<std::string> outputs)
      : nodes_(std::move(nodes)), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {}
  BuildResult build(const Match& match, GraphBuilder& builder) const override;
  std::string describe() const override { return "ONNX text"; }

 private:
  onnx::NodeList nodes_;
  std::vector<std::string> inputs_;
  std::vector<std::string> outputs_;
};

class BuilderReplacement : public Replacement {
 public:
  explicit BuilderReplacement(const Builder& builder) : builder_(builder) {}
  // The builder reads the match through a BuildContext: what it declared, and nothing else.
  BuildResult build(const Match& match, GraphBuilder& builder) const override;
  std::string describe() const override { return "builder " + builder_.name; }
  const BuilderSignature* signature() const override { return &builder_.signature; }

 private:
  const Builder& builder_;  // in BuilderRegistry::builtin(), which lives as long as the program
};

// Computes the rule's `let` values into match.attributes; returns why it can't, or "".
std::string evaluate_lets(const Rule& rule, Match& match);

// `value` converted to an attribute of `type` named `name`; nullopt if it can't be.
std::optional<onnx::AttributeProto> convert_attribute(const onnx::AttributeProto& value, onnx::AttributeProto::AttributeType type,
                                                      const std::string& name);

}  // namespace onnx_rewrite
