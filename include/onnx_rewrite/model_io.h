// Loading and writing models: the first and last stages of the pipeline.
#pragma once

#include <filesystem>
#include <string>

#include "onnx_rewrite/model.h"

namespace onnx_rewrite {

struct LoadOptions {
  // A missing external-data file is listed in Model::missing_external_data instead of refused
  // (inspect and check read no weights; a graph-only download can be looked at).
  bool allow_missing_external_data = false;
};

// Reads a model without touching its weights' payload bytes. Throws InputError naming the file
// on anything unreadable: not a file, not protobuf, not an ONNX model, external data whose
// location is absolute, escapes the model's directory or holds a NUL byte, whose file is missing
// or too short, or whose length does not match the tensor's type and shape.
Model load_model(const std::filesystem::path& path, const LoadOptions& options = {});

// A fresh copy of a model as it was loaded (its source bytes parsed again; cheap: weights stay put).
Model reload_model(const Model& model);

// Same, from bytes in memory (tests, rule examples); external data is not allowed.
Model parse_model(const std::string& bytes, const std::string& name);

struct WriteOptions {
  bool allow_overwrite_input = false;  // --in-place
};

// Writes atomically: a temporary file in the target directory, renamed over `path` only once
// complete. External-data files the model references are copied next to it first when
// `path` lies in another directory. Throws InputError / UsageError; never leaves a partial file.
void write_model(const Model& model, const std::filesystem::path& path, const WriteOptions& options = {});

// Writes `bytes` to `path` the same atomic way (reports).
void write_file_atomically(const std::filesystem::path& path, const std::string& bytes);

// The serialized bytes write_model would write (tests; small models).
std::string serialize_model(const Model& model);

}  // namespace onnx_rewrite
