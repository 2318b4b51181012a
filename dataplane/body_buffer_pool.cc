#include "dataplane/body_buffer_pool.h"

#include <utility>

namespace psrt::dataplane {

std::shared_ptr<BodyBuffer> BodyBufferPool::Take(size_t size) {
  std::unique_ptr<BodyBuffer> buffer;
  {
    absl::MutexLock lock(&mu_);
    // The smallest kept buffer that is large enough and not over twice
    // the size (a small body does not pin a huge buffer).
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if ((*it)->capacity() >= size && (*it)->capacity() <= 2 * size + 4096 &&
          (best == free_.end() || (*it)->capacity() < (*best)->capacity())) {
        best = it;
      }
    }
    if (best != free_.end()) {
      buffer = std::move(*best);
      free_.erase(best);
      free_bytes_ -= buffer->capacity();
    }
  }
  if (buffer == nullptr) buffer = std::make_unique<BodyBuffer>(size);
  buffer->set_size(size);
  std::weak_ptr<BodyBufferPool> pool = weak_from_this();
  return std::shared_ptr<BodyBuffer>(buffer.release(), [pool](BodyBuffer* b) {
    std::unique_ptr<BodyBuffer> owned(b);
    if (auto alive = pool.lock()) alive->Return(std::move(owned));
  });
}

void BodyBufferPool::Return(std::unique_ptr<BodyBuffer> buffer) {
  absl::MutexLock lock(&mu_);
  if (free_bytes_ + buffer->capacity() > kept_bytes_) return;
  free_bytes_ += buffer->capacity();
  free_.push_back(std::move(buffer));
}

}  // namespace psrt::dataplane
