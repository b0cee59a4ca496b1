// .npy: the magic "\x93NUMPY", a version, the header's length (2 bytes in version 1, 4 from 2),
// a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
// spaces, then the array's bytes.
#include "runtime/npy.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "onnx_rewrite/error.h"

namespace onnx_rewrite {

namespace {

using onnx::TensorProto;

struct Dtype {
  const char* code;  // descr without its byte order
  int32_t type;
  size_t size;
};

constexpr Dtype kDtypes[] = {
    {"b1", TensorProto::BOOL, 1},   {"i1", TensorProto::INT8, 1},    {"u1", TensorProto::UINT8, 1},  {"i2", TensorProto::INT16, 2},
    {"u2", TensorProto::UINT16, 2}, {"i4", TensorProto::INT32, 4},   {"u4", TensorProto::UINT32, 4}, {"i8", TensorProto::INT64, 8},
    {"u8", TensorProto::UINT64, 8}, {"f2", TensorProto::FLOAT16, 2}, {"f4", TensorProto::FLOAT, 4},  {"f8", TensorProto::DOUBLE, 8},
};

// The value of `key` in the header dict, as written: "'<f4'", "False", "(2, 3)".
std::string header_value(const std::string& header, const std::string& key) {
  const auto at = header.find("'" + key + "'");
  if (at == std::string::npos) return {};
  auto begin = header.find(':', at);
  if (begin == std::string::npos) return {};
  begin = header.find_first_not_of(' ', begin + 1);
  if (begin == std::string::npos) return {};
  const char open = header[begin];
  const auto end = open == '('    ? header.find(')', begin) + 1
                   : open == '\'' ? header.find('\'', begin + 1) + 1
                                  : header.find_first_of(",}", begin);
  if (end == std::string::npos || end == 0 || end <= begin) return {};
  return header.substr(begin, end - begin);
}

}  // namespace

TensorProto read_npy(const std::filesystem::path& path) {
  const auto fail = [&](const std::string& why) -> InputError {
    return InputError(path.string(), "not a .npy file onnx-rewrite reads: " + why);
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string(), std::string("cannot read: ") + std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) throw fail("no \\x93NUMPY magic");
  const int version = static_cast<unsigned char>(bytes[6]);
  if (version < 1 || version > 3) throw fail("format version " + std::to_string(version));
  const size_t length_size = version == 1 ? 2 : 4;
  size_t header_size = 0;
  for (size_t i = 0; i < length_size; ++i) header_size |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  const size_t data_at = 8 + length_size + header_size;
  if (data_at > bytes.size()) throw fail("the header runs past the end of the file");
  const std::string header = bytes.substr(8 + length_size, header_size);

  const std::string descr = header_value(header, "descr");
  if (descr.size() < 4 || descr.front() != '\'' || descr.back() != '\'') throw fail("no dtype ('descr')");
  const char order = descr[1];
  const std::string code = descr.substr(2, descr.size() - 3);
  const Dtype* dtype = nullptr;
  for (const auto& candidate : kDtypes) {
    if (code == candidate.code) dtype = &candidate;
  }
  if (!dtype) throw fail("dtype " + descr + " (numeric and bool dtypes only)");
  if (order == '>' && dtype->size > 1) throw fail("big-endian dtype " + descr);
  if (order != '<' && order != '|' && order != '=' && order != '>') throw fail("dtype " + descr);
  if (header_value(header, "fortran_order") != "False") throw fail("Fortran order (save it in C order: numpy.ascontiguousarray)");

  const std::string shape = header_value(header, "shape");
  if (shape.size() < 2 || shape.front() != '(') throw fail("no shape");
  TensorProto tensor;
  tensor.set_data_type(dtype->type);
  size_t count = 1;
  for (size_t at = 1; at < shape.size() - 1;) {
    at = shape.find_first_not_of(" ,", at);
    if (at == std::string::npos || at >= shape.size() - 1) break;
    size_t used = 0;
    long long dim = -1;
    try {
      dim = std::stoll(shape.substr(at), &used);
    } catch (...) {
    }
    if (dim < 0 || used == 0) throw fail("shape " + shape);
    tensor.add_dims(dim);
    count *= static_cast<size_t>(dim);
    at += used;
  }
  if (bytes.size() - data_at != count * dtype->size) {
    throw fail("shape " + shape + " of dtype " + descr + " needs " + std::to_string(count * dtype->size) + " bytes of data, the file has " +
               std::to_string(bytes.size() - data_at));
  }
  tensor.set_raw_data(bytes.substr(data_at));
  return tensor;
}

}  // namespace onnx_rewrite
