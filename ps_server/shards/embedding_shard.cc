#include "ps_server/shards/embedding_shard.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "util/finite.h"
#include "util/parallel_for.h"
#include "util/thread_pool.h"

namespace psrt {
namespace {}  // namespace

EmbeddingShard::EmbeddingShard(const VariableLayout& layout, int shard,
                               const Optimizer* optimizer,
                               const Initializer& init, bool initialize)
    : layout_(layout),
      shard_(shard),
      optimizer_(optimizer),
      width_(layout.row_width),
      stride_(layout.row_width * (1 + optimizer->num_slots())),
      rows_(layout.shards[shard].num_rows) {
  if (!initialize) {
    data_ = AllocateZeroFloats(rows_ * stride_);
    return;
  }
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

bool EmbeddingShard::HasRepeatedIds(const ShardUpdate& update) const {
  const std::vector<int64_t>& ids = update.ids;
  if (rows_ > 64 * static_cast<int64_t>(ids.size())) {
    return RowShard::HasRepeatedIds(update);
  }
  if (ids.size() < 2) return false;
  std::vector<uint64_t> seen((rows_ + 63) / 64);
  for (int64_t id : ids) {
    const int64_t r = layout_.LocalRow(shard_, id);
    const uint64_t bit = uint64_t{1} << (r & 63);
    if (seen[r >> 6] & bit) return true;
    seen[r >> 6] |= bit;
  }
  return false;
}

absl::StatusOr<int64_t> EmbeddingShard::Gather(absl::Span<const int64_t> ids,
                                               float* out) const {
  absl::ReaderMutexLock lock(&mu_);
  const float* data = data_.get();
  auto gather = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (i + static_cast<int64_t>(kRowPrefetchDistance) < end) {
        __builtin_prefetch(
            data +
            layout_.LocalRow(shard_, ids[i + kRowPrefetchDistance]) * stride_);
      }
      std::memcpy(out + i * width_,
                  data + layout_.LocalRow(shard_, ids[i]) * stride_,
                  width_ * sizeof(float));
    }
  };
  PoolParallelFor(static_cast<int64_t>(ids.size()), kParallelRows, gather);
  return version_;
}

absl::Status EmbeddingShard::ApplyRowsLocked(
    absl::Span<const int64_t> ids, absl::Span<const PayloadView> grads,
    float learning_rate, float* undo) {
  float* data = data_.get();
  const UpdateContext context =
      MakeUpdateContext(*optimizer_, learning_rate, version_ + 1);
  absl::Status applied = UpdateRowsLocked(
      ids, grads, context, undo,
      [&](size_t i) {
        return data + layout_.LocalRow(shard_, ids[i]) * stride_;
      },
      [](size_t) {});
  ++version_;
  return applied;
}

void EmbeddingShard::UndoRowsLocked(absl::Span<const int64_t> ids,
                                    const float* undo) {
  float* data = data_.get();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(data + layout_.LocalRow(shard_, ids[i]) * stride_,
                undo + i * stride_, stride_ * sizeof(float));
  }
  --version_;
}

int64_t EmbeddingShard::ExportRows(int64_t first, int64_t count, int64_t* ids,
                                   float* out, int64_t* version) const {
  absl::ReaderMutexLock lock(&mu_);
  return ExportRowsLocked(first, count, ids, out, version);
}

int64_t EmbeddingShard::ExportRowsLocked(int64_t first, int64_t count,
                                         int64_t* ids, float* out,
                                         int64_t* version) const {
  count = std::max<int64_t>(0, std::min(count, rows_ - first));
  std::memcpy(out, data_.get() + first * stride_,
              count * stride_ * sizeof(float));
  if (ids != nullptr) {
    for (int64_t i = 0; i < count; ++i) {
      ids[i] = layout_.GlobalRow(shard_, first + i);
    }
  }
  *version = version_;
  return count;
}

absl::Status EmbeddingShard::ImportRows(absl::Span<const int64_t> ids,
                                        const float* rows) {
  absl::MutexLock lock(&mu_);
  bounds_.Invalidate();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(data_.get() + layout_.LocalRow(shard_, ids[i]) * stride_,
                rows + i * stride_, stride_ * sizeof(float));
  }
  return absl::OkStatus();
}

ValueBounds EmbeddingShard::ExactBoundsLocked() const {
  ValueBounds bounds = ValueBounds::Empty();
  for (int64_t row = 0; row < rows_; ++row) {
    bounds.CoverRow(data_.get() + row * stride_, width_,
                    optimizer_->num_slots());
  }
  return bounds;
}

void EmbeddingShard::RestoreVersion(int64_t version) {
  absl::MutexLock lock(&mu_);
  version_ = version;
}

int64_t EmbeddingShard::bytes() const {
  return rows_ * stride_ * static_cast<int64_t>(sizeof(float));
}

int64_t EmbeddingShard::version() const {
  absl::ReaderMutexLock lock(&mu_);
  return version_;
}

}  // namespace psrt
