// Loading and writing models: the first and last stages of the pipeline.
#pragma once

#include <filesystem>
#include <memory>
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
  // When set (batch's OUT_DIR): every file lands under this directory. Missing directories on
  // the way are created, a symbolic link among them must lead to a directory inside it, and a
  // symbolic link at the output's own path is replaced, not followed.
  std::filesystem::path inside;
};

class AtomicFile;

// A model written with its external data, in two steps so that it can be committed together
// with other files (its report). The constructor prepares everything as temporary files,
// unnamed where the file system allows (the model, and copies of the data files it needs when
// `path` lies in another directory than the model's) and fails, leaving nothing behind, on
// anything it can find wrong; commit() puts them in place. A data file already at the
// destination is reused when its bytes are the same and never replaced when they differ, also
// against other processes writing into the same directory at the same time: commit() holds an
// flock() on the directories involved and creates each data file only if its name is free
// (linkat() of an unnamed file, else renameat2(RENAME_NOREPLACE), or link() where a file system
// lacks it), comparing with what it finds when the name is taken. Destroyed uncommitted, it removes
// its temporary files and the directories it created.
class PendingModel {
 public:
  PendingModel(const Model& model, const std::filesystem::path& path, const WriteOptions& options = {});
  ~PendingModel();
  PendingModel(const PendingModel&) = delete;
  PendingModel& operator=(const PendingModel&) = delete;
  // Throws InputError if a data file of the same name but other bytes appeared meanwhile; then
  // nothing of this model is left in place.
  void commit();
  // The prepared model under a hidden name in a hidden directory beside its destination, with
  // its data files beside it (hard links of the very files commit() puts in place, or of those
  // already there), for a reader that loads it from a path (ONNX Runtime, to verify it). Nothing
  // appears under the destination's names; the hidden directory goes after commit(), on
  // destruction, and on SIGINT, SIGTERM or SIGHUP. Throws InputError.
  std::filesystem::path expose();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Writes atomically: PendingModel, committed at once. Throws InputError / UsageError; never
// leaves a partial file.
void write_model(const Model& model, const std::filesystem::path& path, const WriteOptions& options = {});

// A file (a report) whose temporary file is created at once, so that a place it can't be written
// fails before any work; its contents may be replaced until commit() moves it into place.
// Destroyed uncommitted, it leaves nothing. Throws InputError naming `path` when it can't be
// written there.
class PendingFile {
 public:
  explicit PendingFile(const std::filesystem::path& path);
  ~PendingFile();
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;
  void set_contents(const std::string& bytes);
  void commit();

 private:
  std::unique_ptr<AtomicFile> file_;
};

// Writes `bytes` to `path` the same atomic way.
void write_file_atomically(const std::filesystem::path& path, const std::string& bytes);

// The serialized bytes write_model would write (tests; small models).
std::string serialize_model(const Model& model);

}  // namespace onnx_rewrite
