// The one handle through which the rest of the server uses a shard of any
// kind: DenseShard (a range of a DENSE variable), EmbeddingShard (rows of a
// known vocabulary) and HashEmbeddingShard (rows created on first push).
// Request handlers and checkpoint code hold a `Shard*` and never ask which
// kind it is; a new kind, or a wrapper around one (replicated, tiered),
// implements this interface and touches nothing else.
//
// What a request addresses in a shard is a ShardSlice: a range of floats
// [offset, offset + count) of a dense shard, or rows by global id of an
// embedding shard (the variable's kind says which; the request's item
// carries it, checked in rpc/request_item.cc).
#ifndef PSRT_PS_SERVER_SHARDS_SHARD_H_
#define PSRT_PS_SERVER_SHARDS_SHARD_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/frame_reader.h"

namespace psrt {

class CountMinSketch;

// Floats [offset, offset + count) of a dense shard, or the rows of `ids`.
struct ShardSlice {
  int64_t offset = 0;
  int64_t count = 0;
  absl::Span<const int64_t> ids;
};

// The gradient for a range of a dense shard: `count` floats at `offset`.
struct RangeGradient {
  int64_t offset;
  int64_t count;
  PayloadView grad;
};

// Everything one push sends to one shard, gathered from its items: ranges
// (dense) or rows in payload order (embeddings), and the push's effective
// learning rate. Shard::Prepare rewrites it into what ApplyLocked applies.
struct ShardUpdate {
  float learning_rate = 0;
  // Dense shards: the ranges hold values that replace the shard's
  // (TensorItem.assign), not gradients; no optimizer step.
  bool assign = false;
  // The largest magnitude of the gradients, where the push's check found
  // it; +Inf: unknown (the shard cannot prove the update finite from its
  // value bounds, shard_bounds.h).
  float max_abs_grad = std::numeric_limits<float>::infinity();
  std::vector<RangeGradient> ranges;
  std::vector<int64_t> ids;
  std::vector<PayloadView> grads;  // one row per id, in order
  std::vector<float> merged;       // owns gradients Prepare summed or scaled
  // The PS's global step when the push was applied (eviction's clock).
  int64_t global_step = 0;
  // Hash shards: the row of each id, found by Prepare; empty where the
  // shard addresses rows by id itself. Valid while the shard's row epoch
  // is `rows_epoch` (eviction moves rows and advances it: ApplyLocked then
  // finds them again).
  std::vector<uint32_t> rows;
  uint64_t rows_epoch = 0;
  // A backup applying its primary's update (--replicas): which ids the
  // primary gave no row (ReplicatedUpdate.dropped). Set: every other id
  // gets a row and these none, whatever this copy's admission counts, so
  // the copies hold the same rows. Unset: this shard decides.
  std::optional<absl::flat_hash_set<int64_t>> primary_dropped;
};

// A hash shard's row life (AdmissionSpec, EvictionSpec, StorageSpec): rows
// admission created, gradient rows dropped because their id had no row
// yet, rows evicted (with an SSD tier: written to disk), rows on disk now,
// rows brought back from disk, and the disk store's bytes.
struct HashRowCounts {
  int64_t admitted_rows = 0;
  int64_t unadmitted_gradients = 0;
  int64_t evicted_rows = 0;
  // Rows an eviction took from a push between its Prepare and its apply,
  // given back to it (counted as evicted, not as admitted again).
  int64_t given_back_rows = 0;
  int64_t spilled_rows = 0;
  int64_t promoted_rows = 0;
  int64_t spilled_bytes = 0;

  HashRowCounts& operator+=(const HashRowCounts& other) {
    admitted_rows += other.admitted_rows;
    unadmitted_gradients += other.unadmitted_gradients;
    evicted_rows += other.evicted_rows;
    given_back_rows += other.given_back_rows;
    spilled_rows += other.spilled_rows;
    promoted_rows += other.promoted_rows;
    spilled_bytes += other.spilled_bytes;
    return *this;
  }
};

class Shard {
 public:
  virtual ~Shard() = default;

  // Rows of dim 0 the shard holds (hash shards: rows created so far).
  virtual int64_t num_rows() const = 0;
  // Bytes held: parameters, optimizer slots and index structures.
  virtual int64_t bytes() const = 0;
  // Updates applied (Adam's t); restored from checkpoints.
  virtual int64_t version() const = 0;
  // Bytes the shard reserved from its store's memory budget as it grew
  // (hash rows), beyond what the store planned for it at creation.
  virtual int64_t reserved_bytes() const { return 0; }
  // Zero for shards without admission or eviction.
  virtual HashRowCounts row_counts() const { return {}; }
  // Eviction (EvictionSpec): drops the rows no update touched since
  // `global_step` - ttl_steps, a bounded number of rows per hold of the
  // shard's lock; returns how many. Nothing while rows are pinned.
  virtual int64_t EvictIdleRows(int64_t global_step) { return 0; }
  // A backup's copy of its primary's evictions (ReplicatedUpdate.evicted):
  // takes those of `ids` it holds in memory out of it (to the SSD tier, or
  // dropped), as the primary did, before the primary's next update of
  // this shard is applied. Waits while rows are pinned.
  virtual absl::Status FollowEvictions(absl::Span<const int64_t> ids) {
    return absl::InvalidArgumentError(
        "evictions name a shard that holds no hash embedding rows");
  }
  // While pinned (a checkpoint reading rows in several passes, by
  // position), no row is evicted or moved. Pins nest.
  virtual void PinRows(bool pin) const {}

  // Floats a Read of `slice` writes.
  virtual int64_t ValueFloats(const ShardSlice& slice) const = 0;
  // Copies the values of `slice` to out under one lock and returns the
  // shard's version; an error only where the values are on a disk that
  // failed to give them back (a hash shard's SSD tier): nothing to send.
  // REQUIRES: the slice was checked against the shard.
  virtual absl::StatusOr<int64_t> Read(const ShardSlice& slice,
                                       float* out) const = 0;

  // Applying one push to several shards, all or nothing:
  //   1. Prepare(&update, scale) on each, unlocked: repeated ids and
  //      overlapping ranges summed, gradients multiplied by `scale`, rows
  //      admitted, created or read back from disk (RESOURCE_EXHAUSTED past
  //      a capacity, nothing created).
  //   2. Lock every shard's mutex() in catalog order.
  //   3. CheckLocked(&update) on each: brings the update up to date with
  //      what changed since Prepare (hash rows an eviction moved), then
  //      refuses, applying nothing, an update it can tell would make a
  //      value NaN or +-Inf (INVALID_ARGUMENT) or that it can no longer
  //      place (the error that says why).
  //   4. ApplyLocked with undo space on the shards that NeedsUndoLocked,
  //      first: they can only tell after applying, saving each touched
  //      value there first; INVALID_ARGUMENT then names the value.
  //      UndoLocked(update, undo) restores what ApplyLocked changed.
  //      UndoFloats, asked before locking, is the most a shard may need.
  //   5. ApplyLocked(update, nullptr) on the rest, which cannot fail once
  //      CheckLocked passed.
  // The version advances once per ApplyLocked.
  virtual absl::Status Prepare(ShardUpdate* update, float scale) = 0;
  virtual absl::Mutex* mutex() const = 0;
  virtual absl::Status CheckLocked(ShardUpdate* update) = 0;
  virtual int64_t UndoFloats(const ShardUpdate& update) const = 0;
  // After CheckLocked: whether ApplyLocked needs the undo space.
  virtual bool NeedsUndoLocked(const ShardUpdate& update) const {
    return UndoFloats(update) > 0;
  }
  // Updates applied that the shard's value bounds proved finite, skipping
  // the check CheckLocked / ApplyLocked would otherwise make
  // (shard_bounds.h).
  virtual int64_t updates_proven_by_bounds() const { return 0; }
  virtual absl::Status ApplyLocked(const ShardUpdate& update, float* undo) = 0;
  virtual void UndoLocked(const ShardUpdate& update, const float* undo) = 0;
  // Steps 1-5 for this shard alone.
  absl::Status ApplyUpdate(ShardUpdate update, float scale = 1.0f);

  // Checkpointing, in rows of the variable's dim 0: a checkpoint row is
  // [values | slot 0 | slot 1], the row width each (row_stride() floats).
  //
  // Whether rows are saved with their ids (hash shards, whose rows are in
  // creation order) or identified by position (the shard's row range).
  virtual bool exports_ids() const = 0;
  virtual int64_t row_stride() const = 0;
  // Copies rows [first, first + count) of the shard's row order under one
  // lock: their global ids to `ids` and floats to `out` (either may be
  // null). Returns the number copied (fewer at the end of a hash shard)
  // and sets *version.
  virtual int64_t ExportRows(int64_t first, int64_t count, int64_t* ids,
                             float* out, int64_t* version) const = 0;
  // ExportRows for a caller holding *mutex() (shared at least), so that
  // what it reads under the same hold (a replication sequence) matches the
  // rows exactly.
  virtual int64_t ExportRowsLocked(int64_t first, int64_t count, int64_t* ids,
                                   float* out, int64_t* version) const = 0;
  // How many of the rows ExportRowsLocked gives come first from the
  // shard's cold tier (SSD; 0 without one), read under the same hold of
  // *mutex() as the export.
  virtual int64_t ColdRowsLocked() const { return 0; }
  // Feature admission's sightings (a hash shard with admission; null
  // otherwise), read under *mutex() like ExportRowsLocked, so that a copy
  // made of the rows counts what its source counted.
  virtual const CountMinSketch* AdmissionSketchLocked() const {
    return nullptr;
  }
  // Takes another copy's sightings (CountMinSketch::Assign);
  // FAILED_PRECONDITION for a shard without admission.
  virtual absl::Status ImportAdmissionSketch(absl::Span<const uint8_t> counters,
                                             int64_t increments) {
    return absl::FailedPreconditionError(
        "this shard counts no sightings (no feature admission)");
  }
  // Overwrites (hash: creates where needed) the rows of global `ids` from
  // rows[i * row_stride()...]. Hash shards: RESOURCE_EXHAUSTED past the
  // capacity. REQUIRES: every id belongs to this shard.
  virtual absl::Status ImportRows(absl::Span<const int64_t> ids,
                                  const float* rows) = 0;
  // ImportRows for rows another copy holds in its cold tier: with a tier
  // here they go straight to it (a copy's memory then holds what its
  // source's memory held, whatever the import order of the shards);
  // without one, to memory.
  virtual absl::Status ImportColdRows(absl::Span<const int64_t> ids,
                                      const float* rows) {
    return ImportRows(ids, rows);
  }
  virtual void RestoreVersion(int64_t version) = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_SHARD_H_
