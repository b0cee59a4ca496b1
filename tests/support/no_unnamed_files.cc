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

// The C library's open(), looked up once.
OpenFunction real_open() {
  static const OpenFunction next = reinterpret_cast<OpenFunction>(::dlsym(RTLD_NEXT, "open"));
  return next;
}

bool unnamed(int flags) { return (flags & O_TMPFILE) == O_TMPFILE; }

int refuse() {
  if (const char* log = std::getenv("NO_UNNAMED_FILES_LOG")) {
    const int fd = real_open()(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      [[maybe_unused]] const ssize_t written = ::write(fd, "x", 1);
      ::close(fd);
    }
  }
  errno = EOPNOTSUPP;
  return -1;
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
  if (unnamed(flags)) return refuse();
  return real_open()(path, flags, mode);
}

// On 64-bit Linux open64() is open(): one function under both names.
extern "C" int open64(const char* path, int flags, ...) __attribute__((alias("open")));
