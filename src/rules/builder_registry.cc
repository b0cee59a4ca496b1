// The registry of C++ builders. Families register theirs through a function named after their
// folder (rules/group-norm/ defines register_group_norm_builders); the build generates the
// list of those calls (cmake/families.cmake), so a new family touches no file outside its folder.
#include <algorithm>
#include <stdexcept>

#include "onnx_rewrite/builder.h"

namespace onnx_rewrite {

void register_family_builders(BuilderRegistry& registry);  // generated: families_registry.cc

bool BuilderSignature::declares_value(const std::string& name) const {
  return std::find(values.begin(), values.end(), name) != values.end() ||
         std::find(optional_values.begin(), optional_values.end(), name) != optional_values.end();
}

bool BuilderSignature::declares_attribute(const std::string& name) const {
  return std::find(attributes.begin(), attributes.end(), name) != attributes.end() ||
         std::find(optional_attributes.begin(), optional_attributes.end(), name) != optional_attributes.end();
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
