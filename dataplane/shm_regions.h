// The files libfabric's shm keeps its endpoints' regions in:
// /dev/shm/<pid>:<uid>:<index>, unlinked when the endpoint closes. A
// process killed with SIGKILL leaves its own (about 4 MiB of tmpfs each,
// touched), and a later process given the same pid then cannot open shm
// at all (fi_enable: EBUSY). A psrt process holds a shared flock on each
// of its regions while the endpoint is open, so a live psrt endpoint's
// region is never taken for stale, whatever pid namespace shares this
// /dev/shm. (Another libfabric program's, under the same pid and user in
// another pid namespace, holds no such lock and could be.)
#ifndef PSRT_DATAPLANE_SHM_REGIONS_H_
#define PSRT_DATAPLANE_SHM_REGIONS_H_

#include <sys/types.h>

#include "absl/strings/string_view.h"

namespace psrt::dataplane {

// Unlinks the regions named for `pid` (and this user) that no live psrt
// endpoint holds; returns how many. For a process's own pid before it
// opens shm, and for a child after it was reaped.
int RemoveStaleShmRegions(pid_t pid);

// Takes the shared lock on the region of the shm endpoint at
// `fabric_address` ("fi_shm://<pid>:<uid>:<index>"); the returned file
// descriptor holds it until closed. -1 when there is no such region.
int HoldShmRegion(absl::string_view fabric_address);

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_SHM_REGIONS_H_
