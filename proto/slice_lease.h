// Lends caller-owned memory to gRPC as slices, without copying it, and tells
// when gRPC has given all of it back.
//
// gRPC can still hold a sent slice after the call itself has completed: when
// a call fails while its bytes are already queued on the HTTP/2 connection,
// the transport writes them out afterwards. Memory lent to a call therefore
// must stay valid and unchanged until WaitReturned() returns, not merely
// until the call completes.
#ifndef PSRT_PROTO_SLICE_LEASE_H_
#define PSRT_PROTO_SLICE_LEASE_H_

#include <cstddef>

#include "absl/synchronization/mutex.h"
#include "grpcpp/support/slice.h"

namespace psrt {

class SliceLease {
 public:
  SliceLease() = default;
  SliceLease(const SliceLease&) = delete;
  SliceLease& operator=(const SliceLease&) = delete;
  // Waits for every lent slice to come back.
  ~SliceLease();

  // A slice over [data, data + size). REQUIRES: the memory stays valid and
  // unchanged until WaitReturned() returns.
  grpc::Slice Lend(const void* data, size_t size);

  // Blocks until gRPC has released every slice lent so far.
  void WaitReturned();

 private:
  static void OnReturned(void* lease);

  absl::Mutex mu_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace psrt

#endif  // PSRT_PROTO_SLICE_LEASE_H_
