#include "runtime/process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "io/atomic_file.h"
#include "onnx_rewrite/error.h"

extern char** environ;

namespace onnx_rewrite {

std::optional<std::string> find_on_path(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0 ? std::optional(program) : std::nullopt;
  const char* path = std::getenv("PATH");
  const std::string directories = path ? path : "/usr/bin:/bin";
  for (size_t begin = 0; begin <= directories.size();) {
    size_t end = directories.find(':', begin);
    if (end == std::string::npos) end = directories.size();
    const std::string directory = directories.substr(begin, end - begin);
    const std::string candidate = (directory.empty() ? "." : directory) + "/" + program;
    std::error_code ec;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate, ec)) return candidate;
    begin = end + 1;
  }
  return std::nullopt;
}

std::string ProcessExit::describe(const std::string& what) const {
  if (signal) return fmt::format("{} was killed by signal {} ({})", what, signal, ::strsignal(signal));
  return fmt::format("{} ended with exit status {}", what, status);
}

ProcessExit run_process(const std::vector<std::string>& argv, const std::vector<std::string>& environment,
                        const std::filesystem::path& log) {
  std::vector<std::string> variables = environment;
  for (char** entry = environ; *entry; ++entry) {
    const std::string variable = *entry;
    const std::string key = variable.substr(0, variable.find('=') + 1);
    bool replaced = false;
    for (const auto& own : environment) replaced = replaced || own.rfind(key, 0) == 0;
    if (!replaced) variables.push_back(variable);
  }
  std::vector<char*> args, envp;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  for (const auto& variable : variables) envp.push_back(const_cast<char*>(variable.c_str()));
  envp.push_back(nullptr);
  const int out = ::open(log.empty() ? "/dev/null" : log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0) throw InputError(log.string(), std::string("cannot create: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    ::execvpe(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(out);
  if (pid < 0) throw UsageError(fmt::format("cannot start {}: {}", argv[0], std::strerror(fork_errno)));
  const ChildOnInterrupt killed_first(pid);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? ProcessExit{WEXITSTATUS(status), 0} : ProcessExit{-1, WTERMSIG(status)};
}

}  // namespace onnx_rewrite
