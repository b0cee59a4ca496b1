// bench-measure [--runs N] [--warmup N] [--json] -- COMMAND [ARGS...]
//
// Runs COMMAND (fork/exec, no shell) N times and reports each run's wall time
// and peak RSS (wait4's ru_maxrss), then the median, min and max. Per-run
// lines and the child's own stdout go to stderr, so stdout carries only the
// summary: one human-readable line, or one JSON object with --json.

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Run {
  double wall_s;
  double cpu_s;  // user + system: steadier than wall time on a machine others share
  long peak_rss_kib;
};

// Returns nullopt when the command could not run or did not exit with 0:
// a failed run is not a timing.
std::optional<Run> run_once(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    fmt::print(stderr, "bench-measure: fork: {}\n", std::strerror(errno));
    return std::nullopt;
  }
  if (pid == 0) {
    dup2(STDERR_FILENO, STDOUT_FILENO);
    execvp(argv[0], argv.data());
    fmt::print(stderr, "bench-measure: cannot run {}: {}\n", argv[0], std::strerror(errno));
    _exit(127);
  }

  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) < 0) {
    fmt::print(stderr, "bench-measure: wait4: {}\n", std::strerror(errno));
    return std::nullopt;
  }
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start;
  if (WIFSIGNALED(status)) {
    fmt::print(stderr, "bench-measure: {} killed by signal {}\n", command[0], WTERMSIG(status));
    return std::nullopt;
  }
  if (WEXITSTATUS(status) != 0) {
    fmt::print(stderr, "bench-measure: {} exited with {}\n", command[0], WEXITSTATUS(status));
    return std::nullopt;
  }
  const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return Run{wall.count(), seconds(usage.ru_utime) + seconds(usage.ru_stime), usage.ru_maxrss};  // ru_maxrss: KiB
}

template <class T>
double median(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? double(values[mid]) : (double(values[mid - 1]) + double(values[mid])) / 2;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += c;
    }
  }
  return out + '"';
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Run a command N times; report median wall time and peak RSS."};
  int runs = 5;
  int warmup = 0;
  bool json = false;
  std::vector<std::string> command;
  app.add_option("--runs,-n", runs, "measured runs")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "unmeasured runs first")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "print the summary as one JSON object");
  app.add_option("command", command, "command and its arguments (put -- before it)")->required();
  CLI11_PARSE(app, argc, argv);

  for (int i = 0; i < warmup; ++i) {
    if (!run_once(command)) return 1;
  }
  std::vector<double> walls;
  std::vector<double> cpus;
  std::vector<long> rss;
  for (int i = 0; i < runs; ++i) {
    const std::optional<Run> run = run_once(command);
    if (!run) return 1;
    fmt::print(stderr, "run {}/{}: {:.3f} s, peak RSS {:.1f} MiB\n", i + 1, runs, run->wall_s,
               double(run->peak_rss_kib) / 1024);
    walls.push_back(run->wall_s);
    cpus.push_back(run->cpu_s);
    rss.push_back(run->peak_rss_kib);
  }

  const double median_wall = median(walls);
  const double median_rss_kib = median(rss);
  const auto [min_wall, max_wall] = std::minmax_element(walls.begin(), walls.end());
  if (json) {
    std::vector<std::string> quoted;
    for (const std::string& arg : command) quoted.push_back(json_string(arg));
    fmt::print(
        "{{\"command\": [{}], \"runs\": {}, \"median_wall_s\": {:.6f}, \"min_wall_s\": {:.6f}, "
        "\"max_wall_s\": {:.6f}, \"median_cpu_s\": {:.6f}, \"median_peak_rss_kib\": {:.0f}, \"wall_s\": [{:.6f}], "
        "\"peak_rss_kib\": [{}]}}\n",
        fmt::join(quoted, ", "), runs, median_wall, *min_wall, *max_wall, median(cpus), median_rss_kib,
        fmt::join(walls, ", "), fmt::join(rss, ", "));
  } else {
    fmt::print("median {:.3f} s (min {:.3f}, max {:.3f}), median peak RSS {:.1f} MiB, {} runs: {}\n",
               median_wall, *min_wall, *max_wall, median_rss_kib / 1024, runs, fmt::join(command, " "));
  }
  return 0;
}
