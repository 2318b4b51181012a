#include "util/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

extern char** environ;

namespace psrt {
namespace {

// This process's environment with `changes` applied, as NAME=value strings.
std::vector<std::string> ChildEnvironment(
    const std::vector<std::pair<std::string, std::optional<std::string>>>&
        changes) {
  absl::flat_hash_set<std::string> changed;
  for (const auto& change : changes) changed.insert(change.first);
  std::vector<std::string> entries;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const char* equals = std::strchr(*entry, '=');
    if (equals == nullptr) continue;
    if (!changed.contains(std::string(*entry, equals - *entry))) {
      entries.emplace_back(*entry);
    }
  }
  for (const auto& [name, value] : changes) {
    if (value.has_value()) entries.push_back(absl::StrCat(name, "=", *value));
  }
  return entries;
}

// NULL-terminated pointers into `strings`, which must outlive them.
std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const SpawnOptions& options) {
  if (argv.empty() || argv[0].empty()) {
    return absl::InvalidArgumentError("SpawnProcess: no program given");
  }
  std::vector<std::string> arguments = argv;
  std::vector<char*> argument_pointers = Pointers(arguments);
  std::vector<std::string> environment = ChildEnvironment(options.environment);
  std::vector<char*> environment_pointers = Pointers(environment);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int failed_action = 0;
  if (!options.output_file.empty()) {
    // Not O_CLOEXEC: the child opens it as its fd 2 itself.
    const int flags =
        O_WRONLY | O_CREAT | (options.truncate_output ? O_TRUNC : O_APPEND);
    failed_action |= posix_spawn_file_actions_addopen(
        &actions, STDERR_FILENO, options.output_file.c_str(), flags, 0644);
    if (options.stdout_fd < 0) {
      failed_action |= posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO,
                                                        STDOUT_FILENO);
    }
  }
  if (options.stdout_fd >= 0) {
    failed_action |= posix_spawn_file_actions_adddup2(
        &actions, options.stdout_fd, STDOUT_FILENO);
  }
  pid_t pid = -1;
  int error = failed_action;
  if (error == 0) {
    error = (options.search_path ? posix_spawnp : posix_spawn)(
        &pid, arguments[0].c_str(), &actions, nullptr, argument_pointers.data(),
        environment_pointers.data());
  }
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot start ", absl::StrJoin(argv, " ").substr(0, 200),
        options.output_file.empty()
            ? ""
            : absl::StrCat(" (output to ", options.output_file, ")"),
        ": ", std::strerror(error)));
  }
  return pid;
}

int WaitForExit(pid_t pid, absl::Time deadline) {
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace psrt
