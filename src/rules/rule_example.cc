#include "rules/rule_example.h"

#include <map>
#include <sstream>

#include <fmt/format.h>
#include <onnx/defs/attr_proto_util.h>
#include <onnx/defs/parser.h>
#include <onnx/defs/printer.h>

#include "engine/active_rules.h"
#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model_io.h"
#include "graph/scope.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {

std::set<std::string> interface_names(const onnx::ModelProto& model) {
  std::set<std::string> names;
  for (const auto& input : model.graph().input()) names.insert(input.name());
  for (const auto& output : model.graph().output()) names.insert(output.name());
  for (const auto& initializer : model.graph().initializer()) names.insert(initializer.name());
  return names;
}

namespace {

std::string canonicalize(onnx::NodeList nodes, const std::set<std::string>& kept) {
  // Constants last-minute: each goes right before its first consumer.
  onnx::NodeList constants, others;
  for (auto& node : nodes) {
    if (node.op_type() == "Constant" && node.domain().empty() && node.input_size() == 0) *constants.Add() = node;
    else *others.Add() = node;
  }
  onnx::NodeList ordered;
  std::set<int> placed;
  for (const auto& node : others) {
    for (const auto& input : node.input()) {
      for (int c = 0; c < constants.size(); ++c) {
        if (!placed.count(c) && constants.Get(c).output(0) == input) {
          *ordered.Add() = constants.Get(c);
          placed.insert(c);
        }
      }
    }
    *ordered.Add() = node;
  }
  std::map<std::string, std::string> renamed;
  auto rename = [&](std::string& name) {
    if (name.empty() || kept.count(name)) return;
    auto [it, fresh] = renamed.emplace(name, "");
    if (fresh) it->second = "v" + std::to_string(renamed.size());
    name = it->second;
  };
  for (auto& node : ordered) {
    node.clear_name();
    if (node.domain().empty()) node.clear_domain();
    for (auto& input : *node.mutable_input()) rename(input);
    for (auto& output : *node.mutable_output()) rename(output);
    for (auto& attribute : *node.mutable_attribute()) {
      if (attribute.has_t()) attribute.mutable_t()->clear_name();
    }
  }
  std::ostringstream text;
  for (const auto& node : ordered) text << node << "\n";
  return text.str();
}

}  // namespace

std::string canonical_nodes(const onnx::ModelProto& model, const std::set<std::string>& kept) {
  onnx::NodeList nodes;
  for (const auto& initializer : model.graph().initializer()) {
    if (kept.count(initializer.name())) continue;
    onnx::NodeProto& constant = *nodes.Add();
    constant.set_op_type("Constant");
    constant.add_output(initializer.name());
    *constant.add_attribute() = onnx::MakeAttribute("value", initializer);
  }
  for (const auto& node : model.graph().node()) *nodes.Add() = node;
  // Constant nodes and initializers both become `Constant <value = ...>` with a tensor value.
  for (auto& node : nodes) {
    if (node.op_type() != "Constant" || !node.domain().empty()) continue;
    if (auto tensor = constant_node_tensor(node)) {
      node.clear_attribute();
      tensor->clear_name();
      onnx::TensorProto normalized = make_tensor(tensor->data_type(), {tensor->dims().begin(), tensor->dims().end()},
                                                 decode_tensor(*tensor) ? decode_tensor(*tensor)->numbers : std::vector<double>{});
      *node.add_attribute() = onnx::MakeAttribute("value", normalized);
    }
  }
  return canonicalize(std::move(nodes), kept);
}

std::string canonical_nodes_text(const std::string& nodes_text, const onnx::ModelProto& model, const std::set<std::string>& kept) {
  onnx::NodeList nodes;
  const auto status = onnx::OnnxParser::Parse(nodes, nodes_text.c_str());
  if (!status.IsOK()) throw std::runtime_error("bad node list: " + status.ErrorMessage());
  onnx::ModelProto holder = model;
  holder.mutable_graph()->clear_node();
  holder.mutable_graph()->clear_initializer();
  for (const auto& initializer : model.graph().initializer()) {
    if (kept.count(initializer.name())) *holder.mutable_graph()->add_initializer() = initializer;
  }
  *holder.mutable_graph()->mutable_node() = nodes;
  return canonical_nodes(holder, kept);
}

namespace {

std::string serialized(const onnx::ModelProto& proto) {
  std::string bytes;
  proto.SerializeToString(&bytes);
  return bytes;
}

}  // namespace

ExampleOutcome run_rule_example(const Rule& rule, const RuleSet& rules) {
  ExampleOutcome outcome;
  if (!rule.example) {
    outcome.problem = "has no example";
    return outcome;
  }
  onnx::ModelProto before;
  const auto status = onnx::OnnxParser::Parse(before, rule.example->model_text.c_str());
  if (!status.IsOK()) {
    outcome.problem = "its example is not valid ONNX text: " + status.ErrorMessage();
    return outcome;
  }
  RewriteOptions options;
  // The rule's first target; an opt-in fusion (`fuses for:` alone) runs as with --fuse.
  options.target = rule.targets.empty() ? rule.fuse_targets.front() : rule.targets.front();
  options.fuse = rule.targets.empty();
  options.only = {rule.id};
  options.simplify = is_simplification(rule);  // they run in --simplify's run only
  options.max_opset = rule.example->max_opset;
  options.exact_opset = rule.example->exact_opset;
  Model model = parse_model(serialized(before), rule.file + " (example of " + rule.id + ")");
  const RewriteResult result = rewrite_model(model, rules, options);
  for (const auto& note : result.notes) {
    if (note.find("internal error") != std::string::npos) outcome.problem = note;
  }
  if (!result.rules.count(rule.id)) {
    outcome.problem = "did not fire on its own example";
    return outcome;
  }
  const auto kept = interface_names(before);
  outcome.actual = canonical_nodes(model.proto, kept);
  outcome.expected = canonical_nodes_text(rules.expected_nodes(rule), before, kept);
  if (outcome.actual != outcome.expected) {
    outcome.problem = "its example rewrites to other nodes than its expect";
    return outcome;
  }
  outcome.expected.clear();
  outcome.actual.clear();
  if (!outcome.problem.empty()) return outcome;
  Model again = parse_model(serialize_model(model), "the rewritten example of " + rule.id);
  if (rewrite_model(again, rules, options).rules.count(rule.id)) outcome.problem = "fires again on its own output";
  return outcome;
}

}  // namespace onnx_rewrite
