#include "proto/slice_lease.h"

namespace psrt {

SliceLease::~SliceLease() { WaitReturned(); }

grpc::Slice SliceLease::Lend(const void* data, size_t size) {
  if (size == 0) return grpc::Slice();
  {
    absl::MutexLock lock(&mu_);
    ++outstanding_;
  }
  // gRPC never writes through a send slice; the cast only fits its signature.
  return grpc::Slice(const_cast<void*>(data), size, &SliceLease::OnReturned,
                     this);
}

void SliceLease::OnReturned(void* lease) {
  auto* self = static_cast<SliceLease*>(lease);
  absl::MutexLock lock(&self->mu_);
  --self->outstanding_;
}

void SliceLease::WaitReturned() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* outstanding) { return *outstanding == 0; }, &outstanding_));
}

}  // namespace psrt
