// A process-wide pool of large, 64-byte aligned byte buffers.
//
// Multi-megabyte buffers are reused instead of freshly allocated per request:
// glibc serves large allocations with mmap, so every fresh 64 MiB buffer costs
// ~16k page faults (measured here to halve a 64 MiB pull's throughput). A
// buffer handed to gRPC as a slice returns to the pool when gRPC releases it.
#ifndef PSRT_PROTO_BUFFER_POOL_H_
#define PSRT_PROTO_BUFFER_POOL_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/slice.h"

namespace psrt {

class BufferPool;

// A writable buffer of at least size() bytes, owned until destroyed or moved
// into a slice. Move-only.
class PooledBuffer {
 public:
  PooledBuffer() = default;
  PooledBuffer(PooledBuffer&& other) noexcept;
  PooledBuffer& operator=(PooledBuffer&& other) noexcept;
  PooledBuffer(const PooledBuffer&) = delete;
  PooledBuffer& operator=(const PooledBuffer&) = delete;
  ~PooledBuffer();

  char* data() const { return data_; }
  size_t size() const { return size_; }

  // Gives the buffer's first size() bytes to gRPC; the memory returns to the
  // pool when the last reference to the slice is dropped.
  grpc::Slice ReleaseAsSlice() &&;

 private:
  friend class BufferPool;
  PooledBuffer(BufferPool* pool, char* data, size_t size, size_t capacity)
      : pool_(pool), data_(data), size_(size), capacity_(capacity) {}
  void Reset();

  BufferPool* pool_ = nullptr;
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

class BufferPool {
 public:
  // Buffers below this size are plain allocations (malloc reuses them well).
  static constexpr size_t kMinPooledBytes = 64 << 10;

  // `max_cached_bytes` bounds the memory kept in free lists.
  explicit BufferPool(size_t max_cached_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The process-wide pool (never destroyed, so slices released during exit
  // still find it). Caches up to 1 GiB.
  static BufferPool& Default();

  // The largest buffer the pool hands out (its largest size class).
  static constexpr size_t kMaxBytes = size_t{1} << 47;

  // A buffer of `bytes`; RESOURCE_EXHAUSTED (naming the size) beyond
  // kMaxBytes or when the memory cannot be had. What servers call: sizes
  // there come from the wire.
  absl::StatusOr<PooledBuffer> TryAcquire(size_t bytes);
  // TryAcquire for sizes the caller made itself; throws std::bad_alloc
  // where TryAcquire fails.
  PooledBuffer Acquire(size_t bytes);

  size_t cached_bytes() const;

 private:
  friend class PooledBuffer;
  void Return(char* data, size_t capacity);
  static size_t SizeClass(size_t bytes);

  const size_t max_cached_bytes_;
  mutable absl::Mutex mu_;
  // free_[k] holds buffers of capacity 2^k bytes.
  std::vector<std::vector<char*>> free_ ABSL_GUARDED_BY(mu_);
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Tunes glibc malloc for a process that moves large messages: keeps freed
// memory in the heap instead of returning it to the kernel at once, so
// gRPC's per-message receive buffers reuse warm pages rather than faulting
// in fresh ones (measured: dense pull 0.68x -> 1.0x raw TCP; see
// docs/benchmarks.md), and keeps every thread on the one heap whose
// trimming that governs. The heap stays at its high-water mark. Called by
// psrt's binaries at start; a no-op when PSRT_KEEP_MALLOC_DEFAULTS=1.
void TuneAllocatorForLargeMessages();

}  // namespace psrt

#endif  // PSRT_PROTO_BUFFER_POOL_H_
