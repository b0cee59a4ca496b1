// `targets`: the targets, what each loads and what it builds on.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/json.h"
#include "verify/opset.h"
#include "onnx_rewrite/target.h"

namespace onnx_rewrite {

int run_targets(bool json, std::ostream& out) {
  auto caps = [](const Target& target) {
    std::vector<std::string> texts;
    for (const auto& [domain, version] : target.max_opsets) texts.push_back(fmt::format("{} <= {}", display_domain(domain), version));
    return texts;
  };
  auto domains = [](const Target& target) {
    std::vector<std::string> names;
    for (const auto& domain : target.domains) names.push_back(display_domain(domain));
    return names;
  };
  if (json) {
    JsonWriter writer;
    writer.begin_array();
    for (const Target* target : all_targets()) {
      writer.begin_object();
      writer.key("name").value(target->name);
      writer.key("description").value(target->description);
      writer.key("builds_on").strings(std::vector<std::string>(target->lineage.begin() + 1, target->lineage.end()));
      writer.key("domains").strings(domains(*target));
      writer.key("max_opsets").strings(caps(*target));
      writer.key("local_functions").value(target->local_functions);
      writer.key("source").value(target->source);
      writer.key("load_tested").value(target->load_tested);
      writer.key("file").value(target->file);
      writer.end_object();
    }
    writer.end_array();
    out << writer.str();
    return 0;
  }
  for (const Target* target : all_targets()) {
    out << fmt::format("{}\n    {}\n    domains {}", target->name, target->description, fmt::join(domains(*target), ", "));
    if (target->lineage.size() > 1)
      out << fmt::format("; builds on {}", fmt::join(target->lineage.begin() + 1, target->lineage.end(), ", "));
    if (!target->max_opsets.empty()) out << fmt::format("; imports {}", fmt::join(caps(*target), ", "));
    out << fmt::format("; model-local functions {} ({})\n", target->local_functions ? "run" : "inlined first", target->file);
    if (!target->source.empty()) out << fmt::format("    source: {}\n", target->source);
    out << (target->load_tested ? "    load-tested: the test suite loads models in the runtime to check it\n"
                                : "    not load-tested here: what it says comes from its tables alone\n");
  }
  return 0;
}

}  // namespace onnx_rewrite
