// Every node a lowering or raising builds runs in ONNX Runtime, for each element type the rule
// accepts (issue #34): a GPT-2 lowered to 13 once exited 0 with a bool Where ORT has no kernel for.
// Each rule that converts the opset (its example is `example opset N` or `example exact opset N`)
// has its example retyped from float to each type below. Where ONNX Runtime runs the original,
// a rewrite that exits 0 must load and run there and compute the same; a rule that can't build
// for the type must decline (exit 1: the target not met). A type the original op does not take
// in ORT is not the rule's to accept: skipped for that type. An original that needs inputs in a
// range (indices, positions) is not judged on random ones: its rule's own test feeds them. A
// lowering runs at its example's opset and at the lowest its `requires` allows (from 7, where
// ORT runs models): ORT's older kernels take fewer types.
#include <algorithm>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "test_support.h"

namespace onnx_rewrite {
namespace {

using namespace testing;

struct ElementType {
  int32_t type;
  const char* name;
  std::vector<std::string> compare_options;
};

const std::vector<ElementType> kTypes = {
    {onnx::TensorProto::FLOAT, "float", {}},
    {onnx::TensorProto::DOUBLE, "double", {}},
    {onnx::TensorProto::FLOAT16, "float16", {"--rtol", "1e-2", "--atol", "1e-2"}},
    {onnx::TensorProto::INT64, "int64", {}},
    {onnx::TensorProto::INT32, "int32", {}},
    {onnx::TensorProto::UINT8, "uint8", {}},
    {onnx::TensorProto::BOOL, "bool", {}},
};

// The example with every float tensor (interface, value_info, initializers, Constant values) of
// `type`; the other types stay.
onnx::ModelProto retyped(onnx::ModelProto model, int32_t type) {
  auto& graph = *model.mutable_graph();
  for (auto* infos : {graph.mutable_input(), graph.mutable_output(), graph.mutable_value_info()}) {
    for (auto& info : *infos) {
      auto* tensor_type = info.mutable_type()->mutable_tensor_type();
      if (tensor_type->elem_type() == onnx::TensorProto::FLOAT) tensor_type->set_elem_type(type);
    }
  }
  convert_tensors(model, onnx::TensorProto::FLOAT, type);
  return model;
}

// The graph inputs' symbolic dims (compare.js asks for their sizes).
std::vector<std::string> symbolic_dims(const onnx::ModelProto& model) {
  std::vector<std::string> symbols;
  for (const auto& input : model.graph().input()) {
    for (const auto& dim : input.type().tensor_type().shape().dim()) {
      if (!dim.dim_param().empty() && std::find(symbols.begin(), symbols.end(), dim.dim_param()) == symbols.end()) {
        symbols.push_back(dim.dim_param());
      }
    }
  }
  return symbols;
}

struct Conversion {
  std::string rule;
  int opset;
};

void PrintTo(const Conversion& conversion, std::ostream* out) { *out << conversion.rule << " at " << conversion.opset; }

// The lowest ai.onnx version a lowering's replacement may be built for.
std::optional<int> lowest_required(const Rule& rule) {
  for (const VersionRange& range : rule.requires_opsets) {
    if (range.domain.empty()) return std::max(range.min, 7);
  }
  return std::nullopt;
}

std::vector<Conversion> conversions() {
  std::vector<Conversion> all;
  for (const auto& rule : builtin_rules().rules) {
    if (!rule->example || !rule->example->max_opset) continue;
    all.push_back({rule->id, *rule->example->max_opset});
    const auto lowest = lowest_required(*rule);
    if (!rule->example->exact_opset && lowest && *lowest < *rule->example->max_opset) all.push_back({rule->id, *lowest});
  }
  return all;
}

class ConversionTypes : public ::testing::TestWithParam<Conversion> {};

TEST_P(ConversionTypes, AnOutputWrittenRunsInOrtAndComputesTheSame) {
  const Rule& rule = *builtin_rules().find(GetParam().rule);
  const RuleExample& example = *rule.example;
  const std::string opset = std::to_string(GetParam().opset);
  const onnx::ModelProto original = parse_model_text(example.model_text);
  const std::string opset_flag = example.exact_opset ? "--to-opset" : "--opset";
  size_t ran = 0;
  std::vector<std::string> declined, unjudged;
  for (const ElementType& element : kTypes) {
    TempDir dir;
    const fs::path input = dir / "original.onnx";
    write_file(input, serialize(retyped(original, element.type)));
    if (!ort_loads(input).first) continue;  // the original op does not take the type in ORT
    const fs::path output = dir / "converted.onnx";
    const auto result = run_cli({"rewrite", input.string(), "-o", output.string(), opset_flag, opset});
    if (result.exit_code != 0) {  // the target not met (the output is written, as the CLI has it)
      EXPECT_EQ(result.exit_code, 1) << element.name << ": " << result.err;
      EXPECT_NE(result.err.find("target onnx not met"), std::string::npos) << element.name << ": " << result.err;
      declined.push_back(element.name);
      continue;
    }
    std::vector<std::string> options = element.compare_options;
    for (const std::string& symbol : symbolic_dims(original)) options.insert(options.end(), {"--dim", symbol + "=2"});
    auto original_fails = [](const OrtComparison& comparison) {
      return comparison.exit_code == 2 && comparison.output.find("model A failed to run") != std::string::npos;
    };
    auto comparison = ort_compare(input, output, options);
    if (original_fails(comparison)) {  // indices, axes, ratios: small non-negative numbers fit most
      options.insert(options.end(), {"--int-range", "0,1", "--float-range", "0,0.5"});
      comparison = ort_compare(input, output, options);
    }
    if (original_fails(comparison)) {
      unjudged.push_back(element.name);  // random inputs out of the original's range (indices, positions)
      continue;
    }
    EXPECT_TRUE(comparison.ok) << rule.id << " at " << opset << " on " << element.name << ": the rewrite exits 0, and ONNX Runtime\n"
                               << comparison.output;
    ++ran;
  }
  // At its own opset the example must convert in some type; lower, declining every type is fine.
  if (GetParam().opset == *example.max_opset) {
    EXPECT_GT(ran + unjudged.size(), 0u) << rule.id << ": its own example ran in no type";
  }
  if (!declined.empty()) std::cout << "[ declined ] " << rule.id << ": " << fmt::format("{}", fmt::join(declined, ", ")) << "\n";
  if (!unjudged.empty()) {  // their rule's own test feeds inputs in range
    std::cout << "[ unjudged ] " << rule.id << ": the original does not run on random inputs in " << fmt::format("{}", fmt::join(unjudged, ", ")) << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, ConversionTypes, ::testing::ValuesIn(conversions()),
                         [](const auto& info) { return test_name(info.param.rule + "_at_" + std::to_string(info.param.opset)); });

}  // namespace
}  // namespace onnx_rewrite
