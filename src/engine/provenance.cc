// What a rewrite did, kept in the model it wrote (as onnxsim does): whoever loads the file later
// can tell it was rewritten, by which tool and rules, without the report.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/opset.h"
#include "onnx_rewrite/engine.h"

namespace onnx_rewrite {

namespace {

constexpr const char* kPrefix = "onnx_rewrite.";

}  // namespace

void record_provenance(Model& model, const RewriteResult& result, const RewriteOptions& options) {
  std::vector<std::pair<std::string, std::string>> entries;
  entries.emplace_back("tool", fmt::format("onnx-rewrite {}", ONNX_REWRITE_VERSION));
  entries.emplace_back("target", options.target);
  for (const auto& import : model.proto.opset_import()) {
    if (normalize_domain(import.domain()).empty()) entries.emplace_back("opset", std::to_string(import.version()));
  }
  std::vector<std::string> rules;
  for (const auto& [id, stats] : result.rules) rules.push_back(fmt::format("{}:{}", id, stats.matches));
  entries.emplace_back("rules", fmt::format("{}", fmt::join(rules, ",")));
  if (result.functions_inlined) entries.emplace_back("functions_inlined", std::to_string(result.functions_inlined));
  if (!options.input_shapes.empty()) {
    std::vector<std::string> shapes;
    for (const auto& [name, dims] : options.input_shapes) shapes.push_back(fmt::format("{}={}", name, fmt::join(dims, ",")));
    entries.emplace_back("input_shapes", fmt::format("{}", fmt::join(shapes, ";")));
  }

  auto* props = model.proto.mutable_metadata_props();
  for (int i = props->size() - 1; i >= 0; --i) {
    if (props->Get(i).key().rfind(kPrefix, 0) == 0) props->DeleteSubrange(i, 1);
  }
  for (const auto& [key, value] : entries) {
    auto* entry = props->Add();
    entry->set_key(kPrefix + key);
    entry->set_value(value);
  }
  model.changed = true;
}

}  // namespace onnx_rewrite
