// SourceBytes: the bytes a model was loaded from, a read-only memory mapping of its file or a
// buffer in memory. They outlive the parse: untouched initializers are read or copied from here
// until the model is written.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model.h"
#include "io/os_error.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

std::shared_ptr<const SourceBytes> SourceBytes::map_file(const fs::path& path) {
  std::shared_ptr<SourceBytes> source(new SourceBytes);
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) throw InputError(path.string(), "no such file");
  if (fs::is_directory(status)) throw InputError(path.string(), "is a directory, not a model file");
  if (!fs::is_regular_file(status)) throw InputError(path.string(), "not a regular file");
  source->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (source->fd_ < 0) throw os_error(path.string(), "cannot open");
  struct stat st {};
  if (::fstat(source->fd_, &st) != 0) throw os_error(path.string(), "cannot stat");
  source->size_ = static_cast<size_t>(st.st_size);
  if (source->size_ == 0) throw InputError(path.string(), "empty file, not an ONNX model");
  void* mapping = ::mmap(nullptr, source->size_, PROT_READ, MAP_PRIVATE, source->fd_, 0);
  if (mapping == MAP_FAILED) throw os_error(path.string(), "cannot map");
  source->data_ = static_cast<const uint8_t*>(mapping);
  return source;
}

void SourceBytes::drop_pages() const {
  if (fd_ >= 0) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_DONTNEED);  // a hint: failing changes nothing
}

std::string SourceBytes::read(const std::vector<FileRange>& ranges) const {
  size_t size = 0;
  for (const FileRange& range : ranges) size += range.size();
  std::string bytes(size, '\0');
  char* at = bytes.data();
  for (const FileRange& range : ranges) {
    // Read rather than copied from the mapping, whose pages would stay in the process's memory.
    const bool read = fd_ >= 0 && ::pread(fd_, at, range.size(), static_cast<off_t>(range.begin)) == static_cast<ssize_t>(range.size());
    if (!read) std::memcpy(at, data_ + range.begin, range.size());
    at += range.size();
  }
  return bytes;
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

}  // namespace onnx_rewrite
