// Saving: the splice serialization (the model and graph serialized without the untouched
// initializers, whose fields are copied back from the source bytes where protobuf would have
// written them), and the external-data files copied next to a model written elsewhere.
#include "onnx_rewrite/model_io.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "onnx_rewrite/error.h"
#include "graph/two_threads.h"
#include "io/atomic_file.h"
#include "io/file_identity.h"
#include "io/os_error.h"
#include "io/wire.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

// Serialized nodes go out in chunks of this size; for a big graph, on a second thread.
constexpr size_t kChunk = size_t{4} << 20;

// The output as pieces: bytes of our own, a range of the source to copy verbatim, or small
// ranges of the source gathered into one write (an assembled tensor's rows: a copy each would
// cost a system call per row).
struct Piece {
  std::string bytes;
  FileRange source_range;
  bool from_source = false;
  std::vector<FileRange> gathered;

  static Piece own(std::string bytes) { return Piece{std::move(bytes), {}, false, {}}; }
  static Piece copy_of(FileRange range) { return Piece{{}, range, true, {}}; }
  static Piece gather(std::vector<FileRange> ranges) { return Piece{{}, {}, false, std::move(ranges)}; }
};

// A copy of `range` after `pieces`: ranges that lie side by side in the source go out in one
// copy, as most initializers do (a copy each was a third of the time writing a small model took).
void add_copy(std::vector<Piece>& pieces, FileRange range) {
  Piece* last = pieces.empty() ? nullptr : &pieces.back();
  if (last && last->from_source && last->source_range.end == range.begin) last->source_range.end = range.end;
  else pieces.push_back(Piece::copy_of(range));
}

// An assembled tensor's raw bytes as pieces: ranges of 64 KiB or more copied as they are, smaller
// ones gathered a MiB at a time.
void add_assembled(std::vector<Piece>& pieces, const std::vector<FileRange>& raw_data) {
  constexpr size_t kCopiedWhole = size_t{64} << 10;
  constexpr size_t kGathered = size_t{1} << 20;
  size_t gathered = 0;  // bytes in the last piece, when it gathers
  for (const FileRange& range : raw_data) {
    if (range.size() >= kCopiedWhole) {
      add_copy(pieces, range);
      continue;
    }
    if (pieces.back().gathered.empty() || gathered >= kGathered) {
      pieces.push_back(Piece::gather({}));
      gathered = 0;
    }
    auto& ranges = pieces.back().gathered;
    if (!ranges.empty() && ranges.back().end == range.begin) ranges.back().end = range.end;
    else ranges.push_back(range);
    gathered += range.size();
  }
}

// The graph's initializer fields, in order: copies of the source file's bytes where they can be,
// serialized otherwise; `size` gets their length in all.
std::vector<Piece> initializer_pieces(const Model& model, size_t& size) {
  std::vector<Piece> initializers;
  for (const auto& tensor : model.proto.graph().initializer()) {
    if (const FileRange* range = model.deferred_field(tensor)) {
      add_copy(initializers, *range);
      size += range->size();
    } else if (const auto* pieces = model.assembled_raw_data(tensor)) {
      // The header's own fields, then raw_data (field 9, after every field a header made so has).
      size_t raw = 0;
      for (const FileRange& piece : *pieces) raw += piece.size();
      std::string bytes = tensor.SerializeAsString() + wire::len_header(wire::kTensorRawData, raw);
      initializers.push_back(Piece::own(wire::len_header(wire::kGraphInitializer, bytes.size() + raw) + bytes));
      size += initializers.back().bytes.size() + raw;
      add_assembled(initializers, *pieces);
    } else {
      std::string bytes = tensor.SerializeAsString();
      initializers.push_back(Piece::own(wire::len_header(wire::kGraphInitializer, bytes.size()) + bytes));
      size += initializers.back().bytes.size();
    }
  }
  return initializers;
}

// The graph serialized without its nodes and initializers.
std::string serialized_without_nodes_and_initializers(onnx::GraphProto& graph) {
  // Held aside while the rest is serialized, and given back even if that throws.
  struct Aside {
    onnx::GraphProto& graph;
    google::protobuf::RepeatedPtrField<onnx::TensorProto> initializers;
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    explicit Aside(onnx::GraphProto& from) : graph(from) {
      initializers.Swap(graph.mutable_initializer());
      nodes.Swap(graph.mutable_node());
    }
    ~Aside() {
      nodes.Swap(graph.mutable_node());
      initializers.Swap(graph.mutable_initializer());
    }
    Aside(const Aside&) = delete;
    Aside& operator=(const Aside&) = delete;
  } aside(graph);
  return graph.SerializeAsString();
}

// Protobuf writes fields in field-number order, so serializing the model without its graph and
// the graph without its nodes and initializers, then putting the missing pieces where their
// field number belongs, reproduces what a full serialization would write, without copying
// weights. `emit` gets the pieces in file order. The nodes (GraphProto field 1, first) come in
// chunks of about `chunk` bytes, each serialized when the one before has been emitted.
template <typename Emit>
void serialize_pieces(const Model& model, size_t chunk, Emit&& emit) {
  auto& proto = const_cast<onnx::ModelProto&>(model.proto);  // restored before returning
  auto& graph = *proto.mutable_graph();

  size_t initializers_size = 0;
  std::vector<Piece> initializers = initializer_pieces(model, initializers_size);
  const std::string graph_rest = serialized_without_nodes_and_initializers(graph);

  // Each node's size is worked out (and kept in it) before any is written: the graph's length
  // comes first.
  auto node_header = [](size_t size) { return wire::len_header(wire::kGraphNode, size); };
  size_t nodes_size = 0;
  for (const auto& node : graph.node()) {
    const size_t size = node.ByteSizeLong();
    nodes_size += node_header(size).size() + size;
  }

  onnx::GraphProto* released = proto.release_graph();
  std::string model_rest = proto.SerializeAsString();
  proto.set_allocated_graph(released);

  const size_t graph_at = wire::insertion_point(model_rest, wire::kModelGraph);
  emit(Piece::own(model_rest.substr(0, graph_at)));
  emit(Piece::own(wire::len_header(wire::kModelGraph, nodes_size + graph_rest.size() + initializers_size)));
  std::string bytes;
  size_t left = nodes_size;  // of the node fields not yet emitted
  for (const auto& node : graph.node()) {
    const size_t size = static_cast<size_t>(node.GetCachedSize());
    const std::string header = node_header(size);
    if (!bytes.empty() && bytes.size() + header.size() + size > chunk) {
      left -= bytes.size();
      emit(Piece::own(std::exchange(bytes, {})));
    }
    // A chunk's whole size at once: growing it would copy what it holds (often a model's
    // weights, in Constant nodes) again at each step.
    if (bytes.empty()) bytes.reserve(std::max(header.size() + size, std::min(chunk, left)));
    bytes += header;
    const size_t at = bytes.size();
    bytes.resize(at + size);
    node.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(bytes.data() + at));
  }
  if (!bytes.empty()) emit(Piece::own(std::move(bytes)));
  const size_t initializers_at = wire::insertion_point(graph_rest, wire::kGraphInitializer);
  emit(Piece::own(graph_rest.substr(0, initializers_at)));
  for (auto& piece : initializers) emit(std::move(piece));
  emit(Piece::own(graph_rest.substr(initializers_at)));
  emit(Piece::own(model_rest.substr(graph_at)));
}

// Writes the pieces of a model to its file, on a second thread for a big graph: there writing
// (the kernel copying into the page cache) takes about as long as serializing, and the two
// overlap. A failure to write comes back to the caller, at the next piece or at finish().
class PieceWriter {
 public:
  PieceWriter(AtomicFile& file, const SourceBytes& source, bool background) : file_(file), source_(source) {
    if (!background) return;
    try {
      thread_ = std::thread([this] { drain(); });
    } catch (const std::system_error&) {
      // No thread to be had (a busy batch at its limit): written on this one.
    }
  }
  ~PieceWriter() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      queue_.clear();
    }
    changed_.notify_all();
    thread_.join();
  }
  PieceWriter(const PieceWriter&) = delete;
  PieceWriter& operator=(const PieceWriter&) = delete;

  void operator()(Piece piece) {
    if (!thread_.joinable()) return write(piece);
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return queue_.size() < kQueued || failure_; });
    if (failure_) std::rethrow_exception(failure_);
    queue_.push_back(std::move(piece));
    changed_.notify_all();
  }

  void finish() {
    if (!thread_.joinable()) return;
    {
      std::unique_lock lock(mutex_);
      closed_ = true;
      changed_.notify_all();
    }
    thread_.join();
    if (failure_) std::rethrow_exception(failure_);
  }

 private:
  static constexpr size_t kQueued = 4;  // pieces waiting: a few chunks of memory at most

  void write(const Piece& piece) {
    if (piece.from_source) {
      file_.copy_from(source_.fd(), source_.data(), piece.source_range);
    } else if (!piece.gathered.empty()) {
      const std::string bytes = source_.read(piece.gathered);
      file_.write(bytes.data(), bytes.size());
    } else {
      file_.write(piece.bytes.data(), piece.bytes.size());
    }
  }

  void drain() {
    for (;;) {
      Piece piece;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return !queue_.empty() || closed_; });
        if (queue_.empty()) return;
        piece = std::move(queue_.front());
        queue_.pop_front();
        changed_.notify_all();
      }
      try {
        write(piece);
      } catch (...) {
        std::lock_guard lock(mutex_);
        failure_ = std::current_exception();
        queue_.clear();
        changed_.notify_all();
        return;
      }
    }
  }

  AtomicFile& file_;
  const SourceBytes& source_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Piece> queue_;
  bool closed_ = false;
  std::exception_ptr failure_;
  std::thread thread_;
};

// A temporary copy of `from` beside `to`, with `from`'s permissions, not yet in place.
std::unique_ptr<AtomicFile> copy_to_temporary(const fs::path& from, const fs::path& to, mode_t& mode) {
  const int fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw os_error(from.string(), "cannot open external data");
  struct stat st {};
  ::fstat(fd, &st);
  mode = st.st_mode & 07777;
  try {
    auto out = std::make_unique<AtomicFile>(to);
    out->copy_from(fd, nullptr, FileRange{0, static_cast<size_t>(st.st_size)});
    ::close(fd);
    return out;
  } catch (...) {
    ::close(fd);
    throw;
  }
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

bool lies_inside(const fs::path& path, const fs::path& root) {
  const fs::path inside = path.lexically_relative(root);
  return !inside.empty() && *inside.begin() != "..";
}

// Creates `directory` and the directories on the way to it. With a `root` (batch's OUT_DIR),
// `directory` is `root` / something, and every directory on the way must be inside `root` once
// symbolic links are resolved: a link already there (OUT/sub -> /elsewhere) must not carry the
// output out of it. Directories it creates stay (empty) if the write is abandoned: another
// writer may be about to use them.
void make_directories(const fs::path& directory, const fs::path& root, const fs::path& output) {
  std::error_code ec;
  if (root.empty()) {
    fs::create_directories(directory, ec);
    if (ec) throw InputError(output.string(), "cannot create the directory '" + directory.string() + "': " + ec.message());
    return;
  }
  const fs::path real_root = fs::weakly_canonical(root, ec);
  const fs::path relative = directory.lexically_normal().lexically_relative(root.lexically_normal());
  if (relative.empty() || *relative.begin() == "..") {
    throw InputError(output.string(), "'" + directory.string() + "' is not inside " + root.string());
  }
  fs::path at = root;
  for (const auto& part : relative) {
    if (part.empty() || part == ".") continue;
    at /= part;
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0) {
      if (errno != ENOENT) throw os_error(output.string(), "cannot look at '" + at.string() + "'");
      if (::mkdir(at.c_str(), 0777) != 0 && errno != EEXIST) {
        throw os_error(output.string(), "cannot create the directory '" + at.string() + "'");
      }
      if (::lstat(at.c_str(), &st) != 0) throw os_error(output.string(), "cannot look at '" + at.string() + "'");
    }
    if (S_ISLNK(st.st_mode)) {
      const fs::path resolved = fs::weakly_canonical(at, ec);
      if (ec || !lies_inside(resolved, real_root) || !fs::is_directory(resolved, ec)) {
        throw InputError(output.string(),
                         "'" + at.string() + "' is a symbolic link leading out of " + root.string() + "; nothing is written outside it");
      }
    } else if (!S_ISDIR(st.st_mode)) {
      throw InputError(output.string(), "'" + at.string() + "' is in the way: not a directory");
    }
  }
}

// An flock() on each directory a commit writes into, taken in one global order (device, inode)
// so that processes locking several never deadlock. Where a file system has no flock (some
// network file systems), the commit goes on without it: RENAME_NOREPLACE alone still never
// replaces a different file.
class DirectoryLocks {
 public:
  explicit DirectoryLocks(const std::vector<fs::path>& directories) {
    std::vector<std::tuple<dev_t, ino_t, int>> opened;
    for (const auto& directory : directories) {
      const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) continue;
      struct stat st {};
      ::fstat(fd, &st);
      bool seen = false;
      for (const auto& [dev, ino, other] : opened) seen = seen || (dev == st.st_dev && ino == st.st_ino);
      if (seen) ::close(fd);
      else opened.emplace_back(st.st_dev, st.st_ino, fd);
    }
    std::sort(opened.begin(), opened.end());
    for (const auto& [dev, ino, fd] : opened) {
      while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
      }
      fds_.push_back(fd);
    }
  }
  ~DirectoryLocks() {
    for (auto it = fds_.rbegin(); it != fds_.rend(); ++it) ::close(*it);  // closing unlocks
  }
  DirectoryLocks(const DirectoryLocks&) = delete;
  DirectoryLocks& operator=(const DirectoryLocks&) = delete;

 private:
  std::vector<int> fds_;
};

}  // namespace

std::string serialize_model(const Model& model) {
  if (!model.changed) return std::string(reinterpret_cast<const char*>(model.source->data()), model.source->size());
  std::string out;
  serialize_pieces(model, kChunk, [&](const Piece& piece) {
    if (piece.from_source) {
      out.append(reinterpret_cast<const char*>(model.source->data()) + piece.source_range.begin, piece.source_range.size());
    } else if (!piece.gathered.empty()) {
      out += model.source->read(piece.gathered);
    } else {
      out += piece.bytes;
    }
  });
  return out;
}

struct PendingModel::State {
  struct Data {
    std::string location;
    fs::path from;
    fs::path to;
    std::unique_ptr<AtomicFile> copy;  // null: the file already at `to` holds the same bytes
    mode_t mode = 0;
    dev_t device = 0;  // of the file reused, or of the copy once in place
    ino_t inode = 0;
    bool placed = false;  // the copy was moved into place by this commit
  };
  fs::path output;                  // as named, for errors
  fs::path directory;               // the output's, where the model reads its data files
  std::set<std::string> locations;  // of every data file the model reads
  std::vector<Data> data;
  std::unique_ptr<AtomicFile> model;
  // The model and its data files under a hidden name for a reader (expose()); removed after the
  // commit, whose links must come while these names still hold the unnamed files.
  std::unique_ptr<TemporaryDirectory> exposed;

  [[noreturn]] void conflict(const Data& item) const {
    throw InputError(output.string(), "external data '" + printable(item.location) + "' would replace a different file already in " +
                                          directory_of(item.to).string());
  }
  // Data files this commit put in place, removed again when a later step fails. Under the
  // directory locks, so no other onnx-rewrite can have started to rely on them.
  void take_back_data() {
    for (auto& item : data) {
      if (!item.placed) continue;
      struct stat st {};
      if (::lstat(item.to.c_str(), &st) == 0 && st.st_dev == item.device && st.st_ino == item.inode) ::unlink(item.to.c_str());
      item.placed = false;
    }
  }
};

PendingModel::PendingModel(const Model& model, const fs::path& path, const WriteOptions& options) : state_(std::make_unique<State>()) {
  State& state = *state_;
  state.output = path;
  std::error_code ec;
  const bool confined = !options.inside.empty();
  if (fs::is_directory(path, ec)) throw UsageError(path.string() + ": the output is a directory");
  if (!model.missing_external_data.empty()) {
    throw InputError(model.path.string(), "external data file '" + printable(model.missing_external_data.front()) +
                                              "' is missing, and a written model needs it");
  }
  const fs::path directory = directory_of(path);
  state.directory = directory;
  state.locations = external_locations(model);
  try {
    if (confined) {
      make_directories(directory, options.inside, path);
    } else if (!fs::is_directory(directory, ec)) {
      throw UsageError(path.string() + ": output directory '" + directory.string() + "' does not exist");
    }
    // Inside OUT_DIR a symbolic link at the output is replaced; elsewhere (--in-place on a linked
    // model, -o naming a link) what it points to is.
    const bool follow = !confined && fs::is_symlink(path, ec);
    const fs::path target = follow ? resolve_path(path, true) : path;
    if (!options.allow_overwrite_input && !model.path.empty() && !(confined && fs::is_symlink(path, ec)) &&
        same_existing_file(model.path, target)) {
      throw UsageError(path.string() + ": refusing to overwrite the input (use --in-place)");
    }
    // Nor a file the model reads its weights from: the model written would lose them. (The CLI's
    // guard says so first, in its own words; this holds for every program using the library.)
    for (const auto& location : external_locations(model)) {
      if (!(confined && fs::is_symlink(path, ec)) && same_existing_file(model.directory() / location, target)) {
        throw UsageError(path.string() + ": refusing to overwrite the external data file '" + printable(location) +
                         "' the model reads its weights from");
      }
    }

    // The data files, next to the output, where the model will look for them.
    if (!same_existing_file(model.directory(), directory)) {
      for (const auto& location : state.locations) {
        State::Data item;
        item.location = location;
        item.from = model.directory() / location;
        item.to = directory / location;
        if (same_existing_file(item.from, item.to)) continue;
        make_directories(directory_of(item.to), confined ? options.inside : fs::path(), path);
        struct stat st {};
        if (::lstat(item.to.c_str(), &st) == 0) {
          if (confined && S_ISLNK(st.st_mode)) {
            throw InputError(path.string(), "external data '" + printable(location) + "' would be written through the symbolic link '" +
                                                item.to.string() + "'");
          }
          if (!same_contents(item.from, item.to)) state.conflict(item);  // fails before copying anything
          ::stat(item.to.c_str(), &st);
          item.device = st.st_dev;
          item.inode = st.st_ino;
        } else {
          item.copy = copy_to_temporary(item.from, item.to, item.mode);
        }
        state.data.push_back(std::move(item));
      }
    }

    state.model = std::make_unique<AtomicFile>(target);
    const SourceBytes& source = *model.source;
    if (!model.changed) {
      state.model->copy_from(source.fd(), source.data(), FileRange{0, source.size()});
    } else {
      PieceWriter writer(*state.model, source, static_cast<size_t>(model.proto.graph().node_size()) >= kBigGraphNodes);
      serialize_pieces(model, kChunk, writer);
      writer.finish();
    }
  } catch (...) {
    state_.reset();  // removes the temporary files
    throw;
  }
}

PendingModel::~PendingModel() = default;

void PendingModel::commit() {
  if (!state_) throw std::logic_error("PendingModel committed twice");
  State& state = *state_;
  std::vector<fs::path> directories{directory_of(state.model->target())};
  for (const auto& item : state.data) directories.push_back(directory_of(item.to));
  {
    DirectoryLocks locks(directories);
    for (auto& item : state.data) {
      struct stat st {};
      if (!item.copy) {
        // Reused: still the very file compared (onnx-rewrite never rewrites a data file in place).
        const bool there = ::stat(item.to.c_str(), &st) == 0;
        if (there && st.st_dev == item.device && st.st_ino == item.inode) continue;
        if (there && same_contents(item.from, item.to)) continue;
        state.take_back_data();
        if (!there) {
          throw InputError(state.output.string(), "external data '" + printable(item.location) + "' vanished from " +
                                                      directory_of(item.to).string() + " while the model was written");
        }
        state.conflict(item);
      }
      bool placed = false;
      try {
        placed = item.copy->commit_if_absent(item.mode);
      } catch (...) {
        state.take_back_data();
        throw;
      }
      if (placed) {
        ::lstat(item.to.c_str(), &st);
        item.device = st.st_dev;
        item.inode = st.st_ino;
        item.placed = true;
      } else if (!same_contents(item.from, item.to)) {
        // Another process put a file of this name there since the model was prepared.
        state.take_back_data();
        state.conflict(item);
      }
    }
    try {
      state.model->commit();
    } catch (...) {
      state.take_back_data();
      throw;
    }
  }
  state_.reset();
}

fs::path PendingModel::expose() {
  if (!state_) throw std::logic_error("PendingModel exposed after its commit");
  State& state = *state_;
  const fs::path target = state.model->target();
  if (state.exposed) return state.exposed->path() / target.filename();
  auto exposed = std::make_unique<TemporaryDirectory>(directory_of(target), "." + target.filename().string() + ".onnx-rewrite-verify-");
  state.model->link_to(exposed->path() / target.filename());
  for (const auto& location : state.locations) {
    const fs::path to = exposed->path() / location;
    std::error_code ec;
    fs::create_directories(to.parent_path(), ec);
    if (ec) throw InputError(state.output.string(), "cannot create '" + to.parent_path().string() + "': " + ec.message());
    const auto copy =
        std::find_if(state.data.begin(), state.data.end(), [&](const State::Data& item) { return item.location == location; });
    // Else the file the output will read is there already: reused, or the input's own beside it.
    if (copy != state.data.end() && copy->copy) copy->copy->link_to(to);
    else link_or_copy(state.directory / location, to);
  }
  state.exposed = std::move(exposed);
  return state.exposed->path() / target.filename();
}

void write_model(const Model& model, const fs::path& path, const WriteOptions& options) { PendingModel(model, path, options).commit(); }

}  // namespace onnx_rewrite
