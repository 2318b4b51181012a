// A shard of an EMBEDDING variable (known vocabulary): all its rows are
// allocated up front. Each row keeps its parameters and optimizer slots
// side by side -- [values | slot 0 | slot 1], width floats each -- so that
// a sparse update touches one or two cache lines per row, not three
// scattered arrays.
#ifndef PSRT_PS_SERVER_SHARDS_EMBEDDING_SHARD_H_
#define PSRT_PS_SERVER_SHARDS_EMBEDDING_SHARD_H_

#include <memory>

#include "absl/synchronization/mutex.h"
#include "partitioner/shard_map.h"
#include "ps_server/optimizers/optimizer.h"
#include "ps_server/shards/float_array.h"
#include "ps_server/shards/initializer.h"
#include "ps_server/shards/row_shard.h"

namespace psrt {

class EmbeddingShard final : public RowShard {
 public:
  // Allocates the shard and fills it from `init` -- or, without
  // `initialize`, leaves it zero for a restore to overwrite. `layout` and
  // `optimizer` must outlive the shard.
  EmbeddingShard(const VariableLayout& layout, int shard,
                 const Optimizer* optimizer, const Initializer& init,
                 bool initialize = true);

  absl::StatusOr<int64_t> Gather(absl::Span<const int64_t> ids,
                                 float* out) const override;
  absl::Mutex* mutex() const override ABSL_LOCK_RETURNED(mu_) { return &mu_; }
  absl::Status ApplyRowsLocked(absl::Span<const int64_t> ids,
                               absl::Span<const PayloadView> grads,
                               float learning_rate, float* undo) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UndoRowsLocked(absl::Span<const int64_t> ids, const float* undo) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t ExportRows(int64_t first, int64_t count, int64_t* ids, float* out,
                     int64_t* version) const override;
  int64_t ExportRowsLocked(int64_t first, int64_t count, int64_t* ids,
                           float* out, int64_t* version) const override
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status ImportRows(absl::Span<const int64_t> ids,
                          const float* rows) override;
  void RestoreVersion(int64_t version) override;
  int64_t row_stride() const override { return stride_; }
  int64_t row_width() const override { return width_; }
  bool exports_ids() const override { return false; }
  int64_t num_rows() const override { return rows_; }
  int64_t bytes() const override;
  int64_t version() const override;

 protected:
  // A bitmap over the shard's rows where that is cheaper than a hash set.
  bool HasRepeatedIds(const ShardUpdate& update) const override;

  // RowShard.
  int64_t VersionLocked() const override ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return version_;
  }
  ValueBounds ExactBoundsLocked() const override
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  const Optimizer& optimizer() const override { return *optimizer_; }

 private:
  const VariableLayout& layout_;
  const int shard_;
  const Optimizer* const optimizer_;
  const int64_t width_;
  const int64_t stride_;  // floats per row: width * (1 + slots)
  const int64_t rows_;
  mutable absl::Mutex mu_;
  FloatArray data_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_EMBEDDING_SHARD_H_
