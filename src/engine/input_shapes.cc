// --input-shape: graph inputs' dims fixed before matching, as if the model had been exported
// with them (onnxsim's --overwrite-input-shape); shape facts then flow from static dims.
#include <map>
#include <set>

#include <fmt/format.h>

#include "onnx_rewrite/engine.h"
#include "onnx_rewrite/error.h"

namespace onnx_rewrite {

namespace {

std::string dims_text(const std::vector<int64_t>& dims) { return fmt::format("{}", fmt::join(dims, ",")); }

std::string declared_text(const onnx::TensorShapeProto& shape) {
  std::vector<std::string> dims;
  for (const auto& dim : shape.dim()) {
    dims.push_back(dim.has_dim_value() ? std::to_string(dim.dim_value()) : dim.has_dim_param() ? dim.dim_param() : "?");
  }
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

}  // namespace

bool apply_input_shapes(onnx::GraphProto& graph, const InputShapes& shapes, const std::string& model_name) {
  if (shapes.empty()) return false;
  std::set<std::string> initializers;
  for (const auto& tensor : graph.initializer()) initializers.insert(tensor.name());
  std::map<std::string, onnx::ValueInfoProto*> inputs;
  for (auto& input : *graph.mutable_input()) {
    if (!initializers.count(input.name())) inputs.emplace(input.name(), &input);
  }
  // Symbolic dims the named inputs declare, with the size given for them (and by which input).
  std::map<std::string, std::pair<int64_t, std::string>> symbols;
  for (const auto& [name, dims] : shapes) {
    const auto fail = [&, &name = name, &dims = dims](const std::string& why) {
      throw UsageError(fmt::format("{}: --input-shape {}={}: {}", model_name, name, dims_text(dims), why));
    };
    auto found = inputs.find(name);
    if (found == inputs.end()) {
      std::vector<std::string> names;
      for (const auto& [input, info] : inputs) names.push_back(input);
      fail(initializers.count(name) ? "an initializer, not an input the caller feeds"
                                    : fmt::format("the model has no input of that name (inputs: {})", fmt::join(names, ", ")));
    }
    if (!found->second->type().has_tensor_type()) fail("the input is not a tensor");
    for (int64_t dim : dims) {
      if (dim < 1) fail("every dim must be 1 or more");
    }
    const auto& tensor = found->second->type().tensor_type();
    if (!tensor.has_shape()) continue;
    if (tensor.shape().dim_size() != static_cast<int>(dims.size())) {
      fail(fmt::format("the model declares it with rank {} ({})", tensor.shape().dim_size(), declared_text(tensor.shape())));
    }
    for (int i = 0; i < tensor.shape().dim_size(); ++i) {
      const auto& dim = tensor.shape().dim(i);
      const int64_t given = dims[static_cast<size_t>(i)];
      if (dim.has_dim_value() && dim.dim_value() != given) {
        fail(fmt::format("dim {} is {} in the model ({})", i, dim.dim_value(), declared_text(tensor.shape())));
      }
      if (!dim.has_dim_param() || dim.dim_param().empty()) continue;
      auto [bound, fresh] = symbols.emplace(dim.dim_param(), std::pair{given, name});
      if (!fresh && bound->second.first != given) {
        fail(fmt::format("'{}' is {} here but {} in --input-shape {}", dim.dim_param(), given, bound->second.first, bound->second.second));
      }
    }
  }

  bool changed = false;
  for (const auto& [name, dims] : shapes) {
    auto& tensor = *inputs.at(name)->mutable_type()->mutable_tensor_type();
    if (!tensor.has_shape()) {
      auto* shape = tensor.mutable_shape();
      for (int64_t size : dims) shape->add_dim()->set_dim_value(size);
      changed = true;
      continue;
    }
    for (int i = 0; i < tensor.shape().dim_size(); ++i) {
      auto* dim = tensor.mutable_shape()->mutable_dim(i);
      if (dim->has_dim_value()) continue;
      dim->set_dim_value(dims[static_cast<size_t>(i)]);  // clears dim_param: a oneof
      changed = true;
    }
  }
  // One symbol is one size throughout the graph's declarations (ONNX's dim_param): the other
  // inputs, the outputs and value_info that name it are fixed too.
  for (auto* infos : {graph.mutable_input(), graph.mutable_output(), graph.mutable_value_info()}) {
    for (auto& info : *infos) {
      if (!info.type().has_tensor_type() || !info.type().tensor_type().has_shape()) continue;
      for (auto& dim : *info.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim()) {
        if (!dim.has_dim_param()) continue;
        auto bound = symbols.find(dim.dim_param());
        if (bound == symbols.end()) continue;
        dim.set_dim_value(bound->second.first);
        changed = true;
      }
    }
  }
  return changed;
}

}  // namespace onnx_rewrite
