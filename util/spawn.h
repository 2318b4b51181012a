// Starting another program from a process that has threads (a test driving
// a cluster, a benchmark). fork() copies only the calling thread: a lock
// another thread held at that moment stays held in the child forever. Any
// allocation there can wait on one (ASan's allocator, which gcc 12 does
// not prepare for fork), as can setenv. SpawnProcess prepares the
// arguments, the environment and the output files first and starts the
// program with posix_spawn, so the child runs no code of ours and takes
// no lock before exec.
#ifndef PSRT_UTIL_SPAWN_H_
#define PSRT_UTIL_SPAWN_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace psrt {

struct SpawnOptions {
  // stdout and stderr go to this file, created if missing and appended to
  // (or emptied first, with `truncate_output`); "/dev/null" discards them.
  // Empty: both are this process's.
  std::string output_file;
  bool truncate_output = false;
  // When >= 0, stdout goes to this descriptor instead (a pipe's write end,
  // made with O_CLOEXEC so the child holds no other copy of the pipe).
  int stdout_fd = -1;
  // Variables set (a value) or removed (nullopt) in the child's copy of
  // this process's environment.
  std::vector<std::pair<std::string, std::optional<std::string>>> environment;
  // argv[0] is looked up in PATH (else it is the program's path).
  bool search_path = false;
};

// Starts argv[0] with `argv` and returns its pid (reap it with waitpid). An
// error names the program and why it could not start (no such file, not
// executable, the output file cannot be opened).
absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const SpawnOptions& options = {});

// Reaps `pid`: its exit code, 128 + the signal that ended it, or -1 if it
// was still running at `deadline` (then it is killed with SIGKILL).
int WaitForExit(pid_t pid, absl::Time deadline);

}  // namespace psrt

#endif  // PSRT_UTIL_SPAWN_H_
