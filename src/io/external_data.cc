// External-data checks at load time: a location must name a file inside the model's directory
// (not absolute, no `..` or symbolic link out of it, no NUL byte), and the offset and length
// must describe the tensor's bytes within that file. Only names and sizes are looked at.
#include "io/external_data.h"

#include <algorithm>
#include <charconv>
#include <optional>

#include "onnx_rewrite/error.h"
#include "onnx_rewrite/tensor.h"
#include "graph/walk.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

bool escapes_directory(const fs::path& location) {
  if (location.empty() || location.is_absolute() || location.has_root_name()) return true;
  int depth = 0;
  for (const auto& part : location.lexically_normal()) {
    if (part == "..") --depth;
    else if (part != "." && !part.empty()) ++depth;
    if (depth < 0) return true;
  }
  return false;
}

// A non-negative decimal integer, exactly; nullopt for anything else.
std::optional<int64_t> parse_size(const std::string& text) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

std::string shape_text(const onnx::TensorProto& tensor) {
  std::string dims;
  for (const int64_t dim : tensor.dims()) dims += (dims.empty() ? "" : ",") + std::to_string(dim);
  return data_type_name(tensor.data_type()) + "[" + dims + "]";
}

// The bytes a tensor's data takes in a file (sub-byte types packed, the last byte padded), or
// why no file can hold it; nullopt when its element type has no fixed size.
std::optional<int64_t> data_bytes(const onnx::TensorProto& tensor, const std::string& name, const std::string& what) {
  const int bits = element_bits(tensor.data_type());
  if (bits == 0) return std::nullopt;
  int64_t total_bits = bits;
  for (const int64_t dim : tensor.dims()) {
    if (dim < 0) throw InputError(name, what + ": the tensor " + shape_text(tensor) + " has a negative dimension");
    if (__builtin_mul_overflow(total_bits, dim, &total_bits)) {
      throw InputError(name, what + ": the tensor " + shape_text(tensor) + " is larger than any file");
    }
  }
  return total_bits / 8 + (total_bits % 8 != 0);
}

}  // namespace

std::vector<std::string> check_external_data(const Model& model, const std::string& name, bool allow_missing) {
  std::error_code ec;
  const fs::path base = fs::absolute(model.directory(), ec);
  const fs::path directory = fs::weakly_canonical(base, ec);
  // A model reached through a symbolic link (a Hugging Face snapshot: snap/model.onnx ->
  // ../blobs/HASH, snap/model.onnx_data -> ../blobs/HASH2) may have data files that are links
  // into the directory its own link leads to: nothing there is less trusted than the model.
  fs::path real_directory = directory;
  if (fs::is_symlink(model.path, ec)) real_directory = fs::weakly_canonical(fs::absolute(model.path, ec), ec).parent_path();
  auto inside = [](const fs::path& resolved, const fs::path& root) {
    const fs::path relative = resolved.lexically_relative(root);
    return !relative.empty() && !escapes_directory(relative.string());
  };
  std::vector<std::string> missing;
  for_each_tensor(model.proto, [&](const onnx::TensorProto& tensor, const Place& place) {
    if (tensor.data_location() != onnx::TensorProto::EXTERNAL) return;
    const std::string what = "tensor '" + printable(tensor.name()) + "' (" + printable(place.text()) + "): external data";
    std::string location;
    int64_t offset = 0;
    std::optional<int64_t> length;
    for (const auto& entry : tensor.external_data()) {
      if (entry.key() == "location") {
        location = entry.value();
      } else if (entry.key() == "offset" || entry.key() == "length") {
        auto value = parse_size(entry.value());
        if (!value) throw InputError(name, what + " " + entry.key() + " '" + printable(entry.value()) + "' is not a byte count");
        if (entry.key() == "offset") offset = *value;
        else length = *value;
      }
    }
    if (location.empty()) throw InputError(name, what + " has no location");
    const std::string shown = printable(location);
    // The C library would open the name up to its first NUL: another file than the one named.
    if (location.find('\0') != std::string::npos) {
      throw InputError(name, what + " location '" + shown + "' holds a NUL byte, which no file name can");
    }
    if (escapes_directory(location)) {
      throw InputError(name, what + " location '" + shown + "' is absolute or escapes the model's directory");
    }
    // Once symbolic links are resolved, the file must still lie inside the directory.
    const fs::path resolved = fs::weakly_canonical(base / location, ec);
    if (ec) throw InputError(name, what + " location '" + shown + "' cannot be resolved: " + ec.message());
    if (!inside(resolved, directory) && !inside(resolved, real_directory)) {
      throw InputError(name, what + " location '" + shown + "' leads outside the model's directory through a symbolic link");
    }
    const std::optional<int64_t> needed = data_bytes(tensor, name, what);
    if (needed && length && *length != *needed) {
      throw InputError(name, what + " length " + std::to_string(*length) + " does not match the tensor: " + shape_text(tensor) + " takes " +
                                 std::to_string(*needed) + " bytes");
    }
    const fs::path file = base / location;
    if (!fs::is_regular_file(file, ec)) {
      if (!allow_missing) throw InputError(name, what + " file '" + shown + "' is missing");
      if (std::find(missing.begin(), missing.end(), location) == missing.end()) missing.push_back(location);
      return;
    }
    const auto size = static_cast<int64_t>(fs::file_size(file, ec));
    // Without a length, the tensor's own size is read from the offset on.
    const std::optional<int64_t> extent = length ? length : needed;
    if (offset > size || (extent && *extent > size - offset)) {
      throw InputError(name, what + " range [" + std::to_string(offset) + ", +" + (extent ? std::to_string(*extent) : "end") +
                                 ") lies outside '" + shown + "' (" + std::to_string(size) + " bytes)");
    }
  });
  return missing;
}

void refuse_external_data(const Model& model, const std::string& name) {
  for_each_tensor(model.proto, [&](const onnx::TensorProto& tensor, const Place&) {
    if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
      throw InputError(name, "tensor '" + printable(tensor.name()) + "' has external data, which needs a file on disk");
    }
  });
}

}  // namespace onnx_rewrite
