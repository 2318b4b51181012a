#include "proto/buffer_pool.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

constexpr size_t kAlignment = 64;
constexpr int kNumClasses = 48;

static_assert(BufferPool::kMaxBytes == size_t{1} << (kNumClasses - 1));

// Null when the memory cannot be had.
char* AllocateAligned(size_t bytes) {
  return static_cast<char*>(std::aligned_alloc(
      kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment));
}

absl::Status TooLarge(size_t bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "cannot allocate a buffer of ", bytes, " bytes",
      bytes > BufferPool::kMaxBytes
          ? absl::StrCat(" (the most is ", BufferPool::kMaxBytes, ")")
          : std::string(" (out of memory)")));
}

struct SliceOwner {
  BufferPool* pool;
  char* data;
  size_t capacity;
};

}  // namespace

PooledBuffer::PooledBuffer(PooledBuffer&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

PooledBuffer& PooledBuffer::operator=(PooledBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

PooledBuffer::~PooledBuffer() { Reset(); }

void PooledBuffer::Reset() {
  if (data_ != nullptr) pool_->Return(data_, capacity_);
  data_ = nullptr;
  size_ = capacity_ = 0;
}

grpc::Slice PooledBuffer::ReleaseAsSlice() && {
  auto* owner = new SliceOwner{pool_, data_, capacity_};
  grpc::Slice slice(
      data_, size_,
      [](void* arg) {
        auto* o = static_cast<SliceOwner*>(arg);
        o->pool->Return(o->data, o->capacity);
        delete o;
      },
      owner);
  data_ = nullptr;
  size_ = capacity_ = 0;
  return slice;
}

BufferPool::BufferPool(size_t max_cached_bytes)
    : max_cached_bytes_(max_cached_bytes), free_(kNumClasses) {}

BufferPool::~BufferPool() {
  absl::MutexLock lock(&mu_);
  for (auto& list : free_) {
    for (char* p : list) std::free(p);
  }
}

BufferPool& BufferPool::Default() {
  static BufferPool* pool = new BufferPool(size_t{1} << 30);
  return *pool;
}

size_t BufferPool::SizeClass(size_t bytes) {
  size_t k = 0;
  while ((size_t{1} << k) < bytes) ++k;
  return k;
}

PooledBuffer BufferPool::Acquire(size_t bytes) {
  absl::StatusOr<PooledBuffer> buffer = TryAcquire(bytes);
  if (!buffer.ok()) throw std::bad_alloc();
  return *std::move(buffer);
}

absl::StatusOr<PooledBuffer> BufferPool::TryAcquire(size_t bytes) {
  if (bytes > kMaxBytes) return TooLarge(bytes);
  if (bytes < kMinPooledBytes) {
    char* p = AllocateAligned(bytes == 0 ? 1 : bytes);
    if (p == nullptr) return TooLarge(bytes);
    return PooledBuffer(this, p, bytes, bytes);
  }
  const size_t k = SizeClass(bytes);
  const size_t capacity = size_t{1} << k;
  {
    absl::MutexLock lock(&mu_);
    if (!free_[k].empty()) {
      char* p = free_[k].back();
      free_[k].pop_back();
      cached_bytes_ -= capacity;
      return PooledBuffer(this, p, bytes, capacity);
    }
  }
  char* p = AllocateAligned(capacity);
  if (p == nullptr) return TooLarge(bytes);
  return PooledBuffer(this, p, bytes, capacity);
}

void BufferPool::Return(char* data, size_t capacity) {
  if (capacity >= kMinPooledBytes && (capacity & (capacity - 1)) == 0) {
    absl::MutexLock lock(&mu_);
    if (cached_bytes_ + capacity <= max_cached_bytes_) {
      free_[SizeClass(capacity)].push_back(data);
      cached_bytes_ += capacity;
      return;
    }
  }
  std::free(data);
}

size_t BufferPool::cached_bytes() const {
  absl::MutexLock lock(&mu_);
  return cached_bytes_;
}

void TuneAllocatorForLargeMessages() {
  const char* keep = std::getenv("PSRT_KEEP_MALLOC_DEFAULTS");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  // Allocations below 32 MiB (glibc's ceiling) come from the heap; freed
  // memory is trimmed only beyond 1 GiB; the heap grows in 64 MiB steps.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
  // One arena: the threshold above governs only how the main heap shrinks.
  // Other arenas grow in 64 MiB sub-heaps that glibc unmaps as soon as
  // one empties, whatever the threshold, so a 4 MiB message received on a
  // gRPC thread kept faulting in fresh pages (R=2 dense push: 77 faults a
  // push -> 23, 152 -> 205 push/s; docs/benchmarks.md). Small allocations
  // still go through each thread's cache without the arena's lock.
  mallopt(M_ARENA_MAX, 1);
}

}  // namespace psrt
