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

#include "onnx_rewrite/opset.h"
#include "onnx_rewrite/tensor.h"
#include "onnx_rewrite/toolkit.h"

namespace onnx_rewrite {
namespace {

using onnx::TensorProto;

constexpr const char* kNchwcDomain = "com.microsoft.nchwc";
constexpr int64_t kBlockSizes[] = {8, 16};  // MLAS: 8 on x86-64 up to AVX2, 16 with AVX-512F and on ARM64

bool is_nchwc(const onnx::NodeProto& node) { return normalize_domain(node.domain()) == kNchwcDomain; }

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

std::optional<Attributes> pool_attributes(const onnx::NodeProto& node, int opset, std::string& why) {
  constexpr int kKnownOpsets = 17;
  const auto* schema = onnx::OpSchemaRegistry::Schema(node.op_type(), std::min(opset, kKnownOpsets), "");
  Attributes kept;
  for (const auto& attribute : node.attribute()) {
    if (opset > kKnownOpsets || !schema || schema->attributes().count(attribute.name())) {
      kept.push_back(attribute);
      continue;
    }
    if (!changes_nothing(attribute)) {
      why = fmt::format("{} '{}' sets {}, which {} of ai.onnx {} lacks", node.op_type(), describe_node(node),
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
  explicit Layout(const Scope& scope) : scope_(scope) {
    for (const auto& node : scope.nodes()) {
      if (is_nchwc(node)) nchwc_nodes_[node.op_type()].push_back(&node);
    }
    if (nchwc_nodes_.empty()) return;
    // Blocked values: made by an NCHWc op other than ReorderOutput, or by a standard op reading a
    // blocked value. One pass in graph order; more only if the graph is not sorted.
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& node : scope.nodes()) {
        bool makes_blocked = is_nchwc(node) && node.op_type() != "ReorderOutput";
        if (!is_nchwc(node)) {
          for (const auto& input : node.input()) makes_blocked = makes_blocked || blocked(input);
        }
        if (!makes_blocked) continue;
        for (const auto& output : node.output()) {
          if (!output.empty()) changed = blocked_.insert(output).second || changed;
        }
      }
    }
  }

  bool blocked(const std::string& value) const { return blocked_.count(value) != 0; }

  // The nodes connected to `start` through blocked values, in graph order.
  std::vector<const onnx::NodeProto*> region(const onnx::NodeProto* start) {
    std::unordered_set<const onnx::NodeProto*> seen{start};
    std::vector<const onnx::NodeProto*> queue{start};
    for (size_t i = 0; i < queue.size(); ++i) {
      const onnx::NodeProto& node = *queue[i];
      auto visit = [&](const onnx::NodeProto* other) {
        if (seen.insert(other).second) queue.push_back(other);
      };
      for (const auto& input : node.input()) {
        if (blocked(input)) visit(scope_.producer(input)->node);
      }
      for (const auto& output : node.output()) {
        if (!blocked(output)) continue;
        for (const auto& use : scope_.uses(output)) visit(use.node);
      }
    }
    std::sort(queue.begin(), queue.end(),
              [&](const auto* a, const auto* b) { return scope_.position(a) < scope_.position(b); });
    return queue;
  }

  // Channels of a plain NCHW (or NHWC, `channels_last`) value, when the graph tells.
  std::optional<int64_t> plain_channels(const std::string& value, bool channels_last, int depth = 0) {
    if (value.empty() || depth > 64) return std::nullopt;
    const auto dims = scope_.facts(value).static_dims();
    if (dims && dims->size() == 4) {
      const int64_t dim = (*dims)[channels_last ? 3 : 1];
      if (dim > 0) return dim;
    }
    const auto* produced = scope_.producer(value);
    if (!produced || produced->output != 0) return std::nullopt;
    const onnx::NodeProto& node = *produced->node;
    const std::string& op = node.op_type();
    if (is_nchwc(node)) {
      if (op != "ReorderOutput" || (int_attribute(node, "channels_last", 0) != 0) != channels_last) return std::nullopt;
      return int_attribute(node, "channels", 0);
    }
    const std::string domain = normalize_domain(node.domain());
    if (!domain.empty() && domain != "com.microsoft") return std::nullopt;
    if (channels_last) return std::nullopt;
    if (op == "Conv" || op == "FusedConv") {
      auto weight = scope_.facts(node.input(1)).static_dims();
      return weight && weight->size() == 4 ? std::optional<int64_t>((*weight)[0]) : std::nullopt;
    }
    if (op == "Concat") {
      if (int_attribute(node, "axis", 0) != 1) return std::nullopt;
      int64_t total = 0;
      for (const auto& input : node.input()) {
        auto channels = plain_channels(input, false, depth + 1);
        if (!channels) return std::nullopt;
        total += *channels;
      }
      return total;
    }
    if (op == "Reshape") {  // a constant 4-D shape: its channels, or 0 for the input's
      auto shape = scope_.constant_values(node.input(1));
      if (!shape || shape->numbers.size() != 4 || int_attribute(node, "allowzero", 0) != 0) return std::nullopt;
      const int64_t dim = shape->ints()[1];
      if (dim > 0) return dim;
      return dim == 0 ? plain_channels(node.input(0), false, depth + 1) : std::nullopt;
    }
    static const std::set<std::string> keep_channels = {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool",
                                                         "LpPool", "BatchNormalization", "InstanceNormalization",
                                                         "Resize", "Upsample", "LRN"};
    if (keep_channels.count(op) || elementwise_ops().count(op)) {
      for (const auto& input : node.input()) {
        if (auto channels = plain_channels(input, false, depth + 1)) return channels;
        if (!elementwise_ops().count(op)) break;  // only the data input of the others
      }
    }
    return std::nullopt;
  }

  // Cp of a blocked 4-D value for block size `block`, when the graph tells.
  std::optional<int64_t> padded_channels(const std::string& value, int64_t block, int depth = 0) {
    if (value.empty() || depth > 64) return std::nullopt;
    const auto dims = scope_.facts(value).static_dims();
    if (dims && dims->size() == 4 && (*dims)[1] > 0) return (*dims)[1];
    const auto* produced = scope_.producer(value);
    if (!produced) return std::nullopt;
    const onnx::NodeProto& node = *produced->node;
    const std::string& op = node.op_type();
    if (is_nchwc(node)) {
      if (op == "Conv") {
        auto weight = scope_.facts(node.input(1)).static_dims();
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
      for (const auto& input : node.input()) {
        auto channels = padded_channels(input, block, depth + 1);
        if (!channels) return std::nullopt;
        total += *channels;
      }
      return total;
    }
    if (op == "Reshape") {  // the unsplitting Reshape [0, Cp or -1, 0, 0]
      auto shape = scope_.constant_values(node.input(1));
      if (shape && shape->numbers.size() == 4 && shape->ints()[1] > 0) return shape->ints()[1];
    }
    for (const auto& input : node.input()) {
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
    for (const auto* node : nchwc_nodes("Conv")) {
      auto weight = scope_.facts(node->input(1)).static_dims();
      if (!weight || weight->size() != 4) continue;
      const auto& dims = *weight;
      const int64_t group = int_attribute(*node, "group", 1);
      if (dims[0] % block) return fmt::format("Conv '{}' has {} filters", describe_node(*node), dims[0]);
      const bool blocked_input = blocked(node->input(0));
      const bool by_output_block = per_output_block(dims, group, block);
      if (group == 1 && blocked_input == by_output_block) {
        return fmt::format("Conv '{}' reads {} channels {}", describe_node(*node), dims[1],
                           blocked_input ? "blocked" : "in NCHW");
      }
      if (!by_output_block && (dims[1] % block || (dims[0] / group) % block)) {
        return fmt::format("Conv '{}' has {} input channels per group", describe_node(*node), dims[1]);
      }
      if (blocked_input) {
        auto channels = padded_channels(node->input(0), block);
        if (channels && *channels != dims[1] * group) {
          return fmt::format("Conv '{}' reads {} channels, its input has {}", describe_node(*node), dims[1] * group,
                             *channels);
        }
      }
    }
    for (const auto* node : nchwc_nodes("ReorderOutput")) {
      auto channels = padded_channels(node->input(0), block);
      const int64_t logical = int_attribute(*node, "channels", 0);
      if (channels && (*channels % block || *channels != round_up(logical, block))) {
        return fmt::format("ReorderOutput '{}' takes {} of {} channels", describe_node(*node), logical, *channels);
      }
    }
    for (const auto& node : scope_.nodes()) {
      auto split = split_reshape_block(node);
      if (split && *split != block) return fmt::format("Reshape '{}' splits blocks of {}", describe_node(node), *split);
    }
    for (const auto* node : nchwc_nodes("ReorderInput")) {
      auto channels = padded_channels(node->output(0), block);
      for (const auto& use : scope_.uses(node->output(0))) {
        if (use.node->op_type() != "Conv" || !is_nchwc(*use.node) || use.input != 0) continue;
        auto weight = scope_.facts(use.node->input(1)).static_dims();
        if (channels && weight && weight->size() == 4 &&
            *channels != (*weight)[1] * int_attribute(*use.node, "group", 1)) {
          return fmt::format("ReorderInput '{}' makes {} channels for Conv '{}'", describe_node(*node), *channels,
                             describe_node(*use.node));
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
  std::string region_problem(const std::vector<const onnx::NodeProto*>& nodes, int64_t block, int opset) {
    for (const auto* node : nodes) {
      auto problem = is_nchwc(*node) ? nchwc_problem(*node, block, opset) : standard_problem(*node, block);
      if (!problem.empty()) return problem;
      for (const auto& output : node->output()) {
        if (!blocked(output)) continue;
        if (scope_.is_output(output)) {
          return fmt::format("blocked value '{}' is an output of the {}", output, scope_.where());
        }
        for (const auto& use : scope_.uses(output)) {
          if (use.input < 0) return fmt::format("blocked value '{}' is read inside a subgraph", output);
        }
      }
    }
    return {};
  }

  const Scope& scope() const { return scope_; }

 private:
  std::string nchwc_problem(const onnx::NodeProto& node, int64_t block, int opset) {
    const std::string& op = node.op_type();
    const std::string name = describe_node(node);
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
      const ShapeFacts& weight_facts = scope_.facts(node.input(1));
      auto weight = weight_facts.static_dims();
      if (!weight || weight->size() != 4 || !scope_.constant_tensor(node.input(1))) {
        return fmt::format("the weights of Conv '{}' are not a constant 4-D tensor", name);
      }
      if (weight_facts.elem_type != TensorProto::FLOAT) return fmt::format("the weights of Conv '{}' are not float", name);
      if (int_attribute(node, "group", 1) > 1 && !blocked(node.input(0))) {
        return fmt::format("grouped Conv '{}' reads a value that is not blocked", name);
      }
      std::string why;
      if (!mlas_activation(node, why)) return why;
      return {};
    }
    if (op == "Upsample") {
      const auto* scales = find_attribute(node, "scales");
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

  std::string standard_problem(const onnx::NodeProto& node, int64_t block) {
    const std::string& op = node.op_type();
    const std::string name = describe_node(node);
    if (!normalize_domain(node.domain()).empty()) {
      return fmt::format("{}.{} '{}' reads a blocked value", node.domain(), op, name);
    }
    if (op == "Concat") {
      if (int_attribute(node, "axis", 0) != 1) {
        return fmt::format("Concat '{}' of blocked values is not on channels", name);
      }
      for (const auto& input : node.input()) {
        if (!blocked(input)) return fmt::format("Concat '{}' mixes blocked and plain values", name);
      }
      return {};
    }
    if (op == "Reshape") {
      if (split_reshape(node, block) || unsplit_reshape(node)) return {};
      return fmt::format("Reshape '{}' reads the blocked layout", name);
    }
    if (!elementwise_ops().count(op)) return fmt::format("{} '{}' reads the blocked layout", op, name);
    for (const auto& input : node.input()) {
      if (input.empty() || blocked(input)) continue;
      auto values = scope_.constant_values(input, 1);
      if (!values || values->numbers.size() != 1) {
        return fmt::format("{} '{}' broadcasts a plain value over a blocked one", op, name);
      }
    }
    return {};
  }

 public:
  // The block of ORT's [0, -1 or Cp/B, 0, 0, B] view of a blocked [N, Cp, H, W] (TransformBinary).
  std::optional<int64_t> split_reshape_block(const onnx::NodeProto& node) {
    if (node.op_type() != "Reshape" || !blocked(node.input(0))) return std::nullopt;
    auto shape = scope_.constant_values(node.input(1));
    if (!shape || shape->numbers.size() != 5) return std::nullopt;
    const auto dims = shape->ints();
    if (dims[0] != 0 || dims[2] != 0 || dims[3] != 0 || (dims[1] != -1 && dims[1] <= 0)) return std::nullopt;
    return dims[4];
  }

  bool split_reshape(const onnx::NodeProto& node, int64_t block) {
    auto split = split_reshape_block(node);
    if (!split || *split != block) return false;
    auto shape = scope_.constant_values(node.input(1))->ints();
    auto channels = padded_channels(node.input(0), block);
    return shape[1] == -1 || !channels || *channels == shape[1] * block;
  }

  // ORT's [0, -1 or Cp, 0, 0] back from the split view.
  bool unsplit_reshape(const onnx::NodeProto& node) {
    auto shape = scope_.constant_values(node.input(1));
    if (!shape || shape->numbers.size() != 4) return false;
    const auto dims = shape->ints();
    const auto* produced = scope_.producer(node.input(0));
    return dims[0] == 0 && dims[2] == 0 && dims[3] == 0 && produced && !is_nchwc(*produced->node);
  }

  // Channels of ReorderInput's input: the graph's, else the logical channel count ORT keeps
  // downstream (the Convs it feeds may be padded, a depthwise one in group count too).
  std::optional<int64_t> reorder_input_channels(const onnx::NodeProto& node) {
    if (auto channels = plain_channels(node.input(0), int_attribute(node, "channels_last", 0) != 0)) return channels;
    return logical_channels_downstream(node.output(0));
  }

  // The `channels` of the first ReorderOutput reached from a blocked value through ops that keep
  // the channels (pools, Upsample, depthwise Convs, elementwise ops, the split Reshapes).
  std::optional<int64_t> logical_channels_downstream(const std::string& value, int depth = 0) {
    if (depth > 64) return std::nullopt;
    for (const auto& use : scope_.uses(value)) {
      const onnx::NodeProto& node = *use.node;
      const std::string& op = node.op_type();
      bool keeps = false;
      if (is_nchwc(node)) {
        if (op == "ReorderOutput") return int_attribute(node, "channels", 0);
        auto weight = op == "Conv" ? scope_.facts(node.input(1)).static_dims() : std::nullopt;
        const bool depthwise = weight && weight->size() == 4 && (*weight)[1] == 1 &&
                               (*weight)[0] == int_attribute(node, "group", 1) && use.input == 0;
        keeps = op == "MaxPool" || op == "AveragePool" || op == "GlobalMaxPool" || op == "GlobalAveragePool" ||
                op == "Upsample" || depthwise;
      } else {
        keeps = normalize_domain(node.domain()).empty() && (elementwise_ops().count(op) || op == "Reshape");
      }
      if (!keeps || node.output_size() == 0) continue;
      if (auto channels = logical_channels_downstream(node.output(0), depth + 1)) return channels;
    }
    return std::nullopt;
  }

  static std::string upsample_mode(const onnx::NodeProto& node) {
    const auto* mode = find_attribute(node, "mode");
    return mode ? mode->s() : "nearest";
  }

  static std::string upsample_transform(const onnx::NodeProto& node) {
    const auto* transform = find_attribute(node, "coordinate_transformation_mode");
    return transform ? transform->s() : "asymmetric";
  }

 private:
  const std::vector<const onnx::NodeProto*>& nchwc_nodes(const std::string& op) const {
    static const std::vector<const onnx::NodeProto*> none;
    auto it = nchwc_nodes_.find(op);
    return it == nchwc_nodes_.end() ? none : it->second;
  }

  const Scope& scope_;
  std::map<std::string, std::vector<const onnx::NodeProto*>> nchwc_nodes_;
  std::unordered_set<std::string> blocked_;
};

// Every builder starts here: the block size, or why the node's region stays NCHWc.
struct Analysis {
  std::string problem;
  int64_t block = 0;
};

Analysis analyze(Layout& layout, const Match& match, GraphBuilder& b) {
  auto size = layout.block_size();
  if (auto* why = std::get_if<std::string>(&size)) return {*why};
  const auto block = std::get<Layout::BlockSize>(size);
  const auto nodes = layout.region(match.anchor);
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

std::string conv(const Match& match, GraphBuilder& b, Layout&, int64_t block) {
  const onnx::NodeProto& node = *match.anchor;
  const std::string& weight_name = match.value("w");
  const auto weight_dims = match.scope->facts(weight_name).static_dims();
  auto weights = match.scope->constant_values(weight_name, SIZE_MAX);
  if (!weights) return "the Conv weights can't be read";
  const auto& dims = *weight_dims;
  const bool by_output_block = Layout::per_output_block(dims, int_attribute(node, "group", 1), block);
  Value w = b.constant(make_tensor(TensorProto::FLOAT, dims,
                                   unreorder_weights(weights->numbers, dims, block, by_output_block)));
  std::string why;
  auto activation = mlas_activation(node, why);
  Value y = b.op("Conv", {Value{match.value("x")}, w, Value{match.value("b")}},
                 attributes_without(node, "activation"));
  if (!match.value("sum").empty()) y = b.Add(y, Value{match.value("sum")});
  Value activated;
  auto failed = apply_activation(b, y, *activation, TensorProto::FLOAT, activated);
  if (!failed.empty()) return failed;
  b.output(match.value("y"), activated);
  return {};
}

// MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool: the same op, per channel.
std::string pool(const Match& match, GraphBuilder& b, Layout&, int64_t) {
  const onnx::NodeProto& node = *match.anchor;
  std::string why;
  auto attributes = pool_attributes(node, b.opset(), why);
  if (!attributes) return why;
  b.output(match.value("y"), b.op(node.op_type(), {Value{match.value("x")}}, *attributes));
  return {};
}

// Upsample <scales (ints), mode, coordinate_transformation_mode>: Resize (Upsample below ai.onnx 10).
std::string upsample(const Match& match, GraphBuilder& b, Layout&, int64_t) {
  const onnx::NodeProto& node = *match.anchor;
  const auto* scale_attribute = find_attribute(node, "scales");
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
  return {};
}

// ReorderInput <channels_last>: NCHW (or NHWC) to the blocked meaning: channels zero-padded to Cp.
std::string reorder_input(const Match& match, GraphBuilder& b, Layout& layout, int64_t block) {
  const onnx::NodeProto& node = *match.anchor;
  Value x{match.value("x")};
  if (int_attribute(node, "channels_last", 0) != 0) x = b.Transpose(x, {0, 3, 1, 2});
  const int64_t channels = *layout.reorder_input_channels(node);
  const int64_t padding = round_up(channels, block) - channels;
  if (padding > 0) {
    const std::vector<int64_t> pads{0, 0, 0, 0, 0, padding, 0, 0};
    x = b.opset() < 11 ? b.op("Pad", {x}, {attr("pads", pads)}) : b.op("Pad", {x, b.ints(pads)});
  }
  b.output(match.value("y"), x);
  return {};
}

// ReorderOutput <channels, channels_last>: the first `channels` channels, NHWC when channels_last.
std::string reorder_output(const Match& match, GraphBuilder& b, Layout& layout, int64_t block) {
  const onnx::NodeProto& node = *match.anchor;
  const int64_t channels = int_attribute(node, "channels", 0);
  Value y{match.value("x")};
  auto padded = layout.padded_channels(match.value("x"), block);
  if (!padded || *padded != channels) y = b.Slice(y, {0}, {channels}, {1});
  if (int_attribute(node, "channels_last", 0) != 0) y = b.Transpose(y, {0, 2, 3, 1});
  b.output(match.value("y"), y);
  return {};
}

// ORT's Reshape [0, -1, 0, 0, B] of a blocked tensor (for an Add whose shapes it couldn't prove
// equal) reads the layout: in NCHW the same broadcasting is [0, -1, 0, 0, 1].
std::string split_reshape(const Match& match, GraphBuilder& b, Layout& layout, int64_t block) {
  if (!layout.split_reshape(*match.anchor, block)) {
    return "not ORT's channel-splitting Reshape (the unsplitting one stays)";
  }
  b.output(match.value("y"), b.Reshape(Value{match.value("x")}, b.ints({0, -1, 0, 0, 1})));
  return {};
}

// The cheap test first (the rule is tried on every Reshape): a constant shape [0, k, 0, 0, B].
bool maybe_split_reshape(const Match& match) {
  auto shape = match.scope->constant_values(match.value("shape"));
  if (!shape || shape->numbers.size() != 5) return false;
  const auto dims = shape->ints();
  const bool block = std::find(std::begin(kBlockSizes), std::end(kBlockSizes), dims[4]) != std::end(kBlockSizes);
  return dims[0] == 0 && dims[2] == 0 && dims[3] == 0 && block;
}

// One builder for the whole family, so that --only / --skip can't split a region.
std::string nchwc_to_nchw(const Match& match, GraphBuilder& b) {
  using Rewrite = std::string (*)(const Match&, GraphBuilder&, Layout&, int64_t);
  static const std::map<std::string, Rewrite> rewrites = {
      {"Conv", conv},       {"MaxPool", pool},         {"AveragePool", pool},  {"GlobalMaxPool", pool},
      {"GlobalAveragePool", pool}, {"Upsample", upsample}, {"ReorderInput", reorder_input},
      {"ReorderOutput", reorder_output}, {"Reshape", split_reshape}};
  if (!is_nchwc(*match.anchor) && !maybe_split_reshape(match)) return "not ORT's NCHWc channel-splitting Reshape";
  Layout layout(*match.scope);
  if (!is_nchwc(*match.anchor) && !layout.blocked(match.value("x"))) return "not a Reshape of an NCHWc tensor";
  auto analysis = analyze(layout, match, b);
  if (!analysis.problem.empty()) return analysis.problem;
  auto it = rewrites.find(match.anchor->op_type());
  if (it == rewrites.end()) return "unknown NCHWc op " + match.anchor->op_type();
  return it->second(match, b, layout, analysis.block);
}

}  // namespace

void register_defuse_nchwc_builders(BuilderRegistry& registry) {
  registry.add("nchwc_to_nchw", {.values = {"x", "y"}, .optional_values = {"w", "b", "sum", "shape"}},
               with_attribute_types_checked(ort_attribute_types(), nchwc_to_nchw));
}

}  // namespace onnx_rewrite
