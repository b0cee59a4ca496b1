// `batch`: every model under directories, rewritten in parallel into OUT_DIR; for clusters, a
// stable share of them (--shard), a line per finished model (--report-jsonl) and skipping what
// an earlier run finished (--resume); `merge-reports` joins the shards' lines into one report.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "engine/active_rules.h"
#include "cli/junit.h"
#include "cli/outcome.h"
#include "cli/path_guard.h"

namespace onnx_rewrite {
namespace fs = std::filesystem;

namespace {

struct BatchItem {
  std::string input;
  std::string relative;  // to the input directory it was found in: what --shard partitions
  std::string output;
  std::string error;  // the entry could not even be read (a directory, a dangling or looping link, ...)
  int64_t size = -1;  // in bytes, when found: with more than one worker the biggest go first
};

using FileId = std::pair<dev_t, ino_t>;

struct Found {
  fs::path path;
  fs::path relative;
  std::string error;
  int64_t size = -1;
};

// Walks one input directory. Paths are built from the names met on the way, never from where a
// symbolic link leads, so every output lies under OUT_DIR at the entry's own relative path.
// Symbolic links to directories are followed, except one leading to a directory the walk is
// already inside (a loop), which is a failed item like a directory that can't be listed.
class BatchWalk {
 public:
  BatchWalk(std::optional<FileId> out_dir, std::vector<Found>& found, std::vector<Found>& unreadable)
      : out_dir_(out_dir), found_(found), unreadable_(unreadable) {}

  void walk(const fs::path& directory, const fs::path& relative, FileId id) {
    ancestors_.push_back({id, directory});
    DIR* listing = ::opendir(directory.c_str());
    if (!listing) {
      unreadable_.push_back({directory, relative, std::string("cannot read the directory: ") + std::strerror(errno)});
      ancestors_.pop_back();
      return;
    }
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* entry = ::readdir(listing)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
      errno = 0;
    }
    const int listing_error = errno;
    ::closedir(listing);
    if (listing_error) {
      unreadable_.push_back({directory, relative, std::string("cannot read the directory: ") + std::strerror(listing_error)});
    }
    std::sort(names.begin(), names.end());
    for (const auto& name : names) visit(directory / name, relative / name);
    ancestors_.pop_back();
  }

 private:
  void visit(const fs::path& path, const fs::path& relative) {
    const bool model_name = path.extension() == ".onnx";
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      // A symbolic link that loops or leads nowhere (or an entry gone meanwhile).
      if (model_name) unreadable_.push_back({path, relative, std::string("cannot read: ") + std::strerror(errno)});
      return;
    }
    if (S_ISDIR(st.st_mode)) {
      const FileId id{st.st_dev, st.st_ino};
      if (out_dir_ && id == *out_dir_) return;  // never read our own outputs
      for (const auto& [ancestor, ancestor_path] : ancestors_) {
        if (ancestor == id) {
          unreadable_.push_back({path, relative, "leads to '" + ancestor_path.string() + "', a directory it is in: not followed (a loop)"});
          return;
        }
      }
      walk(path, relative, id);
    } else if (model_name) {
      if (S_ISREG(st.st_mode)) found_.push_back({path, relative, {}, static_cast<int64_t>(st.st_size)});
      else unreadable_.push_back({path, relative, "not a regular file"});
    }
  }

  std::optional<FileId> out_dir_;
  std::vector<Found>& found_;
  std::vector<Found>& unreadable_;
  std::vector<std::pair<FileId, fs::path>> ancestors_;
};

// Every item of the batch, in a fixed order (inputs as given, names sorted within a directory,
// then the entries that can't be read): the same in every shard.
std::vector<BatchItem> collect_batch(const BatchCommand& command) {
  std::vector<BatchItem> items;
  std::vector<Found> unreadable;
  std::set<std::string> outputs;
  std::optional<FileId> out_dir;
  struct stat st {};
  if (::stat(command.output_dir.c_str(), &st) == 0) out_dir = FileId{st.st_dev, st.st_ino};
  for (const auto& input : command.inputs) {
    if (::stat(input.c_str(), &st) != 0) {
      if (errno == ENOENT) throw InputError(input, "no such file or directory");
      throw InputError(input, std::string("cannot read: ") + std::strerror(errno));
    }
    std::vector<Found> found;
    if (S_ISDIR(st.st_mode)) {
      BatchWalk(out_dir, found, unreadable).walk(input, {}, FileId{st.st_dev, st.st_ino});
    } else {
      found.push_back({input, fs::path(input).filename(), {}, static_cast<int64_t>(st.st_size)});
    }
    for (const auto& entry : found) {
      BatchItem item{
          entry.path.string(), entry.relative.generic_string(), (fs::path(command.output_dir) / entry.relative).string(), {}, entry.size};
      if (!outputs.insert(item.output).second) {
        throw UsageError("two inputs would both be written to " + item.output);
      }
      items.push_back(std::move(item));
    }
  }
  for (const auto& entry : unreadable) {
    items.push_back({entry.path.string(), entry.relative.generic_string(), "", entry.error});
  }
  return items;
}

// ---- Sharding ------------------------------------------------------------------------------

struct Shard {
  uint64_t index = 1;  // 1..count
  uint64_t count = 1;
};

// "K/N", 1 ≤ K ≤ N.
Shard parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  const auto number = [&](const std::string& part, uint64_t& value) {
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos) return false;
    value = std::stoull(part);
    return true;
  };
  Shard shard;
  if (slash == std::string::npos || !number(text.substr(0, slash), shard.index) || !number(text.substr(slash + 1), shard.count) ||
      shard.count == 0 || shard.index == 0 || shard.index > shard.count) {
    throw UsageError("--shard " + text + ": expected K/N with 1 <= K <= N (e.g. 2/8)");
  }
  return shard;
}

// FNV-1a of the path relative to its input directory: the same model lands in the same shard on
// every machine, whatever the directory is mounted as, and adding models moves no other one.
bool in_shard(const std::string& relative, const Shard& shard) {
  uint64_t hash = 14695981039346656037ull;
  for (const unsigned char c : relative) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash % shard.count == shard.index - 1;
}

// ---- JSON Lines and resuming ----------------------------------------------------------------

// What identifies an input for --resume: a model changed since (size or modification time) is
// done again.
struct InputStamp {
  int64_t size = -1;
  int64_t mtime_ns = -1;
};

InputStamp stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// The fields a line carries beyond the model's report object; merge-reports drops them again.
constexpr const char* kLineOnlyKeys[] = {"tool", "options", "dry_run", "index", "batch_size", "input_stamp"};

bool line_only_key(const std::string& key) {
  return std::find(std::begin(kLineOnlyKeys), std::end(kLineOnlyKeys), key) != std::end(kLineOnlyKeys);
}

// A model's report object without the line-only fields.
JsonValue report_object(const JsonValue& line) {
  JsonValue object;
  object.kind = JsonValue::Kind::kObject;
  for (const auto& member : line.members) {
    if (!line_only_key(member.key)) object.members.push_back(member);
  }
  return object;
}

std::string compact(const JsonValue& value) {
  JsonWriter json(true);
  write_json(json, value);
  return json.str();
}

// The lines of a JSON Lines file that are report lines. A line cut short by a killed run is
// skipped wherever it is (a later run starts on the next line): at worst its model is done
// again, or reported missing by merge-reports. A file with no report line at all is an error.
std::vector<JsonValue> read_lines(const std::string& path, bool missing_is_empty) {
  std::error_code ec;
  if (missing_is_empty && !fs::exists(path, ec)) return {};
  if (fs::is_directory(path, ec)) throw InputError(path, "is a directory, not a JSON Lines report");
  std::ifstream in(path);
  if (!in) throw InputError(path, std::string("cannot read: ") + std::strerror(errno));
  std::vector<JsonValue> lines;
  bool any_text = false;
  for (std::string text; std::getline(in, text);) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    any_text = true;
    auto line = parse_json(text);
    if (line && line->kind == JsonValue::Kind::kObject && line->find("model") && line->find("status")) lines.push_back(std::move(*line));
  }
  if (any_text && lines.empty()) throw InputError(path, "not an onnx-rewrite JSON Lines report (batch --report-jsonl)");
  return lines;
}

// The JSON Lines stream: opened (appending) before any work, one whole line per write.
class LineStream {
 public:
  explicit LineStream(const std::string& path) : path_(path) {
    require_directory_of(path, "report");
    std::error_code ec;
    if (fs::is_directory(path, ec)) throw UsageError(path + ": the report is a directory");
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);  // read: its last byte
    if (fd_ < 0) throw InputError(path, std::string("cannot write: ") + std::strerror(errno));
    // A line cut short by a killed run must not swallow the next one.
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && st.st_size > 0) {
      char last = '\n';
      if (::pread(fd_, &last, 1, st.st_size - 1) == 1 && last != '\n') write_all("\n");
    }
  }
  ~LineStream() {
    if (fd_ >= 0) ::close(fd_);
  }
  LineStream(const LineStream&) = delete;
  LineStream& operator=(const LineStream&) = delete;

  void write(const std::string& line) { write_all(line); }
  const std::string& path() const { return path_; }

 private:
  void write_all(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw InputError(path_, std::string("cannot write: ") + std::strerror(errno));
      done += static_cast<size_t>(n);
    }
  }

  std::string path_;
  int fd_ = -1;
};

// ---- Reports of the whole batch ----------------------------------------------------------------

const std::vector<std::string> kStatuses = {"rewritten", "unchanged", "target-not-met", "verify-failed", "failed"};

// One model as the batch report and JUnit see it: fresh from this run, or read back from a line.
struct Entry {
  size_t index = 0;
  JsonValue object;  // the model's report object
  bool resumed = false;
};

JsonValue outcome_object(const ModelOutcome& outcome, const std::string& target) {
  JsonWriter json(true);
  write_outcome_json(json, outcome, target);
  return *parse_json(json.str());
}

}  // namespace

JunitCase junit_case(const JsonValue& model, const std::string& command) {
  JunitCase test;
  test.name = model.string_or("model", "");
  const std::string target = model.string_or("target", "");
  test.classname = "onnx-rewrite." + command + "." + target;
  if (const JsonValue* timing = model.find("timing")) test.seconds = timing->number_or("total_seconds", 0);
  const std::string status = model.string_or("status", "");
  if (status == "failed") {
    test.result = JunitCase::Result::kError;
    const JsonValue* error = model.find("error");
    test.message = error ? error->string_or("message", "failed") : "failed";
    if (error && error->find("file") && error->find("file")->kind == JsonValue::Kind::kString) {
      test.details = error->string_or("file", "") + ": " + test.message;
    }
  } else if (status == "verify-failed") {
    test.result = JunitCase::Result::kFailed;
    const JsonValue* error = model.find("error");
    test.message = error ? error->string_or("message", "verify failed") : "verify failed";
  } else if (status == "target-not-met") {
    test.result = JunitCase::Result::kFailed;
    std::vector<std::string> lines;
    if (const JsonValue* check = model.find("check")) {
      if (const JsonValue* unloadable = check->find("unloadable")) {
        for (const auto& entry : unloadable->items) {
          lines.push_back(fmt::format("{}.{} x{} ({}): {}", entry.string_or("domain", ""), entry.string_or("op_type", ""),
                                      entry.number_or("count", 0), entry.string_or("where", ""), entry.string_or("reason", "")));
        }
      }
      if (const JsonValue* problems = check->find("opset_problems")) {
        for (const auto& problem : problems->items) lines.push_back(problem.text);
      }
    }
    test.message = fmt::format("target {} not met: {} problem{}", target, lines.size(), lines.size() == 1 ? "" : "s");
    test.details = fmt::format("{}", fmt::join(lines, "\n"));
  }
  return test;
}

namespace {

struct BatchTotals {
  std::map<std::string, int64_t> statuses;
  int64_t nodes_before = 0, nodes_after = 0;
  double model_seconds = 0;
  int64_t resumed = 0;
  int64_t count(const std::string& status) const {
    auto found = statuses.find(status);
    return found == statuses.end() ? 0 : found->second;
  }
};

BatchTotals totals_of(const std::vector<Entry>& entries) {
  BatchTotals totals;
  for (const auto& entry : entries) {
    ++totals.statuses[entry.object.string_or("status", "failed")];
    if (const JsonValue* nodes = entry.object.find("nodes")) {
      totals.nodes_before += static_cast<int64_t>(nodes->number_or("before", 0));
      totals.nodes_after += static_cast<int64_t>(nodes->number_or("after", 0));
    }
    if (const JsonValue* timing = entry.object.find("timing")) totals.model_seconds += timing->number_or("total_seconds", 0);
    totals.resumed += entry.resumed;
  }
  return totals;
}

// The report of a whole batch (docs/cli.md, "batch --report"); `run` writes the run's own fields.
std::string batch_report(const std::function<void(JsonWriter&)>& run, const std::string& target, const std::vector<Entry>& entries,
                         std::optional<double> wall_seconds, const std::vector<std::string>& notes) {
  const BatchTotals totals = totals_of(entries);
  JsonWriter json;
  json.begin_object();
  run(json);
  json.key("target").value(target);
  json.key("summary").begin_object();
  json.key("models").value(static_cast<int64_t>(entries.size()));
  for (const auto& status : kStatuses) json.key(status).value(totals.count(status));
  json.key("resumed").value(totals.resumed);
  json.key("nodes_before").value(totals.nodes_before);
  json.key("nodes_after").value(totals.nodes_after);
  json.end_object();
  json.key("timing").begin_object();
  json.key("model_seconds").value(totals.model_seconds);
  json.key("wall_seconds");
  if (wall_seconds) json.value(*wall_seconds);
  else json.null();
  json.end_object();
  json.key("notes").strings(notes);
  json.key("models").begin_array();
  for (const auto& entry : entries) write_json(json, entry.object);
  json.end_array();
  json.end_object();
  return json.str();
}

std::string junit_report(const std::string& command, const std::string& target, const std::vector<Entry>& entries) {
  std::vector<JunitCase> cases;
  for (const auto& entry : entries) cases.push_back(junit_case(entry.object, command));
  return junit_xml("onnx-rewrite " + command + " --target " + target, cases);
}

// ---- The batch ----------------------------------------------------------------------------------

struct Resumable {
  std::map<std::string, JsonValue> done;  // by input path: the last line finished with these options
};

Resumable read_resumable(const BatchCommand& command, const std::string& options_text) {
  Resumable resumable;
  if (command.resume.empty()) return resumable;
  for (auto& line : read_lines(command.resume, true)) {
    const JsonValue* options = line.find("options");
    if (!options || compact(*options) != options_text) continue;
    const std::string model = line.string_or("model", "");
    resumable.done[model] = std::move(line);
  }
  return resumable;
}

// A line of an earlier run stands for this model when the model is unchanged since, it did not
// fail, and what it wrote is still there.
bool still_done(const JsonValue& line, const BatchItem& item) {
  const std::string status = line.string_or("status", "failed");
  if (status == "failed" || status == "verify-failed" || !item.error.empty()) return false;
  const JsonValue* stamp = line.find("input_stamp");
  const InputStamp now = stamp_of(item.input);
  if (!stamp || stamp->number_or("size", -2) != static_cast<double>(now.size) ||
      stamp->string_or("mtime_ns", "") != std::to_string(now.mtime_ns)) {
    return false;
  }
  std::error_code ec;
  return line.string_or("output", "") == item.output && fs::exists(item.output, ec);
}

// What the command line names, before anything is written: OUT_DIR is no input directory, the
// reports are none of the files read (rule files, --resume, the models in the input directories)
// and none of each other.
PathGuard guard_batch_paths(const BatchCommand& command) {
  PathGuard guard;
  guard.reads_rules(command.rules.paths);
  const FileIdentity out_dir = identify(command.output_dir);
  for (const auto& input : command.inputs) {
    std::error_code ec;
    if (!fs::is_directory(input, ec)) continue;
    if (same_file(identify(input), out_dir)) {
      throw PathCollision(input +
                          ": -o names this input directory, and batch writes each model to its own relative path under "
                          "OUT_DIR: that would replace the inputs; choose another OUT_DIR (batch never rewrites in place; "
                          "`rewrite --in-place` replaces one model)");
    }
    guard.reads_tree(input, command.output_dir);
  }
  for (const auto& [path, what] :
       {std::pair{command.report, "--report"}, {command.junit, "--junit"}, {command.report_jsonl, "--report-jsonl"}}) {
    if (!path.empty()) guard.writes(path, what);
  }
  // Resuming from the file the new lines are appended to is what --resume is for.
  if (!command.resume.empty() && (command.report_jsonl.empty() || !same_file(identify(command.resume), identify(command.report_jsonl)))) {
    guard.reads(command.resume, "--resume");
  }
  return guard;
}

// The batch's line of totals, then a line for each model that failed or missed the target.
void print_summary(const BatchCommand& command, const Target& target, const std::vector<Entry>& entries, const BatchTotals& totals,
                   size_t batch_size, std::ostream& out) {
  std::string scope = command.shard.empty() ? "" : fmt::format(" (shard {} of {} models)", command.shard, batch_size);
  out << fmt::format("batch: {} model(s){}: {} rewritten, {} unchanged, {} target not met, {} failed", entries.size(), scope,
                     totals.count("rewritten"), totals.count("unchanged"), totals.count("target-not-met"), totals.count("failed"));
  if (command.verify) out << fmt::format(", {} failed verification", totals.count("verify-failed"));
  if (totals.resumed) out << fmt::format("; {} done by an earlier run (--resume)", totals.resumed);
  out << "\n";
  for (const auto& entry : entries) {
    const JsonValue& model = entry.object;
    const std::string status = model.string_or("status", "");
    if (status != "failed" && status != "verify-failed") continue;
    const JsonValue* error = model.find("error");
    const std::string file = error ? error->string_or("file", "") : "";
    const std::string message = error ? error->string_or("message", "") : "";
    const std::string input = model.string_or("model", "");
    out << fmt::format("  {}: {}: {}\n", status == "failed" ? "failed" : "verify failed", input,
                       file.empty() || file == input ? message : file + ": " + message);
  }
  for (const auto& entry : entries) {
    if (entry.object.string_or("status", "") != "target-not-met") continue;
    const JunitCase test = junit_case(entry.object, "batch");
    std::string kinds = test.details;
    std::replace(kinds.begin(), kinds.end(), '\n', ';');
    out << fmt::format("  target {} not met: {}: {}\n", target.name, entry.object.string_or("model", ""), kinds);
  }
}

// One model of the batch, rewritten and written; a model that fails is an outcome, not an
// exception. A path collision (a model's data file is a report's path) is the exception that
// stops the batch.
ModelOutcome rewrite_one(const BatchItem& item, const RuleSet& rules, const RewriteOptions& options, const Target& target,
                         const ProcessOptions& how) {
  try {
    if (!item.error.empty()) throw InputError(item.input, item.error);
    Processed processed = process(item.input, item.output, rules, options, target, how);
    if (processed.outcome.status != "verify-failed") {
      const auto start = std::chrono::steady_clock::now();
      processed.output->commit();
      processed.outcome.timing.write += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    return std::move(processed.outcome);
  } catch (...) {
    if (is_path_collision(std::current_exception())) throw;
    ModelOutcome outcome;
    outcome.input = item.input;
    outcome.output = item.output;
    outcome.status = "failed";
    outcome.error = describe_error(std::current_exception());
    return outcome;
  }
}

// What every model of one batch run shares.
struct BatchRun {
  const BatchCommand& command;
  const Target& target;
  const RuleSet& rules;
  const RewriteOptions& options;
  const ProcessOptions& how;
  const std::vector<BatchItem>& all;
  std::function<void(JsonWriter&)> run_fields;
  LineStream* lines;  // --report-jsonl, or null

  // A line: the run's fields, where the model stands in the whole batch, its input's stamp, then
  // the model's report object.
  std::string line_for(const JsonValue& object, size_t index) const {
    JsonWriter json(true);
    json.begin_object();
    run_fields(json);
    json.key("index").value(static_cast<int64_t>(index));
    json.key("batch_size").value(static_cast<int64_t>(all.size()));
    const InputStamp stamp = stamp_of(all[index].input);
    json.key("input_stamp").begin_object().key("size").value(stamp.size).key("mtime_ns").value(std::to_string(stamp.mtime_ns)).end_object();
    for (const auto& [key, member] : object.members) {
      json.key(key);
      write_json(json, member);
    }
    json.end_object();
    return json.str();
  }
};

// The options as a line records them: --resume takes only lines written with the same.
std::string recorded_options(const BatchCommand& command) {
  JsonWriter json(true);
  write_options_json(json, reported_options(command.options, command.overrides), command.rules, command.provenance,
                     command.verify ? &command.verify_options : nullptr);
  return json.str();
}

// The entries of this shard's models (`mine`, indexes into the batch); those an earlier run
// finished with the same options are taken from its lines. Returns the positions left to do.
std::vector<size_t> resume_entries(const BatchRun& run, const Resumable& resumable, const std::vector<size_t>& mine,
                                   bool lines_are_resume_file, std::vector<Entry>& entries) {
  entries.assign(mine.size(), Entry{});
  std::vector<size_t> todo;
  for (size_t k = 0; k < mine.size(); ++k) {
    entries[k].index = mine[k];
    const BatchItem& item = run.all[mine[k]];
    auto previous = resumable.done.find(item.input);
    if (previous != resumable.done.end() && still_done(previous->second, item)) {
      entries[k].object = report_object(previous->second);
      entries[k].resumed = true;
      if (run.lines && !lines_are_resume_file) run.lines->write(run.line_for(entries[k].object, mine[k]));
    } else {
      todo.push_back(k);
    }
  }
  return todo;
}

// Rewrites the entries at positions `todo` on `jobs` threads, each model's line and progress as
// it finishes. A path collision stops the batch and is thrown once the threads are done, as is a
// failure to write a line.
void rewrite_entries(const BatchRun& run, std::vector<size_t> todo, int jobs, std::vector<Entry>& entries, std::ostream& err) {
  if (jobs > 1) {
    // Biggest first: the models left at the end are then the quickest, and no worker waits long
    // for another's last one.
    const auto size = [&](size_t k) { return run.all[entries[k].index].size; };
    std::stable_sort(todo.begin(), todo.end(), [&](size_t a, size_t b) { return size(a) > size(b); });
  }
  std::atomic<size_t> next{0};
  size_t done = 0;
  std::mutex print;
  std::exception_ptr stream_error;
  std::exception_ptr collision;  // a model's data file is a report's path: the batch stops, no report written
  auto work = [&] {
    for (size_t t = next++; t < todo.size(); t = next++) {
      const size_t k = todo[t];
      const BatchItem& item = run.all[entries[k].index];
      ModelOutcome outcome;
      try {
        outcome = rewrite_one(item, run.rules, run.options, run.target, run.how);
      } catch (...) {
        std::lock_guard lock(print);
        if (!collision) collision = std::current_exception();
        next = todo.size();
        continue;
      }
      entries[k].object = outcome_object(outcome, run.target.name);
      std::lock_guard lock(print);
      if (run.lines && !stream_error) {
        try {
          run.lines->write(run.line_for(entries[k].object, entries[k].index));
        } catch (...) {
          stream_error = std::current_exception();
        }
      }
      ++done;
      if (run.command.progress_line) {
        err << fmt::format("\r\033[K[{}/{}] {}", done, todo.size(), item.input) << std::flush;
      } else {
        err << fmt::format("[{}/{}] {} {}{}\n", done, todo.size(), outcome.status, item.input,
                           outcome.error ? ": " + error_text(outcome) : "");
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::min<int>(jobs, static_cast<int>(std::max<size_t>(todo.size(), 1))); ++t) threads.emplace_back(work);
  for (auto& thread : threads) thread.join();
  if (run.command.progress_line && !todo.empty()) err << "\n";
  if (collision) std::rethrow_exception(collision);
  if (stream_error) std::rethrow_exception(stream_error);
}

// Makes -o OUT_DIR; whether it was made by this run.
bool make_output_dir(const std::string& dir) {
  std::error_code ec;
  const bool made = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw UsageError(dir + ": cannot create the output directory" + (ec ? ": " + ec.message() : ""));
  return made;
}

int batch_all(const BatchCommand& command, PathGuard& guard, PendingFile* report, PendingFile* junit, std::ostream& out,
              std::ostream& err) {
  const auto started = std::chrono::steady_clock::now();
  const Target& target = find_target(command.options.target);
  const Shard shard = command.shard.empty() ? Shard{} : parse_shard(command.shard);
  const RuleSet rules = command.rules.load();
  const RewriteOptions options = effective_options(command.options, command.overrides);
  active_rules(rules, options);
  // Found before any work: without a runtime to run them in, nothing is worth doing.
  const std::optional<Runtime> runtime = command.verify ? std::optional(find_runtime(command.verify_options.runtime)) : std::nullopt;
  const auto all = collect_batch(command);
  for (const auto& item : all) {
    guard.reads(item.input, "the input model");
    if (item.error.empty()) guard.writes(item.output, "its output in -o OUT_DIR", false);
  }
  const Resumable resumable = read_resumable(command, recorded_options(command));
  std::unique_ptr<LineStream> lines;
  if (!command.report_jsonl.empty()) lines = std::make_unique<LineStream>(command.report_jsonl);
  std::error_code ec;
  const bool lines_are_resume_file =
      lines && !command.resume.empty() && fs::exists(command.resume, ec) && fs::equivalent(command.report_jsonl, command.resume, ec);
  const bool made_output_dir = make_output_dir(command.output_dir);

  std::vector<size_t> mine;  // indexes into `all` of this shard's items
  for (size_t i = 0; i < all.size(); ++i) {
    if (in_shard(all[i].relative, shard)) mine.push_back(i);
  }
  const int jobs = command.jobs > 0 ? command.jobs : std::max(1u, std::thread::hardware_concurrency());
  ProcessOptions how;
  how.in_batch = true;
  how.provenance = command.provenance;
  how.write.inside = command.output_dir;
  how.guard = &guard;
  // Each worker's ONNX Runtime gets its share of the cores.
  VerifyOptions verify_options = command.verify_options;
  verify_options.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / jobs);
  if (runtime) how.runtime = &*runtime, how.verify = &verify_options;
  const VerifyOptions* verify = command.verify ? &command.verify_options : nullptr;
  const BatchRun run{command,
                     target,
                     rules,
                     options,
                     how,
                     all,
                     [&](JsonWriter& json) {
                       write_run_json(json, reported_options(command.options, command.overrides), command.rules, command.provenance, false,
                                      verify);
                     },
                     lines.get()};

  std::vector<Entry> entries;
  const std::vector<size_t> todo = resume_entries(run, resumable, mine, lines_are_resume_file, entries);
  try {
    rewrite_entries(run, todo, jobs, entries, err);
  } catch (...) {
    if (made_output_dir && is_path_collision(std::current_exception()))
      fs::remove(command.output_dir, ec);  // only if still empty: nothing was written
    throw;
  }

  const BatchTotals totals = totals_of(entries);
  print_summary(command, target, entries, totals, all.size(), out);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::vector<std::string> notes;
  if (!command.shard.empty())
    notes.push_back(fmt::format("shard {}: {} of the batch's {} models", command.shard, entries.size(), all.size()));
  if (report) report->set_contents(batch_report(run.run_fields, target.name, entries, wall, notes));
  if (junit) junit->set_contents(junit_report("batch", target.name, entries));
  if (report) report->commit();
  if (junit) junit->commit();
  return totals.count("failed") + totals.count("target-not-met") + totals.count("verify-failed") > 0
             ? static_cast<int>(ExitCode::kTargetNotMet)
             : 0;
}

}  // namespace

int run_batch(const BatchCommand& command, std::ostream& out, std::ostream& err) {
  if (command.output_dir.empty()) throw UsageError("batch needs -o OUT_DIR");
  PathGuard guard = guard_batch_paths(command);
  const auto report = reserve_report(command.report);
  const auto junit = reserve_report(command.junit);
  try {
    return batch_all(command, guard, report.get(), junit.get(), out, err);
  } catch (...) {
    report_failure(report.get(), std::current_exception(), [&](JsonWriter& json) {
      write_run_json(json, reported_options(command.options, command.overrides), command.rules, command.provenance, false,
                     command.verify ? &command.verify_options : nullptr);
      json.key("target").value(command.options.target);
    });
    throw;
  }
}

int run_merge_reports(const MergeCommand& command, std::ostream& out, std::ostream& err) {
  PathGuard guard;
  for (const auto& path : command.inputs) guard.reads(path, "a report being merged");
  if (!command.output.empty()) guard.writes(command.output, "-o");
  if (!command.junit.empty()) guard.writes(command.junit, "--junit");
  const auto report = reserve_report(command.output);
  const auto junit = reserve_report(command.junit);
  // The last line per model wins (a resumed shard may have failed on it first); every line must
  // come from the same options.
  std::map<int64_t, JsonValue> by_index;
  std::optional<std::string> options_text;
  JsonValue run;  // the first line's run fields
  int64_t batch_size = -1;
  for (const auto& path : command.inputs) {
    for (auto& line : read_lines(path, false)) {
      const JsonValue* options = line.find("options");
      const JsonValue* index = line.find("index");
      if (!options || !index || index->kind != JsonValue::Kind::kNumber) {
        throw InputError(path, "a line lacks the options or index that `batch --report-jsonl` writes");
      }
      if (!options_text) {
        options_text = compact(*options);
        run = line;
      } else if (compact(*options) != *options_text) {
        throw InputError(path, "its lines come from a batch run with other options than " + command.inputs.front() + "'s: not one batch");
      }
      batch_size = std::max<int64_t>(batch_size, static_cast<int64_t>(line.number_or("batch_size", -1)));
      by_index[static_cast<int64_t>(std::strtoll(index->text.c_str(), nullptr, 10))] = std::move(line);
    }
  }
  if (!options_text) throw InputError(command.inputs.front(), "no report lines to merge");
  std::vector<Entry> entries;
  for (const auto& [index, line] : by_index) entries.push_back({static_cast<size_t>(index), report_object(line), false});
  std::vector<std::string> notes;
  const int64_t missing = batch_size - static_cast<int64_t>(entries.size());
  if (missing > 0) {
    notes.push_back(
        fmt::format("incomplete: {} of the batch's {} models have no line (a shard missing or not finished)", missing, batch_size));
    err << "onnx-rewrite: merge-reports: " << notes.back() << "\n";
  }
  const std::string target = run.string_or("target", "");
  const auto run_fields = [&](JsonWriter& json) {
    for (const char* key : {"tool", "options", "dry_run"}) {
      if (const JsonValue* member = run.find(key)) {
        json.key(key);
        write_json(json, *member);
      }
    }
  };
  if (report) report->set_contents(batch_report(run_fields, target, entries, std::nullopt, notes));
  if (junit) junit->set_contents(junit_report("batch", target, entries));
  if (report) report->commit();
  if (junit) junit->commit();
  const BatchTotals totals = totals_of(entries);
  const int64_t verify_failed = totals.count("verify-failed");
  out << fmt::format("merged {} model(s) from {} file(s): {} rewritten, {} unchanged, {} target not met, {} failed{}{}\n", entries.size(),
                     command.inputs.size(), totals.count("rewritten"), totals.count("unchanged"), totals.count("target-not-met"),
                     totals.count("failed"), verify_failed ? fmt::format(", {} failed verification", verify_failed) : "",
                     missing > 0 ? fmt::format(", {} missing", missing) : "");
  return totals.count("failed") + totals.count("target-not-met") + verify_failed + std::max<int64_t>(missing, 0) > 0
             ? static_cast<int>(ExitCode::kTargetNotMet)
             : 0;
}

}  // namespace onnx_rewrite
