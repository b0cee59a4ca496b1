// Saving: the splice serialization (the model and graph serialized without the untouched
// initializers, whose fields are copied back from the source bytes where protobuf would have
// written them), and the external-data files copied next to a model written elsewhere.
#include "onnx_rewrite/model_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "onnx_rewrite/error.h"
#include "graph/walk.h"
#include "io/atomic_file.h"
#include "io/os_error.h"
#include "io/wire.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

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
      initializers.push_back(Piece::own(wire::len_header(wire::kGraphInitializer, bytes.size()) + bytes));
    }
  }
  google::protobuf::RepeatedPtrField<onnx::TensorProto> held;
  held.Swap(graph.mutable_initializer());
  std::string graph_rest = graph.SerializeAsString();
  held.Swap(graph.mutable_initializer());

  std::vector<Piece> graph_pieces;
  split_at(graph_pieces, std::move(graph_rest), wire::kGraphInitializer, initializers);
  size_t graph_size = 0;
  for (const auto& piece : graph_pieces) graph_size += piece.size();
  graph_pieces.insert(graph_pieces.begin(), Piece::own(wire::len_header(wire::kModelGraph, graph_size)));

  onnx::GraphProto* released = proto.release_graph();
  std::string model_rest = proto.SerializeAsString();
  proto.set_allocated_graph(released);

  std::vector<Piece> pieces;
  split_at(pieces, std::move(model_rest), wire::kModelGraph, graph_pieces);
  return pieces;
}

void copy_file_atomically(const fs::path& from, const fs::path& to) {
  const int fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw os_error(from.string(), "cannot open external data");
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

// Copies the model's external-data files into `directory`, where the model at `output` will
// refer to them. A different file already there (another model's weights of the same name) is
// never replaced.
void copy_external_data(const Model& model, const fs::path& output, const fs::path& directory) {
  if (same_file(model.directory(), directory)) return;
  std::error_code ec;
  for (const auto& location : external_locations(model)) {
    const fs::path from = model.directory() / location;
    const fs::path to = directory / location;
    if (same_file(from, to)) continue;
    if (fs::exists(to, ec)) {
      if (same_contents(from, to)) continue;
      throw InputError(output.string(), "external data '" + printable(location) +
                                            "' would replace a different file already in " + directory.string());
    }
    fs::create_directories(to.parent_path(), ec);
    copy_file_atomically(from, to);
  }
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

void write_model(const Model& model, const fs::path& path, const WriteOptions& options) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UsageError(path.string() + ": the output is a directory");
  const fs::path directory = directory_of(path);
  if (!fs::is_directory(directory, ec)) {
    throw UsageError(path.string() + ": output directory '" + directory.string() + "' does not exist");
  }
  if (!options.allow_overwrite_input && !model.path.empty() && same_file(model.path, path)) {
    throw UsageError(path.string() + ": refusing to overwrite the input (use --in-place)");
  }

  // Weights first, so that the model never appears without its data. Models written at the
  // same time (batch) take turns, so that the second one sees the first one's file.
  static std::mutex copying_external_data;
  std::lock_guard lock(copying_external_data);
  copy_external_data(model, path, directory);

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
  out.commit();
}

}  // namespace onnx_rewrite
