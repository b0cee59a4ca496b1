#include "cli/json.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace onnx_rewrite {

void JsonWriter::newline() {
  if (compact_) return;
  out_ += '\n';
  out_.append(first_.size() * 2, ' ');
}

void JsonWriter::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    newline();
  }
}

JsonWriter& JsonWriter::begin_object() {
  separate();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::close(char bracket) {
  const bool empty = first_.back();
  first_.pop_back();
  if (!empty) newline();
  out_ += bracket;
  return *this;
}

JsonWriter& JsonWriter::end_object() { return close('}'); }

JsonWriter& JsonWriter::begin_array() {
  separate();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() { return close(']'); }

JsonWriter& JsonWriter::key(std::string_view name) {
  value(name);
  out_ += compact_ ? ":" : ": ";
  after_key_ = true;
  return *this;
}

namespace {

// The length of the valid UTF-8 sequence starting at text[at], or 0.
size_t utf8_sequence(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || at + length > text.size()) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return 0;
  }
  return length;
}

}  // namespace

JsonWriter& JsonWriter::value(std::string_view text) {
  separate();
  out_ += '"';
  for (size_t at = 0; at < text.size(); ++at) {
    const unsigned char c = static_cast<unsigned char>(text[at]);
    if (c >= 0x80) {  // names come from model files: invalid UTF-8 becomes U+FFFD
      const size_t length = utf8_sequence(text, at);
      if (length == 0) {
        out_ += "\uFFFD";
      } else {
        out_.append(text.substr(at, length));
        at += length - 1;
      }
      continue;
    }
    switch (c) {
      case '"': out_ += "\\\""; break;
      case '\\': out_ += "\\\\"; break;
      case '\n': out_ += "\\n"; break;
      case '\r': out_ += "\\r"; break;
      case '\t': out_ += "\\t"; break;
      default:
        if (c < 0x20) out_ += fmt::format("\\u{:04x}", c);
        else out_ += static_cast<char>(c);
    }
  }
  out_ += '"';
  return *this;
}

JsonWriter& JsonWriter::value(int64_t number) {
  separate();
  out_ += std::to_string(number);
  return *this;
}

JsonWriter& JsonWriter::value(uint64_t number) {
  separate();
  out_ += std::to_string(number);
  return *this;
}

JsonWriter& JsonWriter::value(double number) {
  separate();
  out_ += std::isfinite(number) ? fmt::format("{}", number) : "null";
  return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
  separate();
  out_ += flag ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  separate();
  out_ += "null";
  return *this;
}

JsonWriter& JsonWriter::number_text(std::string_view literal) {
  separate();
  out_ += literal;
  return *this;
}

JsonWriter& JsonWriter::strings(const std::vector<std::string>& items) {
  begin_array();
  for (const auto& item : items) value(item);
  return end_array();
}

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const auto& [name, member] : members) {
    if (name == key) return &member;
  }
  return nullptr;
}

std::string JsonValue::string_or(std::string_view key, std::string fallback) const {
  const JsonValue* member = find(key);
  return member && member->kind == Kind::kString ? member->text : fallback;
}

double JsonValue::number_or(std::string_view key, double fallback) const {
  const JsonValue* member = find(key);
  return member && member->kind == Kind::kNumber ? std::strtod(member->text.c_str(), nullptr) : fallback;
}

namespace {

// Recursive descent, nesting bounded (our reports nest a few levels; a hostile file can't
// overflow the stack).
class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  std::optional<JsonValue> document() {
    JsonValue value;
    if (!parse(value, 0)) return std::nullopt;
    skip_space();
    if (at_ != text_.size()) return std::nullopt;
    return value;
  }

 private:
  static constexpr int kMaxDepth = 64;

  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r')) ++at_;
  }
  bool consume(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  bool parse(JsonValue& value, int depth) {
    if (depth > kMaxDepth) return false;
    skip_space();
    if (at_ >= text_.size()) return false;
    const char c = text_[at_];
    if (c == '{') return object(value, depth);
    if (c == '[') return array(value, depth);
    if (c == '"') {
      value.kind = JsonValue::Kind::kString;
      return string(value.text);
    }
    if (consume("null")) return true;
    if (consume("true")) {
      value.kind = JsonValue::Kind::kBool;
      value.flag = true;
      return true;
    }
    if (consume("false")) {
      value.kind = JsonValue::Kind::kBool;
      return true;
    }
    return number(value);
  }

  bool object(JsonValue& value, int depth) {
    value.kind = JsonValue::Kind::kObject;
    ++at_;
    skip_space();
    if (consume("}")) return true;
    for (;;) {
      skip_space();
      std::string key;
      if (at_ >= text_.size() || text_[at_] != '"' || !string(key)) return false;
      skip_space();
      if (!consume(":")) return false;
      value.members.push_back(JsonMember{std::move(key), JsonValue{}});
      if (!parse(value.members.back().value, depth + 1)) return false;
      skip_space();
      if (consume("}")) return true;
      if (!consume(",")) return false;
    }
  }

  bool array(JsonValue& value, int depth) {
    value.kind = JsonValue::Kind::kArray;
    ++at_;
    skip_space();
    if (consume("]")) return true;
    for (;;) {
      value.items.emplace_back();
      if (!parse(value.items.back(), depth + 1)) return false;
      skip_space();
      if (consume("]")) return true;
      if (!consume(",")) return false;
    }
  }

  bool number(JsonValue& value) {
    const size_t begin = at_;
    if (at_ < text_.size() && text_[at_] == '-') ++at_;
    const size_t digits = at_;
    while (at_ < text_.size() && std::string_view("0123456789.eE+-").find(text_[at_]) != std::string_view::npos) ++at_;
    if (at_ == digits) return false;
    value.kind = JsonValue::Kind::kNumber;
    value.text = std::string(text_.substr(begin, at_ - begin));
    char* end = nullptr;
    std::strtod(value.text.c_str(), &end);
    return end == value.text.c_str() + value.text.size();
  }

  static void append_utf8(std::string& out, uint32_t code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  bool hex4(uint32_t& code) {
    if (at_ + 4 > text_.size()) return false;
    code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[at_++];
      code <<= 4;
      if (h >= '0' && h <= '9') code |= h - '0';
      else if (h >= 'a' && h <= 'f') code |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') code |= h - 'A' + 10;
      else return false;
    }
    return true;
  }

  bool string(std::string& out) {
    ++at_;  // the opening quote
    while (at_ < text_.size()) {
      const char c = text_[at_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= text_.size()) return false;
      const char escape = text_[at_++];
      switch (escape) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t code = 0;
          if (!hex4(code)) return false;
          if (code >= 0xD800 && code < 0xDC00) {  // a surrogate pair
            uint32_t low = 0;
            if (!consume("\\u") || !hex4(low) || low < 0xDC00 || low >= 0xE000) return false;
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          } else if (code >= 0xDC00 && code < 0xE000) {
            return false;
          }
          append_utf8(out, code);
          break;
        }
        default: return false;
      }
    }
    return false;
  }

  std::string_view text_;
  size_t at_ = 0;
};

}  // namespace

std::optional<JsonValue> parse_json(std::string_view text) { return JsonParser(text).document(); }

void write_json(JsonWriter& json, const JsonValue& value) {
  switch (value.kind) {
    case JsonValue::Kind::kNull: json.null(); break;
    case JsonValue::Kind::kBool: json.value(value.flag); break;
    case JsonValue::Kind::kNumber: json.number_text(value.text); break;
    case JsonValue::Kind::kString: json.value(value.text); break;
    case JsonValue::Kind::kArray:
      json.begin_array();
      for (const auto& item : value.items) write_json(json, item);
      json.end_array();
      break;
    case JsonValue::Kind::kObject:
      json.begin_object();
      for (const auto& [key, member] : value.members) {
        json.key(key);
        write_json(json, member);
      }
      json.end_object();
      break;
  }
}

}  // namespace onnx_rewrite
