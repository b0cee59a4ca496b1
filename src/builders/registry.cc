// The C++ replacements rule files can name with `replace with NAME`. Families are listed here
// explicitly (no self-registration: a static library would drop unreferenced builders).
#include "builders.h"

namespace onnx_rewrite {
namespace {

const BuilderTable& registry() {
  static const BuilderTable builders = [] {
    BuilderTable table;
    add_group_norm_builders(table);
    add_deform_conv_builders(table);
    add_contrib_fusion_builders(table);
    add_contrib_defusion_builders(table);
    add_nchwc_builders(table);
    add_attention_builders(table);
    return table;
  }();
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
