// What says two processes can share memory: the same kernel boot and the
// same IPC, PID and mount namespaces (shm's cross-memory attach and
// /dev/shm need all of them), and the same network namespace. Two pods
// on one node differ; so do two network namespaces of one host (tests'
// "hosts", which a partition of their network must cut apart: shared
// memory would not notice it).
#ifndef PSRT_DATAPLANE_HOST_KEY_H_
#define PSRT_DATAPLANE_HOST_KEY_H_

#include <string>

namespace psrt::dataplane {

// "boot id|ipc:[...]|pid:[...]|mnt:[...]|net:[...]"; empty where /proc cannot
// tell (then no client is taken to share this host).
std::string SharedMemoryHostKey();

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_HOST_KEY_H_
