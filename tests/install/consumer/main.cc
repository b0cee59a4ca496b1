// Rewrites a model for standard ONNX through the library's public API, as the README of the
// umbrella header shows: consumer IN.onnx OUT.onnx. Exit 0 when the target is met.
#include <iostream>

#include <onnx_rewrite/onnx_rewrite.h>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  try {
    onnx_rewrite::Model model = onnx_rewrite::load_model(argv[1]);
    onnx_rewrite::RuleSet rules;
    rules.load_builtin();
    onnx_rewrite::RewriteOptions options;
    options.target = "onnx";
    options.inline_functions = !onnx_rewrite::find_target(options.target).local_functions;
    const onnx_rewrite::RewriteResult result = onnx_rewrite::rewrite_model(model, rules, options);
    const onnx_rewrite::CheckReport report =
        onnx_rewrite::check_model(model, onnx_rewrite::find_target(options.target), std::nullopt);
    onnx_rewrite::write_model(model, argv[2]);
    for (const auto& [id, stats] : result.rules) std::cout << "rule " << id << ": " << stats.matches << "\n";
    std::cout << (report.ok() ? "target met" : "target not met") << "\n";
    return report.ok() ? 0 : 1;
  } catch (const onnx_rewrite::InputError& e) {
    std::cerr << e.file() << ": " << e.what() << "\n";
    return 3;
  }
}
