// The registry of C++ builders. Families register theirs through a function named after their
// folder (rules/group-norm/ defines register_group_norm_builders); the build generates the
// list of those calls (cmake/families.cmake), so a new family touches no file outside its folder.
#include <algorithm>
#include <stdexcept>

#include "onnx_rewrite/builder.h"

namespace onnx_rewrite {

void register_family_builders(BuilderRegistry& registry);  // generated: families_registry.cc

static bool listed(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool BuilderSignature::declares_value(std::string_view name) const { return listed(values, name) || listed(optional_values, name); }

bool BuilderSignature::declares_attribute(std::string_view name) const {
  return listed(attributes, name) || listed(optional_attributes, name);
}

bool BuilderSignature::declares_node_attribute(std::string_view name) const { return listed(node_attributes, name); }

BuildResult BuildResult::declined(std::string reason) {
  if (reason.empty()) throw std::logic_error("a builder declined without saying why");
  BuildResult result;
  result.reason_ = std::move(reason);
  return result;
}

const std::string& BuildResult::reason() const {
  static const std::string none;
  return reason_ ? *reason_ : none;
}

void BuilderRegistry::add(std::string name, BuilderSignature signature, BuildFunction build) {
  if (builders_.count(name)) throw std::logic_error("builder '" + name + "' is registered twice");
  Builder builder{name, std::move(signature), std::move(build)};
  builders_.emplace(std::move(name), std::move(builder));
}

const Builder* BuilderRegistry::find(const std::string& name) const {
  auto it = builders_.find(name);
  return it == builders_.end() ? nullptr : &it->second;
}

std::vector<std::string> BuilderRegistry::names() const {
  std::vector<std::string> names;
  for (const auto& [name, builder] : builders_) names.push_back(name);
  return names;
}

const BuilderRegistry& BuilderRegistry::builtin() {
  static const BuilderRegistry registry = [] {
    BuilderRegistry families;
    register_family_builders(families);
    return families;
  }();
  return registry;
}

}  // namespace onnx_rewrite
