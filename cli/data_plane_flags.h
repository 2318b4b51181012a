// The data-plane flags every psrt binary shares (server, worker, tools):
// --data_plane=fabric|grpc and --data_plane_providers.
#ifndef PSRT_CLI_DATA_PLANE_FLAGS_H_
#define PSRT_CLI_DATA_PLANE_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psrt {

struct DataPlaneFlags {
  std::string data_plane;  // "fabric" or "grpc"
  std::vector<std::string> providers;
};

// INVALID_ARGUMENT naming the flag for a value other than fabric or grpc,
// or an empty provider list.
absl::StatusOr<DataPlaneFlags> DataPlaneFromFlags();

}  // namespace psrt

#endif  // PSRT_CLI_DATA_PLANE_FLAGS_H_
