// Preloaded into onnx-rewrite by tests (LD_PRELOAD): a file system without unnamed files, and
// optionally without no-replace renames, and another process racing for a data file's name.
// - open() refuses O_TMPFILE with EOPNOTSUPP, so that the run writes through named temporary
//   files.
// - With NO_UNNAMED_FILES_NO_NOREPLACE set, renameat2(RENAME_NOREPLACE) fails with EINVAL, as
//   on NFS, so that the run moves a data file into place with link().
// - With NO_UNNAMED_FILES_TAKE naming a directory, a no-replace move (renameat2 with
//   RENAME_NOREPLACE, or link()) first finds its target taken by a copy of the file of the same
//   name there, if there is one, made with mode 0604: what another process may do between
//   preparing and committing.
// Each event appends a byte to the file NO_UNNAMED_FILES_LOG names, the tests' proof that the
// path ran: 'x' an O_TMPFILE refused, 'r' a no-replace rename refused, 'l' a link() made or
// tried, 't' a target taken.
#undef _FILE_OFFSET_BITS  // else <fcntl.h> names open() open64 too, and the two definitions clash
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// The C library's function `name` (each caller keeps it in a static, looked up once).
template <typename Function>
Function next(const char* name) {
  return reinterpret_cast<Function>(::dlsym(RTLD_NEXT, name));
}

using OpenFunction = int (*)(const char*, int, ...);

OpenFunction real_open() {
  static const auto function = next<OpenFunction>("open");
  return function;
}

void note(char event) {
  const char* log = std::getenv("NO_UNNAMED_FILES_LOG");
  if (!log) return;
  const int fd = real_open()(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t written = ::write(fd, &event, 1);
  ::close(fd);
}

bool unnamed(int flags) { return (flags & O_TMPFILE) == O_TMPFILE; }

// Puts NO_UNNAMED_FILES_TAKE's file of the target's name at `target` (relative to `directory`,
// as the *at() functions take it), unless one is there.
void take(int directory, const char* target) {
  const char* from_directory = std::getenv("NO_UNNAMED_FILES_TAKE");
  if (!from_directory) return;
  const char* slash = std::strrchr(target, '/');
  const std::string from = std::string(from_directory) + "/" + (slash ? slash + 1 : target);
  const int in = real_open()(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return;
  std::string bytes;
  char buffer[4096];
  for (ssize_t got; (got = ::read(in, buffer, sizeof buffer)) > 0;) bytes.append(buffer, static_cast<size_t>(got));
  ::close(in);
  const int out = ::openat(directory, target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0604);
  if (out < 0) return;
  [[maybe_unused]] const ssize_t written = ::write(out, bytes.data(), bytes.size());
  ::fchmod(out, 0604);  // whatever the umask: the mode tells the other process's file from a copy
  ::close(out);
  note('t');
}

}  // namespace

extern "C" int open(const char* path, int flags, ...) {
  // The mode is there only with O_CREAT or O_TMPFILE.
  mode_t mode = 0;
  if ((flags & O_CREAT) || unnamed(flags)) {
    va_list arguments;
    va_start(arguments, flags);
    mode = static_cast<mode_t>(va_arg(arguments, unsigned));
    va_end(arguments);
  }
  if (unnamed(flags)) {
    note('x');
    errno = EOPNOTSUPP;
    return -1;
  }
  return real_open()(path, flags, mode);
}

// On 64-bit Linux open64() is open(): one function under both names.
extern "C" int open64(const char* path, int flags, ...) __attribute__((alias("open")));

extern "C" int renameat2(int from_directory, const char* from, int to_directory, const char* to, unsigned flags) noexcept {
  using RenameFunction = int (*)(int, const char*, int, const char*, unsigned);
  static const auto real_renameat2 = next<RenameFunction>("renameat2");
  if (flags & RENAME_NOREPLACE) {
    if (std::getenv("NO_UNNAMED_FILES_NO_NOREPLACE")) {  // before the race: link() runs into it
      note('r');
      errno = EINVAL;
      return -1;
    }
    take(to_directory, to);
  }
  return real_renameat2(from_directory, from, to_directory, to, flags);
}

extern "C" int link(const char* from, const char* to) noexcept {
  using LinkFunction = int (*)(const char*, const char*);
  static const auto real_link = next<LinkFunction>("link");
  note('l');
  take(AT_FDCWD, to);
  return real_link(from, to);
}
