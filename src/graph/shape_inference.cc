// Shape inference for the engine's own needs (Scope::facts): the standard ops and the contrib
// ops ONNX Runtime writes, with symbols for sizes known only at run time (shapes.h).
#include "graph/shape_inference.h"

#include <algorithm>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "graph/flat_map.h"
#include "verify/opset.h"
#include "graph/scope.h"
#include "onnx_rewrite/shapes.h"

namespace onnx_rewrite {

// Op sets asked about for every node inferred: one hash, not a walk of string comparisons.
using OpNames = std::unordered_set<std::string_view>;

class ShapeInference::Worker {
 public:
  Worker(const Scope& scope, Scope::Reader reader) : scope_(scope), reader_(reader) {
    for (const Scope* s = &scope; s; s = s->parent()) {
      if (!s->graph()) continue;
      for (const auto& info : s->graph()->input()) {
        if (!inputs_.find(info.name())) inputs_[info.name()] = &info;  // the innermost graph's input wins
      }
    }
    fact_of_value_.resize(scope.value_count());
  }

  // What is known about `value`, working back through its producers as far as needed.
  const ShapeFacts& operator()(std::string_view value) {
    const auto id = scope_.value_id(value);
    if (!id) {  // not read or written here: declared here or in an enclosing graph
      if (const ShapeFacts* known = cached_by_name(value)) return *known;
      store(owned_names_.emplace_back(value), declared(value));  // the key must outlive the caller's string
      return *cached_by_name(value);
    }
    if (const ShapeFacts* known = cached(*id)) return *known;
    // Most queries come in node order, the producer's inputs known already: no walk back.
    if (const auto* produced = scope_.producer(*id)) {
      if (gather_inputs(*produced)) return visit(*produced);
    }
    // The walk goes by value ids: every value a node reads is in the index.
    std::vector<Scope::ValueId> pending{*id};
    // The nodes whose inputs this walk is working out, marked by position with the walk's number:
    // a walk down a chain of a million nodes marks each once, in an array, not a hash set.
    const uint32_t walk = ++walks_;
    while (!pending.empty()) {
      const Scope::ValueId current = pending.back();
      if (cached(current)) {
        pending.pop_back();
        continue;
      }
      const auto* produced = scope_.producer(current);
      if (!produced) {
        store(current, declared(scope_.name(current)));
        pending.pop_back();
        continue;
      }
      const onnx::NodeProto& node = *produced->node;
      const auto at = static_cast<size_t>(produced->position);
      if (at >= walked_at_.size()) walked_at_.resize(std::max(at + 1, static_cast<size_t>(scope_.nodes().size())), 0);
      uint32_t& mark = walked_at_[at];
      const bool seen = mark == walk;
      mark = walk;
      if (gather_inputs(*produced)) {
        visit(*produced);
        pending.pop_back();
      } else if (seen) {  // its inputs wait for it: a cycle (invalid input); it gets no facts
        for (const auto output : scope_.writes_at(produced->position)) store(output, ShapeFacts{});
        pending.pop_back();
      } else {
        // reads_at lists the present inputs first, then what subgraphs read.
        const auto reads = scope_.reads_at(produced->position);
        const auto present = static_cast<size_t>(
            std::count_if(node.input().begin(), node.input().end(), [](const std::string& input) { return !input.empty(); }));
        for (size_t i = 0; i < present; ++i) {
          if (!cached(reads[i])) pending.push_back(reads[i]);
        }
      }
    }
    return *cached(*id);
  }

 private:
  static constexpr size_t kMaxValues = 64;  // larger integer tensors are data, not shapes
  inline static const ShapeFacts kNothing;  // an absent input's

  // Facts are kept by the scope's value ids, and by name for what its index doesn't know (a
  // value of an enclosing graph asked about directly).
  const ShapeFacts* cached(Scope::ValueId value) const {
    const uint32_t at = fact_of_value_[value.index];
    return at ? &facts_[at - 1] : nullptr;
  }
  const ShapeFacts* cached_by_name(std::string_view value) const {
    const size_t* at = by_name_.find(value);
    return at ? &facts_[*at - 1] : nullptr;
  }

  const ShapeFacts& store(Scope::ValueId value, ShapeFacts facts) {
    uint32_t& at = fact_of_value_[value.index];
    if (at == 0) {
      facts_.push_back(std::move(facts));
      at = static_cast<uint32_t>(facts_.size());  // 1-based: 0 is unknown
    } else {
      facts_[at - 1] = std::move(facts);
    }
    return facts_[at - 1];
  }
  // `name` must stay valid for the scope's lifetime (owned_names_).
  void store(std::string_view name, ShapeFacts facts) {
    facts_.push_back(std::move(facts));
    by_name_[name] = facts_.size();
  }

  // Whether every input of the node is known; if so, it is the node being visited and its
  // inputs' facts are at hand (infer asks for each several times: each ask would hash its name).
  bool gather_inputs(const Scope::Producer& produced) {
    visiting_ = nullptr;
    visiting_inputs_.clear();
    const auto reads = scope_.reads_at(produced.position);  // the present inputs first, in order
    size_t next = 0;
    for (const auto& input : produced.node->input()) {
      const ShapeFacts* known = input.empty() ? &kNothing : cached(reads[next++]);
      if (!known) return false;
      visiting_inputs_.push_back(known);
    }
    visiting_ = produced.node;
    return true;
  }

  // Graph inputs (with their dim_params), initializers, values of enclosing graphs.
  ShapeFacts declared(std::string_view value) const {
    ShapeFacts facts;
    const auto type = ShapeInference::declared(scope_, value);
    facts.elem_type = type.elem_type;
    if (const auto* const* input = inputs_.find(value);
        input && (*input)->type().has_tensor_type() && (*input)->type().tensor_type().has_shape()) {
      Dims dims;
      const auto& shape = (*input)->type().tensor_type().shape();
      for (int axis = 0; axis < shape.dim_size(); ++axis) {
        const auto& dim = shape.dim(axis);
        if (dim.has_dim_value()) dims.push_back(Dim::of(dim.dim_value()));
        else if (!dim.dim_param().empty()) dims.push_back(Dim::named(symbol(dim.dim_param())));
        else dims.push_back(fresh(value, static_cast<size_t>(axis)));
      }
      facts.shape = std::move(dims);
    } else if (type.dims) {
      facts.shape = numeric(*type.dims, value);
    }
    add_constant_values(value, facts);
    return facts;
  }

  void add_constant_values(std::string_view value, ShapeFacts& facts) const {
    if (!is_integer(facts.elem_type) || !facts.shape || facts.shape->size() > 1) return;
    if (auto values = scope_.constant_values(value, kMaxValues, reader_)) {
      Dims elements;
      for (int64_t number : values->ints()) elements.push_back(Dim::of(number));
      facts.values = std::move(elements);
    }
  }

  static bool is_integer(int32_t type) { return type == onnx::TensorProto::INT64 || type == onnx::TensorProto::INT32; }

  Dims numeric(const std::vector<int64_t>& dims, std::string_view value) const {
    Dims out;
    for (size_t axis = 0; axis < dims.size(); ++axis) {
      out.push_back(dims[axis] >= 0 ? Dim::of(dims[axis]) : fresh(value, axis));
    }
    return out;
  }

  Dim fresh(std::string_view value, size_t axis) const { return Dim::named(symbol(fmt::format("{}#{}", value, axis))); }

  // Symbols are kept once each, for the scope's lifetime: a dim is a number and a pointer.
  const std::string* symbol(std::string_view name) const {
    if (const std::string* const* known = symbols_.find(name)) return *known;
    const std::string& kept = symbol_names_.emplace_back(name);
    symbols_[kept] = &kept;
    return &kept;
  }

  // Numpy broadcasting; a size that can't be decided becomes a symbol of the result.
  std::optional<Dims> broadcast(const std::vector<const ShapeFacts*>& operands, const std::string& out) {
    size_t rank = 0;
    for (const ShapeFacts* operand : operands) {
      if (!operand->shape) return std::nullopt;
      rank = std::max(rank, operand->shape->size());
    }
    Dims dims(rank);
    for (size_t axis = 0; axis < rank; ++axis) {
      std::vector<Dim> sizes;  // the operands' sizes along this axis that are not 1
      for (const ShapeFacts* operand : operands) {
        const Dims& shape = *operand->shape;
        const size_t offset = rank - shape.size();
        if (axis >= offset && shape[axis - offset].number != 1) sizes.push_back(shape[axis - offset]);
      }
      const auto number = std::find_if(sizes.begin(), sizes.end(), [](const Dim& dim) { return dim.known(); });
      const bool same = std::all_of(sizes.begin(), sizes.end(), [&](const Dim& dim) { return dim == sizes.front(); });
      if (sizes.empty()) dims[axis] = Dim::of(1);
      else if (number != sizes.end()) dims[axis] = *number;  // the others are equal to it (or 1) at run time
      else if (same) dims[axis] = sizes.front();
      else dims[axis] = fresh(out, axis);
    }
    return dims;
  }

  static std::optional<std::vector<int64_t>> ints(const std::optional<Dims>& values) {
    if (!values) return std::nullopt;
    std::vector<int64_t> out;
    for (const Dim& dim : *values) {
      if (!dim.known()) return std::nullopt;
      out.push_back(*dim.number);
    }
    return out;
  }

  static std::optional<int64_t> int_attribute(const onnx::NodeProto& node, const std::string& name) {
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == name && attribute.type() == onnx::AttributeProto::INT) return attribute.i();
    }
    return std::nullopt;
  }

  static std::optional<std::vector<int64_t>> ints_attribute(const onnx::NodeProto& node, const std::string& name) {
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == name) return std::vector<int64_t>(attribute.ints().begin(), attribute.ints().end());
    }
    return std::nullopt;
  }

  const ShapeFacts& input(const onnx::NodeProto& node, int index) {
    if (index >= node.input_size() || node.input(index).empty()) return kNothing;
    if (&node == visiting_) return *visiting_inputs_[static_cast<size_t>(index)];
    return (*this)(node.input(index));
  }

  // Axes given as an attribute (older opsets) or as a constant input.
  std::optional<std::vector<int64_t>> axes_of(const onnx::NodeProto& node, int input_index) {
    if (auto attribute = ints_attribute(node, "axes")) return attribute;
    if (input_index < node.input_size() && !node.input(input_index).empty()) return ints(input(node, input_index).values);
    return std::vector<int64_t>{};
  }

  // Works out the facts of the outputs of the node gather_inputs has just accepted; returns those
  // of the output asked about.
  const ShapeFacts& visit(const Scope::Producer& produced) {
    const onnx::NodeProto& node = *produced.node;
    std::vector<ShapeFacts> outputs(static_cast<size_t>(node.output_size()));
    if (!outputs.empty()) infer(node, outputs);
    visiting_ = nullptr;
    const ShapeFacts* result = nullptr;
    const auto written = scope_.writes_at(produced.position);  // the present outputs, in order
    size_t next = 0;
    for (int i = 0; i < node.output_size(); ++i) {
      const std::string& name = node.output(i);
      if (name.empty()) continue;
      ShapeFacts& facts = outputs[static_cast<size_t>(i)];
      merge_declared(name, facts);
      const ShapeFacts& stored = store(written[next++], std::move(facts));
      if (i == produced.output) result = &stored;
    }
    return result ? *result : kNothing;
  }

  // A declared type (value_info) fills what inference left open; its numbers win over symbols.
  // Only the graph's own table can declare a node's output (a Constant's tensor, which Scope's
  // declared also gives, is what infer started from).
  void merge_declared(const std::string& name, ShapeFacts& facts) const {
    const auto type = ShapeInference::declared_here(scope_, name);
    if (!facts.elem_type) facts.elem_type = type.elem_type;
    if (!type.dims) return;
    if (!facts.shape) {
      facts.shape = numeric(*type.dims, name);
    } else if (type.dims->size() == facts.shape->size()) {
      for (size_t axis = 0; axis < facts.shape->size(); ++axis) {
        if ((*type.dims)[axis] >= 0) (*facts.shape)[axis] = Dim::of((*type.dims)[axis]);
      }
    }
  }

  // If's outputs have the types both branches declare for them (torch and tf2onnx write them).
  static void infer_if_types(const onnx::NodeProto& node, std::vector<ShapeFacts>& outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      int32_t agreed = 0;
      for (const auto& attribute : node.attribute()) {
        if (attribute.type() != onnx::AttributeProto::GRAPH || static_cast<int>(i) >= attribute.g().output_size()) continue;
        const auto& type = attribute.g().output(static_cast<int>(i)).type();
        const int32_t declared = type.has_tensor_type() ? type.tensor_type().elem_type() : 0;
        if (declared == 0 || (agreed != 0 && agreed != declared)) {
          agreed = 0;
          break;
        }
        agreed = declared;
      }
      outputs[i].elem_type = agreed;
    }
  }

  // Loop's outputs have the types its body declares for them: the loop-carried values (body
  // outputs 1..N) and the scan outputs after them, one dim more.
  static void infer_loop_types(const onnx::NodeProto& node, std::vector<ShapeFacts>& outputs) {
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() != "body" || attribute.type() != onnx::AttributeProto::GRAPH) continue;
      const auto& body = attribute.g();
      for (size_t i = 0; i < outputs.size() && static_cast<int>(i) + 1 < body.output_size(); ++i) {
        const auto& type = body.output(static_cast<int>(i) + 1).type();
        if (type.has_tensor_type()) outputs[i].elem_type = type.tensor_type().elem_type();
      }
    }
  }

  void infer(const onnx::NodeProto& node, std::vector<ShapeFacts>& outputs) {
    const std::string domain = normalize_domain(node.domain());
    const std::string& op = node.op_type();
    if (domain == "com.microsoft") return infer_contrib(node, outputs);
    if (domain == "com.microsoft.nchwc") return infer_spatial(node, input(node, 0), outputs[0]);
    if (!domain.empty()) return;
    if (op == "If") return infer_if_types(node, outputs);
    if (op == "Loop") return infer_loop_types(node, outputs);
    if (op == "LSTM" || op == "GRU" || op == "RNN") {  // every output has X's type (W's: the same)
      const int32_t x_type = input(node, 0).elem_type;
      const int32_t type = x_type ? x_type : input(node, 1).elem_type;
      for (auto& output : outputs) output.elem_type = type;
      return;
    }
    if (op == "Constant") {
      outputs[0] = declared(node.output(0));  // the tensor's type and values
      return;
    }
    infer_standard(node, outputs);
    // clang-format off
    static const OpNames kBoolean = {"And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual",
                                     "GreaterOrEqual", "Not", "IsNaN", "IsInf"};
    // clang-format on
    if (kBoolean.count(op)) outputs[0].elem_type = onnx::TensorProto::BOOL;
    if (outputs[0].elem_type == 0 && kSameType.count(op)) outputs[0].elem_type = any_input_type(node);
    if (op == "LayerNormalization" || op == "SimplifiedLayerNormalization") {
      infer_statistics(node, input(node, 0), int_attribute(node, "axis").value_or(-1), outputs);
    }
  }

  // An ai.onnx op's outputs.
  void infer_standard(const onnx::NodeProto& node, std::vector<ShapeFacts>& outputs) {
    const std::string& op = node.op_type();
    const std::string& out = node.output(0);
    ShapeFacts& result = outputs[0];
    // clang-format off
    static const OpNames kSameShape = {
        "Identity", "Abs", "Neg", "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "Tanh",
        "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Softplus",
        "Softsign", "Softmax", "LogSoftmax", "Hardmax", "Dropout", "Clip", "Gelu", "Swish", "Mish", "HardSwish",
        "ThresholdedRelu", "Shrink", "LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization",
        "BatchNormalization", "InstanceNormalization", "GroupNormalization", "LpNormalization",
        "MeanVarianceNormalization", "CumSum", "Cast", "CastLike", "Not", "IsNaN", "IsInf", "Trilu",
        "Scatter", "ScatterElements", "ScatterND"};
    // clang-format on
    // clang-format off
    static const OpNames kBroadcast = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum",
                                       "Mean", "Mod", "PRelu", "And", "Or", "Xor", "Equal", "Less",
                                       "Greater", "LessOrEqual", "GreaterOrEqual", "Where",
                                       "BitwiseAnd", "BitwiseOr", "BitwiseXor"};
    // clang-format on
    const ShapeFacts& first = input(node, 0);
    if (kSameShape.count(op)) {
      result.shape = first.shape;
      result.elem_type = first.elem_type;
      if (op == "Cast") result.elem_type = static_cast<int32_t>(int_attribute(node, "to").value_or(0));
      if (op == "CastLike") result.elem_type = input(node, 1).elem_type;
      if (op == "Identity" || (op == "Cast" && is_integer(result.elem_type))) result.values = first.values;
    } else if (kBroadcast.count(op)) {
      std::vector<const ShapeFacts*> operands;
      for (int i = 0; i < node.input_size(); ++i) operands.push_back(&input(node, i));
      result.shape = broadcast(operands, out);
      result.elem_type = op == "Where" ? input(node, 1).elem_type : first.elem_type;
    } else if (op == "MatMul") {
      infer_matmul(first, input(node, 1), out, result);
    } else if (op == "Gather") {
      infer_gather(node, first, input(node, 1), result);
    } else if (op == "Shape") {
      infer_shape_of(node, first, result);
    } else if (op == "Size") {
      result.elem_type = onnx::TensorProto::INT64;
      result.shape = Dims{};
    } else if (op == "Unsqueeze" || op == "Squeeze") {
      infer_squeeze(node, first, op == "Unsqueeze", result);
    } else if (op == "Concat") {
      infer_concat(node, out, result);
    } else if (op == "Reshape") {
      infer_reshape(node, first, input(node, 1), out, result);
    } else if (op == "Transpose") {
      infer_transpose(node, first, result);
    } else if (op == "Slice") {
      infer_slice(node, first, out, result);
    } else if (op == "Expand") {
      infer_expand(first, input(node, 1), out, result);
    } else if (op.starts_with("Reduce")) {
      infer_reduce(node, first, result);
    } else if (op == "Gemm") {
      infer_gemm(node, first, input(node, 1), out, result);
    } else if (op == "Flatten") {
      result.elem_type = first.elem_type;
      result.shape = Dims{fresh(out, 0), fresh(out, 1)};
    } else if (kSpatial.count(op)) {
      infer_spatial(node, first, result);
      if (op == "Conv" || op == "MaxPool" || op == "AveragePool" || op == "LpPool") infer_window_sizes(node, first, result);
    } else if (op == "Split") {
      infer_split(node, first, outputs);
    } else if (op == "Pad") {
      infer_pad(node, first, out, result);
    } else if (op == "Resize" || op == "Upsample" || op == "Tile" || op == "DepthToSpace" || op == "SpaceToDepth") {
      for (auto& output : outputs) {
        output.elem_type = first.elem_type;
        if (first.shape) output.shape = fresh_dims(first.shape->size(), out);
      }
    } else if (op == "ArgMax" || op == "ArgMin") {
      infer_arg_reduce(node, first, result);
    } else if (op == "Range") {
      infer_range(node, first, result);
    } else if (op == "ConstantOfShape") {
      infer_constant_of_shape(node, first, out, result);
    }
  }

  void infer_expand(const ShapeFacts& first, const ShapeFacts& shape, const std::string& out, ShapeFacts& result) {
    result.elem_type = first.elem_type;
    if (shape.values) {
      ShapeFacts target;
      target.shape = shape.values;
      result.shape = broadcast({&first, &target}, out);
    } else if (const auto length = known_length(shape); length && first.shape) {
      // A shape computed at run time, of a known length: the rank is known, the sizes are not.
      result.shape = fresh_dims(std::max(first.shape->size(), *length), out);
    }
  }

  void infer_constant_of_shape(const onnx::NodeProto& node, const ShapeFacts& shape, const std::string& out, ShapeFacts& result) {
    result.elem_type = onnx::TensorProto::FLOAT;
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == "value") result.elem_type = attribute.t().data_type();
    }
    result.shape = shape.values;
    if (!result.shape) {
      if (const auto length = known_length(shape)) result.shape = fresh_dims(*length, out);
    }
  }

  // Shape <start, end>: int64, the dims themselves as its values.
  void infer_shape_of(const onnx::NodeProto& node, const ShapeFacts& first, ShapeFacts& result) {
    result.elem_type = onnx::TensorProto::INT64;
    if (!first.shape) {
      result.shape = Dims{fresh(node.output(0), 0)};
      return;
    }
    const auto rank = static_cast<int64_t>(first.shape->size());
    auto clamp = [&](int64_t at) { return std::clamp(at < 0 ? at + rank : at, int64_t{0}, rank); };
    const int64_t start = clamp(int_attribute(node, "start").value_or(0));
    const int64_t end = clamp(int_attribute(node, "end").value_or(rank));
    result.values = Dims(first.shape->begin() + start, first.shape->begin() + std::max(start, end));
    result.shape = Dims{Dim::of(static_cast<int64_t>(result.values->size()))};
  }

  void infer_transpose(const onnx::NodeProto& node, const ShapeFacts& first, ShapeFacts& result) {
    result.elem_type = first.elem_type;
    if (!first.shape) return;
    std::vector<int64_t> perm = ints_attribute(node, "perm").value_or(std::vector<int64_t>{});
    if (perm.empty()) {
      for (size_t i = first.shape->size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
    }
    if (!is_permutation_of_axes(perm, first.shape->size())) return;
    Dims dims;
    for (int64_t axis : perm) dims.push_back((*first.shape)[static_cast<size_t>(axis)]);
    result.shape = std::move(dims);
  }

  // ArgMax, ArgMin: one axis (attribute `axis`, default 0), kept as 1 or dropped.
  void infer_arg_reduce(const onnx::NodeProto& node, const ShapeFacts& first, ShapeFacts& result) {
    result.elem_type = onnx::TensorProto::INT64;
    if (!first.shape) return;
    const auto rank = static_cast<int64_t>(first.shape->size());
    int64_t axis = int_attribute(node, "axis").value_or(0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return;
    Dims dims = *first.shape;
    if (int_attribute(node, "keepdims").value_or(1)) dims[static_cast<size_t>(axis)] = Dim::of(1);
    else dims.erase(dims.begin() + axis);
    result.shape = std::move(dims);
  }

  // Range: 1-D; its length when start, limit and delta are known integers.
  void infer_range(const onnx::NodeProto& node, const ShapeFacts& first, ShapeFacts& result) {
    result.elem_type = first.elem_type;
    result.shape = Dims{fresh(node.output(0), 0)};
    const auto& start = first.values;
    const auto& limit = input(node, 1).values;
    const auto& delta = input(node, 2).values;
    if (start && limit && delta && start->size() == 1 && limit->size() == 1 && delta->size() == 1 && (*start)[0].known() &&
        (*limit)[0].known() && (*delta)[0].known() && *(*delta)[0].number != 0) {
      const int64_t span = *(*limit)[0].number - *(*start)[0].number;
      const int64_t step = *(*delta)[0].number;
      const int64_t count = span / step + (span % step != 0 && (span < 0) == (step < 0) ? 1 : 0);
      result.shape = Dims{Dim::of(std::max<int64_t>(count, 0))};
    }
  }

  // Ops whose tensor inputs and first output share one element type: any typed input tells it
  // (ONNX Runtime saves graphs without value_info; a weight's type is often the only one known).
  // clang-format off
  inline static const OpNames kSameType = {
      "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "MatMul", "Gemm", "Conv", "ConvTranspose",
      "Concat", "PRelu", "BatchNormalization", "InstanceNormalization", "LayerNormalization", "GroupNormalization",
      "RMSNormalization", "SimplifiedLayerNormalization", "FusedMatMul", "TransposeMatMul", "FusedGemm", "FusedConv",
      "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "BiasGelu", "FastGelu", "BiasAdd", "BiasSoftmax"};
  // clang-format on

  int32_t any_input_type(const onnx::NodeProto& node) {
    for (int i = 0; i < node.input_size(); ++i) {
      if (int32_t type = input(node, i).elem_type) return type;
    }
    return 0;
  }

  // Ops whose output keeps the input's rank and batch: convolutions and pools (NCHWc ones too).
  // clang-format off
  inline static const OpNames kSpatial = {"Conv", "ConvTranspose", "ConvInteger", "MaxPool", "AveragePool",
                                          "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool",
                                          "FusedConv", "ReorderInput", "ReorderOutput", "Upsample"};
  // clang-format on

  static bool is_permutation_of_axes(const std::vector<int64_t>& perm, size_t rank) {
    if (perm.size() != rank) return false;
    std::vector<bool> seen(rank, false);
    for (int64_t axis : perm) {
      if (axis < 0 || axis >= static_cast<int64_t>(rank) || seen[static_cast<size_t>(axis)]) return false;
      seen[static_cast<size_t>(axis)] = true;
    }
    return true;
  }

  // The number of elements of a 1-D value whose length is known (a shape being computed).
  static std::optional<size_t> known_length(const ShapeFacts& facts) {
    if (!facts.shape || facts.shape->size() != 1 || !(*facts.shape)[0].known() || *(*facts.shape)[0].number < 0) return std::nullopt;
    return static_cast<size_t>(*(*facts.shape)[0].number);
  }

  Dims fresh_dims(size_t rank, const std::string& out) const {
    Dims dims;
    for (size_t axis = 0; axis < rank; ++axis) dims.push_back(fresh(out, axis));
    return dims;
  }

  // [N, C', spatial...]: N kept, C' the weight's first dim for convolutions, 1s for global pools.
  void infer_spatial(const onnx::NodeProto& node, const ShapeFacts& x, ShapeFacts& result) {
    const std::string& op = node.op_type();
    result.elem_type = x.elem_type;
    if (!x.shape || x.shape->size() < 2) return;
    Dims dims = fresh_dims(x.shape->size(), node.output(0));
    dims[0] = (*x.shape)[0];
    const bool convolution = op == "Conv" || op == "FusedConv" || op == "ConvInteger";
    if (convolution && node.input_size() > 1) {
      const ShapeFacts& weight = input(node, 1);
      if (weight.shape && !weight.shape->empty()) dims[1] = (*weight.shape)[0];
    } else if (!convolution && op != "ConvTranspose" && op != "ReorderInput" && op != "ReorderOutput") {
      dims[1] = (*x.shape)[1];  // pools and resizes keep the channels
    }
    if (op.starts_with("Global")) {
      for (size_t axis = 2; axis < dims.size(); ++axis) dims[axis] = Dim::of(1);
    }
    if (op == "ConvInteger") result.elem_type = onnx::TensorProto::INT32;
    result.shape = std::move(dims);
  }

  // The spatial sizes of a Conv or pool whose input sizes, kernel and explicit pads are known, as
  // ONNX Runtime computes them (pool_attributes.h, conv_attributes.h): floor((n - 1) / stride) + 1
  // for n = in + pads - ((kernel - 1) * dilation + 1) + 1; with ceil_mode, ceil, and one less
  // when the last window would start in the end padding. auto_pad other than NOTSET: unknown.
  void infer_window_sizes(const onnx::NodeProto& node, const ShapeFacts& x, ShapeFacts& result) {
    if (!x.shape || x.shape->size() < 3 || !result.shape) return;
    const size_t spatial = x.shape->size() - 2;
    for (const auto& attribute : node.attribute()) {
      if (attribute.name() == "auto_pad" && !attribute.s().empty() && attribute.s() != "NOTSET") return;
    }
    std::vector<int64_t> kernel = ints_attribute(node, "kernel_shape").value_or(std::vector<int64_t>{});
    if (kernel.empty() && node.op_type() == "Conv") {  // the weight's [M, C/group, k...]
      const ShapeFacts& weight = input(node, 1);
      if (!weight.shape || weight.shape->size() != spatial + 2) return;
      for (size_t axis = 2; axis < weight.shape->size(); ++axis) {
        if (!(*weight.shape)[axis].known()) return;
        kernel.push_back(*(*weight.shape)[axis].number);
      }
    }
    const auto strides = ints_attribute(node, "strides").value_or(std::vector<int64_t>(spatial, 1));
    const auto pads = ints_attribute(node, "pads").value_or(std::vector<int64_t>(2 * spatial, 0));
    const auto dilations = ints_attribute(node, "dilations").value_or(std::vector<int64_t>(spatial, 1));
    if (kernel.size() != spatial || strides.size() != spatial || pads.size() != 2 * spatial || dilations.size() != spatial) return;
    const bool ceil_mode = node.op_type() != "Conv" && int_attribute(node, "ceil_mode").value_or(0) == 1;
    for (size_t axis = 0; axis < spatial; ++axis) {
      const Dim& in = (*x.shape)[axis + 2];
      if (!in.known() || *in.number < 0 || strides[axis] <= 0 || kernel[axis] <= 0 || dilations[axis] <= 0) continue;
      const int64_t span = *in.number + pads[axis] + pads[axis + spatial] - ((kernel[axis] - 1) * dilations[axis] + 1);
      if (span < 0) continue;
      int64_t out = span / strides[axis] + 1;
      if (ceil_mode) {
        out = (span + strides[axis] - 1) / strides[axis] + 1;
        if ((out - 1) * strides[axis] >= *in.number + pads[axis]) --out;
      }
      (*result.shape)[axis + 2] = Dim::of(out);
    }
  }

  void infer_gemm(const onnx::NodeProto& node, const ShapeFacts& a, const ShapeFacts& b, const std::string& out, ShapeFacts& result) {
    result.elem_type = a.elem_type;
    Dims dims{fresh(out, 0), fresh(out, 1)};
    if (a.shape && a.shape->size() == 2) dims[0] = (*a.shape)[int_attribute(node, "transA").value_or(0) ? 1 : 0];
    if (b.shape && b.shape->size() == 2) dims[1] = (*b.shape)[int_attribute(node, "transB").value_or(0) ? 0 : 1];
    result.shape = std::move(dims);
  }

  // Mean / inverse standard deviation outputs of a normalization over the axes from `axis` on:
  // the input's shape with those axes 1, in float (double for double input).
  void infer_statistics(const onnx::NodeProto& node, const ShapeFacts& x, int64_t axis, std::vector<ShapeFacts>& outputs) {
    for (size_t i = 1; i < outputs.size() && i < 3; ++i) {
      ShapeFacts& statistics = outputs[i];
      statistics.elem_type = x.elem_type == onnx::TensorProto::DOUBLE ? onnx::TensorProto::DOUBLE
                                                                      : static_cast<int32_t>(int_attribute(node, "stash_type").value_or(1));
      if (!x.shape) continue;
      const auto rank = static_cast<int64_t>(x.shape->size());
      const int64_t first = axis < 0 ? axis + rank : axis;
      if (first < 0 || first > rank) continue;
      Dims dims = *x.shape;
      for (int64_t a = first; a < rank; ++a) dims[static_cast<size_t>(a)] = Dim::of(1);
      statistics.shape = std::move(dims);
    }
  }

  // ONNX Runtime's contrib ops that its optimizer writes (what de-fusion rules must know).
  void infer_contrib(const onnx::NodeProto& node, std::vector<ShapeFacts>& outputs) {
    const std::string& op = node.op_type();
    const std::string& out = node.output(0);
    ShapeFacts& result = outputs[0];
    const ShapeFacts& first = input(node, 0);
    // clang-format off
    static const OpNames kSameShape = {"Gelu", "FastGelu", "BiasGelu", "QuickGelu", "BiasSoftmax",
                                       "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                                       "LayerNormalization", "SimplifiedLayerNormalization"};
    // clang-format on
    if (kSameShape.count(op)) {
      result.elem_type = first.elem_type;
      result.shape = first.shape;
      if (op.starts_with("Skip") && outputs.size() > 3) outputs[3] = result;
      infer_statistics(node, first, op.starts_with("Skip") ? -1 : int_attribute(node, "axis").value_or(-1), outputs);
    } else if (op == "BiasAdd") {
      std::vector<const ShapeFacts*> operands;
      for (int i = 0; i < node.input_size(); ++i) operands.push_back(&input(node, i));
      result.elem_type = first.elem_type;
      result.shape = broadcast(operands, out);
    } else if (op == "FusedMatMul" || op == "TransposeMatMul") {
      // Batch transposes move the first axis behind the batch axes; plain ones swap the last two.
      auto transposed = [&](const ShapeFacts& facts, bool batch, bool trans) {
        ShapeFacts moved = facts;
        if (!moved.shape || moved.shape->size() < 2) return moved;
        Dims& dims = *moved.shape;
        if (batch && dims.size() >= 3) std::rotate(dims.begin(), dims.begin() + 1, dims.end() - 1);
        if (trans) std::swap(dims[dims.size() - 2], dims[dims.size() - 1]);
        return moved;
      };
      const ShapeFacts a = transposed(first, int_attribute(node, "transBatchA").value_or(0), int_attribute(node, "transA").value_or(0));
      const ShapeFacts b =
          transposed(input(node, 1), int_attribute(node, "transBatchB").value_or(0), int_attribute(node, "transB").value_or(0));
      infer_matmul(a, b, out, result);
    } else if (op == "FusedGemm") {
      infer_gemm(node, first, input(node, 1), out, result);
    } else if (op == "FusedConv") {
      infer_spatial(node, first, result);
    } else if (op == "Attention") {
      infer_attention(node, first, outputs);
    } else if (op == "EmbedLayerNormalization") {
      // (input_ids [B, S], ..., word_embedding [V, H], ...) => ([B, S, H], mask_index [B] int32, sum [B, S, H])
      const ShapeFacts& words = input(node, 2);
      result.elem_type = words.elem_type;
      if (first.shape && first.shape->size() == 2 && words.shape && words.shape->size() == 2) {
        result.shape = Dims{(*first.shape)[0], (*first.shape)[1], (*words.shape)[1]};
      }
      if (outputs.size() > 1) {
        outputs[1].elem_type = onnx::TensorProto::INT32;
        if (first.shape && !first.shape->empty()) outputs[1].shape = Dims{(*first.shape)[0]};
      }
      if (outputs.size() > 2) outputs[2] = result;
    }
    if (result.elem_type == 0 && kSameType.count(op)) result.elem_type = any_input_type(node);
  }

  // com.microsoft Attention (input [B, S, Di], weights [Di, 2D + Dv], bias [2D + Dv], mask, past
  // [2, B, N, P, H], ...) => (output [B, S, Dv], present [2, B, N, P + S, H]).
  void infer_attention(const onnx::NodeProto& node, const ShapeFacts& x, std::vector<ShapeFacts>& outputs) {
    const std::string& out = node.output(0);
    std::optional<int64_t> qk_hidden, v_hidden;
    if (auto sizes = ints_attribute(node, "qkv_hidden_sizes"); sizes && sizes->size() == 3) {
      qk_hidden = (*sizes)[0], v_hidden = (*sizes)[2];
    } else {
      for (const auto& [index, axis] : {std::pair{2, size_t{0}}, std::pair{1, size_t{1}}}) {  // bias, else weights
        const ShapeFacts& merged = input(node, index);
        if (qk_hidden || !merged.shape || merged.shape->size() <= axis || !(*merged.shape)[axis].known()) continue;
        qk_hidden = v_hidden = *(*merged.shape)[axis].number / 3;
      }
    }
    for (auto& output : outputs) output.elem_type = x.elem_type ? x.elem_type : any_input_type(node);
    if (!x.shape || x.shape->size() != 3) return;
    const Dim& batch = (*x.shape)[0];
    const Dim& sequence = (*x.shape)[1];
    outputs[0].shape = Dims{batch, sequence, v_hidden ? Dim::of(*v_hidden) : fresh(out, 2)};
    if (outputs.size() < 2) return;
    const auto heads = int_attribute(node, "num_heads");
    const ShapeFacts& past = input(node, 4);
    Dim total = sequence;
    if (past.shape && past.shape->size() == 5) {
      const Dim& past_length = (*past.shape)[3];
      total = past_length.known() && sequence.known() ? Dim::of(*past_length.number + *sequence.number) : fresh(node.output(1), 3);
    }
    const Dim head_size = heads && *heads > 0 && qk_hidden ? Dim::of(*qk_hidden / *heads) : fresh(node.output(1), 4);
    outputs[1].shape = Dims{Dim::of(2), batch, heads ? Dim::of(*heads) : fresh(node.output(1), 2), total, head_size};
  }

  void infer_matmul(const ShapeFacts& a, const ShapeFacts& b, const std::string& out, ShapeFacts& result) {
    result.elem_type = a.elem_type;
    if (!a.shape || !b.shape || a.shape->empty() || b.shape->empty()) return;
    Dims left = *a.shape, right = *b.shape;
    const bool vector_left = left.size() == 1, vector_right = right.size() == 1;
    if (vector_left) left.insert(left.begin(), Dim::of(1));
    if (vector_right) right.push_back(Dim::of(1));
    ShapeFacts left_batch, right_batch;
    left_batch.shape = Dims(left.begin(), left.end() - 2);
    right_batch.shape = Dims(right.begin(), right.end() - 2);
    Dims dims = *broadcast({&left_batch, &right_batch}, out);
    if (!vector_left) dims.push_back(left[left.size() - 2]);
    if (!vector_right) dims.push_back(right.back());
    result.shape = std::move(dims);
  }

  void infer_gather(const onnx::NodeProto& node, const ShapeFacts& data, const ShapeFacts& indices, ShapeFacts& result) {
    result.elem_type = data.elem_type;
    if (!data.shape || !indices.shape || data.shape->empty()) return;
    const auto rank = static_cast<int64_t>(data.shape->size());
    int64_t axis = int_attribute(node, "axis").value_or(0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return;
    Dims dims(data.shape->begin(), data.shape->begin() + axis);
    dims.insert(dims.end(), indices.shape->begin(), indices.shape->end());
    dims.insert(dims.end(), data.shape->begin() + axis + 1, data.shape->end());
    result.shape = std::move(dims);
    if (data.values && axis == 0) {
      if (auto picked = ints(indices.values)) {
        Dims elements;
        for (int64_t index : *picked) {
          if (index < 0) index += static_cast<int64_t>(data.values->size());
          if (index < 0 || index >= static_cast<int64_t>(data.values->size())) return;
          elements.push_back((*data.values)[static_cast<size_t>(index)]);
        }
        result.values = std::move(elements);
      }
    }
  }

  // Split along `axis` into the sizes given (`split`: an input from opset 13, an attribute before),
  // else into equal parts; a rank-1 value's elements are split with it (tf2onnx writes the pads
  // of every Pad as Split -> Concat of one constant).
  void infer_split(const onnx::NodeProto& node, const ShapeFacts& x, std::vector<ShapeFacts>& outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {  // each its own unknown sizes, until worked out
      outputs[i].elem_type = x.elem_type;
      if (x.shape) outputs[i].shape = fresh_dims(x.shape->size(), node.output(static_cast<int>(i)));
    }
    if (!x.shape) return;
    const auto rank = static_cast<int64_t>(x.shape->size());
    int64_t axis = int_attribute(node, "axis").value_or(0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank || !(*x.shape)[static_cast<size_t>(axis)].known()) return;
    const int64_t total = *(*x.shape)[static_cast<size_t>(axis)].number;
    auto sizes = ints_attribute(node, "split");
    if (!sizes && node.input_size() > 1 && !node.input(1).empty()) sizes = ints(input(node, 1).values);
    if (!sizes && node.input_size() > 1 && !node.input(1).empty()) return;  // sizes known only at run time
    const auto parts = static_cast<int64_t>(outputs.size());
    if (!sizes) {
      if (parts == 0 || int_attribute(node, "num_outputs")) return;  // Split-18's uneven last part: left unknown
      if (total % parts != 0) return;
      sizes = std::vector<int64_t>(static_cast<size_t>(parts), total / parts);
    }
    if (static_cast<int64_t>(sizes->size()) != parts) return;
    int64_t start = 0;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const int64_t size = (*sizes)[i];
      if (size < 0 || start + size > total) return;
      Dims dims = *x.shape;
      dims[static_cast<size_t>(axis)] = Dim::of(size);
      outputs[i].shape = std::move(dims);
      if (x.values && rank == 1) outputs[i].values = Dims(x.values->begin() + start, x.values->begin() + start + size);
      start += size;
    }
  }

  // Pad: each dim grows by its pads (an input from opset 11, an attribute before; `axes` from 18).
  void infer_pad(const onnx::NodeProto& node, const ShapeFacts& x, const std::string& out, ShapeFacts& result) {
    result.elem_type = x.elem_type;
    if (!x.shape) return;
    result.shape = fresh_dims(x.shape->size(), out);
    auto pads = ints_attribute(node, "pads");
    if (!pads && node.input_size() > 1) pads = ints(input(node, 1).values);
    const auto rank = static_cast<int64_t>(x.shape->size());
    if (!pads || node.input_size() > 3 || static_cast<int64_t>(pads->size()) != 2 * rank) return;  // axes: not worked out
    Dims dims = *x.shape;
    for (int64_t axis = 0; axis < rank; ++axis) {
      Dim& dim = dims[static_cast<size_t>(axis)];
      const int64_t grown = dim.known() ? *dim.number + (*pads)[static_cast<size_t>(axis)] + (*pads)[static_cast<size_t>(axis + rank)] : -1;
      dim = grown >= 0 ? Dim::of(grown) : fresh(out, static_cast<size_t>(axis));
    }
    result.shape = std::move(dims);
  }

  void infer_squeeze(const onnx::NodeProto& node, const ShapeFacts& x, bool unsqueeze, ShapeFacts& result) {
    result.elem_type = x.elem_type;
    const auto axes = axes_of(node, 1);
    if (!x.shape || !axes) return;
    Dims dims = *x.shape;
    if (unsqueeze) {
      const auto rank = static_cast<int64_t>(dims.size() + axes->size());
      std::vector<int64_t> sorted;
      for (int64_t axis : *axes) sorted.push_back(axis < 0 ? axis + rank : axis);
      std::sort(sorted.begin(), sorted.end());
      for (int64_t axis : sorted) {
        if (axis < 0 || axis > static_cast<int64_t>(dims.size())) return;
        dims.insert(dims.begin() + axis, Dim::of(1));
      }
    } else {
      const auto rank = static_cast<int64_t>(dims.size());
      std::vector<bool> drop(dims.size(), false);
      for (size_t axis = 0; axis < dims.size(); ++axis) {
        if (axes->empty() && dims[axis].number == 1) drop[axis] = true;
        if (axes->empty() && !dims[axis].known()) return;  // might be 1
      }
      for (int64_t axis : *axes) {
        if (axis < 0) axis += rank;
        if (axis < 0 || axis >= rank) return;
        drop[static_cast<size_t>(axis)] = true;
      }
      Dims kept;
      for (size_t axis = 0; axis < dims.size(); ++axis) {
        if (!drop[axis]) kept.push_back(dims[axis]);
      }
      dims = std::move(kept);
    }
    result.shape = std::move(dims);
    if (x.values && result.shape->size() <= 1) result.values = x.values;
  }

  void infer_concat(const onnx::NodeProto& node, const std::string& out, ShapeFacts& result) {
    std::vector<const ShapeFacts*> parts;
    for (int i = 0; i < node.input_size(); ++i) parts.push_back(&input(node, i));
    if (parts.empty()) return;
    result.elem_type = parts.front()->elem_type;
    for (const ShapeFacts* part : parts) {
      if (!part->shape || part->shape->size() != parts.front()->shape->size()) return;
    }
    const auto rank = static_cast<int64_t>(parts.front()->shape->size());
    int64_t axis = int_attribute(node, "axis").value_or(0);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return;
    Dims dims = *parts.front()->shape;
    int64_t total = 0;
    for (const ShapeFacts* part : parts) {
      const Dim& dim = (*part->shape)[static_cast<size_t>(axis)];
      total = total >= 0 && dim.known() ? total + *dim.number : -1;
    }
    dims[static_cast<size_t>(axis)] = total >= 0 ? Dim::of(total) : fresh(out, static_cast<size_t>(axis));
    result.shape = std::move(dims);
    if (rank == 1) {
      Dims elements;
      for (const ShapeFacts* part : parts) {
        if (!part->values) return;
        elements.insert(elements.end(), part->values->begin(), part->values->end());
      }
      result.values = std::move(elements);
    }
  }

  void infer_reshape(const onnx::NodeProto& node, const ShapeFacts& data, const ShapeFacts& shape, const std::string& out,
                     ShapeFacts& result) {
    result.elem_type = data.elem_type;
    if (!shape.values) {
      if (shape.shape && shape.shape->size() == 1 && (*shape.shape)[0].known()) {
        Dims dims;
        for (int64_t axis = 0; axis < *(*shape.shape)[0].number; ++axis) dims.push_back(fresh(out, static_cast<size_t>(axis)));
        result.shape = std::move(dims);
      }
      return;
    }
    const bool allow_zero = int_attribute(node, "allowzero").value_or(0) != 0;
    Dims dims = *shape.values;
    std::optional<size_t> inferred;
    for (size_t axis = 0; axis < dims.size(); ++axis) {
      if (dims[axis].number == 0 && !allow_zero) {
        if (!data.shape || axis >= data.shape->size()) return;
        dims[axis] = (*data.shape)[axis];
      } else if (dims[axis].number == -1) {
        inferred = axis;
      }
    }
    if (inferred) {
      // The -1 axis: the input's size over the product of the others, when all are numbers.
      int64_t total = 1, known = 1;
      bool numeric = data.shape.has_value();
      for (const Dim& dim : data.shape.value_or(Dims{})) numeric = numeric && dim.known() && (total *= *dim.number, true);
      for (size_t axis = 0; axis < dims.size(); ++axis) {
        if (axis != *inferred) numeric = numeric && dims[axis].known() && (known *= *dims[axis].number, true);
      }
      dims[*inferred] = numeric && known > 0 ? Dim::of(total / known) : fresh(out, *inferred);
    }
    result.shape = std::move(dims);
  }

  void infer_slice(const onnx::NodeProto& node, const ShapeFacts& x, const std::string& out, ShapeFacts& result) {
    result.elem_type = x.elem_type;
    if (!x.shape) return;
    const auto rank = static_cast<int64_t>(x.shape->size());
    const bool legacy = node.input_size() < 3;  // opset < 10: attributes
    auto param = [&](int index, const char* attribute) -> std::optional<std::vector<int64_t>> {
      if (legacy) return ints_attribute(node, attribute);
      if (index >= node.input_size() || node.input(index).empty()) return std::nullopt;
      return ints(input(node, index).values);
    };
    const auto starts = param(1, "starts"), ends = param(2, "ends");
    auto axes = param(3, "axes");
    auto steps = param(4, "steps");
    Dims dims = *x.shape;
    if (!starts || !ends) {
      // Unknown bounds: the axes that are sliced lose their size.
      if (!axes) {
        for (size_t axis = 0; axis < dims.size(); ++axis) dims[axis] = fresh(out, axis);
      } else {
        for (int64_t axis : *axes) {
          if (axis < 0) axis += rank;
          if (axis < 0 || axis >= rank) return;
          dims[static_cast<size_t>(axis)] = fresh(out, static_cast<size_t>(axis));
        }
      }
      result.shape = std::move(dims);
      return;
    }
    if (!axes) {
      axes.emplace();
      for (size_t i = 0; i < starts->size(); ++i) axes->push_back(static_cast<int64_t>(i));
    }
    if (!steps) steps = std::vector<int64_t>(starts->size(), 1);
    if (axes->size() != starts->size() || ends->size() != starts->size() || steps->size() != starts->size()) return;
    std::optional<Dims> values = x.values;
    for (size_t i = 0; i < axes->size(); ++i) {
      int64_t axis = (*axes)[i] < 0 ? (*axes)[i] + rank : (*axes)[i];
      if (axis < 0 || axis >= rank || (*steps)[i] == 0) return;
      const Dim& size = dims[static_cast<size_t>(axis)];
      if (!size.known()) {
        dims[static_cast<size_t>(axis)] = fresh(out, static_cast<size_t>(axis));
        values.reset();
        continue;
      }
      // ONNX's clamping: starts to [0, n] (step > 0) or [0, n-1] (step < 0), ends to [0, n] or [-1, n-1].
      const int64_t n = *size.number, step = (*steps)[i];
      auto clamp = [&](int64_t at, int64_t low, int64_t high) { return std::clamp(at < 0 ? at + n : at, low, high); };
      const int64_t begin = step > 0 ? clamp((*starts)[i], 0, n) : clamp((*starts)[i], 0, n - 1);
      const int64_t end = step > 0 ? clamp((*ends)[i], 0, n) : clamp((*ends)[i], -1, n - 1);
      const int64_t span = step > 0 ? end - begin : begin - end;
      const int64_t stride = step > 0 ? step : -step;
      const int64_t count = span > 0 ? (span + stride - 1) / stride : 0;
      dims[static_cast<size_t>(axis)] = Dim::of(count);
      if (values && rank == 1 && count <= static_cast<int64_t>(kMaxValues)) {
        Dims elements;
        for (int64_t k = 0, at = begin; k < count; ++k, at += step) {
          if (at < 0 || at >= static_cast<int64_t>(values->size())) {  // declared dims disagree with the data
            values.reset();
            break;
          }
          elements.push_back((*values)[static_cast<size_t>(at)]);
        }
        if (values) values = std::move(elements);
      } else {
        values.reset();
      }
    }
    result.shape = std::move(dims);
    if (rank == 1) result.values = std::move(values);
  }

  void infer_reduce(const onnx::NodeProto& node, const ShapeFacts& x, ShapeFacts& result) {
    result.elem_type = x.elem_type;
    if (!x.shape) return;
    const bool keepdims = int_attribute(node, "keepdims").value_or(1) != 0;
    auto axes = axes_of(node, 1);
    if (!axes) return;
    const auto rank = static_cast<int64_t>(x.shape->size());
    std::vector<bool> reduced(x.shape->size(), axes->empty() && int_attribute(node, "noop_with_empty_axes").value_or(0) == 0);
    for (int64_t axis : *axes) {
      if (axis < 0) axis += rank;
      if (axis < 0 || axis >= rank) return;
      reduced[static_cast<size_t>(axis)] = true;
    }
    Dims dims;
    for (size_t axis = 0; axis < x.shape->size(); ++axis) {
      if (!reduced[axis]) dims.push_back((*x.shape)[axis]);
      else if (keepdims) dims.push_back(Dim::of(1));
    }
    result.shape = std::move(dims);
  }

  const Scope& scope_;
  const Scope::Reader reader_;  // whose decoded constants to read
  // For the scope's lifetime (one round). Facts live in a deque, which never moves them: callers
  // hold references while asking for more.
  const onnx::NodeProto* visiting_ = nullptr;  // the node gather_inputs accepted, until visited
  std::vector<const ShapeFacts*> visiting_inputs_;
  std::vector<uint32_t> fact_of_value_;  // by value id: 1 + its index in facts_, 0 if unknown
  std::vector<uint32_t> walked_at_;      // by node position: the last walk that waited for its inputs
  uint32_t walks_ = 0;
  FlatMap<std::string_view, size_t> by_name_;  // the same for names the index doesn't know
  std::deque<ShapeFacts> facts_;
  std::deque<std::string> owned_names_;  // values asked for that no node of the scope computes
  mutable std::deque<std::string> symbol_names_;
  mutable FlatMap<std::string_view, const std::string*> symbols_;  // keys view symbol_names_
  FlatMap<std::string_view, const onnx::ValueInfoProto*> inputs_;  // graph inputs, with dim_params
};

ShapeInference::ShapeInference(const Scope& scope, Scope::Reader reader) : worker_(std::make_unique<Worker>(scope, reader)) {}
ShapeInference::~ShapeInference() = default;
const ShapeFacts& ShapeInference::operator()(std::string_view value) { return (*worker_)(value); }

}  // namespace onnx_rewrite
