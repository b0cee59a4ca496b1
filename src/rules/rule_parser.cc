// Reads rule files (docs/rules.md): our thin layer of clauses around ONNX textual syntax, which
// ONNX's own parser reads for patterns, replacements and examples.
#include "rules/rule_parser.h"
#include "rules/rule_checks.h"

#include <algorithm>
#include <cstring>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <onnx/defs/parser.h>

#include "onnx_rewrite/builder.h"
#include "onnx_rewrite/error.h"
#include "rules/matcher.h"
#include "verify/opset.h"
#include "rules/rule.h"
#include "onnx_rewrite/target.h"
#include "onnx_rewrite/tensor.h"
#include "rules/text_replacement.h"

namespace onnx_rewrite {

namespace {

// ONNX's parser, telling how far it read.
class OnnxTextParser : public onnx::OnnxParser {
 public:
  using OnnxParser::OnnxParser;
  size_t consumed() const { return static_cast<size_t>(next_ - start_); }
};

bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }

const std::set<std::string> kCommutative = {"Add", "Mul", "Max",   "Min",        "Sum",       "Mean",      "And",
                                            "Or",  "Xor", "Equal", "BitwiseAnd", "BitwiseOr", "BitwiseXor"};

class RuleFileParser {
 public:
  RuleFileParser(const std::string& text, std::string file) : text_(text), file_(std::move(file)) {
    for (size_t i = 0; i < text_.size(); ++i) {
      if (text_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<std::shared_ptr<const Rule>> parse() {
    std::vector<std::shared_ptr<const Rule>> rules;
    while (skip_space(), pos_ < text_.size()) {
      expect_word("rule");
      rules.push_back(parse_rule());
    }
    return rules;
  }

 private:
  // ---- Low-level reading -----------------------------------------------------------------
  [[noreturn]] void error_at(size_t at, const std::string& what) const {
    auto [line, column] = line_column(at);
    throw InputError(fmt::format("{}:{}:{}", file_, line, column), what);
  }
  [[noreturn]] void error(const std::string& what) const { error_at(pos_, what); }
  [[noreturn]] void error_at(const Constraint& constraint, const std::string& what) const {
    throw InputError(fmt::format("{}:{}:{}", file_, constraint.line, constraint.column), what);
  }

  // Looked up in the line starts: every rule, pattern and constraint records where it is, and a
  // count from the top of the file each time made parsing a file quadratic in its length.
  std::pair<int, int> line_column(size_t at) const {
    at = std::min(at, text_.size());
    const auto after = std::upper_bound(line_starts_.begin(), line_starts_.end(), at);
    return {static_cast<int>(after - line_starts_.begin()), static_cast<int>(at - *(after - 1)) + 1};
  }

  void skip_space(bool newlines = true) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string peek_word() {
    skip_space();
    size_t end = pos_;
    while (end < text_.size() && is_identifier_char(text_[end])) ++end;
    return text_.substr(pos_, end - pos_);
  }

  std::string read_word(const char* what) {
    std::string word = peek_word();
    if (word.empty()) error(std::string("expected ") + what);
    pos_ += word.size();
    return word;
  }

  void expect_word(const std::string& word) {
    if (peek_word() != word) error("expected '" + word + "'");
    pos_ += word.size();
  }

  bool accept(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char c) {
    if (!accept(c)) error(std::string("expected '") + c + "'");
  }

  std::string rest_of_line() {
    skip_space(false);
    const size_t end = std::min(text_.find('\n', pos_), text_.size());
    std::string line = text_.substr(pos_, end - pos_);
    pos_ = end;
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    return line;
  }

  // The text of a `{ ... }` block, braces excluded; our own blocks never nest braces.
  std::pair<std::string, size_t> braced_block() {
    expect('{');
    const size_t start = pos_;
    const size_t end = text_.find('}', pos_);
    if (end == std::string::npos) error_at(start, "unclosed '{'");
    pos_ = end + 1;
    return {text_.substr(start, end - start), start};
  }

  // Reads ONNX text with ONNX's parser, mapping its error positions onto the rule file. With
  // `end`, the text is text_[pos_, end) and must be consumed whole.
  template <typename Proto>
  std::string parse_onnx(Proto& proto, const char* what, size_t end = std::string::npos) {
    skip_space();
    const size_t start = pos_;
    const std::string text = end == std::string::npos ? std::string() : text_.substr(start, end - start);
    OnnxTextParser parser(end == std::string::npos ? text_.c_str() + start : text.c_str());
    onnx::Common::Status status;
    try {
      status = parser.Parse(proto);
    } catch (const std::exception& e) {  // ONNX's parser lets std::stoi & co. throw on a bad number
      error_at(start + parser.consumed(), fmt::format("{} is not valid ONNX text: a number it can't read ({})", what, e.what()));
    }
    if (status.IsOK() && end != std::string::npos && !parser.EndOfInput()) {
      error_at(start + parser.consumed(), fmt::format("{}: unexpected text after it", what));
    }
    if (!status.IsOK()) {
      static const std::regex position(R"(\(line: (\d+) column: (\d+)\))");
      std::smatch found;
      const std::string& message = status.ErrorMessage();
      size_t at = start + parser.consumed();
      if (std::regex_search(message, found, position)) {
        const int line = std::stoi(found[1]);
        const int column = std::stoi(found[2]);
        at = start;
        for (int l = 1; l < line && at < text_.size(); ++at) {
          if (text_[at] == '\n') ++l;
        }
        at += static_cast<size_t>(column - 1);
      }
      const std::string detail = message.substr(message.rfind('\n') + 1);
      error_at(at, fmt::format("{} is not valid ONNX text: {}", what, detail));
    }
    const size_t used = end == std::string::npos ? parser.consumed() : end - start;
    pos_ = start + used;
    return text_.substr(start, used);
  }

  // The extent of a `{ ... }` block whose braces nest (ONNX text), outside string literals.
  // Leaves pos_ after '{' and returns the position of the matching '}'.
  size_t nested_block_end() {
    expect('{');
    int depth = 1;
    bool in_string = false;
    for (size_t i = pos_; i < text_.size(); ++i) {
      const char c = text_[i];
      if (in_string) {
        if (c == '\\') ++i;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '#') {
        while (i < text_.size() && text_[i] != '\n') ++i;
      } else if (c == '{') {
        ++depth;
      } else if (c == '}' && --depth == 0) {
        return i;
      }
    }
    error("unclosed '{'");
  }

  // ---- Rules -----------------------------------------------------------------------------

  // What a rule's clauses say before the rule is checked and finished, with where each was written.
  struct Clauses {
    std::vector<Constraint> shared_constraints;
    std::map<std::string, onnx::AttributeProto> shared_defaults;
    std::vector<VersionRange> shared_opsets;
    bool has_replacement = false;
    onnx::NodeList replacement_nodes;
    std::vector<std::string> replacement_inputs, replacement_outputs;
    std::string builder_name;
    size_t replacement_at = 0, targets_at = 0, fuse_targets_at = 0, requires_at = 0;
    std::vector<std::vector<size_t>> pattern_node_at;  // where each pattern node's op is written
    std::vector<size_t> replacement_node_at;
  };

  std::shared_ptr<const Rule> parse_rule() {
    auto rule = std::make_shared<Rule>();
    rule->file = file_;
    rule->line = line_column(pos_).first;
    rule->id = read_word("a rule id");
    Clauses clauses;
    for (;;) {
      const size_t clause_at = (skip_space(), pos_);
      std::string clause = read_word("a clause or 'end'");
      if (clause == "end") break;
      if (clause == "fuses" && peek_word() == "for") {  // `fuses for: onnx`
        pos_ += 3;
        clause = "fuses for";
      }
      parse_clause(clause, clause_at, *rule, clauses);
    }
    finish_rule(*rule, clauses);
    return rule;
  }

  void parse_clause(const std::string& clause, size_t clause_at, Rule& rule, Clauses& clauses) {
    if (clause == "description" || clause == "targets" || clause == "fuses for" || clause == "priority" || clause == "requires") {
      expect(':');
      const std::string value = rest_of_line();
      if (clause == "description") rule.description = value;
      else if (clause == "targets") {
        rule.targets = split_list(value, clause_at);
        clauses.targets_at = clause_at;
      } else if (clause == "fuses for") {
        rule.fuse_targets = split_list(value, clause_at);
        clauses.fuse_targets_at = clause_at;
      } else if (clause == "priority") rule.priority = parse_int(value, clause_at);
      else {
        rule.requires_opsets = parse_version_list(value, clause_at);
        clauses.requires_at = clause_at;
      }
    } else if (clause == "pattern") {
      rule.patterns.push_back(parse_pattern(clauses.pattern_node_at.emplace_back()));
      if (peek_word() == "where") {  // this pattern's own constraints
        pos_ += 5;
        parse_where(rule.patterns.back().constraints, rule.patterns.back().defaults, rule.patterns.back().opsets);
      }
    } else if (clause == "where") {
      if (!rule.patterns.empty()) error_at(clause_at, "a shared 'where' must come before the first pattern");
      parse_where(clauses.shared_constraints, clauses.shared_defaults, clauses.shared_opsets);
    } else if (clause == "let") {
      parse_lets(rule.lets);
    } else if (clause == "replace") {
      parse_replace(clause_at, clauses);
    } else if (clause == "example") {
      rule.example = parse_example();
    } else if (clause == "expect") {
      if (!rule.example) error_at(clause_at, "'expect' follows an 'example'");
      if (peek_word() == "like") {  // the same nodes as another rule's expect, written once
        pos_ += 4;
        rule.example->expected_like = read_word("a rule id");
      } else {
        onnx::NodeList nodes;
        rule.example->expected_nodes_text = parse_onnx(nodes, "the expected nodes");
      }
    } else {
      error_at(clause_at, "unknown clause '" + clause +
                              "' (description, targets, fuses for, priority, requires, where, "
                              "pattern, let, replace, example, expect, end)");
    }
  }

  // `replace with BUILDER`, or `replace (inputs) => (outputs) { ONNX text }`.
  void parse_replace(size_t clause_at, Clauses& clauses) {
    if (clauses.has_replacement) error_at(clause_at, "a rule has one replacement");
    clauses.has_replacement = true;
    clauses.replacement_at = clause_at;
    if (peek_word() == "with") {
      pos_ += 4;
      clauses.builder_name = read_word("a builder name");
      return;
    }
    parse_signature(clauses.replacement_inputs, clauses.replacement_outputs);
    skip_space();
    const size_t nodes_at = pos_;
    parse_onnx(clauses.replacement_nodes, "the replacement");
    clauses.replacement_node_at = op_positions(nodes_at, clauses.replacement_nodes);
  }

  // `example [exact] [opset N] { model }`.
  RuleExample parse_example() {
    RuleExample example;
    if (peek_word() == "exact") {  // `example exact opset N { ... }`: as with --to-opset N
      pos_ += 5;
      example.exact_opset = true;
      if (peek_word() != "opset") error("expected 'opset N' after 'exact'");
    }
    if (peek_word() == "opset") {  // `example opset N { ... }`: shown as rewritten with --opset N
      pos_ += 5;
      example.max_opset = parse_int(read_word("an opset version"), pos_);
    }
    const size_t end = nested_block_end();
    example.line = line_column(pos_).first;
    onnx::ModelProto model;
    example.model_text = parse_onnx(model, "the example model", end);
    pos_ = end + 1;
    return example;
  }

  // The rule complete and checked: every pattern given the shared `where`, its ops and targets
  // known, its replacement made.
  void finish_rule(Rule& rule, Clauses& clauses) {
    if (rule.patterns.empty()) error("rule " + rule.id + " has no pattern");
    if (!clauses.has_replacement) error("rule " + rule.id + " has no replacement");
    if (rule.targets.empty() && rule.fuse_targets.empty()) error("rule " + rule.id + " names no targets");
    check_targets(rule, rule.targets, clauses.targets_at);
    check_targets(rule, rule.fuse_targets, clauses.fuse_targets_at);
    for (auto& pattern : rule.patterns) {
      for (const auto& constraint : clauses.shared_constraints) {
        if (pattern_has_name(pattern, constraint.subject)) pattern.constraints.push_back(constraint);
      }
      for (const auto& [name, value] : clauses.shared_defaults) pattern.defaults.emplace(name, value);
      for (const auto& range : clauses.shared_opsets) pattern.opsets.push_back(range);
    }
    for (const auto& constraint : clauses.shared_constraints) {
      if (std::none_of(rule.patterns.begin(), rule.patterns.end(),
                       [&](const Pattern& p) { return pattern_has_name(p, constraint.subject); })) {
        error(fmt::format("rule {}: 'where' line {} names '{}', which no pattern has", rule.id, constraint.line, constraint.subject));
      }
    }
    for (auto& pattern : rule.patterns) finish_pattern(rule, pattern);
    if (auto problem = check_rule_ops(rule, clauses.builder_name.empty() ? &clauses.replacement_nodes : nullptr)) {
      using Place = RuleProblem::Place;
      const size_t at = problem->place == Place::kPatternNode       ? clauses.pattern_node_at[problem->pattern][problem->index]
                        : problem->place == Place::kReplacementNode ? clauses.replacement_node_at[problem->index]
                                                                    : clauses.requires_at;
      error_at(at, fmt::format("rule {}: {}", rule.id, problem->message));
    }
    rule.replacement = make_replacement(rule, clauses);
    if (!rule.example) error("rule " + rule.id + " has no example (every rule documents and tests one)");
  }

  void check_targets(const Rule& rule, const std::vector<std::string>& targets, size_t at) {
    const auto& known = all_targets();
    for (const auto& target : targets) {
      if (std::none_of(known.begin(), known.end(), [&](const Target* t) { return t->name == target; })) {
        std::vector<std::string> names;
        for (const Target* t : known) names.push_back(t->name);
        error_at(at, fmt::format("rule {}: unknown target '{}' (known: {})", rule.id, target, fmt::join(names, ", ")));
      }
    }
  }

  std::shared_ptr<const Replacement> make_replacement(const Rule& rule, Clauses& clauses) {
    if (clauses.builder_name.empty()) {
      check_replacement(rule, clauses.replacement_nodes, clauses.replacement_inputs, clauses.replacement_outputs, clauses.replacement_at);
      return std::make_shared<TextReplacement>(std::move(clauses.replacement_nodes), clauses.replacement_inputs,
                                               clauses.replacement_outputs);
    }
    const BuilderRegistry& registry = BuilderRegistry::builtin();
    const Builder* builder = registry.find(clauses.builder_name);
    if (!builder) {
      error_at(clauses.replacement_at,
               fmt::format("unknown builder '{}' (known: {})", clauses.builder_name, fmt::join(registry.names(), ", ")));
    }
    check_signature(rule, *builder, clauses.replacement_at);
    return std::make_shared<BuilderReplacement>(*builder);
  }

  std::vector<std::string> split_list(const std::string& value, size_t at) {
    std::vector<std::string> items;
    std::stringstream stream(value);
    std::string item;
    while (std::getline(stream, item, ',')) {
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (item.empty()) error_at(at, "empty item in list");
      items.push_back(item);
    }
    return items;
  }

  int parse_int(const std::string& value, size_t at) {
    try {
      size_t used = 0;
      const int number = std::stoi(value, &used);
      if (used == value.size()) return number;
    } catch (...) {
    }
    error_at(at, "'" + value + "' is not an integer");
  }

  // "ai.onnx >= 18", "com.microsoft 1", "ai.onnx 13..17", "ai.onnx <= 17"
  VersionRange parse_version(const std::string& spec, size_t at) {
    std::stringstream stream(spec);
    std::string domain, rest, word;
    stream >> domain;
    while (stream >> word) rest += word;
    if (domain.empty() || rest.empty()) error_at(at, "expected 'DOMAIN VERSIONS' (e.g. 'ai.onnx >= 18'), got '" + spec + "'");
    VersionRange range;
    range.domain = normalize_domain(domain);
    if (rest.starts_with(">=")) {
      range.min = parse_int(rest.substr(2), at);
    } else if (rest.starts_with("<=")) {
      range.max = parse_int(rest.substr(2), at);
    } else if (auto dots = rest.find(".."); dots != std::string::npos) {
      range.min = parse_int(rest.substr(0, dots), at);
      if (dots + 2 < rest.size()) range.max = parse_int(rest.substr(dots + 2), at);
    } else {
      range.min = range.max = parse_int(rest, at);
    }
    if (range.min > range.max) error_at(at, "empty version range '" + spec + "'");
    return range;
  }

  std::vector<VersionRange> parse_version_list(const std::string& value, size_t at) {
    std::vector<VersionRange> ranges;
    for (const auto& item : split_list(value, at)) ranges.push_back(parse_version(item, at));
    return ranges;
  }

  void parse_signature(std::vector<std::string>& inputs, std::vector<std::string>& outputs) {
    auto names = [&](std::vector<std::string>& into) {
      expect('(');
      if (accept(')')) return;
      do {
        into.push_back(read_word("a value name"));
      } while (accept(','));
      expect(')');
    };
    names(inputs);
    skip_space();
    if (text_.compare(pos_, 2, "=>") != 0) error("expected '=>'");
    pos_ += 2;
    names(outputs);
  }

  Pattern parse_pattern(std::vector<size_t>& node_at) {
    Pattern pattern;
    pattern.line = line_column(pos_).first;
    parse_signature(pattern.inputs, pattern.outputs);
    if (pattern.outputs.empty()) error("a pattern needs an output: matching starts from the node that computes the first");
    skip_space();
    const size_t at = pos_;
    onnx::NodeList nodes;
    parse_onnx(nodes, "the pattern");
    for (const auto& node : nodes) pattern.nodes.push_back(pattern_node(node, at));
    node_at = op_positions(at, nodes);
    return pattern;
  }

  // Where each node's op (with its domain) is written, from `at` on, in order: ONNX's parser
  // keeps no positions, and errors about a node point at it.
  std::vector<size_t> op_positions(size_t at, const onnx::NodeList& nodes) const {
    auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    std::vector<size_t> positions;
    size_t from = at;
    for (const auto& node : nodes) {
      const std::string written = node.domain().empty() ? node.op_type() : node.domain() + "." + node.op_type();
      size_t found = from;
      for (;; ++found) {
        found = text_.find(written, found);
        if (found == std::string::npos) break;
        const bool starts = found == 0 || (!word_char(text_[found - 1]) && text_[found - 1] != '.');
        const bool ends = found + written.size() >= text_.size() || !word_char(text_[found + written.size()]);
        if (starts && ends) break;
      }
      positions.push_back(found == std::string::npos ? at : found);
      if (found != std::string::npos) from = found + written.size();
    }
    return positions;
  }

  PatternNode pattern_node(const onnx::NodeProto& node, size_t at) {
    PatternNode result;
    result.domain = normalize_domain(node.domain());
    result.op_type = node.op_type();
    result.inputs.assign(node.input().begin(), node.input().end());
    result.outputs.assign(node.output().begin(), node.output().end());
    for (const auto& attribute : node.attribute()) {
      PatternAttribute wanted;
      wanted.name = attribute.name();
      if (!attribute.ref_attr_name().empty()) {
        wanted.capture = attribute.ref_attr_name();
        wanted.capture_type = attribute.type();
      } else {
        wanted.literal = attribute;
        wanted.literal->clear_name();
      }
      result.attributes.push_back(std::move(wanted));
    }
    const bool standard = result.domain.empty();
    result.commutative = standard && kCommutative.count(result.op_type);
    result.associative = standard && (result.op_type == "Mul" || result.op_type == "Add") && result.inputs.size() > 2;
    if (result.associative && std::count(result.inputs.begin(), result.inputs.end(), "") > 0) {
      error_at(at, "an n-ary " + result.op_type + " pattern can't have absent operands");
    }
    return result;
  }

  // ---- where / let blocks ------------------------------------------------------------------
  struct Token {
    std::string text;
    enum class Kind { kWord, kNumber, kString, kSymbol } kind;
  };

  std::vector<Token> tokenize(const std::string& line, size_t at) {
    std::vector<Token> tokens;
    size_t i = 0;
    while (i < line.size()) {
      const char c = line[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
      } else if (c == '"') {
        const size_t end = line.find('"', i + 1);
        if (end == std::string::npos) error_at(at + i, "unclosed string");
        tokens.push_back({line.substr(i + 1, end - i - 1), Token::Kind::kString});
        i = end + 1;
      } else if (std::isdigit(static_cast<unsigned char>(c)) ||
                 (c == '.' && i + 1 < line.size() && std::isdigit(static_cast<unsigned char>(line[i + 1])))) {
        size_t end = i;
        while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) || line[end] == '.' ||
                                     ((line[end] == '-' || line[end] == '+') && (line[end - 1] == 'e' || line[end - 1] == 'E')))) {
          if (line.compare(end, 2, "..") == 0) break;
          ++end;
        }
        tokens.push_back({line.substr(i, end - i), Token::Kind::kNumber});
        i = end;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = i;
        while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) || line[end] == '_' || line[end] == '.')) ++end;
        tokens.push_back({line.substr(i, end - i), Token::Kind::kWord});
        i = end;
      } else {
        static const char* const kSymbols[] = {
            "\xE2\x89\x88", "\xC2\xB1", "~=", "+-", "==", ">=", "<=", "..", "[", "]", "(", ")", ",", "+", "-", "*", "/", "="};
        bool found = false;
        for (const char* symbol : kSymbols) {
          if (line.compare(i, std::strlen(symbol), symbol) == 0) {
            std::string text = symbol;
            if (text == "\xE2\x89\x88") text = "~=";
            if (text == "\xC2\xB1") text = "+-";
            tokens.push_back({text, Token::Kind::kSymbol});
            i += std::strlen(symbol);
            found = true;
            break;
          }
        }
        if (!found) error_at(at + i, fmt::format("unexpected character '{}'", c));
      }
    }
    return tokens;
  }

  // Lines of a block, each from its first non-blank character (with that offset), comments
  // and blank lines dropped.
  std::vector<std::pair<std::string, size_t>> block_lines() {
    auto [body, start] = braced_block();
    std::vector<std::pair<std::string, size_t>> lines;
    size_t offset = 0;
    std::stringstream stream(body);
    std::string line;
    while (std::getline(stream, line)) {
      const size_t line_at = start + offset;
      offset += line.size() + 1;
      line = line.substr(0, line.find('#'));
      const size_t first = line.find_first_not_of(" \t\r");
      if (first == std::string::npos) continue;
      lines.emplace_back(line.substr(first), line_at + first);
    }
    return lines;
  }

  // std::stod / std::stoll, with a number out of range (or malformed) as an error at `at`.
  template <typename Convert>
  auto converted(const Token& token, size_t at, Convert convert) {
    try {
      return convert(token.text);
    } catch (const std::exception&) {
      error_at(at, "the number " + token.text + " is out of range");
    }
  }

  double number_of(const Token& token, size_t at) {
    if (token.kind != Token::Kind::kNumber) error_at(at, "expected a number, got '" + token.text + "'");
    return converted(token, at, [](const std::string& text) { return std::stod(text); });
  }

  onnx::AttributeProto literal_of(const Token& token, size_t at, bool negative = false) {
    onnx::AttributeProto value;
    if (token.kind == Token::Kind::kString) {
      value.set_type(onnx::AttributeProto::STRING);
      value.set_s(token.text);
    } else if (token.kind == Token::Kind::kNumber) {
      const bool is_float = token.text.find_first_of(".eE") != std::string::npos;
      if (is_float) {
        value.set_type(onnx::AttributeProto::FLOAT);
        const double number = converted(token, at, [](const std::string& text) { return std::stod(text); });
        value.set_f(static_cast<float>(negative ? -number : number));
      } else {
        value.set_type(onnx::AttributeProto::INT);
        const long long number = converted(token, at, [](const std::string& text) { return std::stoll(text); });
        value.set_i(negative ? -number : number);
      }
    } else {
      error_at(at, "expected a number or a string, got '" + token.text + "'");
    }
    return value;
  }

  // A literal, or a bracketed list of literals, starting at tokens[i].
  std::vector<onnx::AttributeProto> literal_list(const std::vector<Token>& tokens, size_t i, size_t at) {
    std::vector<onnx::AttributeProto> values;
    const bool bracketed = i < tokens.size() && tokens[i].text == "[";
    if (bracketed) ++i;
    while (i < tokens.size() && tokens[i].text != "]") {
      const bool negative = tokens[i].text == "-";
      if (negative) ++i;
      if (i >= tokens.size()) error_at(at, "expected a value");
      values.push_back(literal_of(tokens[i++], at, negative));
      if (i < tokens.size() && tokens[i].text == ",") ++i;
    }
    if (values.empty()) error_at(at, "expected a value");
    return values;
  }

  void parse_where(std::vector<Constraint>& constraints, std::map<std::string, onnx::AttributeProto>& defaults,
                   std::vector<VersionRange>& opsets) {
    for (const auto& [line, at] : block_lines()) {
      const auto tokens = tokenize(line, at);
      if (tokens.size() < 2) error_at(at, "expected a constraint");
      if (tokens[0].text == "opset") {
        opsets.push_back(parse_version(line.substr(line.find("opset") + 5), at));
        continue;
      }
      Constraint constraint;
      constraint.subject = tokens[0].text;
      std::tie(constraint.line, constraint.column) = line_column(at);
      const std::string& verb = tokens[1].text;
      using K = Constraint::Kind;
      if (verb == "default") {
        defaults[constraint.subject] = literal_list(tokens, 2, at).front();
        continue;
      } else if (verb == "is" && tokens.size() == 3) {
        static const std::map<std::string, K> kinds = {{"constant", K::kConstant}, {"scalar", K::kScalar},   {"optional", K::kOptional},
                                                       {"absent", K::kAbsent},     {"present", K::kPresent}, {"variadic", K::kVariadic}};
        auto it = kinds.find(tokens[2].text);
        if (it == kinds.end()) error_at(at, "expected constant, scalar, optional, absent, present or variadic");
        constraint.kind = it->second;
      } else if (verb == "~=") {
        constraint.kind = K::kApprox;
        size_t i = 2;
        const bool negative = i < tokens.size() && tokens[i].text == "-";
        if (negative) ++i;
        if (i >= tokens.size()) error_at(at, "expected a number after ≈");
        constraint.number = number_of(tokens[i++], at) * (negative ? -1 : 1);
        constraint.tolerance = 1e-6 * std::max(1.0, std::fabs(constraint.number));
        if (i < tokens.size()) {
          if (tokens[i].text != "+-" || i + 1 >= tokens.size()) error_at(at, "expected '± tolerance'");
          constraint.tolerance = number_of(tokens[i + 1], at);
        }
      } else if (verb == "==") {
        constraint.kind = K::kEquals;
        constraint.values = literal_list(tokens, 2, at);
      } else if (verb == "in") {
        constraint.kind = K::kIn;
        constraint.values = literal_list(tokens, 2, at);
      } else if (verb == "dtype") {
        constraint.kind = K::kDtype;
        if (tokens.size() < 4 || (tokens[2].text != "in" && tokens[2].text != "==")) error_at(at, "expected 'dtype in [...]'");
        for (size_t i = 3; i < tokens.size(); ++i) {
          if (tokens[i].kind != Token::Kind::kWord) continue;
          auto type = data_type_from_name(tokens[i].text);
          if (!type) error_at(at, "unknown element type '" + tokens[i].text + "'");
          constraint.dtypes.push_back(*type);
        }
      } else if (verb == "rank") {
        constraint.kind = K::kRank;
        if (tokens.size() < 4) error_at(at, "expected 'rank == N', 'rank >= N', 'rank <= N' or 'rank in [N, M]'");
        const std::string& op = tokens[2].text;
        const int n = static_cast<int>(number_of(tokens[3], at));
        if (op == "==") constraint.min_rank = constraint.max_rank = n;
        else if (op == ">=") constraint.min_rank = n;
        else if (op == "<=") constraint.max_rank = n;
        else if (op == "in") {
          std::vector<int> ranks;
          for (const auto& value : literal_list(tokens, 3, at)) ranks.push_back(static_cast<int>(value.i()));
          constraint.min_rank = *std::min_element(ranks.begin(), ranks.end());
          constraint.max_rank = *std::max_element(ranks.begin(), ranks.end());
        } else {
          error_at(at, "expected ==, >=, <= or in after 'rank'");
        }
      } else {
        error_at(at, "unknown constraint '" + verb + "' (is, ≈, ==, in, dtype, rank, default, opset)");
      }
      constraints.push_back(std::move(constraint));
    }
  }

  // expression := term (('+'|'-') term)* ; term := unary (('*'|'/') unary)* ;
  // unary := '-' unary | primary ; primary := literal | name | name '(' args ')' | '[' list ']' | '(' expression ')'
  struct ExpressionParser {
    RuleFileParser& file;
    const std::vector<Token>& tokens;
    size_t i;
    size_t at;

    const Token* peek() const { return i < tokens.size() ? &tokens[i] : nullptr; }
    bool accept(const char* symbol) {
      if (peek() && peek()->kind == Token::Kind::kSymbol && peek()->text == symbol) {
        ++i;
        return true;
      }
      return false;
    }
    Expression binary(std::string op, Expression left, Expression right) {
      Expression e{Expression::Kind::kBinary, {}, std::move(op), {std::move(left), std::move(right)}};
      return e;
    }
    Expression expression() {
      Expression left = term();
      while (peek() && (peek()->text == "+" || peek()->text == "-")) {
        std::string op = tokens[i++].text;
        left = binary(op, std::move(left), term());
      }
      return left;
    }
    Expression term() {
      Expression left = unary();
      while (peek() && (peek()->text == "*" || peek()->text == "/")) {
        std::string op = tokens[i++].text;
        left = binary(op, std::move(left), unary());
      }
      return left;
    }
    Expression unary() {
      Nested nested(*this);
      if (accept("-")) return Expression{Expression::Kind::kUnary, {}, "-", {unary()}};
      return primary();
    }
    // Expressions are read (and later evaluated) recursively: their nesting is bounded, so that
    // no line of a rule file can exhaust the stack.
    static constexpr int kMaxNesting = 200;
    int nesting = 0;
    struct Nested {
      ExpressionParser& parser;
      explicit Nested(ExpressionParser& p) : parser(p) {
        if (++parser.nesting > kMaxNesting)
          parser.file.error_at(parser.at, fmt::format("expression nested deeper than {} levels", kMaxNesting));
      }
      ~Nested() { --parser.nesting; }
    };
    Expression primary() {
      const Token* token = peek();
      if (!token) file.error_at(at, "expression ends too early");
      if (accept("(")) {
        Expression inner = expression();
        if (!accept(")")) file.error_at(at, "expected ')'");
        return inner;
      }
      if (accept("[")) {
        Expression list{Expression::Kind::kList, {}, {}, {}};
        if (!accept("]")) {
          do {
            list.operands.push_back(expression());
          } while (accept(","));
          if (!accept("]")) file.error_at(at, "expected ']'");
        }
        return list;
      }
      ++i;
      if (token->kind == Token::Kind::kNumber || token->kind == Token::Kind::kString) {
        return Expression{Expression::Kind::kLiteral, file.literal_of(*token, at), {}, {}};
      }
      if (token->kind != Token::Kind::kWord) file.error_at(at, "unexpected '" + token->text + "'");
      if (accept("(")) {
        Expression call{Expression::Kind::kCall, {}, token->text, {}};
        if (!accept(")")) {
          do {
            call.operands.push_back(expression());
          } while (accept(","));
          if (!accept(")")) file.error_at(at, "expected ')'");
        }
        return call;
      }
      return Expression{Expression::Kind::kName, {}, token->text, {}};
    }
  };

  void parse_lets(std::vector<Let>& lets) {
    for (const auto& [line, at] : block_lines()) {
      const auto tokens = tokenize(line, at);
      if (tokens.size() < 3 || tokens[0].kind != Token::Kind::kWord || tokens[1].text != "=") {
        error_at(at, "expected 'name = expression'");
      }
      ExpressionParser parser{*this, tokens, 2, at};
      Let let{tokens[0].text, parser.expression(), line_column(at).first};
      if (parser.i != tokens.size()) error_at(at, "unexpected '" + tokens[parser.i].text + "'");
      lets.push_back(std::move(let));
    }
  }

  // ---- Checks ----------------------------------------------------------------------------
  static bool pattern_has_name(const Pattern& pattern, const std::string& name) {
    for (const auto& node : pattern.nodes) {
      if (std::count(node.inputs.begin(), node.inputs.end(), name) || std::count(node.outputs.begin(), node.outputs.end(), name))
        return true;
      for (const auto& attribute : node.attributes) {
        if (attribute.capture == name) return true;
      }
    }
    return false;
  }

  static bool is_capture(const Pattern& pattern, const std::string& name) {
    for (const auto& node : pattern.nodes) {
      for (const auto& attribute : node.attributes) {
        if (attribute.capture == name) return true;
      }
    }
    return false;
  }

  // An attribute is a literal of the node: only what compares its value applies to it. The
  // rest would be silently true, and a rule trusting it would fire where it must not.
  void refuse_value_only_constraint(const Constraint& constraint, const std::string& where) const {
    using K = Constraint::Kind;
    switch (constraint.kind) {
      case K::kEquals:
      case K::kIn:
      case K::kApprox:
      case K::kPresent:
      case K::kAbsent: return;
      case K::kOptional:
        error_at(constraint, fmt::format("{}: '{}' is an attribute, which may always be absent (a default or 'is present' "
                                         "says what the rule needs)",
                                         where, constraint.subject));
      default:
        error_at(constraint, fmt::format("{}: '{}' is an attribute; '{}' applies to values (attributes take ==, in, ≈, "
                                         "is present, is absent)",
                                         where, constraint.subject, constraint.describe()));
    }
  }

  void finish_pattern(const Rule& rule, Pattern& pattern) {
    const std::string where = fmt::format("rule {} (pattern at line {})", rule.id, pattern.line);
    std::map<std::string, size_t> producer;
    for (size_t i = 0; i < pattern.nodes.size(); ++i) {
      for (const auto& output : pattern.nodes[i].outputs) {
        if (output.empty() || output == "_") continue;
        if (!producer.emplace(output, i).second) error(where + ": '" + output + "' is computed twice");
      }
    }
    // Names no pattern node computes are inputs too (constants, weights), listed or not.
    std::set<std::string> inputs(pattern.inputs.begin(), pattern.inputs.end());
    for (const auto& node : pattern.nodes) {
      for (const auto& input : node.inputs) {
        if (input.empty() || producer.count(input) || !inputs.insert(input).second) continue;
        pattern.inputs.push_back(input);
      }
    }
    for (const auto& input : pattern.inputs) {
      if (producer.count(input)) error(where + ": '" + input + "' is an input of the pattern and computed by it");
    }
    for (const auto& output : pattern.outputs) {
      if (!producer.count(output)) error(where + ": output '" + output + "' is not computed by the pattern");
    }
    for (auto& constraint : pattern.constraints) {
      constraint.on_attribute = is_capture(pattern, constraint.subject);
      if (constraint.on_attribute) refuse_value_only_constraint(constraint, where);
      if (!pattern_has_name(pattern, constraint.subject)) {
        error(fmt::format("{}: 'where' line {} names '{}', which the pattern does not have", where, constraint.line, constraint.subject));
      }
      if (constraint.kind == Constraint::Kind::kVariadic) {
        auto node = producer.find(constraint.subject);
        if (node == producer.end() || pattern.nodes[node->second].associative) {
          error(fmt::format("{}: 'where' line {}: '{}' is variadic, but no pattern node (of fixed operands) computes it", where,
                            constraint.line, constraint.subject));
        }
        pattern.nodes[node->second].variadic = true;
      }
    }
    // Match order: the anchor computes the first output; then producers of bound values
    // (a unique candidate each), then consumers.
    std::vector<bool> placed(pattern.nodes.size(), false);
    std::set<std::string> bound;
    auto place = [&](size_t i) {
      placed[i] = true;
      pattern.order.push_back(i);
      for (const auto& name : pattern.nodes[i].inputs) bound.insert(name);
      for (const auto& name : pattern.nodes[i].outputs) bound.insert(name);
    };
    place(producer.at(pattern.outputs.front()));
    while (pattern.order.size() < pattern.nodes.size()) {
      std::optional<size_t> next;
      for (size_t i = 0; i < pattern.nodes.size() && !next; ++i) {
        if (placed[i]) continue;
        for (const auto& output : pattern.nodes[i].outputs) {
          if (bound.count(output) && output != "_" && !output.empty()) next = i;
        }
      }
      for (size_t i = 0; i < pattern.nodes.size() && !next; ++i) {
        if (placed[i]) continue;
        for (const auto& input : pattern.nodes[i].inputs) {
          if (!input.empty() && bound.count(input)) {
            if (pattern.nodes[i].associative) {
              error(where + ": an n-ary " + pattern.nodes[i].op_type + " must be reached through its output");
            }
            next = i;
            break;
          }
        }
      }
      if (!next) error(where + ": the pattern is not connected");
      place(*next);
    }
  }

  static bool binds_value(const Pattern& pattern, const std::string& name) {
    if (std::count(pattern.inputs.begin(), pattern.inputs.end(), name)) return true;
    return std::any_of(pattern.nodes.begin(), pattern.nodes.end(), [&](const PatternNode& node) {
      return std::count(node.inputs.begin(), node.inputs.end(), name) || std::count(node.outputs.begin(), node.outputs.end(), name);
    });
  }

  // What the builder declares it reads must be bound by every pattern (values) or defined by the
  // rule (captured by every pattern, a default of every pattern, or a let).
  void check_signature(const Rule& rule, const Builder& builder, size_t at) {
    for (const auto& pattern : rule.patterns) {
      for (const auto& name : builder.signature.values) {
        if (!binds_value(pattern, name)) {
          error_at(at, fmt::format("rule {}: builder {} reads pattern value '{}', which the pattern at line {} does not bind", rule.id,
                                   builder.name, name, pattern.line));
        }
      }
    }
    for (const auto& name : builder.signature.attributes) {
      const bool let = std::any_of(rule.lets.begin(), rule.lets.end(), [&](const Let& l) { return l.name == name; });
      for (const auto& pattern : rule.patterns) {
        if (let || is_capture(pattern, name) || pattern.defaults.count(name)) continue;
        error_at(at, fmt::format("rule {}: builder {} reads '{}', which the pattern at line {} neither captures nor defaults "
                                 "(and no let defines)",
                                 rule.id, builder.name, name, pattern.line));
      }
    }
  }

  void check_replacement(const Rule& rule, const onnx::NodeList& nodes, const std::vector<std::string>& inputs,
                         const std::vector<std::string>& outputs, size_t at) {
    const std::string where = "rule " + rule.id + ": replacement";
    for (const auto& pattern : rule.patterns) {
      for (const auto& input : inputs) {
        if (std::find(pattern.inputs.begin(), pattern.inputs.end(), input) == pattern.inputs.end()) {
          error_at(at, fmt::format("{}: input '{}' is not an input of the pattern at line {}", where, input, pattern.line));
        }
      }
      if (std::set<std::string>(outputs.begin(), outputs.end()) != std::set<std::string>(pattern.outputs.begin(), pattern.outputs.end())) {
        error_at(at, fmt::format("{}: its outputs must be the outputs of the pattern at line {}", where, pattern.line));
      }
    }
    std::set<std::string> known(inputs.begin(), inputs.end());
    std::set<std::string> names;  // captures, defaults and lets the replacement may reference
    for (const auto& pattern : rule.patterns) {
      for (const auto& node : pattern.nodes) {
        for (const auto& attribute : node.attributes) {
          if (!attribute.capture.empty()) names.insert(attribute.capture);
        }
      }
      for (const auto& [name, value] : pattern.defaults) names.insert(name);
    }
    for (const auto& let : rule.lets) names.insert(let.name);
    for (const auto& node : nodes) {
      for (const auto& input : node.input()) {
        if (!input.empty() && !known.count(input)) {
          error_at(at, fmt::format("{}: '{}' is neither a replacement input nor computed before its use", where, input));
        }
      }
      for (const auto& attribute : node.attribute()) {
        if (!attribute.ref_attr_name().empty() && !names.count(attribute.ref_attr_name())) {
          error_at(at, fmt::format("{}: @{} is not a captured attribute, a default or a let", where, attribute.ref_attr_name()));
        }
      }
      for (const auto& output : node.output()) known.insert(output);
    }
    for (const auto& output : outputs) {
      if (!known.count(output)) error_at(at, fmt::format("{}: output '{}' is never computed", where, output));
    }
  }

  const std::string& text_;
  std::vector<size_t> line_starts_{0};  // where each line of text_ begins
  std::string file_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<std::shared_ptr<const Rule>> parse_rule_file(const std::string& text, const std::string& name) {
  return RuleFileParser(text, name).parse();
}

}  // namespace onnx_rewrite
