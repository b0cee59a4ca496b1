// A small streaming JSON writer for --json and --report output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace onnx_rewrite {

class JsonWriter {
 public:
  // compact: the whole document on one line (JSON Lines); otherwise indented.
  explicit JsonWriter(bool compact = false) : compact_(compact) {}
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);
  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(int64_t number);
  JsonWriter& value(int number) { return value(static_cast<int64_t>(number)); }
  JsonWriter& value(uint64_t number);
  JsonWriter& value(double number);
  JsonWriter& value(bool flag);
  JsonWriter& null();
  JsonWriter& number_text(std::string_view literal);  // a number as read by parse_json
  JsonWriter& strings(const std::vector<std::string>& items);

  // The document, indented, with a trailing newline.
  std::string str() const { return out_ + "\n"; }

 private:
  JsonWriter& close(char bracket);
  void separate();
  void newline();

  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
  bool compact_ = false;
};

// A parsed JSON document, for reading back our own reports (batch --resume, merge-reports).
// Objects keep their key order; numbers keep their text, so writing one back changes nothing.
struct JsonMember;
struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool flag = false;
  std::string text;  // a string's value, a number's literal
  std::vector<JsonValue> items;
  // Not std::pair: a pair of the incomplete JsonValue does not compile with every standard library.
  std::vector<JsonMember> members;

  const JsonValue* find(std::string_view key) const;
  std::string string_or(std::string_view key, std::string fallback) const;
  double number_or(std::string_view key, double fallback) const;
};
struct JsonMember {
  std::string key;
  JsonValue value;
};

// nullopt unless `text` is exactly one JSON value (surrounding white space allowed).
std::optional<JsonValue> parse_json(std::string_view text);
void write_json(JsonWriter& json, const JsonValue& value);

}  // namespace onnx_rewrite
