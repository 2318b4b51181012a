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
#include "ps_server/shards/float_array.h"
#include "ps_server/shards/initializer.h"

namespace psrt {

class DenseShard {
 public:
  // Allocates the shard and fills it from `init`. `optimizer` must outlive
  // the shard.
  DenseShard(const VariableLayout& layout, int shard,
             const Optimizer* optimizer, const Initializer& init);
  DenseShard(const DenseShard&) = delete;
  DenseShard& operator=(const DenseShard&) = delete;

  // Floats in the shard.
  int64_t size() const { return size_; }
  // Parameter and slot bytes.
  int64_t bytes() const;
  int64_t version() const;

  // Copies elements [offset, offset + count) to out and returns the shard's
  // version at that moment. REQUIRES: the range lies inside the shard.
  int64_t Read(int64_t offset, int64_t count, float* out) const;

  // Applies one update made of gradient pieces for disjoint ranges, under
  // one lock acquisition; the version (Adam's t) advances once.
  // REQUIRES: each range inside the shard, grad.size() == 4 * count, all
  // values finite.
  struct Piece {
    int64_t offset;
    int64_t count;
    PayloadView grad;
  };
  void Apply(absl::Span<const Piece> pieces, float learning_rate)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The two halves of Apply, for a caller that holds the locks of every
  // shard a push touches (mutex()) so that the whole push is checked before
  // any of it is applied. CheckUpdateLocked: INVALID_ARGUMENT naming the
  // first element (shard-local) the update would make NaN or +-Inf;
  // changes nothing.
  absl::Mutex* mutex() const ABSL_LOCK_RETURNED(mu_) { return &mu_; }
  absl::Status CheckUpdateLocked(absl::Span<const Piece> pieces,
                                 float learning_rate) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyLocked(absl::Span<const Piece> pieces, float learning_rate)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Checkpointing, in rows of the variable's dim 0: a checkpoint row is
  // [values | slot 0 | slot 1], row_width floats each (row_stride()).
  // Copies local rows [first, first + count) to out under one lock and
  // returns the version. REQUIRES: the rows lie inside the shard.
  int64_t ExportRows(int64_t first, int64_t count, float* out) const;
  // Overwrites local rows local_rows[i] from rows[i * row_stride()...].
  void ImportRows(absl::Span<const int64_t> local_rows, const float* rows);
  void RestoreVersion(int64_t version);
  int64_t num_rows() const { return size_ / width_; }
  int64_t row_stride() const { return width_ * (1 + optimizer_->num_slots()); }

 private:
  const Optimizer* const optimizer_;
  const int64_t width_;  // floats per row (the variable's row width)
  const int64_t size_;
  mutable absl::Mutex mu_;
  FloatArray params_ ABSL_GUARDED_BY(mu_);
  FloatArray slots_[2] ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_DENSE_SHARD_H_
