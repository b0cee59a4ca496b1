// AtomicFile: an output file that appears complete or not at all (src/io/atomic_file.cc).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>

#include "onnx_rewrite/model.h"

namespace onnx_rewrite {

// The directory a file is in, or will be written to; "." for a bare file name.
std::filesystem::path directory_of(const std::filesystem::path& file);

// `to` made another name of the file `from` (a symbolic link followed): a hard link, or a copy
// where none can be made (another file system, a file of another owner under
// protected_hardlinks). Throws InputError naming `to`.
void link_or_copy(const std::filesystem::path& from, const std::filesystem::path& to);

// A file in the directory of `target` that becomes `target` on commit() and disappears
// otherwise. Where the file system allows, it has no name until then (O_TMPFILE), so that even a
// killed process leaves nothing; elsewhere, and for the instant between a link and a rename when
// it replaces a file, it is a hidden temporary file next to the target, removed when destroyed
// uncommitted and when the process gets SIGINT, SIGTERM or SIGHUP.
// Throws InputError naming the target on any failure.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const char* data, size_t size);
  // Drops what was written so far (a report whose contents change before it is committed).
  void clear();

  // Copies `range` of the file open as `source_fd` in the kernel: no page of it enters this
  // process. Without a file (`source_fd` < 0) it writes the range of `source_data`.
  void copy_from(int source_fd, const uint8_t* source_data, FileRange range);

  // Gives the file `mode` and puts it in place of the target (linked in if it has no name and
  // the target none either, else renamed over it).
  void commit(mode_t mode);
  // Same with the permissions of the file it replaces, or the default ones for a new file.
  void commit();
  // Gives the file `mode` and moves it to the target only if no file of that name exists, in one
  // step no other process can come between: false (and the temporary file still removed
  // later) when one does. linkat() of the unnamed file; else renameat2(RENAME_NOREPLACE), or
  // link() where a file system lacks it.
  bool commit_if_absent(mode_t mode);

  // Another name for the file as written so far (link_or_copy), for a reader that needs a path
  // before commit(): commit() must come while that name still exists, if at all.
  void link_to(const std::filesystem::path& path) const;

  const std::filesystem::path& target() const { return target_; }

 private:
  [[noreturn]] void fail(const std::string& what);
  // The permissions the file is committed with, set once whichever way it goes into place.
  void set_mode(mode_t mode);
  void close_for_commit();
  // Gives the unnamed file `name`: false if a file has that name.
  bool link_unnamed(const std::string& name);
  // Links the unnamed file in as the target, then closes it, committed: false (still open,
  // unnamed) if a file has that name.
  bool link_as_target();
  // Puts temp_ in the table of files removed when the process is interrupted.
  void remove_on_interrupt();

  std::filesystem::path target_;
  std::string temp_;  // empty while the file has no name
  int fd_ = -1;
  bool committed_ = false;
  std::atomic<const char*>* slot_ = nullptr;  // in the table of files removed on interrupt
};

// A directory made for a while (with mkdtemp: `name` followed by six random characters, in
// `parent`), removed with everything in it when destroyed, or when the process is interrupted by
// SIGINT, SIGTERM or SIGHUP. Throws InputError naming `parent` when it can't be made.
class TemporaryDirectory {
 public:
  TemporaryDirectory(const std::filesystem::path& parent, const std::string& name);
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::atomic<const char*>* slot_ = nullptr;
};

// While it lives, the child process `pid` is killed (and waited for) first when the process is
// interrupted, before the files it may be writing are removed.
class ChildOnInterrupt {
 public:
  explicit ChildOnInterrupt(pid_t pid);
  ~ChildOnInterrupt();
  ChildOnInterrupt(const ChildOnInterrupt&) = delete;
  ChildOnInterrupt& operator=(const ChildOnInterrupt&) = delete;

 private:
  std::atomic<pid_t>* slot_ = nullptr;
};

}  // namespace onnx_rewrite
