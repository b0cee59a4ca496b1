// The one guard on what a command writes (docs/cli.md, "Files a command reads and writes"): no
// two files it writes may be one file, and none may be a file it reads (an input model, a data
// file of one, a rule file, an earlier report it reads), through symbolic links, `..` and hard
// links; batch's reports may not lie in a directory whose models it reads. Every path is
// registered before anything is written, and a collision is a usage error (exit 2).
#pragma once

#include <exception>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/file_identity.h"
#include "onnx_rewrite/error.h"
#include "onnx_rewrite/model.h"

namespace onnx_rewrite {

// A collision: nothing is written, not even a report holding the error (it may be the very file).
class PathCollision : public UsageError {
 public:
  using UsageError::UsageError;
};

// Whether `error` is a PathCollision: then nothing at all is written, not even a report of it.
bool is_path_collision(const std::exception_ptr& error);

class PathGuard {
 public:
  // `what` names the path's role in messages: "the input model", "-o", "--report".
  void reads(const std::filesystem::path& path, const std::string& what);
  // `follow_last`: compare what a symbolic link at the path leads to (a file written through it,
  // or named by it); batch's outputs replace a link in OUT_DIR and are compared as themselves.
  void writes(const std::filesystem::path& path, const std::string& what, bool follow_last = true);
  // The *.rules files each --rules path names (a file, or a directory of them).
  void reads_rules(const std::vector<std::string>& paths);
  // A directory batch reads models from: nothing is written inside it, except under `skipped`
  // (OUT_DIR, which the walk does not enter), where no model is read.
  void reads_tree(const std::filesystem::path& directory, const std::filesystem::path& skipped);

  // Once a model is loaded: its data files are read, and copies of them are written beside an
  // output in another directory. Const, so that batch's workers share one guard.
  void check_model_data(const Model& model, const std::filesystem::path& output) const;

 private:
  struct Entry {
    std::string path;  // as given
    std::string what;
    bool written = false;
    std::string resolved;
  };
  struct Tree {
    std::string root, skipped;  // resolved
    std::string path;           // as given
  };
  // The entry `identity` is one file with, among those written (or, `any`, also those read).
  const Entry* find(const FileIdentity& identity, bool any) const;
  void add(const FileIdentity& identity, Entry entry);
  [[noreturn]] static void collide(const Entry& written, const Entry& other);
  void refuse_inside_trees(const Entry& entry) const;

  std::vector<Entry> entries_;
  std::map<std::string, size_t> by_path_;
  std::map<std::pair<dev_t, ino_t>, size_t> by_inode_;
  std::vector<Tree> trees_;
};

}  // namespace onnx_rewrite
