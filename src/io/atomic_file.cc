// Atomic output files: AtomicFile, write_file_atomically, and the table of temporary files a
// signal handler removes when the process is interrupted mid-write.
#include "io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>  // renameat2
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "onnx_rewrite/model_io.h"
#include "io/os_error.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

// Temporary files being written, directories made for a while (their contents included) and
// child processes writing into them, removed (or killed) if the process is interrupted. Fixed
// tables of atomics, because a signal handler may neither lock nor allocate.
std::array<std::atomic<const char*>, 256> g_pending_files{};
std::array<std::atomic<const char*>, 64> g_pending_trees{};
std::array<std::atomic<pid_t>, 64> g_pending_children{};

// `name` in `directory_fd` and, for a directory, everything in it: system calls only, as a signal
// handler may make.
void remove_tree_at(int directory_fd, const char* name, int depth) {
  if (::unlinkat(directory_fd, name, 0) == 0 || errno != EISDIR || depth > 32) return;
  const int fd = ::openat(directory_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    alignas(dirent64) char buffer[4096];
    // Entries removed while listing may make the listing skip others: list again until empty.
    for (int pass = 0; pass < 4; ++pass) {
      ::lseek(fd, 0, SEEK_SET);
      for (ssize_t got; (got = ::getdents64(fd, buffer, sizeof buffer)) > 0;) {
        for (ssize_t at = 0; at < got;) {
          const auto* entry = reinterpret_cast<const dirent64*>(buffer + at);
          at += entry->d_reclen;
          const char* entry_name = entry->d_name;
          if (std::strcmp(entry_name, ".") != 0 && std::strcmp(entry_name, "..") != 0) remove_tree_at(fd, entry_name, depth + 1);
        }
      }
      if (::unlinkat(directory_fd, name, AT_REMOVEDIR) == 0) break;
    }
    ::close(fd);
  }
}

extern "C" void remove_pending_files(int signal_number) {
  for (auto& slot : g_pending_children) {
    if (const pid_t pid = slot.load(); pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  for (auto& slot : g_pending_files) {
    if (const char* path = slot.load()) ::unlink(path);
  }
  for (auto& slot : g_pending_trees) {
    if (const char* path = slot.load()) remove_tree_at(AT_FDCWD, path, 0);
  }
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

// Only where the signal still has its default action: a program that handles one itself (Python
// turns SIGINT into KeyboardInterrupt) keeps its handler, and a library must not take it over.
void install_interrupt_cleanup() {
  static const bool installed = [] {
    for (const int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction current {};
      if (::sigaction(signal_number, nullptr, &current) == 0 && current.sa_handler == SIG_DFL && !(current.sa_flags & SA_SIGINFO)) {
        std::signal(signal_number, remove_pending_files);
      }
    }
    return true;
  }();
  (void)installed;
}

// Takes a free slot of `table` for `value`; null when all are taken (then the cleanup falls to
// the normal path alone).
template <typename T, size_t N>
std::atomic<T>* take_slot(std::array<std::atomic<T>, N>& table, T value) {
  install_interrupt_cleanup();
  for (auto& slot : table) {
    T expected{};
    if (slot.compare_exchange_strong(expected, value)) return &slot;
  }
  return nullptr;
}

mode_t default_file_mode() {
  static const mode_t mode = [] {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    return static_cast<mode_t>(0666 & ~mask);
  }();
  return mode;
}

mode_t mode_of_existing_or_default(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return st.st_mode & 07777;
  return default_file_mode();
}

// The name an unnamed file (O_TMPFILE) is linked by: only through /proc.
std::string proc_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

bool proc_mounted() {
  static const bool mounted = ::access("/proc/self/fd", X_OK) == 0;
  return mounted;
}

// A hidden name next to `target`, named after it for anyone who finds one; XXXXXX for mkstemp.
std::string temporary_name(const fs::path& target, const std::string& suffix = "XXXXXX") {
  return (directory_of(target) / ("." + target.filename().string() + ".onnx-rewrite-" + suffix)).string();
}

// Different for every call in every process (a name taken anyway is tried again).
std::string unique_suffix() {
  static std::atomic<uint64_t> count{0};
  const auto now = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return fmt::format("{:x}{:x}", static_cast<uint64_t>(::getpid()) ^ now, count++);
}

}  // namespace

fs::path directory_of(const fs::path& file) { return file.has_parent_path() ? file.parent_path() : "."; }

void link_or_copy(const fs::path& from, const fs::path& to) {
  if (::linkat(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), AT_SYMLINK_FOLLOW) == 0) return;
  if (errno != EXDEV && errno != EPERM && errno != EMLINK) throw os_error(to.string(), "cannot link '" + from.string() + "' there");
  std::error_code ec;
  if (!fs::copy_file(from, to, ec)) throw InputError(to.string(), "cannot copy '" + from.string() + "' there: " + ec.message());
}

AtomicFile::AtomicFile(fs::path target) : target_(std::move(target)) {
  // A file with no name, where the file system allows: nothing to clean up whatever ends the
  // process, and one directory operation at commit (a link) instead of two (create, rename).
  if (proc_mounted()) fd_ = ::open(directory_of(target_).c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd_ >= 0) return;
  temp_ = temporary_name(target_);
  fd_ = ::mkstemp(temp_.data());
  if (fd_ < 0) throw os_error(target_.string(), "cannot create a file there");
  remove_on_interrupt();
}

void AtomicFile::remove_on_interrupt() { slot_ = take_slot(g_pending_files, temp_.c_str()); }

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
  if (slot_) slot_->store(nullptr);
}

void AtomicFile::write(const char* data, size_t size) {
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

void AtomicFile::clear() {
  if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) != 0) fail("cannot truncate the temporary file");
}

void AtomicFile::copy_from(int source_fd, const uint8_t* source_data, FileRange range) {
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
    // Not possible between these files (another file system, a kernel without it): read and write.
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

void AtomicFile::link_to(const fs::path& path) const { link_or_copy(temp_.empty() ? proc_path(fd_) : temp_, path); }

void AtomicFile::set_mode(mode_t mode) {
  if (fd_ >= 0 && ::fchmod(fd_, mode) != 0) fail("cannot set permissions");
}

void AtomicFile::close_for_commit() {
  if (fd_ < 0) return;
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("close failed");
  }
  fd_ = -1;
}

bool AtomicFile::link_as_target() {
  if (!link_unnamed(target_.string())) return false;
  committed_ = true;
  // In place already: a failed close couldn't take that back, and would only lead the caller to
  // undo what goes with it (unnamed files exist on local file systems, where closing reports
  // nothing a write didn't).
  ::close(std::exchange(fd_, -1));
  return true;
}

bool AtomicFile::link_unnamed(const std::string& name) {
  if (::linkat(AT_FDCWD, proc_path(fd_).c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) return true;
  if (errno != EEXIST) fail("cannot link the new file into place");
  return false;
}

void AtomicFile::commit(mode_t mode) {
  set_mode(mode);
  if (temp_.empty()) {
    if (link_as_target()) return;
    // A file has that name: linked under a hidden temporary name, then renamed over it.
    std::string name;
    do {
      name = temporary_name(target_, unique_suffix());
    } while (!link_unnamed(name));
    temp_ = std::move(name);
    remove_on_interrupt();
  }
  close_for_commit();
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("cannot rename the temporary file into place");
  committed_ = true;
}

void AtomicFile::commit() { commit(mode_of_existing_or_default(target_)); }

bool AtomicFile::commit_if_absent(mode_t mode) {
  set_mode(mode);
  if (temp_.empty()) return link_as_target();
  close_for_commit();
  if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE) == 0) {
    committed_ = true;
    return true;
  }
  if (errno == EEXIST) return false;
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) fail("cannot move the temporary file into place");
  // No RENAME_NOREPLACE on this file system (NFS, ...): a hard link is made only if the name is free.
  if (::link(temp_.c_str(), target_.c_str()) != 0) {
    if (errno == EEXIST) return false;
    fail("cannot move the temporary file into place");
  }
  ::unlink(temp_.c_str());
  committed_ = true;
  return true;
}

void AtomicFile::fail(const std::string& what) { throw os_error(target_.string(), what); }

PendingFile::PendingFile(const fs::path& path) : file_(std::make_unique<AtomicFile>(path)) {}

PendingFile::~PendingFile() = default;

void PendingFile::set_contents(const std::string& bytes) {
  file_->clear();
  file_->write(bytes.data(), bytes.size());
}

void PendingFile::commit() { file_->commit(); }

TemporaryDirectory::TemporaryDirectory(const fs::path& parent, const std::string& name) {
  std::string path = (parent / (name + "XXXXXX")).string();
  if (!::mkdtemp(path.data())) throw os_error(parent.string(), "cannot create a temporary directory there");
  path_ = std::move(path);
  slot_ = take_slot(g_pending_trees, static_cast<const char*>(path_.c_str()));
}

TemporaryDirectory::~TemporaryDirectory() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  if (slot_) slot_->store(nullptr);
}

ChildOnInterrupt::ChildOnInterrupt(pid_t pid) : slot_(take_slot(g_pending_children, pid)) {}

ChildOnInterrupt::~ChildOnInterrupt() {
  if (slot_) slot_->store(0);
}

void write_file_atomically(const fs::path& path, const std::string& bytes) {
  AtomicFile out(path);
  out.write(bytes.data(), bytes.size());
  out.commit();
}

}  // namespace onnx_rewrite
