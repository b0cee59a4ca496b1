// Files compiled into the binary (rules/*/*.rules, targets/), so that a copied binary works alone.
#pragma once

#include <span>
#include <string_view>

namespace onnx_rewrite {

struct EmbeddedFile {
  std::string_view path;  // relative to the repository, e.g. "rules/group-norm/group-norm.rules"
  std::string_view contents;
};

std::span<const EmbeddedFile> embedded_files();

}  // namespace onnx_rewrite
