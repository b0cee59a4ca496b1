#include "cli/path_guard.h"

#include <fmt/format.h>

#include "io/atomic_file.h"
#include "rules/rule.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

bool lies_under(const std::string& path, const std::string& root) {
  return path.size() > root.size() && path.compare(0, root.size(), root) == 0 && (root.back() == '/' || path[root.size()] == '/');
}

}  // namespace

bool is_path_collision(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const PathCollision&) {
    return true;
  } catch (...) {
    return false;
  }
}

const PathGuard::Entry* PathGuard::find(const FileIdentity& identity, bool any) const {
  const auto pick = [&](size_t index) { return any || entries_[index].written ? &entries_[index] : nullptr; };
  if (auto it = by_path_.find(identity.resolved); it != by_path_.end()) {
    if (const Entry* entry = pick(it->second)) return entry;
  }
  if (identity.inode) {
    if (auto it = by_inode_.find(*identity.inode); it != by_inode_.end()) return pick(it->second);
  }
  return nullptr;
}

void PathGuard::add(const FileIdentity& identity, Entry entry) {
  entry.resolved = identity.resolved;
  entries_.push_back(std::move(entry));
  by_path_.emplace(identity.resolved, entries_.size() - 1);
  if (identity.inode) by_inode_.emplace(*identity.inode, entries_.size() - 1);
}

void PathGuard::collide(const Entry& written, const Entry& other) {
  const std::string also = other.path == written.path ? "" : " '" + other.path + "'";
  if (other.written) {
    throw PathCollision(
        fmt::format("{}: {} and {}{} are the same file; nothing was written", written.path, written.what, other.what, also));
  }
  throw PathCollision(fmt::format("{}: {} would replace {}{}; nothing was written", written.path, written.what, other.what, also));
}

void PathGuard::refuse_inside_trees(const Entry& entry) const {
  for (const auto& tree : trees_) {
    if (!lies_under(entry.resolved, tree.root) || (!tree.skipped.empty() && lies_under(entry.resolved, tree.skipped))) continue;
    throw PathCollision(
        fmt::format("{}: {} lies inside the input directory '{}', where batch reads models and their data files; "
                    "write it outside the input directories (inside OUT_DIR is fine); nothing was written",
                    entry.path, entry.what, tree.path));
  }
}

void PathGuard::reads(const fs::path& path, const std::string& what) {
  const FileIdentity identity = identify(path);
  if (const Entry* written = find(identity, false)) collide(*written, Entry{path.string(), what, false, identity.resolved});
  if (!find(identity, true)) add(identity, Entry{path.string(), what, false, {}});
}

void PathGuard::writes(const fs::path& path, const std::string& what, bool follow_last) {
  const FileIdentity identity = identify(path, follow_last);
  Entry entry{path.string(), what, true, identity.resolved};
  if (const Entry* other = find(identity, true)) collide(entry, *other);
  refuse_inside_trees(entry);
  add(identity, std::move(entry));
}

void PathGuard::reads_rules(const std::vector<std::string>& paths) {
  for (const auto& path : paths) {
    for (const auto& file : rule_files(path)) reads(file, "the rule file");
  }
}

void PathGuard::reads_tree(const fs::path& directory, const fs::path& skipped) {
  trees_.push_back(
      {resolve_path(directory, true).string(), skipped.empty() ? "" : resolve_path(skipped, true).string(), directory.string()});
  for (const auto& entry : entries_) {
    if (entry.written) refuse_inside_trees(entry);
  }
}

void PathGuard::check_model_data(const Model& model, const fs::path& output) const {
  for (const auto& location : external_locations(model)) {
    const fs::path from = model.directory() / location;
    const FileIdentity read = identify(from);
    if (const Entry* written = find(read, false)) collide(*written, Entry{from.string(), "a data file of the input model", false, {}});
    if (output.empty()) continue;
    const fs::path to = directory_of(output) / location;
    const FileIdentity copy = identify(to);
    if (same_file(read, copy)) continue;  // the output is beside the input: its data files are shared, not written
    if (const Entry* other = find(copy, true)) collide(Entry{to.string(), "the output's copy of a data file", true, {}}, *other);
  }
}

}  // namespace onnx_rewrite
