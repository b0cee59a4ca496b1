// Child processes: finding a program on PATH and running it (the runtime drivers, Python's probe).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace onnx_rewrite {

// `program` as execvp would find it: a path when it has a '/', else in $PATH.
std::optional<std::string> find_on_path(const std::string& program);

struct ProcessExit {
  int status = -1;  // the exit status, or -1 when a signal ended it
  int signal = 0;
  std::string describe(const std::string& what) const;  // "WHAT was killed by signal 11 (Segmentation fault)"
};

// Runs `argv` (found on PATH) with `environment` (KEY=VALUE) replacing those of ours, its stdout
// and stderr to `log` (/dev/null when empty), and waits for it. The child dies with this process
// (PR_SET_PDEATHSIG), and is killed first if this process is interrupted (ChildOnInterrupt).
// Throws InputError naming `log` when it can't be written, UsageError when nothing starts.
ProcessExit run_process(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
                        const std::filesystem::path& log);

}  // namespace onnx_rewrite
