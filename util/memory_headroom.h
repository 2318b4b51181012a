// How much more memory this process may allocate before the kernel's OOM
// killer acts: the host's MemAvailable, or less when the process runs in a
// memory-limited cgroup (a container with a memory limit, a Kubernetes pod),
// where the limit minus what the cgroup already holds is what counts.
#ifndef PSRT_UTIL_MEMORY_HEADROOM_H_
#define PSRT_UTIL_MEMORY_HEADROOM_H_

#include <cstdint>
#include <string>

namespace psrt {

struct MemoryHeadroom {
  int64_t bytes = -1;  // -1: unknown
  // The memory of what bounds it (MemTotal, or the cgroup's limit), for a
  // reserve proportional to it.
  int64_t total = 0;
  std::string source;  // what bounds it, for error messages
};

// Where the kernel's files are (tests point these at a tree of their own).
struct MemoryFiles {
  std::string proc = "/proc";
  std::string cgroup = "/sys/fs/cgroup";
};

// MemAvailable of <proc>/meminfo, lowered to the tightest memory limit of
// this process's cgroup and its ancestors (cgroup v2 memory.max, or v1
// memory.limit_in_bytes) minus that cgroup's working set (usage less
// inactive file pages, which the kernel reclaims before it kills: the
// figure the kubelet evicts by).
MemoryHeadroom AvailableMemory(const MemoryFiles& files = {});

}  // namespace psrt

#endif  // PSRT_UTIL_MEMORY_HEADROOM_H_
