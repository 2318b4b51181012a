#include "ps_server/dense_shard.h"

#include <algorithm>
#include <cstring>

#include "ps_server/parallel_for.h"

namespace psrt {

DenseShard::DenseShard(const VariableLayout& layout, int shard,
                       const Optimizer* optimizer, const Initializer& init)
    : optimizer_(optimizer),
      size_(layout.shards[shard].num_rows * layout.row_width) {
  const int64_t width = layout.row_width;
  const int64_t first_row = layout.shards[shard].row_begin;
  params_.reset(new float[size_]);
  float* params = params_.get();
  ParallelFor(layout.shards[shard].num_rows, 1 << 16,
              [&](int64_t begin, int64_t end) {
                init.FillRows(first_row + begin, end - begin, width,
                              params + begin * width);
              });
  for (int k = 0; k < optimizer_->num_slots(); ++k) {
    slots_[k].reset(new float[size_]);
    std::fill_n(slots_[k].get(), size_, optimizer_->initial_slot_value(k));
  }
}

int64_t DenseShard::bytes() const {
  return size_ * sizeof(float) * (1 + optimizer_->num_slots());
}

int64_t DenseShard::version() const {
  absl::ReaderMutexLock lock(&mu_);
  return version_;
}

int64_t DenseShard::Read(int64_t offset, int64_t count, float* out) const {
  absl::ReaderMutexLock lock(&mu_);
  std::memcpy(out, params_.get() + offset, count * sizeof(float));
  return version_;
}

void DenseShard::Apply(absl::Span<const Piece> pieces, float learning_rate) {
  absl::MutexLock lock(&mu_);
  const UpdateContext context{learning_rate, version_ + 1};
  for (const Piece& piece : pieces) {
    ForEachFloatRun(piece.grad, [&](const float* g, size_t n, size_t first) {
      const int64_t at = piece.offset + static_cast<int64_t>(first);
      float* slots[2] = {slots_[0] ? slots_[0].get() + at : nullptr,
                         slots_[1] ? slots_[1].get() + at : nullptr};
      optimizer_->Apply(params_.get() + at, slots, g, n, context);
    });
  }
  ++version_;
}

}  // namespace psrt
