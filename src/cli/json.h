// A small streaming JSON writer for --json and --report output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace onnx_rewrite {

class JsonWriter {
 public:
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
};

}  // namespace onnx_rewrite
