// com.microsoft.nchwc (ONNX Runtime's blocked NCHWc layout) back to standard NCHW ops
// (rules/defuse-nchwc/nchwc.rules).
//
// ORT's NchwcTransformer stores a tensor [N, C, H, W] as [N, Cp/B, H, W, B] (Cp = C rounded up to
// the MLAS block size B, 8 or 16 by CPU; the padded channels hold whatever the ops compute there)
// behind a 4-D shape [N, Cp, H, W]. We give every such blocked tensor the plain NCHW meaning with
// its Cp channels: an NCHWc Conv becomes a Conv whose weights are reordered back to OIHW (the
// padded filters and input channels kept, zero), pools stay pools, ReorderInput pads the channels
// and ReorderOutput slices them off. The standard ops ORT runs on blocked tensors (activations,
// Add/Sum/Mul of two blocked tensors, Concat on channels) compute elementwise, so they keep their
// meaning unchanged; the only one that reads the layout, the [0, -1, 0, 0, B] Reshape ORT uses
// around an Add whose shapes it can't prove equal, becomes [0, -1, 0, 0, 1].
//
// That meaning must change for all ops touching a blocked tensor at once, so the builder (one for
// the whole family) first analyzes the node's whole region (the NCHWc ops and the standard ops
// connected through blocked tensors) and declines, with the same reason for every node of the
// region, unless all of it can be rewritten. Rules apply in one round from one view of the graph,
// so the region is rewritten together or not at all.
#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include <fmt/format.h>
#include <onnx/defs/schema.h>

#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

constexpr const char* kNchwcDomain = "com.microsoft.nchwc";
constexpr int64_t kBlockSizes[] = {8, 16};  // MLAS: 8 on x86-64 up to AVX2, 16 with AVX-512F and on ARM64

bool is_nchwc(const NodeView& node) { return node.domain() == kNchwcDomain; }

int64_t round_up(int64_t channels, int64_t block) { return (channels + block - 1) / block * block; }

// The block size MLAS would pick on this machine (MlasNchwcGetBlockSize): the tie-breaker when the
// graph fits both sizes, since a model optimized at level `all` is normally rewritten where ORT ran.
int64_t host_block_size() {
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") ? 16 : 8;
#elif defined(__aarch64__)
  return 16;
#else
  return 8;
#endif
}

// Standard ops ORT leaves on blocked tensors that compute elementwise (any layout gives the same
// numbers, as long as every non-scalar input is blocked the same way).
const std::set<std::string>& elementwise_ops() {
  static const std::set<std::string> ops = {
      "Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu", "Softplus",
      "Softsign", "ThresholdedRelu", "Gelu", "Mish", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Floor",
      "Ceil", "Round", "Sign", "Identity", "Dropout", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean"};
  return ops;
}

// The attributes of an NCHWc pooling node that the standard op at `opset` takes. ORT writes its
// own schema's defaults (ceil_mode = 0, storage_order = 0) even where the standard op at the
// model's opset has no such attribute (MaxPool before 10): those go when they hold the value
// that changes nothing; any other value makes the node inexpressible (`why`). ONNX's registry
// here knows opsets up to 17; later opsets have every attribute ORT's pools carry.
bool changes_nothing(const onnx::AttributeProto& attribute) {
  if (attribute.type() == onnx::AttributeProto::INT) return attribute.i() == 0;  // ceil_mode, storage_order
  if (attribute.type() == onnx::AttributeProto::INTS) {                          // dilations
    return std::all_of(attribute.ints().begin(), attribute.ints().end(), [](int64_t v) { return v == 1; });
  }
  return false;
}

std::optional<Attributes> pool_attributes(const NodeView& node, int opset, std::string& why) {
  constexpr int kKnownOpsets = 17;
  const auto* schema = onnx::OpSchemaRegistry::Schema(node.op_type(), std::min(opset, kKnownOpsets), "");
  Attributes kept;
  for (const auto& attribute : node.attributes_except()) {
    if (opset > kKnownOpsets || !schema || schema->attributes().count(attribute.name())) {
      kept.push_back(attribute);
      continue;
    }
    if (!changes_nothing(attribute)) {
      why = fmt::format("{} '{}' sets {}, which {} of ai.onnx {} lacks", node.op_type(), node.description(),
                        attribute.name(), node.op_type(), opset);
      return std::nullopt;
    }
  }
  return kept;
}

// What the NCHWc ops of one scope imply: which values are blocked, each connected region, and
// the block size.
class Layout {
 public:
  explicit Layout(const BuildContext& match) : match_(match), nodes_(match.graph_nodes()) {
    for (const NodeView& node : nodes_) {
      if (is_nchwc(node)) nchwc_nodes_[node.op_type()].push_back(node);
    }
    if (nchwc_nodes_.empty()) return;
    // Blocked values: made by an NCHWc op other than ReorderOutput, or by a standard op reading a
    // blocked value. One pass in graph order; more only if the graph is not sorted.
    for (bool changed = true; changed;) {
      changed = false;
      for (const NodeView& node : nodes_) {
        bool makes_blocked = is_nchwc(node) && node.op_type() != "ReorderOutput";
        if (!is_nchwc(node)) {
          for (const Value& input : node.inputs()) makes_blocked = makes_blocked || blocked(input);
        }
        if (!makes_blocked) continue;
        for (const Value& output : node.outputs()) {
          if (!output.absent()) changed = blocked_.insert(output.name).second || changed;
        }
      }
    }
  }

  bool blocked(const Value& value) const { return blocked_.count(value.name) != 0; }

  // The nodes connected to `start` through blocked values, in graph order.
  std::vector<NodeView> region(const NodeView& start) {
    std::vector<NodeView> queue{start};
    auto visit = [&](const NodeView& other) {
      if (std::find(queue.begin(), queue.end(), other) == queue.end()) queue.push_back(other);
    };
    for (size_t i = 0; i < queue.size(); ++i) {
      const NodeView node = queue[i];
      for (const Value& input : node.inputs()) {
        if (blocked(input)) visit(*match_.producer(input));
      }
      for (const Value& output : node.outputs()) {
        if (!blocked(output)) continue;
        for (const auto& read : match_.readers(output)) visit(read.node);
      }
    }
    std::vector<NodeView> in_order;
    for (const NodeView& node : nodes_) {
      if (std::find(queue.begin(), queue.end(), node) != queue.end()) in_order.push_back(node);
    }
    return in_order;
  }

  // Channels of a plain NCHW (or NHWC, `channels_last`) value, when the graph tells.
  std::optional<int64_t> plain_channels(const Value& value, bool channels_last, int depth = 0) {
    if (value.absent() || depth > 64) return std::nullopt;
    const auto dims = match_.facts_of(value).static_dims();
    if (dims && dims->size() == 4) {
      const int64_t dim = (*dims)[channels_last ? 3 : 1];
      if (dim > 0) return dim;
    }
    const auto produced = match_.producer(value);
    if (!produced || produced->output(0).name != value.name) return std::nullopt;
    const NodeView& node = *produced;
    const std::string& op = node.op_type();
    if (is_nchwc(node)) {
      if (op != "ReorderOutput" || (node.attribute_int("channels_last", 0) != 0) != channels_last) return std::nullopt;
      return node.attribute_int("channels", 0);
    }
    const std::string domain = node.domain();
    if (!domain.empty() && domain != "com.microsoft") return std::nullopt;
    if (channels_last) return std::nullopt;
    if (op == "Conv" || op == "FusedConv") {
      auto weight = match_.facts_of(node.input(1)).static_dims();
      return weight && weight->size() == 4 ? std::optional<int64_t>((*weight)[0]) : std::nullopt;
    }
    if (op == "Concat") {
      if (node.attribute_int("axis", 0) != 1) return std::nullopt;
      int64_t total = 0;
      for (const Value& input : node.inputs()) {
        auto channels = plain_channels(input, false, depth + 1);
        if (!channels) return std::nullopt;
        total += *channels;
      }
      return total;
    }
    if (op == "Reshape") {  // a constant 4-D shape: its channels, or 0 for the input's
      auto shape = match_.constant_of(node.input(1));
      if (!shape || shape->numbers.size() != 4 || node.attribute_int("allowzero", 0) != 0) return std::nullopt;
      const int64_t dim = shape->ints()[1];
      if (dim > 0) return dim;
      return dim == 0 ? plain_channels(node.input(0), false, depth + 1) : std::nullopt;
    }
    static const std::set<std::string> keep_channels = {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool",
                                                         "LpPool", "BatchNormalization", "InstanceNormalization",
                                                         "Resize", "Upsample", "LRN"};
    if (keep_channels.count(op) || elementwise_ops().count(op)) {
      for (const Value& input : node.inputs()) {
        if (auto channels = plain_channels(input, false, depth + 1)) return channels;
        if (!elementwise_ops().count(op)) break;  // only the data input of the others
      }
    }
    return std::nullopt;
  }

  // Cp of a blocked 4-D value for block size `block`, when the graph tells.
  std::optional<int64_t> padded_channels(const Value& value, int64_t block, int depth = 0) {
    if (value.absent() || depth > 64) return std::nullopt;
    const auto dims = match_.facts_of(value).static_dims();
    if (dims && dims->size() == 4 && (*dims)[1] > 0) return (*dims)[1];
    const auto produced = match_.producer(value);
    if (!produced) return std::nullopt;
    const NodeView& node = *produced;
    const std::string& op = node.op_type();
    if (is_nchwc(node)) {
      if (op == "Conv") {
        auto weight = match_.facts_of(node.input(1)).static_dims();
        return weight && weight->size() == 4 ? std::optional<int64_t>((*weight)[0]) : std::nullopt;
      }
      if (op == "ReorderInput") {
        auto channels = reorder_input_channels(node);
        return channels ? std::optional<int64_t>(round_up(*channels, block)) : std::nullopt;
      }
      return padded_channels(node.input(0), block, depth + 1);  // pools, Upsample
    }
    if (op == "Concat") {
      int64_t total = 0;
      for (const Value& input : node.inputs()) {
        auto channels = padded_channels(input, block, depth + 1);
        if (!channels) return std::nullopt;
        total += *channels;
      }
      return total;
    }
    if (op == "Reshape") {  // the unsplitting Reshape [0, Cp or -1, 0, 0]
      auto shape = match_.constant_of(node.input(1));
      if (shape && shape->numbers.size() == 4 && shape->ints()[1] > 0) return shape->ints()[1];
    }
    for (const Value& input : node.inputs()) {
      if (blocked(input)) return padded_channels(input, block, depth + 1);
    }
    return std::nullopt;
  }

  // Whether ORT reordered a Conv's weights OIHWBo (NCHW input, depthwise) rather than OIHWBiBo
  // (nchwc_transformer.cc, TransformConv).
  static bool per_output_block(const std::vector<int64_t>& weight_dims, int64_t group, int64_t block) {
    const int64_t filters = weight_dims[0], input_channels = weight_dims[1];
    return group > 1 ? input_channels == 1 && filters == group : input_channels < block;
  }

  // Why block size `block` can't be the one ORT used for this scope's NCHWc ops ("" if it can).
  std::string block_conflict(int64_t block) {
    for (const NodeView& node : nchwc_nodes("Conv")) {
      auto weight = match_.facts_of(node.input(1)).static_dims();
      if (!weight || weight->size() != 4) continue;
      const auto& dims = *weight;
      const int64_t group = node.attribute_int("group", 1);
      if (dims[0] % block) return fmt::format("Conv '{}' has {} filters", node.description(), dims[0]);
      const bool blocked_input = blocked(node.input(0));
      const bool by_output_block = per_output_block(dims, group, block);
      if (group == 1 && blocked_input == by_output_block) {
        return fmt::format("Conv '{}' reads {} channels {}", node.description(), dims[1],
                           blocked_input ? "blocked" : "in NCHW");
      }
      if (!by_output_block && (dims[1] % block || (dims[0] / group) % block)) {
        return fmt::format("Conv '{}' has {} input channels per group", node.description(), dims[1]);
      }
      if (blocked_input) {
        auto channels = padded_channels(node.input(0), block);
        if (channels && *channels != dims[1] * group) {
          return fmt::format("Conv '{}' reads {} channels, its input has {}", node.description(), dims[1] * group,
                             *channels);
        }
      }
    }
    for (const NodeView& node : nchwc_nodes("ReorderOutput")) {
      auto channels = padded_channels(node.input(0), block);
      const int64_t logical = node.attribute_int("channels", 0);
      if (channels && (*channels % block || *channels != round_up(logical, block))) {
        return fmt::format("ReorderOutput '{}' takes {} of {} channels", node.description(), logical, *channels);
      }
    }
    for (const NodeView& node : nodes_) {
      auto split = split_reshape_block(node);
      if (split && *split != block) return fmt::format("Reshape '{}' splits blocks of {}", node.description(), *split);
    }
    for (const NodeView& node : nchwc_nodes("ReorderInput")) {
      auto channels = padded_channels(node.output(0), block);
      for (const auto& read : match_.readers(node.output(0))) {
        const NodeView& conv = read.node;
        if (conv.op_type() != "Conv" || !is_nchwc(conv) || read.input != 0) continue;
        auto weight = match_.facts_of(conv.input(1)).static_dims();
        if (channels && weight && weight->size() == 4 && *channels != (*weight)[1] * conv.attribute_int("group", 1)) {
          return fmt::format("ReorderInput '{}' makes {} channels for Conv '{}'", node.description(), *channels,
                             conv.description());
        }
      }
    }
    return {};
  }

  struct BlockSize {
    int64_t size;
    bool from_this_machine;  // the graph fits both: MLAS's choice here decided
  };

  // The block size of this scope's NCHWc ops, or why none fits.
  std::variant<BlockSize, std::string> block_size() {
    std::vector<int64_t> fitting;
    std::vector<std::string> conflicts;
    for (int64_t block : kBlockSizes) {
      std::string conflict = block_conflict(block);
      if (conflict.empty()) fitting.push_back(block);
      else conflicts.push_back(fmt::format("not {}: {}", block, conflict));
    }
    if (fitting.empty()) return fmt::format("no NCHWc block size fits the graph ({})", fmt::join(conflicts, "; "));
    if (fitting.size() == 1) return BlockSize{fitting.front(), false};
    const int64_t host = host_block_size();
    return BlockSize{std::find(fitting.begin(), fitting.end(), host) != fitting.end() ? host : fitting.front(), true};
  }

  // Why the region can't go back to NCHW ("" if it can), given the block size and the opset.
  std::string region_problem(const std::vector<NodeView>& nodes, int64_t block, int opset) {
    for (const NodeView& node : nodes) {
      auto problem = is_nchwc(node) ? nchwc_problem(node, block, opset) : standard_problem(node, block);
      if (!problem.empty()) return problem;
      for (const Value& output : node.outputs()) {
        if (!blocked(output)) continue;
        if (match_.is_graph_output(output)) return fmt::format("blocked value '{}' is an output of the graph", output);
        for (const auto& read : match_.readers(output)) {
          if (read.input < 0) return fmt::format("blocked value '{}' is read inside a subgraph", output);
        }
      }
    }
    return {};
  }

 private:
  std::string nchwc_problem(const NodeView& node, int64_t block, int opset) {
    const std::string& op = node.op_type();
    const std::string name = node.description();
    if (op == "ReorderInput") {
      if (blocked(node.input(0))) return fmt::format("ReorderInput '{}' reads a blocked value", name);
      if (!reorder_input_channels(node)) {
        return fmt::format("the channel count of ReorderInput '{}''s input is unknown", name);
      }
      return {};
    }
    if (op != "Conv" && !blocked(node.input(0))) {
      return fmt::format("{} '{}' reads a value that is not blocked", op, name);
    }
    if (op == "Conv") {
      const ShapeFacts& weight_facts = match_.facts_of(node.input(1));
      auto weight = weight_facts.static_dims();
      if (!weight || weight->size() != 4 || !match_.is_constant(node.input(1))) {
        return fmt::format("the weights of Conv '{}' are not a constant 4-D tensor", name);
      }
      if (weight_facts.elem_type != TensorProto::FLOAT) return fmt::format("the weights of Conv '{}' are not float", name);
      if (node.attribute_int("group", 1) > 1 && !blocked(node.input(0))) {
        return fmt::format("grouped Conv '{}' reads a value that is not blocked", name);
      }
      std::string why;
      if (!mlas_activation(node, why)) return why;
      return {};
    }
    if (op == "Upsample") {
      const auto* scales = node.attribute("scales");
      if (!scales || scales->ints_size() != 4) return fmt::format("Upsample '{}' has no 4 scales", name);
      const std::string mode = upsample_mode(node), transform = upsample_transform(node);
      if (mode != "nearest" && mode != "linear") return fmt::format("Upsample '{}' has mode '{}'", name, mode);
      if (opset < 7) return "Upsample needs ai.onnx >= 7";
      if (opset < 11 && transform != "asymmetric") {
        return fmt::format("Upsample '{}' ({} {}) needs Resize of ai.onnx >= 11", name, mode, transform);
      }
      return {};
    }
    if (op == "ReorderOutput") return {};
    static const std::set<std::string> pools = {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"};
    if (!pools.count(op)) return fmt::format("unknown NCHWc op {} ('{}')", op, name);
    std::string why;
    return pool_attributes(node, opset, why) ? "" : why;
  }

  std::string standard_problem(const NodeView& node, int64_t block) {
    const std::string& op = node.op_type();
    const std::string name = node.description();
    if (!node.domain().empty()) {
      return fmt::format("{}.{} '{}' reads a blocked value", node.domain(), op, name);
    }
    if (op == "Concat") {
      if (node.attribute_int("axis", 0) != 1) {
        return fmt::format("Concat '{}' of blocked values is not on channels", name);
      }
      for (const Value& input : node.inputs()) {
        if (!blocked(input)) return fmt::format("Concat '{}' mixes blocked and plain values", name);
      }
      return {};
    }
    if (op == "Reshape") {
      if (split_reshape(node, block) || unsplit_reshape(node)) return {};
      return fmt::format("Reshape '{}' reads the blocked layout", name);
    }
    if (!elementwise_ops().count(op)) return fmt::format("{} '{}' reads the blocked layout", op, name);
    for (const Value& input : node.inputs()) {
      if (input.absent() || blocked(input)) continue;
      auto values = match_.constant_of(input, 1);
      if (!values || values->numbers.size() != 1) {
        return fmt::format("{} '{}' broadcasts a plain value over a blocked one", op, name);
      }
    }
    return {};
  }

 public:
  // The block of ORT's [0, -1 or Cp/B, 0, 0, B] view of a blocked [N, Cp, H, W] (TransformBinary).
  std::optional<int64_t> split_reshape_block(const NodeView& node) {
    if (node.op_type() != "Reshape" || !blocked(node.input(0))) return std::nullopt;
    auto shape = match_.constant_of(node.input(1));
    if (!shape || shape->numbers.size() != 5) return std::nullopt;
    const auto dims = shape->ints();
    if (dims[0] != 0 || dims[2] != 0 || dims[3] != 0 || (dims[1] != -1 && dims[1] <= 0)) return std::nullopt;
    return dims[4];
  }

  bool split_reshape(const NodeView& node, int64_t block) {
    auto split = split_reshape_block(node);
    if (!split || *split != block) return false;
    auto shape = match_.constant_of(node.input(1))->ints();
    auto channels = padded_channels(node.input(0), block);
    return shape[1] == -1 || !channels || *channels == shape[1] * block;
  }

  // ORT's [0, -1 or Cp, 0, 0] back from the split view.
  bool unsplit_reshape(const NodeView& node) {
    auto shape = match_.constant_of(node.input(1));
    if (!shape || shape->numbers.size() != 4) return false;
    const auto dims = shape->ints();
    const auto produced = match_.producer(node.input(0));
    return dims[0] == 0 && dims[2] == 0 && dims[3] == 0 && produced && !is_nchwc(*produced);
  }

  // Channels of ReorderInput's input: the graph's, else the logical channel count ORT keeps
  // downstream (the Convs it feeds may be padded, a depthwise one in group count too).
  std::optional<int64_t> reorder_input_channels(const NodeView& node) {
    if (auto channels = plain_channels(node.input(0), node.attribute_int("channels_last", 0) != 0)) return channels;
    return logical_channels_downstream(node.output(0));
  }

  // The `channels` of the first ReorderOutput reached from a blocked value through ops that keep
  // the channels (pools, Upsample, depthwise Convs, elementwise ops, the split Reshapes).
  std::optional<int64_t> logical_channels_downstream(const Value& value, int depth = 0) {
    if (depth > 64) return std::nullopt;
    for (const auto& read : match_.readers(value)) {
      const NodeView& node = read.node;
      const std::string& op = node.op_type();
      bool keeps = false;
      if (is_nchwc(node)) {
        if (op == "ReorderOutput") return node.attribute_int("channels", 0);
        auto weight = op == "Conv" ? match_.facts_of(node.input(1)).static_dims() : std::nullopt;
        const bool depthwise = weight && weight->size() == 4 && (*weight)[1] == 1 &&
                               (*weight)[0] == node.attribute_int("group", 1) && read.input == 0;
        keeps = op == "MaxPool" || op == "AveragePool" || op == "GlobalMaxPool" || op == "GlobalAveragePool" ||
                op == "Upsample" || depthwise;
      } else {
        keeps = node.domain().empty() && (elementwise_ops().count(op) || op == "Reshape");
      }
      if (!keeps || node.outputs().empty()) continue;
      if (auto channels = logical_channels_downstream(node.output(0), depth + 1)) return channels;
    }
    return std::nullopt;
  }

  static std::string upsample_mode(const NodeView& node) {
    const auto* mode = node.attribute("mode");
    return mode ? mode->s() : "nearest";
  }

  static std::string upsample_transform(const NodeView& node) {
    const auto* transform = node.attribute("coordinate_transformation_mode");
    return transform ? transform->s() : "asymmetric";
  }

 private:
  const std::vector<NodeView>& nchwc_nodes(const std::string& op) const {
    static const std::vector<NodeView> none;
    auto it = nchwc_nodes_.find(op);
    return it == nchwc_nodes_.end() ? none : it->second;
  }

  const BuildContext& match_;
  std::vector<NodeView> nodes_;  // the graph's, in order
  std::map<std::string, std::vector<NodeView>> nchwc_nodes_;
  std::unordered_set<std::string> blocked_;
};

// Every builder starts here: the block size, or why the node's region stays NCHWc.
struct Analysis {
  std::string problem;
  int64_t block = 0;
};

Analysis analyze(Layout& layout, const BuildContext& match, GraphBuilder& b) {
  auto size = layout.block_size();
  if (auto* why = std::get_if<std::string>(&size)) return {*why};
  const auto block = std::get<Layout::BlockSize>(size);
  const auto nodes = layout.region(match.anchor());
  if (auto problem = layout.region_problem(nodes, block.size, b.opset()); !problem.empty()) {
    return {fmt::format("the NCHWc region of {} nodes stays as it is: {}", nodes.size(), problem)};
  }
  if (block.from_this_machine) {
    b.note(fmt::format("the NCHWc graph fits block sizes 8 and 16; {} was taken, ONNX Runtime's choice on this CPU: "
                       "rewrite where the model was optimized",
                       block.size));
  }
  return {{}, block.size};
}

// OIHWBiBo ([O/B][I/B][K][Bi][Bo]) or OIHWBo ([O/B][I][K][Bo]) back to OIHW (MLAS reorder.cpp).
std::vector<double> unreorder_weights(const std::vector<double>& reordered, const std::vector<int64_t>& dims,
                                      int64_t block, bool per_output_block) {
  const int64_t filters = dims[0], inputs = dims[1], kernel = dims[2] * dims[3];
  std::vector<double> oihw(reordered.size());
  for (int64_t o = 0; o < filters; ++o) {
    for (int64_t i = 0; i < inputs; ++i) {
      for (int64_t k = 0; k < kernel; ++k) {
        const int64_t at = per_output_block
                               ? (((o / block) * inputs + i) * kernel + k) * block + o % block
                               : (((o / block) * (inputs / block) + i / block) * kernel + k) * block * block +
                                     (i % block) * block + o % block;
        oihw[static_cast<size_t>((o * inputs + i) * kernel + k)] = reordered[static_cast<size_t>(at)];
      }
    }
  }
  return oihw;
}

BuildResult conv(const BuildContext& match, GraphBuilder& b, Layout&, int64_t block) {
  const NodeView node = match.anchor();
  const auto weight_dims = match.facts("w").static_dims();
  auto weights = match.constant("w", SIZE_MAX);
  if (!weights) return decline("the Conv weights can't be read");
  const auto& dims = *weight_dims;
  const bool by_output_block = Layout::per_output_block(dims, node.attribute_int("group", 1), block);
  Value w = b.constant(make_tensor(TensorProto::FLOAT, dims,
                                   unreorder_weights(weights->numbers, dims, block, by_output_block)));
  std::string why;
  auto activation = mlas_activation(node, why);
  Value y = b.op("Conv", {match.value("x"), w, match.value("b")},
                 node.attributes_except({"activation"}));
  if (match.has("sum")) y = b.Add(y, match.value("sum"));
  Value activated;
  auto failed = apply_activation(b, y, *activation, TensorProto::FLOAT, activated);
  if (failed) return decline(*failed);
  b.output(match.value("y"), activated);
  return built();
}

// MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool: the same op, per channel.
BuildResult pool(const BuildContext& match, GraphBuilder& b, Layout&, int64_t) {
  const NodeView node = match.anchor();
  std::string why;
  auto attributes = pool_attributes(node, b.opset(), why);
  if (!attributes) return decline(why);
  b.output(match.value("y"), b.op(node.op_type(), {match.value("x")}, *attributes));
  return built();
}

// Upsample <scales (ints), mode, coordinate_transformation_mode>: Resize (Upsample below ai.onnx 10).
BuildResult upsample(const BuildContext& match, GraphBuilder& b, Layout&, int64_t) {
  const NodeView node = match.anchor();
  const auto* scale_attribute = node.attribute("scales");
  const std::vector<double> scales(scale_attribute->ints().begin(), scale_attribute->ints().end());
  const std::string mode = Layout::upsample_mode(node), transform = Layout::upsample_transform(node);
  Value x{match.value("x")};
  const int opset = b.opset();
  Value y;
  if (opset < 9) {
    std::vector<float> float_scales(scales.begin(), scales.end());
    y = b.op("Upsample", {x}, {attr("mode", mode), attr("scales", float_scales)});
  } else if (opset < 11) {
    y = b.op(opset < 10 ? "Upsample" : "Resize", {x, b.floats(scales)}, {attr("mode", mode)});
  } else {
    Attributes attributes{attr("mode", mode), attr("coordinate_transformation_mode", transform)};
    if (mode == "nearest") attributes.push_back(attr("nearest_mode", "floor"));
    Value roi = opset < 13 ? b.floats({}) : Value{};
    y = b.op("Resize", {x, roi, b.floats(scales)}, attributes);
  }
  b.output(match.value("y"), y);
  return built();
}

// ReorderInput <channels_last>: NCHW (or NHWC) to the blocked meaning: channels zero-padded to Cp.
BuildResult reorder_input(const BuildContext& match, GraphBuilder& b, Layout& layout, int64_t block) {
  const NodeView node = match.anchor();
  Value x{match.value("x")};
  if (node.attribute_int("channels_last", 0) != 0) x = b.Transpose(x, {0, 3, 1, 2});
  const int64_t channels = *layout.reorder_input_channels(node);
  const int64_t padding = round_up(channels, block) - channels;
  if (padding > 0) {
    const std::vector<int64_t> pads{0, 0, 0, 0, 0, padding, 0, 0};
    x = b.opset() < 11 ? b.op("Pad", {x}, {attr("pads", pads)}) : b.op("Pad", {x, b.ints(pads)});
  }
  b.output(match.value("y"), x);
  return built();
}

// ReorderOutput <channels, channels_last>: the first `channels` channels, NHWC when channels_last.
BuildResult reorder_output(const BuildContext& match, GraphBuilder& b, Layout& layout, int64_t block) {
  const NodeView node = match.anchor();
  const int64_t channels = node.attribute_int("channels", 0);
  Value y{match.value("x")};
  auto padded = layout.padded_channels(match.value("x"), block);
  if (!padded || *padded != channels) y = b.Slice(y, {0}, {channels}, {1});
  if (node.attribute_int("channels_last", 0) != 0) y = b.Transpose(y, {0, 2, 3, 1});
  b.output(match.value("y"), y);
  return built();
}

// ORT's Reshape [0, -1, 0, 0, B] of a blocked tensor (for an Add whose shapes it couldn't prove
// equal) reads the layout: in NCHW the same broadcasting is [0, -1, 0, 0, 1].
BuildResult split_reshape(const BuildContext& match, GraphBuilder& b, Layout& layout, int64_t block) {
  if (!layout.split_reshape(match.anchor(), block)) {
    return decline("not ORT's channel-splitting Reshape (the unsplitting one stays)");
  }
  b.output(match.value("y"), b.Reshape(match.value("x"), b.ints({0, -1, 0, 0, 1})));
  return built();
}

// The cheap test first (the rule is tried on every Reshape): a constant shape [0, k, 0, 0, B].
bool maybe_split_reshape(const BuildContext& match) {
  auto shape = match.constant("shape");
  if (!shape || shape->numbers.size() != 5) return false;
  const auto dims = shape->ints();
  const bool block = std::find(std::begin(kBlockSizes), std::end(kBlockSizes), dims[4]) != std::end(kBlockSizes);
  return dims[0] == 0 && dims[2] == 0 && dims[3] == 0 && block;
}

// One builder for the whole family, so that --only / --skip can't split a region.
BuildResult nchwc_to_nchw(const BuildContext& match, GraphBuilder& b) {
  using Rewrite = BuildResult (*)(const BuildContext&, GraphBuilder&, Layout&, int64_t);
  static const std::map<std::string, Rewrite> rewrites = {
      {"Conv", conv},       {"MaxPool", pool},         {"AveragePool", pool},  {"GlobalMaxPool", pool},
      {"GlobalAveragePool", pool}, {"Upsample", upsample}, {"ReorderInput", reorder_input},
      {"ReorderOutput", reorder_output}, {"Reshape", split_reshape}};
  if (!is_nchwc(match.anchor()) && !maybe_split_reshape(match)) return decline("not ORT's NCHWc channel-splitting Reshape");
  Layout layout(match);
  if (!is_nchwc(match.anchor()) && !layout.blocked(match.value("x"))) return decline("not a Reshape of an NCHWc tensor");
  auto analysis = analyze(layout, match, b);
  if (!analysis.problem.empty()) return decline(analysis.problem);
  auto it = rewrites.find(match.anchor().op_type());
  if (it == rewrites.end()) return decline("unknown NCHWc op " + match.anchor().op_type());
  return it->second(match, b, layout, analysis.block);
}

}  // namespace

void register_defuse_nchwc_builders(BuilderRegistry& registry) {
  registry.add("nchwc_to_nchw",
               {.values = {"x", "y"},
                .optional_values = {"w", "b", "sum", "shape"},
                .node_attributes = {"activation", "activation_params", "allowzero", "axis", "channels", "channels_last",
                                    "coordinate_transformation_mode", "group", "mode", "scales"}},
               with_attribute_types_checked(ort_attribute_types(), nchwc_to_nchw));
}

}  // namespace onnx_rewrite
