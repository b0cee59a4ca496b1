// Rules as data (rule.h): descriptions for messages, and rule sets loaded from files, directories
// and the families compiled in.
#include "onnx_rewrite/rule.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "onnx_rewrite/error.h"
#include "onnx_rewrite/matcher.h"
#include "onnx_rewrite/opset.h"
#include "onnx_rewrite/target.h"
#include "onnx_rewrite/tensor.h"
#include "graph/two_threads.h"
#include "rules/embedded.h"
#include "rules/rule_parser.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

std::string VersionRange::describe() const {
  const std::string name = display_domain(domain);
  if (max == INT_MAX) return fmt::format("{} >= {}", name, min);
  if (min == max) return fmt::format("{} {}", name, min);
  if (min <= 1) return fmt::format("{} <= {}", name, max);
  return fmt::format("{} {}..{}", name, min, max);
}

std::string Constraint::describe() const {
  switch (kind) {
    case Kind::kConstant: return subject + " is constant";
    case Kind::kScalar: return subject + " is scalar";
    case Kind::kApprox: return fmt::format("≈ {} ± {}", number, tolerance);
    case Kind::kEquals: return "== " + attribute_value_text(values.front());
    case Kind::kIn: {
      std::vector<std::string> texts;
      for (const auto& value : values) texts.push_back(attribute_value_text(value));
      return fmt::format("in [{}]", fmt::join(texts, ", "));
    }
    case Kind::kOptional: return subject + " is optional";
    case Kind::kPresent: return subject + " is present";
    case Kind::kAbsent: return subject + " is absent";
    case Kind::kDtype: {
      std::vector<std::string> names;
      for (int32_t type : dtypes) names.push_back(data_type_name(type));
      return fmt::format("{} dtype in [{}]", subject, fmt::join(names, ", "));
    }
    case Kind::kRank: return fmt::format("{} rank in {}..{}", subject, min_rank, max_rank);
    case Kind::kVariadic: return subject + " is variadic";
  }
  return {};
}

bool Rule::serves(const Target& target, bool fuse) const {
  const auto builds_on = [&](const std::string& name) { return target.builds_on(name); };
  return std::any_of(targets.begin(), targets.end(), builds_on) ||
         (fuse && std::any_of(fuse_targets.begin(), fuse_targets.end(), builds_on));
}

void RuleSet::load_text(const std::string& text, const std::string& name) { add(parse_rule_file(text, name)); }

void RuleSet::add(std::vector<std::shared_ptr<const Rule>> parsed) {
  for (auto& rule : parsed) {
    if (const Rule* existing = find(rule->id)) {
      throw InputError(fmt::format("{}:{}", rule->file, rule->line),
                       fmt::format("rule id '{}' is already used at {}:{}", rule->id, existing->file, existing->line));
    }
    rules.push_back(std::move(rule));
  }
}

std::vector<fs::path> rule_files(const std::string& path) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      if (entry.path().extension() == ".rules") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else {
    throw InputError(path, "no such rule file or directory");
  }
  return files;
}

void RuleSet::load_path(const std::string& path) {
  for (const auto& file : rule_files(path)) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw InputError(file.string(), "cannot read the rule file");
    std::stringstream text;
    text << in.rdbuf();
    load_text(text.str(), file.string());
  }
}

void RuleSet::load_builtin() {
  std::vector<const EmbeddedFile*> files;
  for (const auto& file : embedded_files()) {
    if (file.path.starts_with("rules/") && file.path.ends_with(".rules")) files.push_back(&file);
  }
  // Parsed on two threads, about half the text each (this is most of the start of every run,
  // which a batch waits for), then added in order: what they hold, or the first failure, is
  // what one thread would have come to.
  struct Parsed {
    std::vector<std::shared_ptr<const Rule>> rules;
    std::exception_ptr failure;
  };
  std::vector<Parsed> parsed(files.size());
  auto parse = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      try {
        parsed[i].rules = parse_rule_file(std::string(files[i]->contents), std::string(files[i]->path));
      } catch (...) {
        parsed[i].failure = std::current_exception();
      }
    }
  };
  // The first file alone first: what ONNX builds on first use (its op schemas, the parser's
  // tables) is built before the second thread starts.
  parse(0, std::min<size_t>(1, files.size()));
  size_t rest = 0;  // the text of the files after the first, split in two halves
  for (size_t i = 1; i < files.size(); ++i) rest += files[i]->contents.size();
  size_t half = 1;
  for (size_t first_bytes = 0; half < files.size() && first_bytes < rest / 2; ++half) first_bytes += files[half]->contents.size();
  on_two_threads([&] { parse(half, files.size()); }, [&] { parse(1, half); });
  for (auto& file : parsed) {
    if (file.failure) std::rethrow_exception(file.failure);
    add(std::move(file.rules));
  }
}

const std::string& RuleSet::expected_nodes(const Rule& rule) const {
  const Rule* current = &rule;
  for (size_t steps = 0; current->example && !current->example->expected_like.empty(); ++steps) {
    const Rule* next = find(current->example->expected_like);
    if (!next || steps > rules.size()) {
      throw InputError(fmt::format("{}:{}", rule.file, rule.example->line),
                       fmt::format("rule {}: 'expect like {}' names {}", rule.id, current->example->expected_like,
                                   next ? "a chain of rules that comes back" : "no loaded rule"));
    }
    current = next;
  }
  if (!current->example) throw InputError(fmt::format("{}:{}", rule.file, rule.line), "rule " + current->id + " has no example");
  return current->example->expected_nodes_text;
}

const Rule* RuleSet::find(const std::string& id) const {
  for (const auto& rule : rules) {
    if (rule->id == id) return rule.get();
  }
  return nullptr;
}

}  // namespace onnx_rewrite
