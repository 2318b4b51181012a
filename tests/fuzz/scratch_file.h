// A scratch file for a fuzz target whose code under test reads a path:
// /dev/shm/psrt_<name>_<pid>, removed when the target exits normally (as
// libFuzzer does at the end of -max_total_time). A crash leaves it; the
// input that caused it is saved by libFuzzer anyway.
#ifndef PSRT_TESTS_FUZZ_SCRATCH_FILE_H_
#define PSRT_TESTS_FUZZ_SCRATCH_FILE_H_

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace psrt::fuzz {

inline std::string& ScratchFileStorage() {
  static std::string path;
  return path;
}

// The same path for every call of one process; `name` names it once.
inline const std::string& ScratchFilePath(const char* name) {
  std::string& path = ScratchFileStorage();
  if (path.empty()) {
    path =
        std::string("/dev/shm/psrt_") + name + "_" + std::to_string(getpid());
    std::atexit([] { unlink(ScratchFileStorage().c_str()); });
  }
  return path;
}

}  // namespace psrt::fuzz

#endif  // PSRT_TESTS_FUZZ_SCRATCH_FILE_H_
