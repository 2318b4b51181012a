// One shard of a DENSE variable: a contiguous range of its rows, flattened,
// with the optimizer's slots in parallel arrays.
#ifndef PSRT_PS_SERVER_SHARDS_DENSE_SHARD_H_
#define PSRT_PS_SERVER_SHARDS_DENSE_SHARD_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "partitioner/shard_map.h"
#include "proto/frame_reader.h"
#include "ps_server/optimizers/optimizer.h"
#include "ps_server/optimizers/value_bounds.h"
#include "ps_server/shards/float_array.h"
#include "ps_server/shards/initializer.h"
#include "ps_server/shards/shard.h"
#include "ps_server/shards/shard_bounds.h"

namespace psrt {

class DenseShard final : public Shard {
 public:
  // Allocates the shard and fills it from `init` -- or, without
  // `initialize`, leaves it zero for a restore to overwrite. `layout` and
  // `optimizer` must outlive the shard.
  DenseShard(const VariableLayout& layout, int shard,
             const Optimizer* optimizer, const Initializer& init,
             bool initialize = true);
  DenseShard(const DenseShard&) = delete;
  DenseShard& operator=(const DenseShard&) = delete;

  // Floats in the shard.
  int64_t size() const { return size_; }

  // Copies elements [offset, offset + count) to out and returns the shard's
  // version at that moment. REQUIRES: the range lies inside the shard.
  int64_t Read(int64_t offset, int64_t count, float* out) const;

  // Applies one update made of gradient pieces for disjoint ranges, under
  // one lock acquisition; the version (Adam's t) advances once.
  // REQUIRES: each range inside the shard, grad.size() == 4 * count, all
  // values finite.
  using Piece = RangeGradient;
  void Apply(absl::Span<const Piece> pieces, float learning_rate)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Shard. Prepare sums the ranges (several workers' gradients for one
  // synchronous step may overlap) into one, scaled. CheckLocked proves the
  // update leaves every value finite, so UndoFloats is 0 and ApplyLocked
  // cannot fail: from the shard's value bounds and the gradient's largest
  // magnitude where the optimizer can (value_bounds.h; no pass over the
  // values), else by a dry run of the update naming the first element
  // (shard-local) it would make NaN or +-Inf.
  int64_t num_rows() const override { return size_ / width_; }
  int64_t bytes() const override;
  int64_t version() const override;
  int64_t ValueFloats(const ShardSlice& slice) const override {
    return slice.count;
  }
  absl::StatusOr<int64_t> Read(const ShardSlice& slice,
                               float* out) const override {
    return Read(slice.offset, slice.count, out);
  }
  absl::Status Prepare(ShardUpdate* update, float scale) override;
  absl::Mutex* mutex() const override ABSL_LOCK_RETURNED(mu_) { return &mu_; }
  absl::Status CheckLocked(ShardUpdate* update) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t UndoFloats(const ShardUpdate& update) const override { return 0; }
  absl::Status ApplyLocked(const ShardUpdate& update, float* undo) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UndoLocked(const ShardUpdate& update, const float* undo) override {}
  // No dry run for these.
  int64_t updates_proven_by_bounds() const override {
    absl::ReaderMutexLock lock(&mu_);
    return bounds_.proven();
  }
  bool exports_ids() const override { return false; }
  int64_t row_stride() const override {
    return width_ * (1 + optimizer_->num_slots());
  }
  int64_t ExportRows(int64_t first, int64_t count, int64_t* ids, float* out,
                     int64_t* version) const override;
  int64_t ExportRowsLocked(int64_t first, int64_t count, int64_t* ids,
                           float* out, int64_t* version) const override
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status ImportRows(absl::Span<const int64_t> ids,
                          const float* rows) override;
  void RestoreVersion(int64_t version) override;

 private:
  absl::Status CheckRangesLocked(absl::Span<const Piece> pieces,
                                 float learning_rate) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyRangesLocked(absl::Span<const Piece> pieces, float learning_rate)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The values' exact bounds (a pass over the shard).
  ValueBounds ExactBoundsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Optimizer* const optimizer_;
  const int64_t width_;      // floats per row (the variable's row width)
  const int64_t row_begin_;  // the shard's first global row
  const int64_t size_;
  mutable absl::Mutex mu_;
  FloatArray params_ ABSL_GUARDED_BY(mu_);
  FloatArray slots_[2] ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  // Mutable: CheckLocked keeps them as a cache of what the values allow.
  mutable ShardBounds bounds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_DENSE_SHARD_H_
