// Protobuf wire format, just enough to walk the top levels of a ModelProto without
// parsing initializer payloads (docs/design.md, "Lazy initializers").
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace onnx_rewrite::wire {

// The two levels of an ONNX model the loader splits and the writer splices back, and a tensor's
// raw bytes.
constexpr uint32_t kModelGraph = 7;        // ModelProto.graph
constexpr uint32_t kGraphNode = 1;         // GraphProto.node
constexpr uint32_t kGraphInitializer = 5;  // GraphProto.initializer
constexpr uint32_t kTensorRawData = 9;     // TensorProto.raw_data (packed weights are assembled from it)

enum class WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5 };

struct MalformedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One field as it sits in a buffer: [begin, end) holds tag, length and payload;
// for length-delimited fields [payload_begin, end) is the payload.
struct Field {
  uint32_t number = 0;
  WireType type = WireType::kVarint;
  size_t begin = 0;
  size_t payload_begin = 0;
  size_t end = 0;
  uint64_t varint = 0;  // value of a varint field

  size_t size() const { return end - begin; }
  size_t payload_size() const { return end - payload_begin; }
};

// Reads fields one after the other from data[begin, end); offsets are relative to `data`.
class FieldReader {
 public:
  FieldReader(const uint8_t* data, size_t begin, size_t end) : data_(data), pos_(begin), end_(end) {}

  // False at the end of the buffer; throws MalformedError on bytes that are not protobuf.
  bool next(Field& field) {
    if (pos_ >= end_) return false;
    field.begin = pos_;
    const uint64_t tag = read_varint();
    field.number = static_cast<uint32_t>(tag >> 3);
    if (field.number == 0 || (tag >> 3) > 0x1FFFFFFF) throw MalformedError("invalid field number");
    switch (tag & 7) {
      case 0:
        field.type = WireType::kVarint;
        field.varint = read_varint();
        field.payload_begin = pos_;
        break;
      case 1:
        field.type = WireType::kFixed64;
        field.payload_begin = pos_;
        skip(8);
        break;
      case 2: {
        field.type = WireType::kLen;
        const uint64_t length = read_varint();
        field.payload_begin = pos_;
        if (length > end_ - pos_) throw MalformedError("a field runs past the end of its message");
        pos_ += length;
        break;
      }
      case 5:
        field.type = WireType::kFixed32;
        field.payload_begin = pos_;
        skip(4);
        break;
      default: throw MalformedError("unsupported wire type " + std::to_string(tag & 7));
    }
    field.end = pos_;
    return true;
  }

 private:
  uint64_t read_varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= end_) throw MalformedError("truncated varint");
      const uint8_t byte = data_[pos_++];
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
    throw MalformedError("varint longer than 10 bytes");
  }
  void skip(size_t n) {
    if (n > end_ - pos_) throw MalformedError("truncated fixed-width field");
    pos_ += n;
  }

  const uint8_t* data_;
  size_t pos_;
  size_t end_;
};

inline void append_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

// Tag and length of a length-delimited field whose payload follows.
inline std::string len_header(uint32_t number, uint64_t payload_size) {
  std::string out;
  append_varint(out, (static_cast<uint64_t>(number) << 3) | 2);
  append_varint(out, payload_size);
  return out;
}

// Offset of the first field numbered above `number` in a serialized message: where protobuf,
// which writes known fields in field-number order, would have written field `number`.
inline size_t insertion_point(std::string_view message, uint32_t number) {
  const auto* data = reinterpret_cast<const uint8_t*>(message.data());
  FieldReader reader(data, 0, message.size());
  Field field;
  while (reader.next(field)) {
    if (field.number > number) return field.begin;
  }
  return message.size();
}

}  // namespace onnx_rewrite::wire
