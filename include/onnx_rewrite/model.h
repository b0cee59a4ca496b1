// The in-memory model: a ModelProto whose main-graph initializers hold only their header
// (name, type, dims, external-data entries); their payload stays in the source file and is
// written back verbatim unless a rewrite replaces the tensor. Rules that need a constant's
// values ask for them (`tensor_with_data`), which decodes just that tensor; initializers are
// deleted through `remove_initializers`, which keeps that bookkeeping right.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <onnx/onnx_pb.h>

namespace onnx_rewrite {

// Bytes [begin, end) of the source file.
struct FileRange {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
  friend bool operator==(const FileRange&, const FileRange&) = default;
};

// The bytes a model was loaded from: a read-only memory mapping of its file, or a buffer.
class SourceBytes {
 public:
  static std::shared_ptr<const SourceBytes> map_file(const std::filesystem::path& path);  // throws InputError
  static std::shared_ptr<const SourceBytes> hold(std::string bytes);
  ~SourceBytes();
  SourceBytes(const SourceBytes&) = delete;
  SourceBytes& operator=(const SourceBytes&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }  // -1 for a buffer
  // A mapped file's pages read so far leave the process's memory (the page cache keeps them, and
  // the next read maps them again): parsed, the graph's bytes are not read again. No-op for a buffer.
  void drop_pages() const;
  // The bytes of `ranges`, one after the other; a mapped file's are read, not mapped in.
  std::string read(const std::vector<FileRange>& ranges) const;

 private:
  SourceBytes() = default;
  std::string buffer_;
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class Model {
 public:
  Model() = default;
  // Moving keeps the headers, and so what is known of their payloads. A copy would have new
  // headers and no payloads, so there is none (reload_model makes a fresh model).
  Model(Model&&) = default;
  Model& operator=(Model&&) = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  onnx::ModelProto proto;

  // Where the model came from; external-data locations are relative to its directory.
  std::filesystem::path path;
  std::shared_ptr<const SourceBytes> source;

  // Set by the rewriter as soon as anything changes; an unchanged model is written back as
  // a copy of its source file.
  bool changed = false;

  // "." for a bare file name, so that it always names a directory. External-data locations are
  // relative to it: the directory of the path the model was reached by, a symbolic link's own
  // directory rather than its target's, as ONNX Runtime and onnx read them.
  std::filesystem::path directory() const { return path.has_parent_path() ? path.parent_path() : "."; }

  // External-data files the model names that are not there (locations as written), when the
  // loader was asked to allow that (inspect, check); such a model can't be written.
  std::vector<std::string> missing_external_data;

  // The serialized initializer field (tag, length, TensorProto) a header stands for, if its
  // payload was left in the source file.
  const FileRange* deferred_field(const onnx::TensorProto& header) const;
  // The full tensor, payload included (decoded from the source file when deferred or assembled).
  onnx::TensorProto tensor_with_data(const onnx::TensorProto& tensor) const;
  // Whether a header's payload is kept out of it: deferred or assembled.
  bool payload_elsewhere(const onnx::TensorProto& header) const;
  // The bytes the tensor takes serialized, payload included wherever it lies (a deferred one:
  // its initializer field in the source).
  size_t tensor_size(const onnx::TensorProto& tensor) const;

  // Where a deferred tensor's raw_data lies in the source, if it is stored that way.
  std::optional<FileRange> raw_data_in_source(const onnx::TensorProto& header) const;
  // A tensor made of other tensors' raw bytes without decoding them (weights packed side by
  // side): `header`, an initializer of this model with type and dims but no payload, has as
  // raw_data the source's bytes in `raw_data`, in order, copied when the model is written.
  void assemble(const onnx::TensorProto& header, std::vector<FileRange> raw_data);
  const std::vector<FileRange>* assembled_raw_data(const onnx::TensorProto& header) const;

  // Deletes the initializers of `graph` (the main graph or any subgraph) that `doomed` picks,
  // keeping the order of the others. The only way to delete one: a header's payload is found by
  // its address, which a tensor created later may reuse.
  void remove_initializers(onnx::GraphProto& graph, const std::function<bool(const onnx::TensorProto&)>& doomed);

 private:
  // The loader (src/io/load.cc) records where each header's payload lies.
  friend Model parse_source(std::shared_ptr<const SourceBytes> source, const std::string& name);
  void defer(const onnx::TensorProto& header, FileRange field) { deferred_[&header] = field; }

  std::unordered_map<const onnx::TensorProto*, FileRange> deferred_;
  std::unordered_map<const onnx::TensorProto*, std::vector<FileRange>> assembled_;
};

}  // namespace onnx_rewrite
