// Shared by the quantized-rule tests (qlinear_to_qdq_test, dynamic_quant_matmul_test): running
// quant_compare.js, reading its per-output lines, the tolerance verdict, and the negative controls
// (a zero point off by one; rounding down instead of to nearest).
#pragma once

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "test_support.h"

namespace onnx_rewrite::testing {

struct OutputStats {
  std::string type;
  long count = 0;
  double max_step = 0;  // max |a - b| (for integer outputs: quantization steps)
  long differing = 0;
  double max_rel = 0;
  double rel_to_max = 0;
  long nonfinite_expected = 0;
  long nonfinite_got = 0;
  long nonfinite_where_finite = 0;  // NaN/Inf where the expected value is finite: always a failure
};

struct QuantComparison {
  bool ran = false;
  std::map<std::string, OutputStats> outputs;  // B against the expected (the reference)
  std::map<std::string, OutputStats> kernel;   // ORT's kernel against the reference, when exact here
  std::vector<std::string> inexact;            // outputs whose kernel the probe found inexact on this CPU
  std::string text;
};

// rules/qlinear-to-qdq/quant_compare.js: B against A's reference evaluation (reference = true:
// qlinear_reference.js plus `references`, and ORT's kernel where exact), or against A run in ORT.
inline QuantComparison quant_compare(const fs::path& a, const fs::path& b, const std::vector<std::string>& extra = {},
                                     bool reference = true, const std::vector<fs::path>& references = {}) {
  std::vector<std::string> argv{"node", (family_file("qlinear-to-qdq", "quant_compare.js")).string(), a.string(),
                                b.string()};
  if (reference) {
    argv.insert(argv.end(), {"--reference", family_file("qlinear-to-qdq", "qlinear_reference.js").string(), "--kernel"});
    for (const auto& r : references) argv.insert(argv.end(), {"--reference", r.string()});
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto result = run_command(argv);
  QuantComparison comparison;
  comparison.text = result.out + result.err;
  comparison.ran = result.exit_code == 0;
  static const std::regex line(
      R"((output|kernel) (\S+) (\S+) count (\d+) max_step (\S+) differing (\d+) max_abs \S+ max_rel (\S+) rel_to_max (\S+))"
      R"( nonfinite_expected (\d+) nonfinite_got (\d+) nonfinite_where_finite (\d+))");
  static const std::regex inexact(R"(kernel (\S+) inexact on this CPU.*)");
  std::istringstream lines(result.out);
  for (std::string text; std::getline(lines, text);) {
    std::smatch m;
    if (std::regex_match(text, m, inexact)) {
      comparison.inexact.push_back(m[1]);
      continue;
    }
    if (!std::regex_match(text, m, line)) continue;
    OutputStats stats{m[3], std::stol(m[4]), std::stod(m[5]), std::stol(m[6]), std::stod(m[7]), std::stod(m[8]),
                      std::stol(m[9]), std::stol(m[10]), std::stol(m[11])};
    (m[1] == "output" ? comparison.outputs : comparison.kernel)[m[2]] = stats;
  }
  return comparison;
}

// The tolerance of a comparison: integer outputs within max_step steps with at most
// max_differing elements differing; float outputs within max_step of the largest value; never a
// NaN or infinity where the reference is finite.
struct Tolerance {
  double max_step = 0;
  long max_differing = 0;
};

inline bool within(const OutputStats& s, const Tolerance& t) {
  if (s.nonfinite_where_finite > 0) return false;
  if (s.type == "float32") return s.rel_to_max <= t.max_step;
  return s.max_step <= t.max_step && s.differing <= t.max_differing;
}

inline std::string describe(const OutputStats& s) {
  return fmt::format("{} max_step {} differing {} of {} rel_to_max {:.3g} nonfinite_where_finite {}", s.type, s.max_step, s.differing,
                     s.count, s.rel_to_max, s.nonfinite_where_finite);
}

// The element type of a value: an initializer, a graph input or output, a Constant, or an output
// of DynamicQuantizeLinear (uint8); 0 when unknown.
inline int element_type_of(const onnx::GraphProto& graph, const std::string& name) {
  for (const auto& init : graph.initializer()) {
    if (init.name() == name) return init.data_type();
  }
  for (const auto* list : {&graph.input(), &graph.output(), &graph.value_info()}) {
    for (const auto& v : *list) {
      if (v.name() == name && v.type().tensor_type().elem_type() != 0) return v.type().tensor_type().elem_type();
    }
  }
  for (const auto& node : graph.node()) {
    for (const auto& out : node.output()) {
      if (out != name) continue;
      if (node.op_type() == "DynamicQuantizeLinear" && out != node.output(1)) return onnx::TensorProto::UINT8;
      if (node.op_type() == "Constant") {
        for (const auto& attr : node.attribute()) {
          if (attr.name() == "value") return attr.t().data_type();
        }
      }
    }
  }
  return 0;
}

// The same model with one zero point off by one: the one read by its last QuantizeLinear, else by
// its first DequantizeLinear of a constant (B), else MatMulInteger's b_zero_point (or
// a_zero_point), else the first DequantizeLinear's -- a one-step systematic error the comparison
// must catch (a negative control). The zero point becomes Cast(Add(Cast(zp, int32), 1), type), so
// that it works for a constant, a graph input or a computed zero point alike and moves only that
// one use (a zero point shared with the input DequantizeLinear would cancel); an absent one
// becomes a 1.
inline onnx::ModelProto zero_point_off_by_one(onnx::ModelProto model) {
  auto* graph = model.mutable_graph();
  int target = -1;
  int slot = 2;
  auto constant = [&](const std::string& name) {
    for (const auto& init : graph->initializer()) {
      if (init.name() == name) return true;
    }
    return false;
  };
  for (int i = 0; i < graph->node_size(); ++i) {
    const auto& node = graph->node(i);
    if (node.op_type() == "QuantizeLinear" && node.input_size() > 2 && !node.input(2).empty()) target = i;
  }
  for (int i = 0; i < graph->node_size() && target < 0; ++i) {
    const auto& node = graph->node(i);
    if (node.op_type() == "DequantizeLinear" && constant(node.input(0))) target = i;
  }
  for (int i = 0; i < graph->node_size() && target < 0; ++i) {
    const auto& node = graph->node(i);
    if (node.op_type() == "MatMulInteger") {
      target = i;
      slot = node.input_size() > 3 && !node.input(3).empty() ? 3 : 2;
    }
  }
  for (int i = 0; i < graph->node_size() && target < 0; ++i) {
    if (graph->node(i).op_type() == "DequantizeLinear") target = i;
  }
  if (target < 0) return model;
  const auto& node = graph->node(target);
  std::string zp = node.input_size() > slot ? node.input(slot) : "";
  int elem = zp.empty() ? 0 : element_type_of(*graph, zp);
  if (elem == 0) {
    const std::string data = node.op_type() == "MatMulInteger" ? node.input(slot - 2) : node.input(0);
    elem = node.op_type() == "QuantizeLinear" ? graph->output(0).type().tensor_type().elem_type() : element_type_of(*graph, data);
  }
  auto cast = [](const std::string& in, const std::string& out, int to) {
    onnx::NodeProto node;
    node.set_op_type("Cast");
    node.add_input(in);
    node.add_output(out);
    auto* attr = node.add_attribute();
    attr->set_name("to");
    attr->set_type(onnx::AttributeProto::INT);
    attr->set_i(to);
    return node;
  };
  auto* one = graph->add_initializer();
  one->set_name("control_one");
  one->set_data_type(onnx::TensorProto::INT32);
  one->add_int32_data(1);
  if (zp.empty()) {
    auto* zero = graph->add_initializer();
    zero->set_name("control_zero");
    zero->set_data_type(onnx::TensorProto::INT32);
    zero->add_int32_data(0);
    zp = "control_zero";
  }
  onnx::NodeProto add;
  add.set_op_type("Add");
  add.add_input("control_zp_int");
  add.add_input("control_one");
  add.add_output("control_zp_plus_one");
  std::vector<onnx::NodeProto> nodes(graph->node().begin(), graph->node().end());
  while (nodes[target].input_size() <= slot) nodes[target].add_input("");
  nodes[target].set_input(slot, "control_zp");
  nodes.insert(nodes.begin() + target, {cast(zp, "control_zp_int", onnx::TensorProto::INT32), add,
                                        cast("control_zp_plus_one", "control_zp", elem)});
  graph->clear_node();
  for (auto& n : nodes) *graph->add_node() = std::move(n);
  return model;
}

// The same model rounding down instead of to nearest in its last QuantizeLinear: x becomes
// x - scale/2 before it, so round(x/scale) turns into about floor(x/scale) -- the other one-step
// systematic error (truncation) a comparison must catch. Returns false when the model has no
// QuantizeLinear (a float output).
inline bool round_down_instead(onnx::ModelProto& model) {
  auto* graph = model.mutable_graph();
  int target = -1;
  for (int i = 0; i < graph->node_size(); ++i) {
    if (graph->node(i).op_type() == "QuantizeLinear") target = i;
  }
  if (target < 0) return false;
  auto* half = graph->add_initializer();
  half->set_name("control_half");
  half->set_data_type(onnx::TensorProto::FLOAT);
  half->add_float_data(0.5f);
  std::vector<onnx::NodeProto> nodes(graph->node().begin(), graph->node().end());
  onnx::NodeProto mul;
  mul.set_op_type("Mul");
  mul.add_input(nodes[target].input(1));
  mul.add_input("control_half");
  mul.add_output("control_half_step");
  onnx::NodeProto sub;
  sub.set_op_type("Sub");
  sub.add_input(nodes[target].input(0));
  sub.add_input("control_half_step");
  sub.add_output("control_rounded_down");
  nodes[target].set_input(0, "control_rounded_down");
  nodes.insert(nodes.begin() + target, {mul, sub});
  graph->clear_node();
  for (auto& n : nodes) *graph->add_node() = std::move(n);
  return true;
}

}  // namespace onnx_rewrite::testing
