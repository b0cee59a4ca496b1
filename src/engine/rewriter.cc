#include "engine/rewriter.h"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <queue>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "verify/opset.h"
#include "graph/walk.h"

namespace onnx_rewrite {
namespace {

// Takes every element out of a repeated field (keeping the objects alive) so that the field can
// be refilled in a new order without copying.
template <typename T>
std::vector<T*> take_all(google::protobuf::RepeatedPtrField<T>& field) {
  std::vector<T*> elements(static_cast<size_t>(field.size()));
  if (!elements.empty()) field.ExtractSubrange(0, field.size(), elements.data());
  return elements;
}

template <typename Visit>
void for_each_graph_name(const onnx::GraphProto& graph, Visit&& visit) {
  visit(graph.name());
  for (const auto& info : graph.input()) visit(info.name());
  for (const auto& info : graph.output()) visit(info.name());
  for (const auto& info : graph.value_info()) visit(info.name());
  for (const auto& tensor : graph.initializer()) visit(tensor.name());
  for (const auto& sparse : graph.sparse_initializer()) visit(sparse.values().name());
}

// The tensor's serialization as if it had no name: what makes two constants the same. The name
// is put back.
std::string serialized_without_name(onnx::TensorProto& tensor) {
  std::string name = std::move(*tensor.mutable_name());
  tensor.clear_name();
  std::string bytes = tensor.SerializeAsString();
  tensor.set_name(std::move(name));
  return bytes;
}

// A hash as the name registry keeps it: the one value that marks an empty slot moves aside.
constexpr size_t kEmptySlot = 0;
size_t stored_hash(std::string_view name) {
  const size_t hash = std::hash<std::string_view>()(name);
  return hash == kEmptySlot ? 1 : hash;
}

// Calls `visit` with every value a node reads, explicit and through its subgraphs (views into
// the node's protos).
template <typename Visit>
void for_each_read(const onnx::NodeProto& node, Visit&& visit) {
  for (const auto& input : node.input()) visit(std::string_view(input));
  if (holds_a_graph(node)) {
    for (const auto name : implicit_inputs(node)) visit(name);
  }
}

// Stable topological order: a node moves only as far as its inputs force it to. Most rounds
// leave the order as it was: that is checked first, in one pass over a flat table.
void repair_order(NodeList& nodes, const std::string& where) {
  const size_t count = static_cast<size_t>(nodes.size());
  FlatMap<std::string_view, int> producer;
  producer.reserve(count);
  for (int i = 0; i < nodes.size(); ++i) {
    for (const auto& output : nodes.Get(i).output()) {
      if (!output.empty()) producer[output] = i + 1;  // 0: not computed here
    }
  }
  auto producer_of = [&](std::string_view value) {
    const int* at = producer.find(value);
    return at ? *at - 1 : -1;
  };
  bool ordered = true;
  for (int i = 0; i < nodes.size() && ordered; ++i) {
    for_each_read(nodes.Get(i), [&](std::string_view value) { ordered = ordered && producer_of(value) < i; });
  }
  if (ordered) return;
  std::vector<std::vector<int>> consumers(count);
  std::vector<int> waiting(count, 0);
  for (int i = 0; i < nodes.size(); ++i) {
    for_each_read(nodes.Get(i), [&](std::string_view value) {
      const int at = producer_of(value);
      if (at < 0) return;
      consumers[static_cast<size_t>(at)].push_back(i);
      ++waiting[static_cast<size_t>(i)];
    });
  }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (int i = 0; i < nodes.size(); ++i) {
    if (waiting[static_cast<size_t>(i)] == 0) ready.push(i);
  }
  std::vector<onnx::NodeProto*> elements = take_all(nodes);
  std::vector<onnx::NodeProto*> sorted;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    sorted.push_back(elements[static_cast<size_t>(i)]);
    for (int consumer : consumers[static_cast<size_t>(i)]) {
      if (--waiting[static_cast<size_t>(consumer)] == 0) ready.push(consumer);
    }
  }
  if (sorted.size() != elements.size()) {
    for (auto* node : elements) nodes.AddAllocated(node);
    throw std::logic_error("a rewrite created a cycle in the " + where);
  }
  for (auto* node : sorted) nodes.AddAllocated(node);
}

}  // namespace

void NameRegistry::collect() {
  collected_ = true;
  // Two passes, counting first: the set is sized once (at most half full), not grown hash by hash.
  const auto names = [&](auto&& visit) {
    for_each_graph(std::as_const(model_), [&](const GraphView<true>& view) {
      if (view.graph) for_each_graph_name(*view.graph, visit);
      if (view.function) {
        for (const auto& name : view.function->input()) visit(name);
        for (const auto& name : view.function->output()) visit(name);
      }
      const Place::Kind root = view.place->root().kind();
      const bool checked = root != Place::Kind::kTrainingInitialization && root != Place::Kind::kTrainingAlgorithm;
      const bool collect_reads = !(reads_defined_ && checked);
      for (const auto& node : *view.nodes) {
        visit(node.name());
        if (collect_reads) {
          for (const auto& name : node.input()) visit(name);
        }
        for (const auto& name : node.output()) visit(name);
      }
    });
  };
  size_t visits = 0;
  names([&](const std::string&) { ++visits; });
  size_t size = 16;
  while (size < visits * 2) size *= 2;
  slots_.assign(size, kEmptySlot);
  // Each insertion lands in a random slot of a table far larger than the caches: the slots of
  // the next names are fetched while this one is placed.
  constexpr size_t kAhead = 16;
  std::array<size_t, kAhead> ahead{};
  size_t seen = 0;
  names([&](const std::string& name) {
    const size_t hash = stored_hash(name);
    __builtin_prefetch(&slots_[hash & (slots_.size() - 1)]);
    size_t& oldest = ahead[seen++ % kAhead];
    if (seen > kAhead) add(oldest);
    oldest = hash;
  });
  for (size_t i = seen > kAhead ? seen - kAhead : 0; i < seen; ++i) add(ahead[i % kAhead]);
}

bool NameRegistry::taken(size_t hash) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    if (slots_[i] == hash) return true;
    if (slots_[i] == kEmptySlot) return false;
  }
}

void NameRegistry::add(size_t hash) {
  if ((count_ + 1) * 4 > slots_.size() * 3) {
    std::vector<size_t> old = std::exchange(slots_, std::vector<size_t>(std::max<size_t>(16, slots_.size() * 2), kEmptySlot));
    count_ = 0;
    for (size_t kept : old) {
      if (kept != kEmptySlot) add(kept);
    }
  }
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    if (slots_[i] == hash) return;
    if (slots_[i] == kEmptySlot) {
      slots_[i] = hash;
      ++count_;
      return;
    }
  }
}

void NameRegistry::start_collecting() {
  if (collected_ || collecting_.joinable()) return;
  try {
    collecting_ = std::thread([this] {
      try {
        collect();
      } catch (...) {  // out of memory: collected again on first use, where a failure is reported
        collect_failed_ = true;
      }
    });
  } catch (const std::system_error&) {  // collected on first use
  }
}

void NameRegistry::finish_collecting() {
  if (!collecting_.joinable()) return;
  collecting_.join();
  if (std::exchange(collect_failed_, false)) forget();
}

void NameRegistry::model_changed() {
  finish_collecting();
  if (!handed_out_) forget();
}

void NameRegistry::forget() {
  collected_ = false;
  slots_ = {};
  count_ = 0;
}

std::string NameRegistry::fresh(const std::string& hint) {
  finish_collecting();
  if (!collected_) collect();
  handed_out_ = true;
  const size_t hint_hash = stored_hash(hint);
  std::string candidate = hint;
  size_t candidate_hash = hint_hash;
  int* suffix = nullptr;  // most hints are free: their suffixes are not kept
  while (taken(candidate_hash)) {
    if (!suffix) suffix = &next_suffix_[hint_hash];
    candidate = hint + "_" + std::to_string(++*suffix);
    candidate_hash = stored_hash(candidate);
  }
  add(candidate_hash);
  return candidate;
}

void Rewriter::replace(const Match& match, GraphBuilder&& builder) {
  const Scope& scope = *match.scope;
  Pending& pending = pending_[&scope];
  int last = -1;  // the position of the match's last node
  for (const auto* node : match.nodes) {
    pending.removed.insert(node);
    last = std::max(last, scope.position(node));
  }
  std::vector<onnx::NodeProto> nodes = std::move(builder.nodes());
  std::vector<onnx::NodeProto> constant_nodes;
  std::map<std::string, std::string> renamed;  // a constant equal to one made earlier is reused
  // New constants are initializers of the main graph; below IR 4 every initializer must also be
  // a graph input (an overridable one), so there, as in subgraphs and functions, Constant nodes.
  const bool as_initializers = scope.kind() == Scope::Kind::kMainGraph && model_.proto.ir_version() >= 4;
  for (auto& [name, tensor] : builder.constants()) {
    // An assembled constant's payload stays in the source until written: the same header from
    // the same ranges is the same tensor.
    const auto* assembled = builder.assembled_raw_data(name);
    std::vector<FileRange> ranges = assembled ? *assembled : std::vector<FileRange>{};
    if (as_initializers) {
      const std::string bytes = serialized_without_name(tensor);
      const size_t hash = std::hash<std::string>{}(bytes);
      const onnx::TensorProto* same = nullptr;
      for (auto [it, end] = pending.initializers_by_hash.equal_range(hash); it != end && !same; ++it) {
        onnx::TensorProto& made = pending.initializers[it->second];
        if (serialized_without_name(made) == bytes && pending.raw_data_ranges[it->second] == ranges) same = &made;
      }
      if (same) {
        renamed[name] = same->name();
      } else {
        pending.initializers_by_hash.emplace(hash, pending.initializers.size());
        pending.initializers.push_back(std::move(tensor));
        pending.raw_data_ranges.push_back(std::move(ranges));
      }
    } else {
      onnx::NodeProto& constant = constant_nodes.emplace_back();
      constant.set_op_type("Constant");
      constant.set_name(name);
      constant.add_output(name);
      onnx::TensorProto value = tensor;
      value.clear_name();
      if (assembled) value.set_raw_data(model_.source->read(ranges));
      *constant.add_attribute() = onnx::MakeAttribute("value", value);
    }
  }
  for (auto& node : nodes) {
    for (auto& input : *node.mutable_input()) {
      if (auto it = renamed.find(input); it != renamed.end()) input = it->second;
    }
  }
  auto& inserted = pending.inserted.emplace_back(Insertion{last, std::move(constant_nodes)}).nodes;
  inserted.insert(inserted.end(), std::make_move_iterator(nodes.begin()), std::make_move_iterator(nodes.end()));
}

void Rewriter::commit(const std::vector<std::unique_ptr<Scope>>& scopes) {
  for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
    auto found = pending_.find(it->get());
    if (found != pending_.end() && !found->second.removed.empty()) commit_scope(**it, found->second);
  }
  pending_.clear();
}

size_t Rewriter::remove_unused(const std::vector<std::unique_ptr<Scope>>& scopes,
                               const std::function<bool(const onnx::NodeProto&)>& which) {
  const size_t before = nodes_removed_;
  for (const auto& scope : scopes) {
    int position = -1;  // the index's: what a node writes is found by id, without hashing names
    for (auto& node : scope->nodes()) {
      ++position;
      const std::string domain = normalize_domain(node.domain());
      if ((!domain.empty() && domain != "ai.onnx.ml") || node.output_size() == 0 || !which(node)) continue;
      const auto writes = scope->writes_at(position);  // the present outputs
      const bool unused = std::all_of(writes.begin(), writes.end(),
                                      [&](Scope::ValueId output) { return !scope->is_output(output) && scope->uses(output).empty(); });
      if (unused) pending_[scope.get()].removed.insert(&node);
    }
  }
  commit(scopes);  // the sweep there takes what only the removed nodes read
  return nodes_removed_ - before;
}

size_t Rewriter::bypass_identities(const std::vector<std::unique_ptr<Scope>>& scopes,
                                   const std::function<bool(const onnx::NodeProto&)>& which) {
  const size_t before = nodes_removed_;
  for (const auto& scope : scopes) {
    // In node order, so a chain of Identities collapses onto its first input.
    std::unordered_map<std::string, std::string> bypassed;  // an Identity's output -> what its readers read instead
    for (auto& node : scope->nodes()) {
      if (node.op_type() != "Identity" || !normalize_domain(node.domain()).empty() || node.input_size() != 1 || node.output_size() != 1 ||
          node.input(0).empty() || !which(node)) {
        continue;
      }
      const std::string& output = node.output(0);
      const auto uses = scope->uses(output);
      if (scope->is_output(output) || std::any_of(uses.begin(), uses.end(), [](const Use& use) { return use.input < 0; })) continue;
      auto earlier = bypassed.find(node.input(0));
      const std::string source = earlier != bypassed.end() ? earlier->second : node.input(0);
      Pending& pending = pending_[scope.get()];
      for (const Use& use : uses) {
        pending.rewired.push_back({use.node, use.input, source});
        touched_.insert(use.node);
      }
      pending.read_anew.insert(source);
      pending.removed.insert(&node);
      bypassed[output] = source;
    }
  }
  commit(scopes);
  return nodes_removed_ - before;
}

namespace {

using ValueId = Scope::ValueId;

// Insertions before one node become one run of new nodes, in the order recorded (their ranks
// count on for breaks_order); in node order (matches are found mostly in it: the sort has little
// to do).
void merge_insertion_runs(std::vector<Rewriter::Insertion>& inserted) {
  std::stable_sort(inserted.begin(), inserted.end(),
                   [](const Rewriter::Insertion& a, const Rewriter::Insertion& b) { return a.before < b.before; });
  size_t runs = 0;
  for (auto& insertion : inserted) {
    if (runs > 0 && inserted[runs - 1].before == insertion.before) {
      auto& run = inserted[runs - 1].nodes;
      run.insert(run.end(), std::make_move_iterator(insertion.nodes.begin()), std::make_move_iterator(insertion.nodes.end()));
    } else if (&inserted[runs++] != &insertion) {
      inserted[runs - 1] = std::move(insertion);
    }
  }
  inserted.resize(runs);
}

// value_info of values that no longer exist: computed by a node that went and by no new one, or
// a dead initializer.
void drop_vanished_value_info(const Scope& scope, const std::vector<Rewriter::Insertion>& inserted, const std::vector<int>& gone,
                              const std::unordered_set<std::string>& dead_initializers) {
  if (!scope.graph() || scope.graph()->value_info_size() == 0) return;
  FlatMap<std::string_view, bool> computed_by_new;
  for (const auto& insertion : inserted) {
    for (const auto& node : insertion.nodes) {
      for (const auto& output : node.output()) computed_by_new[output] = true;
    }
  }
  std::unordered_set<std::string> vanished;
  for (int position : gone) {
    for (const ValueId value : scope.writes_at(position)) {
      if (!computed_by_new.contains(scope.name(value))) vanished.emplace(scope.name(value));
    }
  }
  vanished.insert(dead_initializers.begin(), dead_initializers.end());
  auto& infos = *scope.graph()->mutable_value_info();
  for (auto* info : take_all(infos)) {
    if (vanished.count(info->name())) delete info;
    else infos.AddAllocated(info);
  }
}

}  // namespace

// The walks of a commit go by the index's value ids, not names: a round on a big graph removes
// hundreds of thousands of nodes, and hashing each name they read and write again was much of a
// commit.
void Rewriter::commit_scope(const Scope& scope, Pending& pending) {
  merge_insertion_runs(pending.inserted);
  // Values of the index that new nodes read: whatever goes, they stay in use. Their ids, in
  // the order read, serve breaks_order too.
  std::vector<char> read_by_new(scope.value_count(), 0);
  std::vector<std::optional<ValueId>> read_ids;
  for (const auto& insertion : pending.inserted) {
    for (const auto& node : insertion.nodes) {
      for_each_read(node, [&](std::string_view name) {
        const auto id = scope.value_id(name);
        if (id) read_by_new[id->index] = 1;
        read_ids.push_back(id);
      });
    }
  }
  Removals removals(scope);
  for (const auto* node : pending.removed) removals.remove(scope.position(node));
  const std::unordered_set<std::string> dead_initializers = sweep_unused(scope, pending, read_by_new, removals);
  // Readers whose values something else computes now (a new node, or an initializer a folded
  // constant became) may match differently, as may the producers that lost readers (above).
  for (int position : removals.gone) {
    for (const ValueId value : scope.writes_at(position)) {
      for (const auto& use : scope.uses(value)) {
        if (!removals.is_gone(use.position)) touched_.insert(use.node);
      }
    }
  }
  drop_vanished_value_info(scope, pending.inserted, removals.gone, dead_initializers);
  const bool reorder = !ordered_ || breaks_order(scope, pending, read_ids, removals.gone_at);
  // Readers of bypassed Identities read their inputs from now on: only after the last use of the
  // round's index, whose keys view the names as they were.
  for (const auto& rewire : pending.rewired) rewire.node->set_input(rewire.input, rewire.source);
  rebuild_nodes(scope, pending, removals);
  if (scope.graph()) {
    if (!dead_initializers.empty()) {
      model_.remove_initializers(*scope.graph(),
                                 [&](const onnx::TensorProto& tensor) { return dead_initializers.count(tensor.name()) != 0; });
    }
    auto& initializers = *scope.graph()->mutable_initializer();
    for (size_t i = 0; i < pending.initializers.size(); ++i) {
      onnx::TensorProto& added = *initializers.Add();
      added = std::move(pending.initializers[i]);
      if (!pending.raw_data_ranges[i].empty()) model_.assemble(added, std::move(pending.raw_data_ranges[i]));
    }
  }
  if (reorder) repair_order(scope.nodes(), scope.where());
}

// Producers and initializers the removals leave without any use (and only those), found with
// the round's index before anything changes: the producers join the removals, the initializers'
// names are returned.
std::unordered_set<std::string> Rewriter::sweep_unused(const Scope& scope, const Pending& pending, const std::vector<char>& read_by_new,
                                                       Removals& removals) {
  std::vector<ValueId> maybe_dead;
  auto inputs_maybe_dead = [&](int position) {
    const auto reads = scope.reads_at(position);
    maybe_dead.insert(maybe_dead.end(), reads.begin(), reads.end());
  };
  for (int position : removals.gone) inputs_maybe_dead(position);
  // Nodes only go, so each value keeps how many of its uses are known to be gone: a constant
  // read by every block of a long chain is scanned once, not once per removed reader.
  std::vector<uint32_t> uses_gone(scope.value_count(), 0);
  auto unused = [&](ValueId value) {
    if (scope.is_output(value) || read_by_new[value.index] ||
        (!pending.read_anew.empty() && pending.read_anew.count(std::string(scope.name(value))))) {
      return false;
    }
    const auto uses = scope.uses(value);
    uint32_t& known = uses_gone[value.index];
    while (known < uses.size() && removals.is_gone(uses[known].position)) ++known;
    return known == uses.size();
  };
  std::unordered_set<std::string> dead_initializers;
  while (!maybe_dead.empty()) {
    const ValueId value = maybe_dead.back();
    maybe_dead.pop_back();
    const auto* produced = scope.producer(value);
    if (produced) {
      if (removals.is_gone(produced->position)) continue;  // most: values between two nodes of one match
      touched_.insert(produced->node);                     // it loses a reader (and leaves touched_ again if it goes too)
    }
    if (!unused(value)) continue;
    if (produced) {
      const auto outputs = scope.writes_at(produced->position);
      if (!std::all_of(outputs.begin(), outputs.end(), unused)) continue;
      removals.remove(produced->position);
      inputs_maybe_dead(produced->position);
    } else if (const std::string_view name = scope.name(value); scope.owns_initializer(name) && !scope.is_graph_input_here(name)) {
      dead_initializers.emplace(name);
    }
  }
  return dead_initializers;
}

// The scope's node list rebuilt: new nodes before the node they stand before, the removed ones
// deleted.
void Rewriter::rebuild_nodes(const Scope& scope, Pending& pending, const Removals& removals) {
  NodeList& nodes = scope.nodes();
  int position = 0;  // the index's
  auto insertion = pending.inserted.begin();
  for (auto* node : take_all(nodes)) {
    for (; insertion != pending.inserted.end() && insertion->before == position; ++insertion) {
      for (auto& built : insertion->nodes) {
        auto* added = new onnx::NodeProto(std::move(built));
        nodes.AddAllocated(added);
        created_.insert(added);
        touched_.insert(added);
      }
    }
    if (removals.is_gone(position++)) {
      created_.erase(node);
      touched_.erase(node);
      retried_.erase(node);
      delete node;
      ++nodes_removed_;
    } else {
      nodes.AddAllocated(node);
    }
  }
}

// Whether the rebuilt node list will have a node before what it reads, found with the round's
// index before anything changes. In a scope that was in order, old nodes keep their relative
// order, so only a new node, a reader of what a new node computes (another replacement of the
// round may have put it further down) or a rewired reader can. A node's place is the position
// of the old node it stands before, or is, and its rank there: new nodes stand before their
// anchor in the order built, the anchor itself (which goes) after them.
bool Rewriter::breaks_order(const Scope& scope, const Pending& pending, const std::vector<std::optional<Scope::ValueId>>& read_ids,
                            const std::vector<char>& gone_at) const {
  using Place = std::pair<int, size_t>;
  auto kept_at = [](int position) { return Place{position, std::numeric_limits<size_t>::max()}; };
  auto is_gone = [&](int position) { return gone_at[static_cast<size_t>(position)] != 0; };
  // Where new nodes compute values: by id for the index's values (a match's outputs keep their
  // names), by name for the values new nodes bring.
  FlatMap<uint32_t, Place> built_by_id;
  FlatMap<std::string_view, Place> built_by_name;
  std::vector<std::optional<Scope::ValueId>> write_ids;  // of the new nodes' present outputs, in order
  for (const auto& insertion : pending.inserted) {
    for (size_t rank = 0; rank < insertion.nodes.size(); ++rank) {
      for (const auto& output : insertion.nodes[rank].output()) {
        if (output.empty()) continue;
        const auto id = scope.value_id(output);
        if (id) built_by_id[id->index] = Place{insertion.before, rank};
        else built_by_name[output] = Place{insertion.before, rank};
        write_ids.push_back(id);
      }
    }
  }
  auto computed_at = [&](std::string_view name, std::optional<Scope::ValueId> id) -> std::optional<Place> {  // nullopt: not in this scope
    if (!id) {
      if (const Place* found = built_by_name.find(name)) return *found;
      return std::nullopt;
    }
    if (const Place* found = built_by_id.find(id->index)) return *found;
    const auto* produced = scope.producer(*id);
    if (produced && !is_gone(produced->position)) return kept_at(produced->position);
    return std::nullopt;
  };
  size_t next_read = 0, next_write = 0;
  for (const auto& insertion : pending.inserted) {
    for (size_t rank = 0; rank < insertion.nodes.size(); ++rank) {
      const Place place{insertion.before, rank};
      bool early = false;
      for_each_read(insertion.nodes[rank], [&](std::string_view value) {
        const auto at = computed_at(value, read_ids[next_read++]);
        early = early || (at && *at >= place);
      });
      if (early) return true;
      for (const auto& output : insertion.nodes[rank].output()) {
        if (output.empty()) continue;
        const auto id = write_ids[next_write++];
        if (!id) continue;  // a new value: only new nodes read it
        for (const auto& use : scope.uses(*id)) {
          if (!is_gone(use.position) && kept_at(use.position) <= place) return true;
        }
      }
    }
  }
  return std::any_of(pending.rewired.begin(), pending.rewired.end(), [&](const Pending::Rewire& rewire) {
    const auto at = computed_at(rewire.source, scope.value_id(rewire.source));
    const int position = scope.position(rewire.node);
    return !is_gone(position) && at && *at >= kept_at(position);
  });
}

}  // namespace onnx_rewrite
