// libfabric, loaded when the data plane first opens an endpoint rather
// than at process start.
//
// Debian's libfabric1 pulls in libinfinipath (its psm provider), whose
// load-time constructor replaces the handlers of SIGINT, SIGTERM, SIGSEGV,
// SIGBUS, SIGILL and SIGABRT with one that calls exit(1) from inside the
// signal handler. A process linked against libfabric therefore did not die
// of SIGTERM: it ran its exit handlers in whatever state the signal found
// it, and hung for good when that was inside malloc (a ps_worker stopped
// by SageMaker's StopTrainingJob, seen); a Python program that imported
// psrt got exit(1) instead of KeyboardInterrupt on Ctrl-C.
//
// So nothing links libfabric: a process with --data_plane=grpc never loads
// it (nor its providers' libraries), one without libfabric installed runs
// and falls back to gRPC, and the load puts back every signal handler the
// process had before it.
#ifndef PSRT_DATAPLANE_LIBFABRIC_H_
#define PSRT_DATAPLANE_LIBFABRIC_H_

#include <rdma/fabric.h>

#include "absl/status/statusor.h"

namespace psrt::dataplane {

// The libfabric entry points psrt calls (the rest of its API reaches a
// provider through the objects these return).
struct LibFabric {
  decltype(&fi_getinfo) getinfo;
  decltype(&fi_freeinfo) freeinfo;
  decltype(&fi_dupinfo) dupinfo;  // dupinfo(nullptr) is fi_allocinfo()
  decltype(&fi_fabric) fabric;
  decltype(&fi_strerror) strerror;
};

// Loads libfabric.so.1 once (thread-safe) with the signal handlers kept
// as they were; later calls return the same table, or the same error (the
// library missing, or too old for the symbols psrt binds).
absl::StatusOr<const LibFabric*> LoadLibFabric();

// The loaded table; only after LoadLibFabric succeeded.
const LibFabric& Fabric();

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_LIBFABRIC_H_
