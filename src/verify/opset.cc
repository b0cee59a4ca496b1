#include "verify/opset.h"

#include <algorithm>
#include <charconv>
#include <sstream>
#include <stdexcept>

#include "rules/embedded.h"
#include "onnx_rewrite/tensor.h"

namespace onnx_rewrite {

std::string normalize_domain(std::string_view domain) { return domain == "ai.onnx" ? std::string() : std::string(domain); }

std::string display_domain(std::string_view domain) { return domain.empty() ? std::string("ai.onnx") : std::string(domain); }

namespace {

int parse_int(std::string_view text, size_t line) {
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw std::runtime_error("line " + std::to_string(line) + ": '" + std::string(text) + "' is not a version");
  }
  return value;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(separator, start), text.size());
    if (end > start) parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// Splits on `separator` outside parentheses: "seq(tensor(a)),b" -> "seq(tensor(a))", "b".
std::vector<std::string_view> split_top_level(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == separator && depth == 0)) {
      if (i > start) parts.push_back(text.substr(start, i - start));
      start = i + 1;
    } else if (text[i] == '(') {
      ++depth;
    } else if (text[i] == ')') {
      --depth;
    }
  }
  return parts;
}

std::optional<int32_t> type_id(std::string_view type) {
  if (type.starts_with("seq(")) return kSequenceTypes;
  if (type.starts_with("optional(")) return kOptionalTypes;
  if (type.starts_with("map(")) return kMapTypes;
  return data_type_from_name(type);
}

// One "kind" of a version token: types(a,b), attr(x=0,y=1), input(3), same, relaxed, deprecated.
void apply_kind(OpVersionStep& step, std::string_view kind, size_t line) {
  const size_t open = kind.find('(');
  const std::string_view name = kind.substr(0, open);
  std::string_view arguments;
  if (open != std::string_view::npos) {
    if (kind.back() != ')') throw std::runtime_error("line " + std::to_string(line) + ": unclosed '('");
    arguments = kind.substr(open + 1, kind.size() - open - 2);
  }
  if (name == "same") {
  } else if (name == "relaxed") {
    step.relaxed = true;
  } else if (name == "deprecated") {
    step.deprecated = true;
  } else if (name == "types") {
    for (auto type : split_top_level(arguments, ',')) {
      auto id = type_id(type);
      if (!id) throw std::runtime_error("line " + std::to_string(line) + ": unknown type '" + std::string(type) + "'");
      step.added_types.push_back(*id);
    }
  } else if (name == "attr") {
    for (auto attribute : split(arguments, ',')) {
      const size_t equals = attribute.find('=');
      step.added_attributes.emplace_back(std::string(attribute.substr(0, equals)),
                                         equals == std::string_view::npos ? "" : std::string(attribute.substr(equals + 1)));
    }
  } else if (name == "input") {
    for (auto index : split(arguments, ',')) step.added_inputs.push_back(parse_int(index, line));
  } else {
    throw std::runtime_error("line " + std::to_string(line) + ": unknown change kind '" + std::string(name) + "'");
  }
}

// Whether an attribute value differs from the default a version step documents.
bool differs_from_default(const onnx::AttributeProto& attribute, const std::string& default_text) {
  if (default_text.empty()) return true;
  std::ostringstream value;
  switch (attribute.type()) {
    case onnx::AttributeProto::INT: value << attribute.i(); break;
    case onnx::AttributeProto::FLOAT: value << attribute.f(); break;
    case onnx::AttributeProto::STRING: value << attribute.s(); break;
    default: return true;
  }
  if (value.str() == default_text) return false;
  try {
    return std::stod(value.str()) != std::stod(default_text);
  } catch (...) {
    return true;
  }
}

std::string type_text(int32_t type) {
  switch (type) {
    case kSequenceTypes: return "sequence";
    case kOptionalTypes: return "optional";
    case kMapTypes: return "map";
    default: return data_type_name(type);
  }
}

bool has_attribute(const onnx::NodeProto& node, std::string_view name) {
  return std::any_of(node.attribute().begin(), node.attribute().end(), [&](const auto& a) { return a.name() == name; });
}

int64_t int_attribute_or(const onnx::NodeProto& node, std::string_view name, int64_t otherwise) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) return attribute.i();
  }
  return otherwise;
}

bool has_input(const onnx::NodeProto& node, int index) { return index < node.input_size() && !node.input(index).empty(); }

bool has_output(const onnx::NodeProto& node, int index) { return index < node.output_size() && !node.output(index).empty(); }

// Whether every value of an int or ints attribute is >= 0 (true when the attribute is absent).
bool non_negative(const onnx::NodeProto& node, std::string_view name) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() != name) continue;
    if (attribute.type() == onnx::AttributeProto::INT) return attribute.i() >= 0;
    if (attribute.type() == onnx::AttributeProto::INTS) {
      return std::all_of(attribute.ints().begin(), attribute.ints().end(), [](int64_t v) { return v >= 0; });
    }
    return false;
  }
  return true;
}

// Ops whose version 11 only let their axis (or axes) attribute count from the back: a node whose
// axes are all >= 0 (or absent: the same default on both sides) means the same either side.
std::optional<std::string_view> negative_axes_only_at_11(const std::string& op) {
  if (op == "Flatten" || op == "Concat" || op == "ArgMax" || op == "ArgMin" || op == "Softmax" || op == "LogSoftmax" || op == "Hardmax" ||
      op == "Split" || op == "Compress") {
    return "axis";
  }
  if (op == "Squeeze" || op == "Unsqueeze" || op.starts_with("Reduce")) return "axes";
  return std::nullopt;
}

// Version steps the tables mark as changing meaning (either way) or as relaxed (lowering), where
// this node means the same on both sides and is valid on both (no input slot, even empty, that
// one side lacks): the change is about inputs, attributes or values it doesn't use.
bool same_meaning_across(const onnx::NodeProto& node, int step, const OpTable::ConstantOf& constant) {
  const std::string& op = node.op_type();
  // Whether input `index` is a constant whose values are all >= 0 (or absent).
  auto input_non_negative = [&](int index) {
    if (!has_input(node, index)) return true;
    const onnx::TensorProto* tensor = constant ? constant(node.input(index)) : nullptr;
    if (!tensor) return false;
    auto values = decode_tensor(*tensor);
    if (!values) return false;
    const auto ints = values->ints();
    return std::all_of(ints.begin(), ints.end(), [](int64_t v) { return v >= 0; });
  };
  if (step == 11) {
    if (auto axes = negative_axes_only_at_11(op)) return non_negative(node, *axes);
    if (op == "Gemm") return has_input(node, 2);                        // 11 made C optional
    if (op == "Constant") return !has_attribute(node, "sparse_value");  // 11 added sparse_value
    // 11 let Gather's axis and indices, and Slice's axes, count from the back.
    if (op == "Gather") return non_negative(node, "axis") && input_non_negative(1);
    if (op == "Slice") return input_non_negative(3);
  }
  if (op == "BatchNormalization" && (step == 14 || step == 9)) {
    // Inference, one output: 14 added training_mode (and changed the training outputs), 9 removed
    // `spatial` (its default, 1, is what 9 does).
    return !has_attribute(node, "training_mode") && !has_attribute(node, "spatial") && !has_output(node, 1) && !has_output(node, 2) &&
           !has_output(node, 3) && !has_output(node, 4);
  }
  if (op == "ConvTranspose" && step == 11) {  // 11 redefined the automatic padding (auto_pad, output_shape)
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == "auto_pad" && attribute.s() != "NOTSET") return false;
    }
    return !has_attribute(node, "output_shape");
  }
  if (op == "MaxPool" && step == 8) {  // 8 added the Indices output and storage_order
    return !has_output(node, 1) && !has_attribute(node, "storage_order");
  }
  if ((op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") && step == 13) {
    // The last axis: -1 coerces to [rest, last] (before 13) and is the one axis (from 13). Only
    // when written: the default changed from 1 to -1.
    return has_attribute(node, "axis") && int_attribute_or(node, "axis", 0) == -1;
  }
  const bool reduce = op.starts_with("Reduce") && (step == 18 || (op == "ReduceSum" && step == 13));
  if (reduce) {
    // Reducing every axis: axes neither an input (newer) nor an attribute (older).
    return node.input_size() <= 1 && !has_attribute(node, "axes") && int_attribute_or(node, "noop_with_empty_axes", 0) == 0;
  }
  if (op == "Squeeze" && step == 13) return node.input_size() <= 1 && !has_attribute(node, "axes");
  if (op == "Split" && step == 13) return node.input_size() <= 1 && !has_attribute(node, "split");  // equal parts
  if (op == "Split" && step == 18) return has_input(node, 1) && !has_attribute(node, "num_outputs");
  if (op == "Clip" && step == 11) {  // no bounds: nothing clipped
    return node.input_size() <= 1 && !has_attribute(node, "min") && !has_attribute(node, "max");
  }
  if (op == "Resize" && step == 13) return has_input(node, 1) && has_input(node, 2);  // 13 made them optional
  if (op == "Resize" && step == 18) {                                                 // 18 added these
    return !has_attribute(node, "antialias") && !has_attribute(node, "axes") && !has_attribute(node, "keep_aspect_ratio_policy");
  }
  if (op == "Resize" && step == 19) {  // 19 added a coordinate mode
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == "coordinate_transformation_mode") return attribute.s() != "half_pixel_symmetric";
    }
    return true;
  }
  if ((op == "ScatterElements" || op == "ScatterND") && step == 18) {  // 18 added reductions max and min
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == "reduction") return attribute.s() != "max" && attribute.s() != "min";
    }
    return true;
  }
  if (op == "Dropout" && step == 12) {  // inference, the identity, on both sides; ratio and seed are one side's,
    // and ONNX Runtime's masks differ (Dropout-10 with a ratio input dropped gave zeros)
    return node.input_size() <= 1 && !has_attribute(node, "ratio") && !has_attribute(node, "seed") &&
           (node.output_size() < 2 || node.output(1).empty());
  }
  if (op == "Pad" && step == 19) {  // 19 added mode "wrap"
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == "mode") return attribute.s() != "wrap";
    }
    return true;
  }
  return false;
}

std::optional<std::string> added_type_used(const OpVersionStep& step, const std::string& where, const std::set<int32_t>& model_types) {
  for (int32_t type : step.added_types) {
    if (model_types.count(type)) return where + " added " + type_text(type) + " types, which the model uses";
  }
  return std::nullopt;
}

}  // namespace

OpTable OpTable::parse(std::string_view text) {
  OpTable table;
  size_t line_number = 0;
  for (auto line : split(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    std::vector<std::string_view> tokens;
    for (auto token : split(line, ' ')) {
      for (auto piece : split(token, '\t')) {
        if (piece.back() == '\r') piece.remove_suffix(1);
        if (!piece.empty()) tokens.push_back(piece);
      }
    }
    if (tokens.empty()) continue;
    auto& steps = table.ops_[std::string(tokens[0])];
    for (size_t i = 1; i < tokens.size(); ++i) {
      OpVersionStep step;
      const auto token = tokens[i];
      const size_t colon = token.find(':');
      step.version = parse_int(token.substr(0, colon), line_number);
      if (colon != std::string_view::npos) {
        step.breaking = false;
        for (auto kind : split_top_level(token.substr(colon + 1), '+')) apply_kind(step, kind, line_number);
      }
      if (!steps.empty() && step.version <= steps.back().version) {
        throw std::runtime_error("line " + std::to_string(line_number) + ": versions must ascend");
      }
      table.highest_ = std::max(table.highest_, step.version);
      steps.push_back(std::move(step));
    }
    if (steps.empty()) throw std::runtime_error("line " + std::to_string(line_number) + ": no versions");
  }
  return table;
}

std::optional<int> OpTable::since_version(const std::string& op_type, int opset) const {
  auto it = ops_.find(op_type);
  if (it == ops_.end()) return std::nullopt;
  const OpVersionStep* current = nullptr;
  for (const auto& step : it->second) {
    if (step.version > opset) break;
    current = &step;
  }
  if (!current || current->deprecated) return std::nullopt;
  return current->version;
}

std::optional<int> OpTable::introduced(const std::string& op_type) const {
  auto it = ops_.find(op_type);
  if (it == ops_.end() || it->second.empty()) return std::nullopt;
  return it->second.front().version;
}

std::optional<std::string> OpTable::move_blocker(const onnx::NodeProto& node, int from, int to, const std::set<int32_t>& model_types,
                                                 const ConstantOf& constant) const {
  const std::string& op = node.op_type();
  if (std::max(from, to) > highest_) {
    return "opset " + std::to_string(std::max(from, to)) + " is newer than the version tables (" + std::to_string(highest_) + ")";
  }
  if (!since_version(op, from)) return op + " does not exist at opset " + std::to_string(from);
  if (!since_version(op, to)) return op + " does not exist at opset " + std::to_string(to);
  const bool lowering = to < from;
  const int low = std::min(from, to);
  const int high = std::max(from, to);
  for (const auto& step : ops_.find(op)->second) {
    if (step.version <= low || step.version > high) continue;
    const std::string where = op + "-" + std::to_string(step.version);
    if (step.breaking && !same_meaning_across(node, step.version, constant)) return where + " changed its meaning";
    // Raising crosses what only widened the schema: relaxations, added types (a node using one
    // was invalid below and means at the newer version what it was written for), new attributes
    // and inputs (they default to the old behaviour).
    if (!lowering) continue;
    if (step.relaxed && !same_meaning_across(node, step.version, constant)) {
      return where + " accepts nodes that " + op + "-" + std::to_string(low) + " does not, and this is one";
    }
    if (auto used = added_type_used(step, where, model_types)) return used;
    // Set even to its default, an attribute the older schema lacks makes the node invalid there
    // (ONNX Runtime: "Unrecognized attribute"), as does an input slot, even an empty one.
    for (const auto& [name, default_text] : step.added_attributes) {
      for (const auto& attribute : node.attribute()) {
        if (attribute.name() != name) continue;
        if (differs_from_default(attribute, default_text)) return where + " added attribute " + name + ", which this node sets";
        return where + " added attribute " + name + ", which this node writes (to its default)";
      }
    }
    for (int index : step.added_inputs) {
      if (index < node.input_size()) {
        const bool used = !node.input(index).empty();
        return where + " added input " + std::to_string(index) + (used ? ", which this node uses" : ", which this node lists (empty)");
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> OpTable::type_blocker(const onnx::NodeProto& node, int from, int to,
                                                 const std::set<int32_t>& model_types) const {
  if (std::max(from, to) > highest_) {
    return "opset " + std::to_string(std::max(from, to)) + " is newer than the version tables (" + std::to_string(highest_) + ")";
  }
  auto it = ops_.find(node.op_type());
  if (it == ops_.end() || to > from) return std::nullopt;  // raising: types were only added
  for (const auto& step : it->second) {
    if (step.version <= std::min(from, to) || step.version > std::max(from, to)) continue;
    if (auto used = added_type_used(step, node.op_type() + "-" + std::to_string(step.version), model_types)) return used;
  }
  return std::nullopt;
}

std::vector<std::string> OpTable::op_types() const {
  std::vector<std::string> names;
  for (const auto& [name, steps] : ops_) names.push_back(name);
  return names;
}

const OpRegistry& OpRegistry::builtin() {
  static const OpRegistry registry = [] {
    OpRegistry built;
    for (const auto& file : embedded_files()) {
      if (!file.path.starts_with("targets/") || !file.path.ends_with(".ops")) continue;
      std::string_view domain = file.path.substr(8, file.path.size() - 8 - 4);
      try {
        built.tables_.emplace(normalize_domain(domain), OpTable::parse(file.contents));
      } catch (const std::exception& e) {
        throw std::logic_error("embedded " + std::string(file.path) + ": " + e.what());
      }
    }
    return built;
  }();
  return registry;
}

const OpTable* OpRegistry::table(std::string_view domain) const {
  auto it = tables_.find(normalize_domain(domain));
  return it == tables_.end() ? nullptr : &it->second;
}

}  // namespace onnx_rewrite
