#include "cli/data_plane_flags.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gflags/gflags.h"

DEFINE_string(data_plane, "fabric",
              "How pushes and pulls travel: grpc, or fabric (libfabric beside "
              "gRPC, over --data_plane_providers; gRPC, with a warning, under "
              "TLS or where no provider opens, or where the PS does not "
              "serve it). grpc keeps every byte on gRPC (a PS then listens "
              "on one port, and holds about 10 MiB less).");
DEFINE_string(data_plane_providers, "tcp",
              "The data plane's libfabric providers: tcp (or another by "
              "name) for every host; add shm for shared memory between a "
              "worker and a PS on one host (in one network namespace; "
              "opt-in: on a host without spare cores its polling costs "
              "training more than it saves, docs/benchmarks.md).");

namespace psrt {

absl::StatusOr<DataPlaneFlags> DataPlaneFromFlags() {
  if (FLAGS_data_plane != "fabric" && FLAGS_data_plane != "grpc") {
    return absl::InvalidArgumentError(
        absl::StrCat("--data_plane=", FLAGS_data_plane,
                     ": expected fabric (libfabric beside gRPC) or grpc"));
  }
  DataPlaneFlags flags;
  flags.data_plane = FLAGS_data_plane;
  flags.providers =
      absl::StrSplit(FLAGS_data_plane_providers, ',', absl::SkipEmpty());
  if (flags.providers.empty()) {
    return absl::InvalidArgumentError(
        "--data_plane_providers is empty; name shm, tcp or both");
  }
  return flags;
}

}  // namespace psrt
