// absl::Status inside psrt, grpc::Status at the RPC edge: the one place the
// two are converted (as TensorFlow keeps it in grpc_util.h). Both follow
// google.rpc.Code, so codes map by value; a code outside that set (a peer
// speaking a newer protocol) becomes UNKNOWN, never an invalid enum.
#ifndef PSRT_UTIL_GRPC_STATUS_H_
#define PSRT_UTIL_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace psrt {

// `s` as an absl::Status; with `context`, the message reads
// "<context>: <grpc message>" (say, "push to PS 1 (h2:2223)").
absl::Status FromGrpcStatus(const grpc::Status& s,
                            absl::string_view context = "");

// `s` as a grpc::Status, code and message unchanged.
grpc::Status ToGrpcStatus(const absl::Status& s);

}  // namespace psrt

#endif  // PSRT_UTIL_GRPC_STATUS_H_
