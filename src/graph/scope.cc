#include "graph/scope.h"

#include <array>
#include <deque>
#include <list>
#include <map>
#include <unordered_set>
#include <utility>

#include "graph/flat_map.h"
#include "graph/shape_inference.h"
#include "graph/two_threads.h"
#include "graph/walk.h"
#include "graph/work_count.h"
#include "verify/opset.h"

namespace onnx_rewrite {

// Keys view names owned by the model's protos, which don't change while a scope is in use.
struct Scope::Index {
  std::shared_ptr<FreeNameCache> free_name_cache;  // shared with the scopes nested in this one
  // One entry per value a node computes or reads: the questions come in pairs (who computes
  // it, who reads it), and each name is hashed once.
  struct Value {
    Producer producer;        // node null: computed elsewhere
    uint32_t uses_begin = 0;  // into uses, in node order
    uint32_t uses_count = 0;
    // What constant_tensor asks of a value, answered by the one lookup of its entry: 1 + the
    // index of the initializer of its name (0: none), and whether it is a graph input.
    uint32_t initializer = 0;
    bool graph_input = false;
  };
  FlatMap<std::string_view, Value> values;  // its entries' indexes are the ValueIds
  // What each node reads and writes, node after node (reads_at, writes_at), and where each
  // node's part begins, by position (one more for the end).
  std::vector<ValueId> read, written;
  std::vector<uint32_t> reads_begin, writes_begin;
  std::vector<bool> output_values;  // by ValueId: is_output
  // Keys of values only subgraphs read, copied: a commit replaces a subgraph's nodes before
  // those of the graph holding it, whose index still looks these values up. A list, which
  // allocates nothing while empty (a deque allocates half a KiB: per function, of 100,000).
  std::list<std::string> read_by_subgraphs;
  std::vector<Use> uses;
  std::unordered_set<std::string_view> outputs;
  std::unordered_set<std::string_view> graph_inputs;
  FlatMap<std::string_view, const onnx::TensorProto*> initializers;
  FlatMap<std::string_view, Declared> types;
  FlatMap<const onnx::NodeProto*, int> positions;
  std::map<std::string, int, std::less<>> opsets;
  // Small constants decoded so far, by tensor: a model's few shared constants are read by
  // thousands of nodes, and each search would decode them again.
  struct Decoded {
    bool done = false;
    std::optional<TensorValues> values;
  };
  std::array<FlatMap<const onnx::TensorProto*, Decoded>, 2> decoded;  // by Reader

  void add_type(const onnx::ValueInfoProto& info);
  void build(const Scope& scope);
  void declare_interface(const Scope& scope, const onnx::GraphProto& graph);
  bool index_writes(NodeList& nodes);
  void mark_interface_values(const onnx::GraphProto* graph);
  void index_reads(NodeList& nodes);
  void index_reads_in_halves(NodeList& nodes);
};
bool is_constant_node(const onnx::NodeProto& node) { return node.op_type() == "Constant" && normalize_domain(node.domain()).empty(); }

const onnx::TensorProto* constant_node_value(const onnx::NodeProto& node) {
  if (!is_constant_node(node)) return nullptr;
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == "value" && attribute.has_t()) return &attribute.t();
  }
  return nullptr;
}

std::optional<onnx::TensorProto> constant_node_tensor(const onnx::NodeProto& node) {
  if (!is_constant_node(node)) return std::nullopt;
  for (const auto& attribute : node.attribute()) {
    const std::string& name = attribute.name();
    if (name == "value" && attribute.has_t()) return attribute.t();
    if (name == "value_float") return make_tensor(onnx::TensorProto::FLOAT, {}, {attribute.f()});
    if (name == "value_int") return make_tensor(onnx::TensorProto::INT64, {}, {static_cast<double>(attribute.i())});
    if (name == "value_floats") {
      std::vector<double> numbers(attribute.floats().begin(), attribute.floats().end());
      return make_tensor(onnx::TensorProto::FLOAT, {static_cast<int64_t>(numbers.size())}, numbers);
    }
    if (name == "value" && attribute.type() == onnx::AttributeProto::STRING) {
      // torch writes a str constant as a STRING attribute named value.
      onnx::TensorProto tensor;
      tensor.set_data_type(onnx::TensorProto::STRING);
      tensor.add_string_data(attribute.s());
      return tensor;
    }
    if (name == "value_string" || name == "value_strings") {
      onnx::TensorProto tensor;
      tensor.set_data_type(onnx::TensorProto::STRING);
      if (name == "value_string") tensor.add_string_data(attribute.s());
      else tensor.add_dims(attribute.strings_size());
      for (const auto& text : attribute.strings()) tensor.add_string_data(text);
      return tensor;
    }
    if (name == "value_ints") {
      std::vector<double> numbers(attribute.ints().begin(), attribute.ints().end());
      return make_tensor(onnx::TensorProto::INT64, {static_cast<int64_t>(numbers.size())}, numbers);
    }
  }
  return std::nullopt;
}

Scope::Scope(Kind kind, std::string where, const Model& model, const Scope* parent, onnx::GraphProto* graph, onnx::FunctionProto* function)
    : kind_(kind),
      where_(std::move(where)),
      model_(model),
      parent_(parent),
      graph_(graph),
      function_(function),
      index_(std::make_unique<Index>()) {
  index_->build(*this);
}

// Through const accessors: the list is read on two threads at times (a mutable accessor may mark
// the message as it goes).
NodeList& Scope::nodes() const { return const_cast<NodeList&>(graph_ ? std::as_const(*graph_).node() : std::as_const(*function_).node()); }

void Scope::Index::add_type(const onnx::ValueInfoProto& info) {
  if (!info.type().has_tensor_type()) return;
  const auto& tensor = info.type().tensor_type();
  Declared type;
  type.elem_type = tensor.elem_type();
  if (tensor.has_shape()) {
    std::vector<int64_t> dims;
    for (const auto& dim : tensor.shape().dim()) dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    type.dims = std::move(dims);
  }
  types[info.name()] = std::move(type);
}

namespace {

// Reading a node's names chases pointers: the node, its list of names, each name, its
// characters; on a graph far larger than the caches each is a miss. Each pass below brings in
// one link of that chain for nodes a few places ahead, so that the misses overlap.
void fetch_ahead(const NodeList& nodes, int position, bool inputs) {
  const int count = nodes.size();
  auto names = [&](int at) -> const google::protobuf::RepeatedPtrField<std::string>& {
    return inputs ? nodes.Get(at).input() : nodes.Get(at).output();
  };
  if (position + 12 < count) __builtin_prefetch(&nodes.Get(position + 12));
  if (position + 8 < count && !names(position + 8).empty()) __builtin_prefetch(&names(position + 8).Get(0));
  if (position + 4 < count) {
    for (const auto& name : names(position + 4)) __builtin_prefetch(name.data());
  }
}

}  // namespace

void Scope::Index::build(const Scope& scope) {
  onnx::GraphProto* graph = scope.graph_;
  free_name_cache = scope.parent_ ? scope.parent_->index_->free_name_cache : std::make_shared<FreeNameCache>();
  if (scope.kind_ != Kind::kSubgraph) {  // subgraphs use the imports of the graph or function holding them
    const auto& imports = scope.function_ ? scope.function_->opset_import() : scope.model_.proto.opset_import();
    for (const auto& import : imports) opsets[normalize_domain(import.domain())] = static_cast<int>(import.version());
  }

  if (graph) {
    declare_interface(scope, *graph);
  } else {
    for (const auto& output : scope.function_->output()) outputs.insert(output);
  }

  // Producers first, so that a value computed here is keyed by its producer's output. Uses are
  // stored flat, grouped by value: count, place, then fill in node order.
  NodeList& nodes = scope.nodes();
  const size_t count = static_cast<size_t>(nodes.size());
  count_work(count + 1);
  // About one value per node (a model with more grows these once): tables twice as large would
  // be a fifth of the peak memory on a graph of a million nodes.
  positions.reserve(count);
  values.reserve(count);
  const bool any_subgraph = index_writes(nodes);
  if (count >= kBigGraphNodes && !any_subgraph) index_reads_in_halves(nodes);
  else index_reads(nodes);

  mark_interface_values(graph);
}

// The graph's inputs, outputs (and, for the main graph, what training graphs read), declared
// types and initializers.
void Scope::Index::declare_interface(const Scope& scope, const onnx::GraphProto& graph) {
  for (const auto& input : graph.input()) {
    graph_inputs.insert(input.name());
    add_type(input);
  }
  for (const auto& output : graph.output()) {
    outputs.insert(output.name());
    add_type(output);
  }
  if (scope.kind_ == Kind::kMainGraph) {
    // Training graphs read the main graph's values: what they read must stay as it is.
    std::vector<const onnx::GraphProto*> training_graphs;
    for (const auto& training : scope.model_.proto.training_info()) {
      if (training.has_initialization()) training_graphs.push_back(&training.initialization());
      if (training.has_algorithm()) training_graphs.push_back(&training.algorithm());
    }
    for (const auto name : free_names(training_graphs)) outputs.insert(name);
  }
  types.reserve(static_cast<size_t>(graph.value_info_size() + graph.initializer_size()));
  for (const auto& info : graph.value_info()) add_type(info);
  initializers.reserve(static_cast<size_t>(graph.initializer_size()));
  for (const auto& initializer : graph.initializer()) {
    initializers[initializer.name()] = &initializer;
    Declared type;
    type.elem_type = initializer.data_type();
    type.dims = std::vector<int64_t>(initializer.dims().begin(), initializer.dims().end());
    types[initializer.name()] = std::move(type);
  }
}

// Who writes each value, node by node; whether any node holds a subgraph.
bool Scope::Index::index_writes(NodeList& nodes) {
  const size_t count = static_cast<size_t>(nodes.size());
  int position = 0;
  written.reserve(count);
  writes_begin.reserve(count + 1);
  bool any_subgraph = false;
  for (auto& node : nodes) {
    fetch_ahead(nodes, position, false);
    writes_begin.push_back(static_cast<uint32_t>(written.size()));
    for (int i = 0; i < node.output_size(); ++i) {
      if (node.output(i).empty()) continue;
      const uint32_t entry = values.index_of(node.output(i));
      values.at(entry).producer = {&node, i, position};
      written.push_back({entry});
    }
    any_subgraph = any_subgraph || holds_a_graph(node);
    positions[&node] = position++;
  }
  writes_begin.push_back(static_cast<uint32_t>(written.size()));
  return any_subgraph;
}

// Flags the values that are graph outputs, initializers and graph inputs.
void Scope::Index::mark_interface_values(const onnx::GraphProto* graph) {
  output_values.resize(values.size());
  for (const auto name : outputs) {
    if (const uint32_t entry = values.entry_of(name); entry != values.npos) output_values[entry] = true;
  }
  if (graph) {
    for (int i = 0; i < graph->initializer_size(); ++i) {
      const uint32_t entry = values.entry_of(graph->initializer(i).name());
      if (entry != values.npos) values.at(entry).initializer = static_cast<uint32_t>(i) + 1;
    }
    for (const auto& input : graph->input()) {
      if (const uint32_t entry = values.entry_of(input.name()); entry != values.npos) values.at(entry).graph_input = true;
    }
  }
}

// What each node reads, and each value's uses, grouped by value: count, place, then fill in node
// order.
void Scope::Index::index_reads(NodeList& nodes) {
  const size_t count = static_cast<size_t>(nodes.size());
  auto for_each_use = [&](auto&& visit) {
    int position = 0;
    for (auto& node : nodes) {
      fetch_ahead(nodes, position, true);
      for (int i = 0; i < node.input_size(); ++i) {
        if (!node.input(i).empty()) visit(std::string_view(node.input(i)), Use{&node, i, position});
      }
      for (const auto name : implicit_inputs(node, free_name_cache.get())) visit(name, Use{&node, -1, position});
      ++position;
    }
  };
  // Each use's value is looked up once: where its entry is, in use order, for the second pass
  // and for reads_at.
  read.reserve(count * 2);
  reads_begin.reserve(count + 1);
  for_each_use([&](std::string_view name, const Use& use) {
    const bool implicit_first = use.input < 0 && !values.contains(name);
    const uint32_t entry = values.index_of(implicit_first ? std::string_view(read_by_subgraphs.emplace_back(name)) : name);
    ++values.at(entry).uses_count;
    while (reads_begin.size() <= static_cast<size_t>(use.position)) reads_begin.push_back(static_cast<uint32_t>(read.size()));
    read.push_back({entry});
  });
  while (reads_begin.size() <= count) reads_begin.push_back(static_cast<uint32_t>(read.size()));
  uint32_t next = 0;
  values.for_each([&](std::string_view, Value& value) {
    value.uses_begin = next;
    next += value.uses_count;
    value.uses_count = 0;
  });
  uses.resize(next);
  size_t at = 0;
  for_each_use([&](std::string_view, const Use& use) {
    Value& value = values.at(read[at++].index);
    uses[value.uses_begin + value.uses_count++] = use;
  });
}

// The same for a big graph whose nodes hold no graphs, on two threads: each looks up what its
// half of the nodes reads (the table of values is only read meanwhile) and later places its uses
// after those the first half has of the same values. Names no node computes are added after the
// lookups, in the order read, as index_reads adds them: the ids come out the same.
void Scope::Index::index_reads_in_halves(NodeList& nodes) {
  const int count = nodes.size();
  struct Half {
    int from = 0, to = 0;
    std::vector<uint32_t> ids;                 // per read in node order: its entry (npos: not in the table yet)
    std::vector<uint32_t> begins;              // per node: where its reads start in ids
    std::vector<std::pair<int, int>> unknown;  // per npos in ids: the position and input reading it
    std::vector<uint32_t> next;                // per value: where the half's next use goes
  };
  std::array<Half, 2> halves;
  halves[0].to = halves[1].from = count / 2;
  halves[1].to = count;
  auto look_up = [&](Half& half) {
    half.begins.reserve(static_cast<size_t>(half.to - half.from));
    half.ids.reserve(static_cast<size_t>(half.to - half.from) * 2);
    for (int position = half.from; position < half.to; ++position) {
      fetch_ahead(nodes, position, true);
      const onnx::NodeProto& node = nodes.Get(position);
      half.begins.push_back(static_cast<uint32_t>(half.ids.size()));
      for (int i = 0; i < node.input_size(); ++i) {
        if (node.input(i).empty()) continue;
        const uint32_t entry = values.entry_of(node.input(i));
        if (entry == values.npos) half.unknown.emplace_back(position, i);
        half.ids.push_back(entry);
      }
    }
  };
  on_two_threads([&] { look_up(halves[1]); }, [&] { look_up(halves[0]); });

  for (Half& half : halves) {
    auto unknown = half.unknown.begin();
    for (uint32_t& id : half.ids) {
      if (id != values.npos) continue;
      const auto [position, input] = *unknown++;
      id = values.index_of(nodes.Get(position).input(input));
    }
  }
  read.reserve(halves[0].ids.size() + halves[1].ids.size());
  reads_begin.reserve(static_cast<size_t>(count) + 1);
  for (const Half& half : halves) {
    const auto offset = static_cast<uint32_t>(read.size());
    for (const uint32_t begin : half.begins) reads_begin.push_back(offset + begin);
    for (const uint32_t id : half.ids) read.push_back({id});
  }
  reads_begin.push_back(static_cast<uint32_t>(read.size()));

  // Uses grouped by value in node order: the first half's, then the second's.
  std::array<std::vector<uint32_t>, 2> counted;
  for (size_t h = 0; h < 2; ++h) {
    counted[h].assign(values.size(), 0);
    for (const uint32_t id : halves[h].ids) ++counted[h][id];
  }
  uint32_t next = 0;
  halves[0].next.resize(values.size());
  halves[1].next.resize(values.size());
  for (uint32_t entry = 0; entry < values.size(); ++entry) {
    Value& value = values.at(entry);
    value.uses_begin = next;
    value.uses_count = counted[0][entry] + counted[1][entry];
    halves[0].next[entry] = next;
    halves[1].next[entry] = next + counted[0][entry];
    next += value.uses_count;
  }
  uses.resize(next);
  auto place = [&](Half& half) {
    size_t at = 0;
    for (int position = half.from; position < half.to; ++position) {
      onnx::NodeProto& node = *nodes.Mutable(position);
      for (int i = 0; i < node.input_size(); ++i) {
        if (!node.input(i).empty()) uses[half.next[half.ids[at++]]++] = Use{&node, i, position};
      }
    }
  };
  on_two_threads([&] { place(halves[1]); }, [&] { place(halves[0]); });
}

int Scope::opset(std::string_view domain) const {
  if (kind_ == Kind::kSubgraph) return parent_->opset(domain);
  auto it = index_->opsets.find(normalize_domain(domain));
  return it == index_->opsets.end() ? 0 : it->second;
}

const Scope::Producer* Scope::producer(std::string_view value) const {
  const auto id = value_id(value);
  return id ? producer(*id) : nullptr;
}

std::span<const Use> Scope::uses(std::string_view value) const {
  const auto id = value_id(value);
  return id ? uses(*id) : std::span<const Use>();
}

bool Scope::is_output(std::string_view value) const { return index_->outputs.count(value) != 0; }

size_t Scope::value_count() const { return index_->values.size(); }

std::optional<Scope::ValueId> Scope::value_id(std::string_view value) const {
  const uint32_t entry = index_->values.entry_of(value);
  return entry == index_->values.npos ? std::nullopt : std::optional<ValueId>(ValueId{entry});
}

std::string_view Scope::name(ValueId value) const { return index_->values.key_at(value.index); }

namespace {
// The part of `ids` that belongs to the node at `position` (`begins`: where each node's starts).
std::span<const Scope::ValueId> part_at(const std::vector<Scope::ValueId>& ids, const std::vector<uint32_t>& begins, int position) {
  const auto at = static_cast<size_t>(position);
  return std::span<const Scope::ValueId>(ids).subspan(begins[at], begins[at + 1] - begins[at]);
}
}  // namespace

std::span<const Scope::ValueId> Scope::reads_at(int position) const { return part_at(index_->read, index_->reads_begin, position); }
std::span<const Scope::ValueId> Scope::writes_at(int position) const { return part_at(index_->written, index_->writes_begin, position); }

const Scope::Producer* Scope::producer(ValueId value) const {
  const Index::Value& found = index_->values.at(value.index);
  return found.producer.node ? &found.producer : nullptr;
}

std::span<const Use> Scope::uses(ValueId value) const {
  const Index::Value& found = index_->values.at(value.index);
  return std::span<const Use>(index_->uses).subspan(found.uses_begin, found.uses_count);
}

bool Scope::is_output(ValueId value) const { return index_->output_values[value.index]; }
bool Scope::owns_initializer(std::string_view value) const { return index_->initializers.contains(value); }
bool Scope::is_graph_input_here(std::string_view value) const { return index_->graph_inputs.count(value) != 0; }
int Scope::position(const onnx::NodeProto* node) const { return *index_->positions.find(node); }

bool Scope::holds(const onnx::NodeProto* node) const { return index_->positions.contains(node); }

bool Scope::is_graph_input(std::string_view value) const {
  if (index_->graph_inputs.count(value) || index_->initializers.contains(value)) return true;
  if (producer(value)) return false;
  return parent_ && parent_->is_graph_input(value);
}

const onnx::TensorProto* Scope::constant_tensor(std::string_view value) const { return constant_tensor(value, nullptr); }

const onnx::TensorProto* Scope::constant_tensor(std::string_view value, const Producer** computed_here) const {
  const uint32_t entry = index_->values.entry_of(value);
  auto from_table = [&]() -> const onnx::TensorProto* {
    const auto* held = index_->initializers.find(value);
    return held ? *held : nullptr;
  };
  // Values no node here computes or reads (rare questions) are looked up in the tables.
  const onnx::TensorProto* initializer = nullptr;
  bool graph_input = false;
  const Producer* produced = nullptr;
  if (entry != index_->values.npos) {
    const Index::Value& found = index_->values.at(entry);
    // Checked by name: a commit that removed initializers must not make this another one.
    const int held = static_cast<int>(found.initializer) - 1;
    if (held >= 0 && held < graph_->initializer_size() && graph_->initializer(held).name() == value) {
      initializer = &graph_->initializer(held);
    } else if (held >= 0) {
      initializer = from_table();
    }
    graph_input = found.graph_input;
    produced = found.producer.node ? &found.producer : nullptr;
    if (computed_here) *computed_here = produced;
  } else {
    initializer = from_table();
    graph_input = index_->graph_inputs.count(value) != 0;
  }
  if (initializer) {
    // An initializer that is also a graph input can be overridden at run time (IR >= 4).
    if (graph_input && model_.proto.ir_version() >= 4) return nullptr;
    return initializer;
  }
  if (produced) return constant_node_value(*produced->node);  // value_float & co are read by constant_values
  if (graph_input) return nullptr;
  return parent_ ? parent_->constant_tensor(value) : nullptr;
}

bool Scope::is_constant(std::string_view value) const {
  const Producer* produced = nullptr;
  if (constant_tensor(value, &produced)) return true;
  return produced && is_constant_node(*produced->node);
}

std::optional<TensorValues> Scope::constant_values(std::string_view value, size_t max_elements, Reader reader) const {
  const Producer* produced = nullptr;
  const onnx::TensorProto* tensor = constant_tensor(value, &produced);
  if (!tensor) {
    if (!produced) return std::nullopt;
    auto made = constant_node_tensor(*produced->node);
    return made ? decode_tensor(*made) : std::nullopt;
  }
  size_t elements = 1;
  for (int64_t dim : tensor->dims()) {
    if (dim < 0) return std::nullopt;
    if (dim > 0 && elements > max_elements / static_cast<size_t>(dim)) return std::nullopt;
    elements *= static_cast<size_t>(dim);
  }
  if (elements > max_elements) return std::nullopt;
  constexpr size_t kKeptElements = 64;  // what is kept decoded: scalars and short vectors
  // A tensor held whole (a Constant's, a new initializer) is decoded where it is, not copied.
  auto decode = [&] {
    return model_.payload_elsewhere(*tensor) ? decode_tensor(model_.tensor_with_data(*tensor)) : decode_tensor(*tensor);
  };
  if (elements > kKeptElements) return decode();
  auto& decoded = index_->decoded[static_cast<size_t>(reader)];
  auto& kept = decoded.at(decoded.index_of(tensor));
  if (!kept.done) kept = {true, decode()};
  return kept.values;
}

Scope::~Scope() = default;

const ShapeFacts& Scope::facts(std::string_view value, Reader reader) const {
  auto& inference = inference_[static_cast<size_t>(reader)];
  if (!inference) inference = std::make_unique<ShapeInference>(*this, reader);
  return (*inference)(value);
}

void Scope::forget_facts() const {
  forget_facts(Reader::kRound);
  forget_facts(Reader::kAhead);
}

void Scope::forget_facts(Reader reader) const {
  inference_[static_cast<size_t>(reader)].reset();
  index_->decoded[static_cast<size_t>(reader)] = {};  // a commit may change or free the tensors it is keyed by
}

Scope::Declared Scope::declared_here(std::string_view value) const {
  const Declared* type = index_->types.find(value);
  return type ? *type : Declared{};
}

Scope::Declared Scope::declared(std::string_view value) const {
  if (const Declared* type = index_->types.find(value)) return *type;
  if (const Producer* produced = producer(value)) {
    auto declare = [](const onnx::TensorProto& tensor) {
      Declared type;
      type.elem_type = tensor.data_type();
      type.dims = std::vector<int64_t>(tensor.dims().begin(), tensor.dims().end());
      return type;
    };
    if (const onnx::TensorProto* tensor = constant_node_value(*produced->node)) return declare(*tensor);
    if (auto tensor = constant_node_tensor(*produced->node)) return declare(*tensor);
    return {};
  }
  return parent_ ? parent_->declared(value) : Declared{};
}

std::vector<std::unique_ptr<Scope>> collect_scopes(Model& model) {
  // Walked through const accessors: a mutable walk sets has-bits on its way, and the model may
  // be read on another thread meanwhile (the engine checks a round's result while it indexes the
  // next). Scopes hand out the graphs mutable: they are the model's own.
  if (!model.proto.has_graph()) model.proto.mutable_graph();
  std::vector<std::unique_ptr<Scope>> scopes;
  std::unordered_map<const Place*, const Scope*> scope_at;  // the walk gives parents first
  for_each_graph(
      std::as_const(model.proto),
      [&](const GraphView<true>& view) {
        const Place& place = *view.place;
        const Scope* parent = place.parent() ? scope_at.at(place.parent()) : nullptr;
        const Scope::Kind kind = view.function ? Scope::Kind::kFunction : parent ? Scope::Kind::kSubgraph : Scope::Kind::kMainGraph;
        scopes.push_back(std::make_unique<Scope>(kind, place.text(), model, parent, const_cast<onnx::GraphProto*>(view.graph),
                                                 const_cast<onnx::FunctionProto*>(view.function)));
        scope_at[&place] = scopes.back().get();
      },
      /*with_training=*/false);
  return scopes;
}

}  // namespace onnx_rewrite
