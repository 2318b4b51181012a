// One shard of an embedding table: rows addressed by global id. Two kinds:
// EmbeddingShard (known vocabulary, rows preallocated) and
// HashEmbeddingShard (any int64 id, rows created on first push).
#ifndef PSRT_PS_SERVER_SHARDS_ROW_SHARD_H_
#define PSRT_PS_SERVER_SHARDS_ROW_SHARD_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/frame_reader.h"
#include "ps_server/optimizers/optimizer.h"
#include "ps_server/shards/shard.h"
#include "ps_server/shards/shard_bounds.h"
#include "util/finite.h"
#include "util/thread_pool.h"

namespace psrt {

class RowShard : public Shard {
 public:
  // Copies the rows of `ids` (duplicates allowed) to out, width floats each,
  // all under one lock, and returns the shard's version (an error: rows on
  // an SSD tier that could not be read; see Shard::Read).
  // REQUIRES: every id routes to this shard.
  virtual absl::StatusOr<int64_t> Gather(absl::Span<const int64_t> ids,
                                         float* out) const = 0;

  // Makes sure rows exist for `ids` before an update (hash shards create
  // them; RESOURCE_EXHAUSTED if that would pass the shard's capacity, with
  // nothing created). Hash shards also store each id's row in `rows` (if
  // given), for ApplyLocked to use without looking the ids up again.
  // `rows_epoch` (if given): the row epoch the rows are valid in
  // (ShardUpdate::rows_epoch). `primary_dropped` (a backup's copy of its
  // primary's update, ShardUpdate::primary_dropped): the ids to give no
  // row; every other id gets one, admission or not.
  virtual absl::Status EnsureRows(
      absl::Span<const int64_t> ids, std::vector<uint32_t>* rows,
      uint64_t* rows_epoch = nullptr,
      const absl::flat_hash_set<int64_t>* primary_dropped = nullptr) {
    return absl::OkStatus();
  }
  absl::Status EnsureRows(absl::Span<const int64_t> ids) {
    return EnsureRows(ids, nullptr);
  }

  // Applies one update: `grads` are payloads holding, in order, one row of
  // gradient per id (each payload whole rows). The version advances once.
  // REQUIRES: ids unique and routed here, rows ensured, values finite.
  void Apply(absl::Span<const int64_t> ids, absl::Span<const PayloadView> grads,
             float learning_rate) {
    absl::MutexLock lock(mutex());
    ApplyRowsLocked(ids, grads, learning_rate, nullptr).IgnoreError();
  }

  // Apply, for a caller that holds mutex(). With `undo`
  // (ids.size() * row_stride() floats), each row's floats are saved there
  // before its update, and INVALID_ARGUMENT names the first id whose row
  // (values or slots) the update made NaN or +-Inf; the update stays
  // applied until UndoRowsLocked(ids, undo) restores every row and the
  // version. Saving as rows are updated costs one copy of a row already in
  // cache; a separate checking pass would fetch each randomly placed row
  // twice. REQUIRES: *mutex() held; Apply's requirements.
  virtual absl::Status ApplyRowsLocked(absl::Span<const int64_t> ids,
                                       absl::Span<const PayloadView> grads,
                                       float learning_rate, float* undo) = 0;
  virtual void UndoRowsLocked(absl::Span<const int64_t> ids,
                              const float* undo) = 0;

  // Shard, in terms of the above. Prepare sums the gradients of repeated
  // ids (scaling them) and ensures the rows. CheckLocked passes everything:
  // an update the shard's value bounds prove finite (shard_bounds.h) is
  // applied without undo; the rest are checked row by row as they are
  // applied, with undo.
  int64_t ValueFloats(const ShardSlice& slice) const final {
    return static_cast<int64_t>(slice.ids.size()) * row_width();
  }
  absl::StatusOr<int64_t> Read(const ShardSlice& slice,
                               float* out) const final {
    return Gather(slice.ids, out);
  }
  absl::Status Prepare(ShardUpdate* update, float scale) final;
  absl::Status CheckLocked(ShardUpdate* update) final;
  int64_t UndoFloats(const ShardUpdate& update) const final {
    return static_cast<int64_t>(update.ids.size()) * row_stride();
  }
  bool NeedsUndoLocked(const ShardUpdate& update) const final {
    return !bounds_.Cleared(update);
  }
  absl::Status ApplyLocked(const ShardUpdate& update, float* undo) final;
  void UndoLocked(const ShardUpdate& update, const float* undo) final {
    UndoRowsLocked(update.ids, undo);
  }

  // Floats of a row's values (without slots).
  virtual int64_t row_width() const = 0;
  // No undo copies and no check of each row for these.
  int64_t updates_proven_by_bounds() const final {
    absl::ReaderMutexLock lock(mutex());
    return bounds_.proven();
  }

 protected:
  // The shard's version (Adam's t), read under mutex().
  virtual int64_t VersionLocked() const = 0;
  // The values' exact bounds: a pass over every row. REQUIRES: *mutex()
  // held.
  virtual ValueBounds ExactBoundsLocked() const = 0;
  // CheckLocked's first step: brings what Prepare found for the update up
  // to date with the shard (hash shards: rows an eviction moved since).
  // An error refuses the update with nothing applied.
  virtual absl::Status RefreshRowsLocked(ShardUpdate* update) {
    return absl::OkStatus();
  }
  // ApplyLocked for an update the caller has checked: the rows Prepare
  // found where the shard keeps them (hash shards).
  virtual absl::Status ApplyUpdateLocked(const ShardUpdate& update,
                                         float* undo) {
    return ApplyRowsLocked(update.ids, update.grads, update.learning_rate,
                           undo);
  }
  virtual const Optimizer& optimizer() const = 0;

  // REQUIRES: *mutex() held for every use. Mutable: CheckLocked keeps them
  // as a cache of what the values allow.
  mutable ShardBounds bounds_;

  // True if the update repeats an id (a hash set of its ids; shards that
  // know their rows may do better). REQUIRES: EnsureRows(ids, &rows) ran.
  virtual bool HasRepeatedIds(const ShardUpdate& update) const;

  // The update loop of both kinds, for ApplyRowsLocked: applies `grads`
  // (pieces holding one gradient row per id, in order) with the shard's
  // optimizer to the row `row_of(i)` gives for ids[i] (null: the id has
  // no row -- not admitted -- and its gradient is dropped), prefetching
  // the rows ahead, saving each row to undo + i * stride first (with
  // `undo`), and calling updated(i) after each. Large updates are split
  // over the pool by pieces: ids are unique, so pieces update disjoint
  // rows. Returns OkStatus, or (checked only with undo) the error naming
  // the first id whose row went non-finite; the update stays applied, for
  // UndoRowsLocked. REQUIRES: *mutex() held; row_of and updated may run
  // on pool threads.
  template <typename RowOf, typename Updated>
  absl::Status UpdateRowsLocked(absl::Span<const int64_t> ids,
                                absl::Span<const PayloadView> grads,
                                const UpdateContext& context, float* undo,
                                RowOf row_of, Updated updated);
};

// Rows ahead of the one being read or updated whose memory is prefetched:
// rows of a table larger than the caches are random DRAM reads, and this
// many in flight hide most of their latency.
inline constexpr size_t kRowPrefetchDistance = 16;
// Gathers, lookups and updates of at least this many rows are split over
// the cores (util/thread_pool.h).
inline constexpr int64_t kParallelRows = 16384;

// Prefetches every cache line of a row of `floats` floats (for writing if
// `write`).
inline void PrefetchRow(const float* row, int64_t floats, bool write) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (int64_t line = 0; line < floats * 4; line += 64) {
    if (write) {
      __builtin_prefetch(bytes + line, 1);
    } else {
      __builtin_prefetch(bytes + line, 0);
    }
  }
}

// Copies a row aside for undo with streaming stores: the copy is read back
// only if the push is refused, so it should not evict the table's rows
// from the caches. Call FinishSavingRows() before the copies are read.
void SaveRowForUndo(const float* from, int64_t floats, float* to);
void FinishSavingRows();

// The error ApplyRowsLocked returns for the row of `id`, column `column` of
// which became `value` (from `old`).
absl::Status NonFiniteRowError(int64_t id, int64_t column, float value,
                               float old);

template <typename RowOf, typename Updated>
absl::Status RowShard::UpdateRowsLocked(absl::Span<const int64_t> ids,
                                        absl::Span<const PayloadView> grads,
                                        const UpdateContext& context,
                                        float* undo, RowOf row_of,
                                        Updated updated) {
  const int64_t width = row_width();
  const int64_t stride = row_stride();
  const Optimizer& rule = optimizer();
  absl::Mutex bad_mu;
  size_t bad_row = ids.size();  // the first row gone non-finite
  // Rows of gradient pieces [first, last); `row` is the id index of the
  // first of them. (A gradient row is only valid inside ForEachRow's
  // callback: one that straddles wire slices is assembled in a buffer.)
  auto update = [&](size_t first, size_t last, size_t row) {
    size_t bad = ids.size();
    for (size_t p = first; p < last; ++p) {
      const size_t end = row + grads[p].size() / (width * sizeof(float));
      ForEachRow(grads[p], width, [&](size_t r, const float* g) {
        const size_t i = row + r;
        if (i + kRowPrefetchDistance < end) {
          if (const float* ahead = row_of(i + kRowPrefetchDistance)) {
            PrefetchRow(ahead, stride, /*write=*/true);
          }
        }
        float* values = row_of(i);
        if (values == nullptr) return;  // not admitted: dropped
        float* slots[2] = {values + width, values + 2 * width};
        if (undo != nullptr) SaveRowForUndo(values, stride, undo + i * stride);
        rule.Apply(values, slots, g, width, context);
        updated(i);
        if (undo != nullptr && bad == ids.size() &&
            !SpanFinite(values, stride)) {
          bad = i;
        }
      });
      row = end;
    }
    if (undo != nullptr) FinishSavingRows();  // visible to UndoRowsLocked
    if (bad != ids.size()) {
      absl::MutexLock lock(&bad_mu);
      bad_row = std::min(bad_row, bad);
    }
  };
  if (ids.size() < static_cast<size_t>(kParallelRows) || grads.size() < 2) {
    update(0, grads.size(), 0);
  } else {
    std::vector<size_t> first_row(grads.size() + 1, 0);
    for (size_t p = 0; p < grads.size(); ++p) {
      first_row[p + 1] =
          first_row[p] + grads[p].size() / (width * sizeof(float));
    }
    PoolParallelFor(static_cast<int64_t>(grads.size()), 1,
                    [&](int64_t begin, int64_t end) {
                      update(begin, end, first_row[begin]);
                    });
  }
  if (bad_row == ids.size()) return absl::OkStatus();
  const float* now = row_of(bad_row);
  const float* old = undo + bad_row * stride;
  int64_t column = 0;
  while (column < stride && std::isfinite(now[column])) ++column;
  return NonFiniteRowError(ids[bad_row], column, now[column], old[column]);
}

// Calls fn(i, row) for i over ids' positions with the gradient row of ids[i],
// walking the pieces in order.
template <typename Fn>
void ForEachGradientRow(absl::Span<const PayloadView> grads, size_t width,
                        Fn&& fn) {
  size_t base = 0;
  for (const PayloadView& piece : grads) {
    ForEachRow(piece, width,
               [&](size_t row, const float* g) { fn(base + row, g); });
    base += piece.size() / (width * sizeof(float));
  }
}

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_ROW_SHARD_H_
