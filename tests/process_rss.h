// Resident memory and CPU time of a process, as the kernel reports them.
#ifndef PSRT_TESTS_PROCESS_RSS_H_
#define PSRT_TESTS_PROCESS_RSS_H_

#include <sys/types.h>

#include <cstdint>

namespace psrt {

// VmRSS of `pid` in bytes; -1 if it cannot be read (the process is gone).
int64_t RssBytes(pid_t pid);
// VmHWM of `pid` in bytes (peak resident memory since start or since this
// process's last ResetPeakRss); -1 if it cannot be read.
int64_t PeakRssBytes(pid_t pid);
// Starts this process's VmHWM afresh from its current resident memory.
void ResetPeakRss();
// User + system CPU seconds `pid` has used (/proc/PID/stat, in clock
// ticks); -1 if it cannot be read.
double CpuSeconds(pid_t pid);

}  // namespace psrt

#endif  // PSRT_TESTS_PROCESS_RSS_H_
