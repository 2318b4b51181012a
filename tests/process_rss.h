// Resident memory and CPU time of a process, as the kernel reports them.
#ifndef PSRT_TESTS_PROCESS_RSS_H_
#define PSRT_TESTS_PROCESS_RSS_H_

#include <sys/types.h>

#include <cstdint>

namespace psrt {

// VmRSS of `pid` in bytes; -1 if it cannot be read (the process is gone).
int64_t RssBytes(pid_t pid);
// User + system CPU seconds `pid` has used (/proc/PID/stat, in clock
// ticks); -1 if it cannot be read.
double CpuSeconds(pid_t pid);

}  // namespace psrt

#endif  // PSRT_TESTS_PROCESS_RSS_H_
