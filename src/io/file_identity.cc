#include "io/file_identity.h"

#include <sys/stat.h>

#include "graph/walk.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

// As many links as the kernel follows before it gives up (ELOOP); a longer chain is left where
// it stops, and writing through it fails with the kernel's error.
constexpr int kMaxLinkHops = 40;

}  // namespace

fs::path resolve_path(const fs::path& path, bool follow_last) {
  std::error_code ec;
  fs::path at = fs::absolute(path, ec);
  if (ec) at = path;
  for (int hop = 0; follow_last && hop < kMaxLinkHops; ++hop) {
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) break;
    const fs::path target = fs::read_symlink(at, ec);
    if (ec) break;
    at = target.is_absolute() ? target : at.parent_path() / target;
  }
  const fs::path name = at.filename();
  if (name.empty() || name == "." || name == "..") return fs::weakly_canonical(at, ec);
  return fs::weakly_canonical(at.parent_path(), ec) / name;
}

FileIdentity identify(const fs::path& path, bool follow_last) {
  FileIdentity identity{resolve_path(path, follow_last).string(), std::nullopt};
  struct stat st {};
  if (::lstat(identity.resolved.c_str(), &st) == 0) identity.inode = std::make_pair(st.st_dev, st.st_ino);
  return identity;
}

bool same_file(const FileIdentity& a, const FileIdentity& b) {
  return a.resolved == b.resolved || (a.inode && b.inode && *a.inode == *b.inode);
}

bool same_existing_file(const fs::path& a, const fs::path& b) {
  const FileIdentity first = identify(a), second = identify(b);
  return first.inode && second.inode && *first.inode == *second.inode;
}

std::set<std::string> external_locations(const Model& model) {
  std::set<std::string> locations;
  for_each_tensor(model.proto, [&](const onnx::TensorProto& tensor, const Place&) {
    if (tensor.data_location() != onnx::TensorProto::EXTERNAL) return;
    for (const auto& entry : tensor.external_data()) {
      if (entry.key() == "location") locations.insert(entry.value());
    }
  });
  return locations;
}

}  // namespace onnx_rewrite
