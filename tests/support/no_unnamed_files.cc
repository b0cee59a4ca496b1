// Preloaded into onnx-rewrite by a test (LD_PRELOAD): open() refuses O_TMPFILE with EOPNOTSUPP,
// as a file system without unnamed files does, so that the run writes through named temporary
// files. Each refusal appends a byte to the file NO_UNNAMED_FILES_LOG names: the test's proof
// that the fallback ran.
#undef _FILE_OFFSET_BITS  // else <fcntl.h> names open() open64 too, and the two definitions clash
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdlib>

namespace {

using OpenFunction = int (*)(const char*, int, ...);

OpenFunction real(const char* name) { return reinterpret_cast<OpenFunction>(::dlsym(RTLD_NEXT, name)); }

bool unnamed(int flags) { return (flags & O_TMPFILE) == O_TMPFILE; }

int refuse() {
  if (const char* log = std::getenv("NO_UNNAMED_FILES_LOG")) {
    static const OpenFunction open_file = real("open");
    const int fd = open_file(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      [[maybe_unused]] const ssize_t written = ::write(fd, "x", 1);
      ::close(fd);
    }
  }
  errno = EOPNOTSUPP;
  return -1;
}

int forward(const char* name, const char* path, int flags, va_list arguments) {
  // The mode is there only with O_CREAT or O_TMPFILE.
  const mode_t mode = (flags & O_CREAT) || unnamed(flags) ? static_cast<mode_t>(va_arg(arguments, unsigned)) : 0;
  if (unnamed(flags)) return refuse();
  return real(name)(path, flags, mode);
}

}  // namespace

extern "C" int open(const char* path, int flags, ...) {
  va_list arguments;
  va_start(arguments, flags);
  const int fd = forward("open", path, flags, arguments);
  va_end(arguments);
  return fd;
}

extern "C" int open64(const char* path, int flags, ...) {
  va_list arguments;
  va_start(arguments, flags);
  const int fd = forward("open64", path, flags, arguments);
  va_end(arguments);
  return fd;
}
