#include "engine/simplify.h"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph/walk.h"
#include "verify/opset.h"

namespace onnx_rewrite {
namespace {

// Beyond this size two initializers are not compared: serializing a weight to hash it would cost
// what the rest of the run does, and exporters rarely store big ones twice.
constexpr size_t kLargestDeduplicated = 1 << 20;

bool is_standard_domain(const std::string& domain) { return normalize_domain(domain).empty(); }

// Ops two of which with the same inputs may compute different values.
const std::unordered_set<std::string> kNondeterministic = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                                                           "Multinomial",  "Bernoulli",        "Dropout"};

// The tensor a Constant node holds, named after its output; nothing for a sparse value (an
// initializer can't hold one) or a node that is not a plain Constant.
std::optional<onnx::TensorProto> constant_tensor(const onnx::NodeProto& node) {
  if (node.op_type() != "Constant" || !is_standard_domain(node.domain()) || node.output_size() != 1 || node.attribute_size() != 1) {
    return std::nullopt;
  }
  const auto& attribute = node.attribute(0);
  if (!attribute.ref_attr_name().empty()) return std::nullopt;
  onnx::TensorProto tensor;
  const std::string_view name = attribute.name();
  if (name == "value") {
    tensor = attribute.t();
  } else if (name == "value_float") {
    tensor.set_data_type(onnx::TensorProto::FLOAT);
    tensor.add_float_data(attribute.f());
  } else if (name == "value_floats") {
    tensor.set_data_type(onnx::TensorProto::FLOAT);
    tensor.add_dims(attribute.floats_size());
    *tensor.mutable_float_data() = attribute.floats();
  } else if (name == "value_int") {
    tensor.set_data_type(onnx::TensorProto::INT64);
    tensor.add_int64_data(attribute.i());
  } else if (name == "value_ints") {
    tensor.set_data_type(onnx::TensorProto::INT64);
    tensor.add_dims(attribute.ints_size());
    *tensor.mutable_int64_data() = attribute.ints();
  } else if (name == "value_string") {
    tensor.set_data_type(onnx::TensorProto::STRING);
    tensor.add_string_data(attribute.s());
  } else if (name == "value_strings") {
    tensor.set_data_type(onnx::TensorProto::STRING);
    tensor.add_dims(attribute.strings_size());
    *tensor.mutable_string_data() = attribute.strings();
  } else {
    return std::nullopt;  // sparse_value
  }
  tensor.set_name(node.output(0));
  return tensor;
}

// Deletes the elements `removed` marks, keeping the order of the others.
template <typename Element>
void erase_marked(google::protobuf::RepeatedPtrField<Element>& elements, const std::vector<char>& removed) {
  int kept = 0;
  for (int i = 0; i < elements.size(); ++i) {
    if (removed[static_cast<size_t>(i)]) continue;
    if (kept != i) elements.SwapElements(kept, i);
    ++kept;
  }
  elements.DeleteSubrange(kept, elements.size() - kept);
}

class MainGraphSimplifier {
 public:
  MainGraphSimplifier(Model& model, RewriteResult& result) : model_(model), graph_(*model.proto.mutable_graph()), result_(result) {
    for (const auto& input : graph_.input()) fixed_.insert(input.name());
    for (const auto& output : graph_.output()) fixed_.insert(output.name());
    // A training graph may read any initializer of the main graph by name.
    training_ = model.proto.training_info_size() > 0;
  }

  // Whether anything changed.
  bool run() {
    // An initializer of IR below 4 must also be a graph input: a Constant stays a node there.
    if (model_.proto.ir_version() >= 4) constants_to_initializers();
    if (!training_) {
      merge_duplicate_initializers();
      merge_common_subexpressions();
      name_outputs_at_their_producers();
      remove_unused_initializers();
      remove_stale_value_info();
    }
    return changed_;
  }

 private:
  // What a clean-up did, as a rule's statistics: `how_many` changes, of which `nodes` removed a node.
  void count(const char* what, int how_many, bool nodes = false) {
    if (how_many == 0) return;
    changed_ = true;
    RuleStats& stats = result_.rules[what];
    stats.matches += how_many;
    if (nodes) stats.nodes_removed += how_many;
  }

  // Every name a node of the main graph or of a graph nested in it reads.
  std::unordered_set<std::string> reads() const {
    std::unordered_set<std::string> read;
    for_each_nested_node(graph_.node(), [&](const onnx::NodeProto& node) {
      for (const auto& input : node.input()) read.insert(input);
    });
    return read;
  }

  void constants_to_initializers() {
    auto& nodes = *graph_.mutable_node();
    std::vector<char> moved(static_cast<size_t>(nodes.size()), 0);
    int count_moved = 0;
    for (int i = 0; i < nodes.size(); ++i) {
      const auto& node = nodes[i];
      if (node.output_size() != 1 || fixed_.contains(node.output(0))) continue;
      auto tensor = constant_tensor(node);
      if (!tensor) continue;
      *graph_.add_initializer() = std::move(*tensor);
      moved[static_cast<size_t>(i)] = 1;
      ++count_moved;
    }
    erase_marked(nodes, moved);
    count("simplify-constant-nodes", count_moved, /*nodes=*/true);
  }

  // Readers of a duplicate read the first of its kind; the duplicate then has no reader. Only
  // tensors sharing type and dims with another are read in full, each at most 1 MiB.
  void merge_duplicate_initializers() {
    std::unordered_map<std::string, std::vector<const onnx::TensorProto*>> by_header;  // type and dims -> tensors
    for (const auto& initializer : graph_.initializer()) {
      if (fixed_.contains(initializer.name()) || initializer.data_location() == onnx::TensorProto::EXTERNAL) continue;
      if (model_.tensor_size(initializer) > kLargestDeduplicated) continue;
      std::string header = std::to_string(initializer.data_type());
      for (int64_t dim : initializer.dims()) header += ',' + std::to_string(dim);
      by_header[header].push_back(&initializer);  // in order: the first of its kind stays
    }
    std::unordered_map<std::string, std::string> replaced_by;
    for (auto& [header, tensors] : by_header) {
      if (tensors.size() < 2) continue;
      std::unordered_map<std::string, const onnx::TensorProto*> first_of_kind;  // serialization without the name
      for (const auto* tensor : tensors) {
        onnx::TensorProto unnamed = model_.tensor_with_data(*tensor);
        unnamed.clear_name();
        std::string key;
        unnamed.SerializeToString(&key);
        auto [it, first] = first_of_kind.try_emplace(std::move(key), tensor);
        if (!first) replaced_by.emplace(tensor->name(), it->second->name());
      }
    }
    if (replaced_by.empty()) return;
    rename_reads(replaced_by, /*main_graph_too=*/true);
    count("simplify-duplicate-initializers", static_cast<int>(replaced_by.size()));
  }

  // A node computing what an earlier one computes (same op, inputs and attributes) goes; its
  // readers read the earlier node's outputs. In node order, which is topological, so that a chain
  // merges in one pass: torch writes a Shape (x) → Gather for every x.size(i) it reads.
  void merge_common_subexpressions() {
    std::unordered_map<std::string, std::string> replaced_by;  // output -> the equal earlier output
    std::unordered_map<std::string, int> first_with_key;       // key -> position
    auto& nodes = *graph_.mutable_node();
    std::vector<char> merged(static_cast<size_t>(nodes.size()), 0);
    for (int i = 0; i < nodes.size(); ++i) {
      auto& node = nodes[i];
      for (auto& input : *node.mutable_input()) {
        auto found = replaced_by.find(input);
        if (found != replaced_by.end()) input = found->second;
      }
      auto key = subexpression_key(node);
      if (!key) continue;
      auto [it, first] = first_with_key.try_emplace(std::move(*key), i);
      if (first) continue;
      const auto& earlier = nodes[it->second];
      for (int k = 0; k < node.output_size(); ++k) {
        if (!node.output(k).empty()) replaced_by.emplace(node.output(k), earlier.output(k));
      }
      merged[static_cast<size_t>(i)] = 1;
    }
    if (replaced_by.empty()) return;
    rename_reads(replaced_by, /*main_graph_too=*/false);  // the main graph's were renamed on the way
    erase_marked(nodes, merged);
    const int removed = static_cast<int>(std::count(merged.begin(), merged.end(), 1));
    count("simplify-common-subexpressions", removed, /*nodes=*/true);
  }

  // What makes two nodes compute the same, or nothing for a node that may not be merged: one with
  // side effects or randomness, of a domain we can't vouch for, holding a graph, or writing a
  // graph output (whose name must stay where it is).
  std::optional<std::string> subexpression_key(const onnx::NodeProto& node) const {
    if (!is_standard_domain(node.domain()) && node.domain() != "ai.onnx.ml") return std::nullopt;
    if (node.input_size() == 0 || kNondeterministic.contains(node.op_type())) return std::nullopt;
    for (const auto& output : node.output()) {
      if (fixed_.contains(output)) return std::nullopt;
    }
    std::vector<const onnx::AttributeProto*> attributes;
    for (const auto& attribute : node.attribute()) {
      if (attribute.type() == onnx::AttributeProto::GRAPH || attribute.type() == onnx::AttributeProto::GRAPHS) return std::nullopt;
      attributes.push_back(&attribute);
    }
    std::sort(attributes.begin(), attributes.end(), [](auto* a, auto* b) { return a->name() < b->name(); });
    std::string key = node.domain() == "ai.onnx" ? std::string() : node.domain();
    key += '\0' + node.op_type() + '\0' + std::to_string(node.output_size());
    for (const auto& output : node.output()) key += output.empty() ? '-' : '+';  // which optional outputs it writes
    for (const auto& input : node.input()) key += '\0' + input;
    for (const auto* attribute : attributes) {
      key += '\1';
      key += attribute->SerializeAsString();
    }
    return key;
  }

  // `y = Identity (x)` writing a graph output, x computed by a node of the main graph and no
  // graph input, output or initializer: that node computes y itself, and x's readers read y (a
  // graph output's name is the interface; x's is nobody's).
  void name_outputs_at_their_producers() {
    auto& nodes = *graph_.mutable_node();
    std::unordered_map<std::string, onnx::NodeProto*> producers;
    for (auto& node : nodes) {
      for (const auto& output : node.output()) {
        if (!output.empty()) producers.emplace(output, &node);
      }
    }
    std::unordered_set<std::string> not_renamed;  // the interface's names
    for (const auto& name : fixed_) not_renamed.insert(name);
    for (const auto& initializer : graph_.initializer()) not_renamed.insert(initializer.name());
    std::unordered_map<std::string, std::string> renamed;  // x -> y
    std::vector<char> removed(static_cast<size_t>(nodes.size()), 0);
    for (int i = 0; i < nodes.size(); ++i) {
      const auto& node = nodes[i];
      if (node.op_type() != "Identity" || !is_standard_domain(node.domain()) || node.input_size() != 1 || node.output_size() != 1) continue;
      const std::string& x = node.input(0);
      const std::string& y = node.output(0);
      auto producer = producers.find(x);
      if (!fixed_.contains(y) || not_renamed.contains(x) || renamed.contains(x) || producer == producers.end()) continue;
      for (auto& output : *producer->second->mutable_output()) {
        if (output == x) output = y;
      }
      renamed.emplace(x, y);
      removed[static_cast<size_t>(i)] = 1;
    }
    if (renamed.empty()) return;
    rename_reads(renamed, /*main_graph_too=*/true);
    erase_marked(nodes, removed);
    count("simplify-graph-output-identities", static_cast<int>(renamed.size()), /*nodes=*/true);
  }

  // Nodes reading a value of `replaced_by` read its replacement: in the graphs nested in the main
  // graph (which may read its values by name), and in the main graph itself if asked.
  void rename_reads(const std::unordered_map<std::string, std::string>& replaced_by, bool main_graph_too) {
    for_each_graph(
        model_.proto,
        [&](const auto& view) {
          if (view.place->root().kind() != Place::Kind::kMainGraph) return;
          if (view.place->kind() == Place::Kind::kMainGraph && !main_graph_too) return;
          for (auto& node : *view.nodes) {
            for (auto& input : *node.mutable_input()) {
              auto found = replaced_by.find(input);
              if (found != replaced_by.end()) input = found->second;
            }
          }
        },
        /*with_training=*/false);
  }

  void remove_unused_initializers() {
    const auto read = reads();
    const int before = graph_.initializer_size();
    model_.remove_initializers(graph_, [&](const onnx::TensorProto& initializer) {
      return !read.contains(initializer.name()) && !fixed_.contains(initializer.name());
    });
    count("simplify-unused-initializers", before - graph_.initializer_size());
  }

  // value_info of values the graph no longer has (a Constant's output became an initializer
  // stays described).
  void remove_stale_value_info() {
    std::unordered_set<std::string> defined;
    for (const auto& node : graph_.node()) {
      for (const auto& output : node.output()) defined.insert(output);
    }
    for (const auto& initializer : graph_.initializer()) defined.insert(initializer.name());
    for (const auto& input : graph_.input()) defined.insert(input.name());
    auto& value_info = *graph_.mutable_value_info();
    std::vector<char> stale;
    for (const auto& info : value_info) stale.push_back(!defined.contains(info.name()));
    erase_marked(value_info, stale);
    count("simplify-unused-value-info", static_cast<int>(std::count(stale.begin(), stale.end(), 1)));
  }

  Model& model_;
  onnx::GraphProto& graph_;
  RewriteResult& result_;
  std::unordered_set<std::string> fixed_;  // graph input and output names
  bool training_ = false;
  bool changed_ = false;
};

}  // namespace

bool simplify_main_graph(Model& model, RewriteResult& result) { return MainGraphSimplifier(model, result).run(); }

}  // namespace onnx_rewrite
