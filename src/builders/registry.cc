// The C++ replacements rule files can name with `replace with NAME`. Listed here explicitly
// (no self-registration: a static library would drop unreferenced builders).
#include <map>

#include "onnx_rewrite/builder.h"

namespace onnx_rewrite {
namespace {

const std::map<std::string, BuilderFunction>& registry() {
  static const std::map<std::string, BuilderFunction> builders = {};
  return builders;
}

}  // namespace

const BuilderFunction* find_builder(const std::string& name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<std::string> builder_names() {
  std::vector<std::string> names;
  for (const auto& [name, builder] : registry()) names.push_back(name);
  return names;
}

}  // namespace onnx_rewrite
