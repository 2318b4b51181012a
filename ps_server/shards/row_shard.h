// One shard of an embedding table: rows addressed by global id. Two kinds:
// EmbeddingShard (known vocabulary, rows preallocated) and
// HashEmbeddingShard (any int64 id, rows created on first push).
#ifndef PSRT_PS_SERVER_SHARDS_ROW_SHARD_H_
#define PSRT_PS_SERVER_SHARDS_ROW_SHARD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/frame_reader.h"

namespace psrt {

class RowShard {
 public:
  virtual ~RowShard() = default;

  // Copies the rows of `ids` (duplicates allowed) to out, width floats each,
  // all under one lock, and returns the shard's version.
  // REQUIRES: every id routes to this shard.
  virtual int64_t Gather(absl::Span<const int64_t> ids, float* out) const = 0;

  // Makes sure rows exist for `ids` before an update (hash shards create
  // them; RESOURCE_EXHAUSTED if that would pass the shard's capacity, with
  // nothing created).
  virtual absl::Status EnsureRows(absl::Span<const int64_t> ids) {
    return absl::OkStatus();
  }

  // Applies one update: `grads` are payloads holding, in order, one row of
  // gradient per id (each payload whole rows). The version advances once.
  // REQUIRES: ids unique and routed here, rows ensured, values finite.
  void Apply(absl::Span<const int64_t> ids, absl::Span<const PayloadView> grads,
             float learning_rate) {
    absl::MutexLock lock(mutex());
    ApplyLocked(ids, grads, learning_rate, nullptr).IgnoreError();
  }

  // Apply, for a caller that holds the locks of every shard a push touches
  // (mutex()), so that the whole push is checked before it becomes
  // visible. With `undo` (ids.size() * row_stride() floats), each row's
  // floats are saved there before its update, and INVALID_ARGUMENT names
  // the first id whose row (values or slots) the update made NaN or +-Inf;
  // the update stays applied until UndoLocked(ids, undo) restores every row
  // and the version. Saving as rows are updated costs one copy of a row
  // already in cache; a separate checking pass would fetch each randomly
  // placed row twice.
  // REQUIRES: *mutex() held; Apply's requirements.
  virtual absl::Mutex* mutex() const = 0;
  virtual absl::Status ApplyLocked(absl::Span<const int64_t> ids,
                                   absl::Span<const PayloadView> grads,
                                   float learning_rate, float* undo) = 0;
  virtual void UndoLocked(absl::Span<const int64_t> ids, const float* undo) = 0;

  // Checkpointing. A checkpoint row is [values | slot 0 | slot 1], the
  // row width each (row_stride() floats).
  //
  // Copies rows [first, first + count) of the shard's row order (local row
  // order; creation order for hash shards) under one lock: their global
  // ids to ids (may be null) and their floats to out (hash shards: may be
  // null). Returns the number
  // copied (fewer at the end of a hash shard) and sets *version.
  virtual int64_t ExportRows(int64_t first, int64_t count, int64_t* ids,
                             float* out, int64_t* version) const = 0;
  // Overwrites (hash: creates where needed) the rows of global `ids` from
  // rows[i * row_stride()...]. Hash shards: RESOURCE_EXHAUSTED past the
  // capacity. REQUIRES: every id routes to this shard.
  virtual absl::Status ImportRows(absl::Span<const int64_t> ids,
                                  const float* rows) = 0;
  virtual void RestoreVersion(int64_t version) = 0;
  virtual int64_t row_stride() const = 0;

  virtual int64_t num_rows() const = 0;
  // Bytes held: parameters, slots and index structures.
  virtual int64_t bytes() const = 0;
  virtual int64_t version() const = 0;
};

// The error ApplyLocked returns for the row of `id`, column `column` of
// which became `value` (from `old`).
absl::Status NonFiniteRowError(int64_t id, int64_t column, float value,
                               float old);

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
