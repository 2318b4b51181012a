// Where a hash embedding shard keeps the rows it took out of memory (its
// cold tier: StorageSpec.tier = SSD). The shard keeps every id in exactly
// one tier: Spill adds rows it just dropped from memory, Take reads and
// drops a row it is bringing back.
//
// Implementations: RowSpillStore (row_spill_store.h), an append-only file
// on the PS's disk, which ps_server uses; MemoryColdTier
// (memory_cold_tier.h), the same contract in memory, on which tests make
// the disk full, failing or corrupt (cold_tier_contract_test.cc holds both
// to the contract below).
//
// Threads: Spill, Commit, Take and TakeMany change the tier; the shard
// calls them under its exclusive lock. Read, Pin, Unpin and Export may run
// beside each other (under the shard's shared lock).
#ifndef PSRT_PS_SERVER_SHARDS_COLD_TIER_H_
#define PSRT_PS_SERVER_SHARDS_COLD_TIER_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace psrt {

class ColdTier {
 public:
  virtual ~ColdTier() = default;

  // Stages row `row` (the tier's row width of floats) of `id`; Commit
  // writes what was staged.
  virtual void Spill(int64_t id, const float* row) = 0;
  // Writes the staged rows. On an error (a full or failing disk) none of
  // them is in the tier, and `unwritten` (if not null) gets each of them
  // (id, row) before they are dropped from the stage, so that the caller
  // can keep them: nothing is lost.
  using Unwritten = std::function<void(int64_t id, const float* row)>;
  virtual absl::Status Commit(const Unwritten& unwritten) = 0;
  absl::Status Commit() { return Commit(nullptr); }
  virtual int64_t staged_rows() const = 0;

  // Reads `id`'s row into `row` and drops it from the tier; false if the
  // tier has no row for it. TakeMany of one id.
  absl::StatusOr<bool> Take(int64_t id, float* row) {
    bool found = false;
    absl::Status s = TakeMany(absl::MakeConstSpan(&id, 1), row, &found);
    if (!s.ok()) return s;
    return found;
  }
  // Take for many ids in one batch: rows to rows + i * row floats,
  // found[i] whether ids[i] had a row. On an error (a record that cannot
  // be read, or that holds another id: DATA_LOSS naming the id) nothing
  // is taken and every found[i] is false. REQUIRES: ids unique.
  virtual absl::Status TakeMany(absl::Span<const int64_t> ids, float* rows,
                                bool* found) = 0;
  // Reads the rows of `ids` (their values: the first `floats` floats of
  // each; none with floats 0) into out + i * floats; found[i] says whether
  // ids[i] had a row. Errors as TakeMany's.
  virtual absl::Status Read(absl::Span<const int64_t> ids, int64_t floats,
                            float* out, bool* found) const = 0;

  // While pinned, Export reads the rows as they were when the first pin
  // was taken. Pins nest.
  virtual void Pin() = 0;
  virtual void Unpin() = 0;
  // Copies rows [first, first + count) of the tier's order to `ids` and
  // `out` (either may be null); returns the number copied (fewer if the
  // tier cannot read them: the caller sees the export end early).
  virtual int64_t Export(int64_t first, int64_t count, int64_t* ids,
                         float* out) = 0;

  // Rows in the tier.
  virtual int64_t rows() const = 0;
  // Bytes the tier's rows take where they are kept.
  virtual int64_t disk_bytes() const = 0;
  // Bytes of memory the tier holds now.
  virtual int64_t memory_bytes() const = 0;
  // The part of memory_bytes() that grows with the rows; the rest is
  // within fixed_memory_bytes(), reserved when the shard is created.
  virtual int64_t index_bytes() const = 0;
  virtual int64_t fixed_memory_bytes() const = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_COLD_TIER_H_
