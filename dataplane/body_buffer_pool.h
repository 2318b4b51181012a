// Memory data-plane bodies are received into or sent from, kept for the
// next body (up to a bound): a fresh 64 MiB allocation costs its page
// faults and zeroing on every push or pull, more than the transfer itself.
#ifndef PSRT_DATAPLANE_BODY_BUFFER_POOL_H_
#define PSRT_DATAPLANE_BODY_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace psrt::dataplane {

// A body's memory; not zeroed.
class BodyBuffer {
 public:
  explicit BodyBuffer(size_t capacity)
      : data_(new uint8_t[capacity]), capacity_(capacity) {}
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  void set_size(size_t size) { size_ = size; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t capacity_;
  size_t size_ = 0;
};

class BodyBufferPool : public std::enable_shared_from_this<BodyBufferPool> {
 public:
  // Keeps at most `kept_bytes` of returned buffers.
  explicit BodyBufferPool(size_t kept_bytes = size_t{512} << 20)
      : kept_bytes_(kept_bytes) {}

  // A buffer of `size` bytes, handed back here when its last user drops
  // it (also after the pool is gone: then freed). Throws std::bad_alloc.
  std::shared_ptr<BodyBuffer> Take(size_t size) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Return(std::unique_ptr<BodyBuffer> buffer) ABSL_LOCKS_EXCLUDED(mu_);

  const size_t kept_bytes_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<BodyBuffer>> free_ ABSL_GUARDED_BY(mu_);
  size_t free_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_BODY_BUFFER_POOL_H_
