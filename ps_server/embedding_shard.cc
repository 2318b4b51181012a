#include "ps_server/embedding_shard.h"

#include <algorithm>
#include <cstring>

#include "ps_server/parallel_for.h"

namespace psrt {
namespace {
// Rows ahead of the one being updated whose memory is prefetched.
constexpr size_t kPrefetchDistance = 16;
}  // namespace

EmbeddingShard::EmbeddingShard(const VariableLayout& layout, int shard,
                               const Optimizer* optimizer,
                               const Initializer& init)
    : layout_(layout),
      shard_(shard),
      optimizer_(optimizer),
      width_(layout.row_width),
      stride_(layout.row_width * (1 + optimizer->num_slots())),
      rows_(layout.shards[shard].num_rows) {
  data_ = AllocateFloats(rows_ * stride_);
  float* data = data_.get();
  ParallelFor(rows_, 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = data + r * stride_;
      init.FillRow(layout_.GlobalRow(shard_, r), width_, row);
      for (int k = 0; k < optimizer_->num_slots(); ++k) {
        std::fill_n(row + width_ * (k + 1), width_,
                    optimizer_->initial_slot_value(k));
      }
    }
  });
}

int64_t EmbeddingShard::Gather(absl::Span<const int64_t> ids,
                               float* out) const {
  absl::ReaderMutexLock lock(&mu_);
  const float* data = data_.get();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kPrefetchDistance < ids.size()) {
      __builtin_prefetch(data +
                         layout_.LocalRow(shard_, ids[i + kPrefetchDistance]) *
                             stride_);
    }
    std::memcpy(out + i * width_,
                data + layout_.LocalRow(shard_, ids[i]) * stride_,
                width_ * sizeof(float));
  }
  return version_;
}

void EmbeddingShard::Apply(absl::Span<const int64_t> ids,
                           absl::Span<const PayloadView> grads,
                           float learning_rate) {
  absl::MutexLock lock(&mu_);
  float* data = data_.get();
  const UpdateContext context =
      MakeUpdateContext(*optimizer_, learning_rate, version_ + 1);
  ForEachGradientRow(grads, width_, [&](size_t i, const float* g) {
    if (i + kPrefetchDistance < ids.size()) {
      const char* ahead = reinterpret_cast<const char*>(
          data +
          layout_.LocalRow(shard_, ids[i + kPrefetchDistance]) * stride_);
      for (int64_t line = 0; line < stride_ * 4; line += 64) {
        __builtin_prefetch(ahead + line, 1);
      }
    }
    float* row = data + layout_.LocalRow(shard_, ids[i]) * stride_;
    float* slots[2] = {row + width_, row + 2 * width_};
    optimizer_->Apply(row, slots, g, width_, context);
  });
  ++version_;
}

int64_t EmbeddingShard::bytes() const {
  return rows_ * stride_ * static_cast<int64_t>(sizeof(float));
}

int64_t EmbeddingShard::version() const {
  absl::ReaderMutexLock lock(&mu_);
  return version_;
}

}  // namespace psrt
