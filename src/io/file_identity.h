// Which file a path names (src/io/file_identity.cc): what decides that writing one path would
// replace another, through symbolic links, `..` and hard links.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "onnx_rewrite/model.h"

namespace onnx_rewrite {

// `path` made absolute with every symbolic link among its directories and every `..` resolved
// as far as the path exists; with `follow_last`, a link at the path itself is followed too, also
// one leading to a file that does not exist yet (where a write through it would land).
std::filesystem::path resolve_path(const std::filesystem::path& path, bool follow_last);

// A path as the file it names: two identities are one file when their resolved paths are equal
// or, for files that exist, their (device, inode) are (hard links).
struct FileIdentity {
  std::string resolved;
  std::optional<std::pair<dev_t, ino_t>> inode;
};
FileIdentity identify(const std::filesystem::path& path, bool follow_last = true);
bool same_file(const FileIdentity& a, const FileIdentity& b);
// Both exist and are one file.
bool same_existing_file(const std::filesystem::path& a, const std::filesystem::path& b);

// The external-data files a model refers to, as locations relative to its directory.
std::set<std::string> external_locations(const Model& model);

}  // namespace onnx_rewrite
