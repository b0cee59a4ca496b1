// Loading keeps main-graph initializer payloads in the (memory-mapped) source file; writing
// splices them back verbatim. docs/design.md explains why: a no-op rewrite costs about a `cp`.
#include "onnx_rewrite/model_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <optional>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "onnx_rewrite/error.h"
#include "onnx_rewrite/tensor.h"
#include "graph/walk.h"
#include "io/wire.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kModelGraph = 7;        // ModelProto.graph
constexpr uint32_t kGraphInitializer = 5;  // GraphProto.initializer

// TensorProto fields that hold element values; an initializer header is the tensor without them.
bool is_tensor_payload(uint32_t field_number) {
  switch (field_number) {
    case 4:   // float_data
    case 5:   // int32_data
    case 6:   // string_data
    case 7:   // int64_data
    case 9:   // raw_data
    case 10:  // double_data
    case 11:  // uint64_data
      return true;
    default:
      return false;
  }
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

// ---- SourceBytes ---------------------------------------------------------------------------

std::shared_ptr<const SourceBytes> SourceBytes::map_file(const fs::path& path) {
  std::shared_ptr<SourceBytes> source(new SourceBytes);
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) throw InputError(path.string(), "no such file");
  if (fs::is_directory(status)) throw InputError(path.string(), "is a directory, not a model file");
  if (!fs::is_regular_file(status)) throw InputError(path.string(), "not a regular file");
  source->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (source->fd_ < 0) throw InputError(path.string(), "cannot open: " + errno_text());
  struct stat st {};
  if (::fstat(source->fd_, &st) != 0) throw InputError(path.string(), "cannot stat: " + errno_text());
  source->size_ = static_cast<size_t>(st.st_size);
  if (source->size_ == 0) throw InputError(path.string(), "empty file, not an ONNX model");
  void* mapping = ::mmap(nullptr, source->size_, PROT_READ, MAP_PRIVATE, source->fd_, 0);
  if (mapping == MAP_FAILED) throw InputError(path.string(), "cannot map: " + errno_text());
  source->data_ = static_cast<const uint8_t*>(mapping);
  return source;
}

std::shared_ptr<const SourceBytes> SourceBytes::hold(std::string bytes) {
  std::shared_ptr<SourceBytes> source(new SourceBytes);
  source->buffer_ = std::move(bytes);
  source->data_ = reinterpret_cast<const uint8_t*>(source->buffer_.data());
  source->size_ = source->buffer_.size();
  return source;
}

SourceBytes::~SourceBytes() {
  if (fd_ >= 0) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    ::close(fd_);
  }
}

// ---- Model ---------------------------------------------------------------------------------

const FileRange* Model::deferred_field(const onnx::TensorProto& header) const {
  auto it = deferred_.find(&header);
  return it == deferred_.end() ? nullptr : &it->second;
}

onnx::TensorProto Model::tensor_with_data(const onnx::TensorProto& tensor) const {
  const FileRange* field = deferred_field(tensor);
  if (!field) return tensor;
  wire::FieldReader reader(source->data(), field->begin, field->end);
  wire::Field parsed;
  reader.next(parsed);
  onnx::TensorProto full;
  full.ParseFromArray(source->data() + parsed.payload_begin, static_cast<int>(parsed.payload_size()));
  return full;
}

// ---- Loading -------------------------------------------------------------------------------

namespace {

// Splits the graph field: initializers become headers whose payload stays in `source`,
// everything else is collected for a regular parse.
void scan_graph(const SourceBytes& source, const wire::Field& graph_field, std::string& graph_rest,
                std::vector<std::pair<std::string, FileRange>>& initializers) {
  wire::FieldReader reader(source.data(), graph_field.payload_begin, graph_field.end);
  wire::Field field;
  while (reader.next(field)) {
    const char* bytes = reinterpret_cast<const char*>(source.data());
    if (field.number != kGraphInitializer || field.type != wire::WireType::kLen) {
      graph_rest.append(bytes + field.begin, field.size());
      continue;
    }
    std::string header;
    wire::FieldReader tensor_reader(source.data(), field.payload_begin, field.end);
    wire::Field tensor_field;
    while (tensor_reader.next(tensor_field)) {
      if (!is_tensor_payload(tensor_field.number)) header.append(bytes + tensor_field.begin, tensor_field.size());
    }
    initializers.emplace_back(std::move(header), FileRange{field.begin, field.end});
  }
}

Model parse_source(std::shared_ptr<const SourceBytes> source, const std::string& name) {
  Model model;
  model.source = source;
  std::string model_rest;
  std::string graph_rest;
  std::vector<std::pair<std::string, FileRange>> initializers;
  bool has_graph = false;
  try {
    wire::FieldReader reader(source->data(), 0, source->size());
    wire::Field field;
    while (reader.next(field)) {
      if (field.number == kModelGraph && field.type == wire::WireType::kLen) {
        has_graph = true;
        scan_graph(*source, field, graph_rest, initializers);
      } else {
        model_rest.append(reinterpret_cast<const char*>(source->data()) + field.begin, field.size());
      }
    }
  } catch (const wire::MalformedError& e) {
    throw InputError(name, std::string("not a valid ONNX model (corrupt protobuf: ") + e.what() + ")");
  }
  auto* graph = model.proto.mutable_graph();
  if (!model.proto.ParsePartialFromString(model_rest) || !graph->ParsePartialFromString(graph_rest)) {
    throw InputError(name, "not a valid ONNX model (protobuf parse failed)");
  }
  if (!has_graph) throw InputError(name, "not an ONNX model: it has no graph");
  if (!model.proto.has_ir_version() || model.proto.ir_version() <= 0) {
    throw InputError(name, "not an ONNX model: it has no ir_version");
  }
  graph->mutable_initializer()->Reserve(static_cast<int>(initializers.size()));
  for (auto& [header, range] : initializers) {
    auto* tensor = graph->add_initializer();
    if (!tensor->ParsePartialFromString(header)) {
      throw InputError(name, "not a valid ONNX model (an initializer does not parse)");
    }
    model.defer(*tensor, range);
  }
  return model;
}

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

// Bits per element of the types whose size is fixed; 0 for strings and types we don't know.
int element_bits(int32_t data_type) {
  switch (data_type) {
    case onnx::TensorProto::FLOAT: case onnx::TensorProto::INT32: case onnx::TensorProto::UINT32: return 32;
    case onnx::TensorProto::DOUBLE: case onnx::TensorProto::INT64: case onnx::TensorProto::UINT64:
    case onnx::TensorProto::COMPLEX64: return 64;
    case onnx::TensorProto::COMPLEX128: return 128;
    case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16: case onnx::TensorProto::INT16:
    case onnx::TensorProto::UINT16: return 16;
    case onnx::TensorProto::INT8: case onnx::TensorProto::UINT8: case onnx::TensorProto::BOOL:
    case 17: case 18: case 19: case 20:  // the float8 types
    case 24: return 8;                    // float8e8m0
    case 21: case 22: case 23: return 4;  // uint4, int4, float4e2m1: two per byte
    case 25: case 26: return 2;           // uint2, int2: four per byte
    default: return 0;
  }
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

// Refuses external data that could read outside the model's directory, is not there, or does
// not hold exactly the tensor its header describes. Reads no weight bytes.
void check_external_data(Model& model, const std::string& name) {
  std::error_code ec;
  const fs::path base = fs::absolute(model.directory(), ec);
  const fs::path directory = fs::weakly_canonical(base, ec);
  for_each_tensor(std::as_const(model.proto), [&](const onnx::TensorProto& tensor, const Place& place) {
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
    const fs::path inside = resolved.lexically_relative(directory);
    if (inside.empty() || escapes_directory(inside.string())) {
      throw InputError(name, what + " location '" + shown + "' leads outside the model's directory through a symbolic link");
    }
    const fs::path file = base / location;
    if (!fs::is_regular_file(file, ec)) throw InputError(name, what + " file '" + shown + "' is missing");
    const std::optional<int64_t> needed = data_bytes(tensor, name, what);
    if (needed && length && *length != *needed) {
      throw InputError(name, what + " length " + std::to_string(*length) + " does not match the tensor: " + shape_text(tensor) +
                                 " takes " + std::to_string(*needed) + " bytes");
    }
    const auto size = static_cast<int64_t>(fs::file_size(file, ec));
    // Without a length, the tensor's own size is read from the offset on.
    const std::optional<int64_t> extent = length ? length : needed;
    if (offset > size || (extent && *extent > size - offset)) {
      throw InputError(name, what + " range [" + std::to_string(offset) + ", +" + (extent ? std::to_string(*extent) : "end") +
                                 ") lies outside '" + shown + "' (" + std::to_string(size) + " bytes)");
    }
  });
}

}  // namespace

Model load_model(const fs::path& path) {
  Model model = parse_source(SourceBytes::map_file(path), path.string());
  model.path = path;
  check_external_data(model, path.string());
  return model;
}

Model reload_model(const Model& model) {
  Model fresh = parse_source(model.source, model.path.string());
  fresh.path = model.path;
  return fresh;
}

Model parse_model(const std::string& bytes, const std::string& name) {
  if (bytes.empty()) throw InputError(name, "empty, not an ONNX model");
  Model model = parse_source(SourceBytes::hold(bytes), name);
  model.path = name;
  for_each_tensor(std::as_const(model.proto), [&](const onnx::TensorProto& tensor, const Place&) {
    if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
      throw InputError(name, "tensor '" + printable(tensor.name()) + "' has external data, which needs a file on disk");
    }
  });
  return model;
}

// ---- Serializing ---------------------------------------------------------------------------

namespace {

// The output as pieces: bytes of our own, or a range of the source to copy verbatim.
struct Piece {
  std::string bytes;
  FileRange source_range;
  bool from_source = false;

  static Piece own(std::string bytes) { return Piece{std::move(bytes), {}, false}; }
  static Piece copy_of(FileRange range) { return Piece{{}, range, true}; }
  size_t size() const { return from_source ? source_range.size() : bytes.size(); }
};

void split_at(std::vector<Piece>& pieces, std::string serialized, uint32_t field_number,
              std::vector<Piece>& inserted) {
  const size_t at = wire::insertion_point(serialized, field_number);
  pieces.push_back(Piece::own(serialized.substr(0, at)));
  for (auto& piece : inserted) pieces.push_back(std::move(piece));
  pieces.push_back(Piece::own(serialized.substr(at)));
}

// Protobuf writes fields in field-number order, so serializing the model without its graph and
// the graph without its initializers, then inserting the missing pieces where their field number
// belongs, reproduces what a full serialization would write, without copying weights.
std::vector<Piece> serialize_pieces(const Model& model) {
  auto& proto = const_cast<onnx::ModelProto&>(model.proto);  // restored before returning
  auto& graph = *proto.mutable_graph();

  std::vector<Piece> initializers;
  for (const auto& tensor : graph.initializer()) {
    if (const FileRange* range = model.deferred_field(tensor)) {
      initializers.push_back(Piece::copy_of(*range));
    } else {
      std::string bytes = tensor.SerializeAsString();
      initializers.push_back(Piece::own(wire::len_header(kGraphInitializer, bytes.size()) + bytes));
    }
  }
  google::protobuf::RepeatedPtrField<onnx::TensorProto> held;
  held.Swap(graph.mutable_initializer());
  std::string graph_rest = graph.SerializeAsString();
  held.Swap(graph.mutable_initializer());

  std::vector<Piece> graph_pieces;
  split_at(graph_pieces, std::move(graph_rest), kGraphInitializer, initializers);
  size_t graph_size = 0;
  for (const auto& piece : graph_pieces) graph_size += piece.size();
  graph_pieces.insert(graph_pieces.begin(), Piece::own(wire::len_header(kModelGraph, graph_size)));

  onnx::GraphProto* released = proto.release_graph();
  std::string model_rest = proto.SerializeAsString();
  proto.set_allocated_graph(released);

  std::vector<Piece> pieces;
  split_at(pieces, std::move(model_rest), kModelGraph, graph_pieces);
  return pieces;
}

// ---- Atomic output files -------------------------------------------------------------------

// Temporary files being written, removed if the process is interrupted.
std::array<std::atomic<const char*>, 64> g_pending_files{};

extern "C" void remove_pending_files(int signal_number) {
  for (auto& slot : g_pending_files) {
    if (const char* path = slot.load()) ::unlink(path);
  }
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

void install_interrupt_cleanup() {
  static const bool installed = [] {
    std::signal(SIGINT, remove_pending_files);
    std::signal(SIGTERM, remove_pending_files);
    std::signal(SIGHUP, remove_pending_files);
    return true;
  }();
  (void)installed;
}

mode_t default_file_mode() {
  static const mode_t mode = [] {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    return static_cast<mode_t>(0666 & ~mask);
  }();
  return mode;
}

// A temporary file next to `target` that becomes `target` on commit() and disappears otherwise.
class AtomicFile {
 public:
  explicit AtomicFile(fs::path target) : target_(std::move(target)) {
    install_interrupt_cleanup();
    const fs::path directory = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
    std::string temp_name = ".";  // hidden, and named after its target for anyone who finds one
    temp_name += target_.filename().string();
    temp_name += ".onnx-rewrite-XXXXXX";
    temp_ = (directory / temp_name).string();
    fd_ = ::mkstemp(temp_.data());
    if (fd_ < 0) throw InputError(target_.string(), "cannot create a file there: " + errno_text());
    for (auto& slot : g_pending_files) {
      const char* expected = nullptr;
      if (slot.compare_exchange_strong(expected, temp_.c_str())) {
        slot_ = &slot;
        break;
      }
    }
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
    if (slot_) slot_->store(nullptr);
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const char* data, size_t size) {
    while (size > 0) {
      const ssize_t written = ::write(fd_, data, size);
      if (written < 0) {
        if (errno == EINTR) continue;
        fail("write failed");
      }
      data += written;
      size -= static_cast<size_t>(written);
    }
  }

  // Copies bytes of another file in the kernel: no page of it enters this process.
  void copy_from(int source_fd, const uint8_t* source_data, FileRange range) {
    if (source_fd < 0) return write(reinterpret_cast<const char*>(source_data) + range.begin, range.size());
    loff_t offset = static_cast<loff_t>(range.begin);
    size_t left = range.size();
    while (left > 0) {
      const ssize_t copied = ::copy_file_range(source_fd, &offset, fd_, nullptr, left, 0);
      if (copied > 0) {
        left -= static_cast<size_t>(copied);
        continue;
      }
      if (copied < 0 && errno == EINTR) continue;
      if (copied == 0 || errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) break;
      fail("copy failed");
    }
    std::vector<char> buffer(std::min<size_t>(left, 1 << 20));
    while (left > 0) {
      const ssize_t got = ::pread(source_fd, buffer.data(), std::min(left, buffer.size()), offset);
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        fail("read of the source failed");
      }
      write(buffer.data(), static_cast<size_t>(got));
      offset += got;
      left -= static_cast<size_t>(got);
    }
  }

  void commit(mode_t mode) {
    if (::fchmod(fd_, mode) != 0) fail("cannot set permissions");
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail("close failed");
    }
    fd_ = -1;
    if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("cannot rename the temporary file into place");
    committed_ = true;
  }

 private:
  [[noreturn]] void fail(const std::string& what) { throw InputError(target_.string(), what + ": " + errno_text()); }

  fs::path target_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
  std::atomic<const char*>* slot_ = nullptr;
};

mode_t mode_of_existing_or_default(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return st.st_mode & 07777;
  return default_file_mode();
}

void copy_file_atomically(const fs::path& from, const fs::path& to) {
  const int fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(from.string(), "cannot open external data: " + errno_text());
  struct stat st {};
  ::fstat(fd, &st);
  try {
    AtomicFile out(to);
    out.copy_from(fd, nullptr, FileRange{0, static_cast<size_t>(st.st_size)});
    out.commit(st.st_mode & 07777);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

bool same_contents(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::file_size(a, ec) != fs::file_size(b, ec) || ec) return false;
  std::ifstream first(a, std::ios::binary), second(b, std::ios::binary);
  std::vector<char> left(1 << 20), right(1 << 20);
  while (first && second) {
    first.read(left.data(), static_cast<std::streamsize>(left.size()));
    second.read(right.data(), static_cast<std::streamsize>(right.size()));
    if (first.gcount() != second.gcount() || !std::equal(left.begin(), left.begin() + first.gcount(), right.begin())) return false;
  }
  return true;
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
}

// External-data files the model refers to, relative to its directory.
std::set<std::string> external_locations(const Model& model) {
  std::set<std::string> locations;
  for_each_tensor(model.proto, [&](const onnx::TensorProto& tensor, const Place&) {
    if (tensor.data_location() != onnx::TensorProto::EXTERNAL) return;
    for (const auto& entry : tensor.external_data()) {
      if (entry.key() == "location") locations.insert(entry.value());
    }
  });
  return locations;
}

}  // namespace

std::string serialize_model(const Model& model) {
  if (!model.changed) return std::string(reinterpret_cast<const char*>(model.source->data()), model.source->size());
  std::string out;
  for (const auto& piece : serialize_pieces(model)) {
    if (piece.from_source) {
      out.append(reinterpret_cast<const char*>(model.source->data()) + piece.source_range.begin, piece.source_range.size());
    } else {
      out += piece.bytes;
    }
  }
  return out;
}

void write_file_atomically(const fs::path& path, const std::string& bytes) {
  AtomicFile out(path);
  out.write(bytes.data(), bytes.size());
  out.commit(mode_of_existing_or_default(path));
}

void write_model(const Model& model, const fs::path& path, const WriteOptions& options) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UsageError(path.string() + ": the output is a directory");
  const fs::path directory = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  if (!fs::is_directory(directory, ec)) {
    throw UsageError(path.string() + ": output directory '" + directory.string() + "' does not exist");
  }
  if (!options.allow_overwrite_input && !model.path.empty() && same_file(model.path, path)) {
    throw UsageError(path.string() + ": refusing to overwrite the input (use --in-place)");
  }

  // Weights first, so that the model never appears without its data. A different file already
  // there (another model's weights of the same name) is never replaced; models written at the
  // same time (batch) take turns, so that the second one sees the first one's file.
  static std::mutex copying_external_data;
  std::lock_guard lock(copying_external_data);
  if (!same_file(model.directory(), directory)) {
    for (const auto& location : external_locations(model)) {
      const fs::path from = model.directory() / location;
      const fs::path to = directory / location;
      if (same_file(from, to)) continue;
      if (fs::exists(to, ec)) {
        if (same_contents(from, to)) continue;
        throw InputError(path.string(), "external data '" + printable(location) +
                                            "' would replace a different file already in " + directory.string());
      }
      fs::create_directories(to.parent_path(), ec);
      copy_file_atomically(from, to);
    }
  }

  // Writing through a symbolic link (e.g. --in-place on a linked model) replaces what it points to.
  const fs::path target = fs::is_symlink(path, ec) ? fs::canonical(path, ec) : path;
  AtomicFile out(target);
  const SourceBytes& source = *model.source;
  if (!model.changed) {
    out.copy_from(source.fd(), source.data(), FileRange{0, source.size()});
  } else {
    for (const auto& piece : serialize_pieces(model)) {
      if (piece.from_source) out.copy_from(source.fd(), source.data(), piece.source_range);
      else out.write(piece.bytes.data(), piece.bytes.size());
    }
  }
  out.commit(mode_of_existing_or_default(target));
}

}  // namespace onnx_rewrite
