#include "engine/inline.h"

#include <algorithm>
#include <deque>
#include <utility>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/error.h"
#include "verify/opset.h"
#include "engine/rewriter.h"
#include "graph/imports.h"
#include "graph/walk.h"
#include "graph/work_count.h"

namespace onnx_rewrite {
namespace {

constexpr int kNodeOverloadField = 8;             // NodeProto.overload (IR 10), unknown to ONNX 1.12
constexpr int kFunctionOverloadField = 13;        // FunctionProto.overload (IR 10)
constexpr int kFunctionAttributeProtoField = 11;  // FunctionProto.attribute_proto (IR 9): defaults
constexpr size_t kNamePathLimit = 256;

std::string unknown_string(const google::protobuf::Message& message, int number) {
  const auto& fields = message.GetReflection()->GetUnknownFields(message);
  for (int i = 0; i < fields.field_count(); ++i) {
    const auto& field = fields.field(i);
    if (field.number() == number && field.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      return field.length_delimited();
    }
  }
  return {};
}

// Attributes with default values a function declares; ONNX 1.12 keeps them as unknown fields.
std::vector<onnx::AttributeProto> attribute_defaults(const onnx::FunctionProto& function) {
  std::vector<onnx::AttributeProto> defaults;
  const auto& fields = function.GetReflection()->GetUnknownFields(function);
  for (int i = 0; i < fields.field_count(); ++i) {
    const auto& field = fields.field(i);
    if (field.number() != kFunctionAttributeProtoField || field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    onnx::AttributeProto attribute;
    if (attribute.ParseFromString(field.length_delimited())) defaults.push_back(std::move(attribute));
  }
  return defaults;
}

using FunctionKey = std::tuple<std::string, std::string, std::string>;  // domain, name, overload

FunctionKey key_of(const onnx::FunctionProto& function) {
  return {normalize_domain(function.domain()), function.name(), unknown_string(function, kFunctionOverloadField)};
}

FunctionKey key_of(const onnx::NodeProto& node) {
  return {normalize_domain(node.domain()), node.op_type(), unknown_string(node, kNodeOverloadField)};
}

// Replaces attribute references (`ref_attr_name`) in a body node, and in the graphs it holds,
// by the call's values; a reference to an attribute the call doesn't give and that has no
// default is dropped, as if never written.
void resolve_attribute_references(onnx::NodeProto& node, const std::map<std::string, onnx::AttributeProto>& values) {
  for_each_node_within(node, [&](onnx::NodeProto& inner) {
    auto& attributes = *inner.mutable_attribute();
    for (int i = attributes.size() - 1; i >= 0; --i) {
      onnx::AttributeProto& attribute = *attributes.Mutable(i);
      if (attribute.ref_attr_name().empty()) continue;
      auto it = values.find(attribute.ref_attr_name());
      if (it == values.end()) {
        attributes.DeleteSubrange(i, 1);
        continue;
      }
      const std::string name = attribute.name();
      attribute = it->second;
      attribute.set_name(name);
    }
  });
}

// Names of a function body in the caller: the call's inputs and outputs for the function's, a
// fresh name for every other name the body defines, in subgraphs too (so that two inlined copies,
// or a copy and the caller, never define the same name).
class Renamer {
 public:
  Renamer(NameRegistry& registry, std::string base) : registry_(registry), base_(std::move(base)) {}

  void bind(const std::string& name, const std::string& caller_name) { names_[name] = caller_name; }
  bool bound(const std::string& name) const { return names_.count(name) != 0; }
  const std::string& operator[](const std::string& name) const { return names_.at(name); }
  void define(const std::string& name) {
    if (!name.empty() && !names_.count(name)) names_[name] = fresh(name);
  }

  // A node of the body: its inputs and outputs (defined beforehand), and the graphs it holds.
  void rename_node(onnx::NodeProto& node) const {
    rename_uses(node, names_);
    for (auto& output : *node.mutable_output()) rename(output, names_);
  }

 private:
  using Scope = std::map<std::string, std::string>;

  std::string fresh(const std::string& name) const { return registry_.fresh(base_ + "/" + name); }

  static void rename(std::string& name, const Scope& scope) {
    if (auto it = scope.find(name); !name.empty() && it != scope.end()) name = it->second;
  }

  void rename_uses(onnx::NodeProto& node, const Scope& scope) const {
    for (auto& input : *node.mutable_input()) rename(input, scope);
    for (auto [attribute, graph] : subgraphs_of(node)) rename_graph(*graph, scope);
  }

  // A subgraph sees the names of the scopes around it; everything it defines gets a fresh name.
  void rename_graph(onnx::GraphProto& graph, Scope scope) const {
    auto define_here = [&](std::string& name) {
      if (name.empty()) return;
      const std::string renamed = fresh(name);
      scope[name] = renamed;
      name = renamed;
    };
    for (auto& input : *graph.mutable_input()) define_here(*input.mutable_name());
    for (auto& tensor : *graph.mutable_initializer()) define_here(*tensor.mutable_name());
    for (auto& sparse : *graph.mutable_sparse_initializer()) define_here(*sparse.mutable_values()->mutable_name());
    for (auto& node : *graph.mutable_node()) {
      rename_uses(node, scope);
      for (auto& output : *node.mutable_output()) define_here(output);
    }
    for (auto& output : *graph.mutable_output()) rename(*output.mutable_name(), scope);
    for (auto& info : *graph.mutable_value_info()) rename(*info.mutable_name(), scope);
  }

  NameRegistry& registry_;
  std::string base_;
  Scope names_;
};

class Inliner {
 public:
  Inliner(Model& model, std::vector<std::string>* notes) : model_(model), names_(model.proto), notes_(notes) {
    for (auto& function : *model.proto.mutable_functions()) functions_[key_of(function)] = &function;
    model_types_ = model_types(model.proto);
  }

  int run() {
    if (functions_.empty()) return 0;
    for (const auto& [key, function] : functions_) function_domains_.insert(std::get<0>(key));
    inline_in(*model_.proto.mutable_graph()->mutable_node(), ImportOwner{});
    // A function whose calls stay is kept; the calls inside it may still be inlined (which may
    // keep further functions).
    for (size_t i = 0; i < kept_.size(); ++i) {
      onnx::FunctionProto& function = *functions_.at(kept_[i]);
      inline_in(*function.mutable_node(), ImportOwner{&function});
    }
    drop_uncalled_functions();
    drop_unused_function_domains();
    return inlined_;
  }

 private:
  // Why the body of `function` would mean something else under the imports of the owner of the
  // call (the model, or a kept function), if it would.
  std::optional<std::string> import_conflict(const onnx::FunctionProto& function, ImportOwner owner) const {
    for (const auto& import : function.opset_import()) {
      const std::string domain = normalize_domain(import.domain());
      const int caller = import_of(imports_of(model_.proto, owner), domain);
      const int own = static_cast<int>(import.version());
      if (caller == 0 || caller == own) continue;
      const auto blocker = import_move_blocker(model_.proto, ImportOwner{&function}, domain, own, caller, model_types_,
                                               [&](const onnx::NodeProto& node) { return functions_.count(key_of(node)) != 0; });
      if (blocker) {
        return fmt::format("its body imports {} {}, {} imports {}, and {}", display_domain(domain), own, owner.text(), caller, *blocker);
      }
    }
    return std::nullopt;
  }

  // Expands every call in `nodes` (and in the graphs its nodes hold), then the calls the bodies
  // make, depth first in node order, with an explicit stack of frames: a chain of 100,000
  // functions or of graphs nested 100,000 deep can't exhaust the call stack.
  void inline_in(NodeList& nodes, ImportOwner owner) {
    std::deque<Frame> stack;  // a frame stays where it is while others are pushed (bodies write to it)
    open(stack, nodes, nullptr);
    while (!stack.empty()) {
      Frame& frame = stack.back();
      if (frame.next == frame.nodes->size()) {
        if (!frame.expanding) frame.nodes->Swap(&frame.rebuilt);
        const FunctionKey* expanded = frame.expanding;
        stack.pop_back();
        if (!expanded) continue;
        // A body is done: its nodes already stand in the caller's list where the call stood.
        Frame& caller = stack.back();
        active_.erase(*expanded);
        caller.body.reset();
        ++caller.next;
        ++inlined_;
        continue;
      }
      onnx::NodeProto& node = *frame.nodes->Mutable(frame.next);
      if (!frame.subgraphs_done) {
        frame.subgraphs_done = true;
        const size_t before = stack.size();
        for (auto [attribute, graph] : subgraphs_of(node)) open(stack, *graph->mutable_node(), nullptr);
        std::reverse(stack.begin() + static_cast<std::ptrdiff_t>(before), stack.end());  // in attribute order
        continue;
      }
      frame.subgraphs_done = false;
      auto found = functions_.find(key_of(node));
      if (found == functions_.end()) {
        frame.place(std::move(node));
        continue;
      }
      const onnx::FunctionProto& function = *found->second;
      if (auto conflict = import_conflict(function, owner)) {
        if (std::find(kept_.begin(), kept_.end(), found->first) == kept_.end()) kept_.push_back(found->first);
        if (notes_ && noted_.insert(found->first).second) {
          notes_->push_back(fmt::format("calls to model-local function {}.{} were not inlined: {}", display_domain(function.domain()),
                                        function.name(), *conflict));
        }
        import_call_domain(node, owner);
        frame.place(std::move(node));
        continue;
      }
      if (!active_.insert(found->first).second) {
        throw InputError(model_.path.string(),
                         fmt::format("model-local function {} calls itself", display_domain(function.domain()) + "." + function.name()));
      }
      frame.body = std::make_unique<NodeList>(expand(node, function));
      adopt_imports(*frame.body, function, owner);
      NodeList& body = *frame.body;
      open(stack, body, &found->first);
    }
  }

  // A node list being inlined: the nodes done so far, and the body of the call being expanded.
  // A body's nodes go straight to the list its call is in: moved once, not once per level of a
  // chain of calls.
  struct Frame {
    NodeList* nodes;
    const FunctionKey* expanding;    // for a body: the function it is the body of
    NodeList rebuilt;                // the nodes of `nodes` done so far (for a body: unused)
    NodeList* caller_out = nullptr;  // for a body: where its caller's done nodes go
    int next = 0;
    bool subgraphs_done = false;     // of nodes[next]
    std::unique_ptr<NodeList> body;  // of the call nodes[next], while its own calls are expanded

    NodeList& out() { return caller_out ? *caller_out : rebuilt; }
    // nodes[next], done: where it ends up.
    void place(onnx::NodeProto&& node) {
      count_work(1);
      *out().Add() = std::move(node);
      ++next;
    }
  };

  // Pushes a frame for `nodes`, unless nothing in it (at any depth) calls a local function.
  void open(std::deque<Frame>& stack, NodeList& nodes, const FunctionKey* expanding) {
    bool any = expanding != nullptr;  // a body always stands in for its call
    for_each_nested_node(nodes, [&](const onnx::NodeProto& node) { any = any || functions_.count(key_of(node)); });
    if (any) stack.push_back(Frame{&nodes, expanding, {}, expanding ? &stack.back().out() : nullptr, 0, false, nullptr});
  }

  // The body of `function` as it computes the call `call`.
  NodeList expand(const onnx::NodeProto& call, const onnx::FunctionProto& function) {
    // Names say where they came from (call/node), but a chain of calls inlined into each other
    // must not make them grow with its depth: past a few hundred characters, the call's own name.
    std::string base = call.name().empty() ? call.op_type() : call.name();
    if (base.size() > kNamePathLimit) base = base.substr(base.rfind('/') + 1);
    Renamer names(names_, base);
    for (int i = 0; i < function.input_size(); ++i) names.bind(function.input(i), i < call.input_size() ? call.input(i) : "");
    std::set<std::string> produced;
    for (const auto& node : function.node()) produced.insert(node.output().begin(), node.output().end());
    // An output the body computes takes the call's name; one it passes through (an input, or
    // the same value as an earlier output) is copied by an Identity.
    std::vector<std::pair<std::string, std::string>> copies;  // function name -> caller name
    for (int i = 0; i < function.output_size(); ++i) {
      const std::string& output = function.output(i);
      const bool used = i < call.output_size() && !call.output(i).empty();
      if (produced.count(output) && !names.bound(output)) {
        names.bind(output, used ? call.output(i) : names_.fresh(base + "/" + output));
      } else if (used) {
        copies.emplace_back(output, call.output(i));
      }
    }
    for (const auto& node : function.node()) {
      for (const auto& output : node.output()) names.define(output);
    }

    std::map<std::string, onnx::AttributeProto> values;
    for (const auto& attribute : attribute_defaults(function)) {
      if (attribute.has_type()) values[attribute.name()] = attribute;
    }
    for (const auto& attribute : call.attribute()) values[attribute.name()] = attribute;

    NodeList body;
    for (const auto& original : function.node()) {
      onnx::NodeProto& node = *body.Add();
      node = original;
      node.set_name(names_.fresh(base + "/" + (original.name().empty() ? original.op_type() : original.name())));
      resolve_attribute_references(node, values);
      names.rename_node(node);
      while (node.input_size() > 0 && node.input(node.input_size() - 1).empty()) node.mutable_input()->RemoveLast();
    }
    for (const auto& [output, caller_name] : copies) {
      if (!names.bound(output)) continue;  // the function never defines it
      onnx::NodeProto& copy = *body.Add();
      copy.set_op_type("Identity");
      copy.set_name(names_.fresh(base + "/Identity"));
      copy.add_input(names[output]);
      copy.add_output(caller_name);
    }
    return body;
  }

  // The owner imports every domain the inlined body uses, at the function's versions.
  void adopt_imports(const NodeList& body, const onnx::FunctionProto& function, ImportOwner owner) {
    Imports& imports = imports_of(model_.proto, owner);
    for (const auto& import : function.opset_import()) {
      const std::string domain = normalize_domain(import.domain());
      if (import_of(imports, domain)) continue;
      bool used = false;
      for_each_nested_node(body, [&](const onnx::NodeProto& node) {
        // Calls are inlined next; one that stays imports its domain then (import_call_domain).
        used = used || (normalize_domain(node.domain()) == domain && !functions_.count(key_of(node)));
      });
      if (!used) continue;
      auto* added = imports.Add();
      added->set_domain(import.domain());
      added->set_version(import.version());
    }
  }

  // A call that stays needs its domain imported where it now stands, and by the model (ONNX
  // Runtime resolves every function domain through the model's imports).
  void import_call_domain(const onnx::NodeProto& call, ImportOwner owner) {
    const std::string domain = normalize_domain(call.domain());
    // Once the model imports the domain (below, at the first such call), no function is read.
    int version = import_of(model_.proto.opset_import(), domain);
    for (int i = 0; !version && i < model_.proto.functions_size(); ++i) {
      count_work(1);
      version = import_of(model_.proto.functions(i).opset_import(), domain);
    }
    for (Imports* imports : {&imports_of(model_.proto, owner), model_.proto.mutable_opset_import()}) {
      if (import_of(*imports, domain)) continue;
      auto* added = imports->Add();
      added->set_domain(call.domain());
      added->set_version(version ? version : 1);
    }
  }

  // Imports of the domains of local functions that no node uses any more, in the model and in
  // the functions that are left.
  void drop_unused_function_domains() {
    std::set<std::string> anywhere;
    for_each_node(std::as_const(model_.proto),
                  [&](const onnx::NodeProto& node, const Place&) { anywhere.insert(normalize_domain(node.domain())); });
    auto drop = [&](Imports& imports, const std::set<std::string>& in_use) {
      for (int i = imports.size() - 1; i >= 0; --i) {
        const std::string domain = normalize_domain(imports.Get(i).domain());
        if (function_domains_.count(domain) && !in_use.count(domain)) imports.DeleteSubrange(i, 1);
      }
    };
    drop(*model_.proto.mutable_opset_import(), anywhere);
    for (auto& function : *model_.proto.mutable_functions()) {
      std::set<std::string> in_use;
      for_each_nested_node(function.node(), [&](const onnx::NodeProto& node) { in_use.insert(normalize_domain(node.domain())); });
      drop(*function.mutable_opset_import(), in_use);
    }
  }

  // Functions the main graph (or training info) can reach, through the functions it calls.
  void drop_uncalled_functions() {
    std::set<FunctionKey> reached;
    std::vector<const onnx::FunctionProto*> pending;  // reached, their calls not yet followed
    auto reach = [&](const onnx::NodeProto& node) {
      auto found = functions_.find(key_of(node));
      if (found != functions_.end() && reached.insert(found->first).second) pending.push_back(found->second);
    };
    for_each_nested_node(model_.proto.graph().node(), reach);
    for (const auto& training : model_.proto.training_info()) {
      for_each_nested_node(training.initialization().node(), reach);
      for_each_nested_node(training.algorithm().node(), reach);
    }
    while (!pending.empty()) {
      const onnx::FunctionProto* function = pending.back();
      pending.pop_back();
      for_each_nested_node(function->node(), reach);
    }
    auto& functions = *model_.proto.mutable_functions();
    for (int i = functions.size() - 1; i >= 0; --i) {
      if (!reached.count(key_of(functions.Get(i)))) functions.DeleteSubrange(i, 1);
    }
  }

  Model& model_;
  NameRegistry names_;
  std::vector<std::string>* notes_;
  std::map<FunctionKey, onnx::FunctionProto*> functions_;
  std::set<int32_t> model_types_;
  std::set<std::string> function_domains_;
  std::vector<FunctionKey> kept_;  // functions some call to which stays
  std::set<FunctionKey> noted_;
  std::set<FunctionKey> active_;  // functions whose bodies are being expanded (a call inside one of them recurses)
  int inlined_ = 0;
};

}  // namespace

int inline_local_functions(Model& model, std::vector<std::string>* notes) {
  if (model.proto.functions_size() == 0) return 0;
  return Inliner(model, notes).run();
}

}  // namespace onnx_rewrite
