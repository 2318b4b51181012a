// The worker's row cache with bounded staleness (--row_cache_staleness=S,
// --row_cache_mb).
//
// Zipf-distributed feature ids repeat in almost every batch, so pulling and
// pushing them every step is most of a worker's row traffic. With the cache
// a row pulled for step p serves steps p .. p + S - 1 from the worker's
// memory, and the gradients those steps compute for it are summed here and
// pushed once, instead of once per step.
//
// The guarantee, for one worker, with steps counted by that worker
// (docs/operations.md states it for users):
//  - Values: a row that step k reads was pulled from the servers by the
//    pull of a step p with k - S < p <= k. (S = 1: by step k's own pull, as
//    without a cache.)
//  - Gradients: a row gradient computed at step k is in the push of a step
//    j with k <= j <= k + max(S - 2, 0): gradients of a row are flushed in
//    the last two pushes before its value is pulled again, so the new value
//    has them as far as the pipeline allows (the pull of step k + 1 is sent
//    before the push of step k, as without a cache). TakeAll hands over
//    every gradient still held: the trainer pushes them at the end of
//    training, before a mid-run evaluation and after a PS failure.
//  - Nothing is pushed twice: a gradient is handed out by exactly one of
//    Accumulate (uncached rows, and flushed sums) and TakeAll.
//
// The trainer's call order per step k (the pull of step k + 1 overlaps the
// compute of step k):
//   Lookup(k + 1) ... Accumulate(k) -> push k ... Store(k + 1) when the pull
//   of step k + 1 has arrived.
// Not thread-safe: the training loop owns it.
#ifndef PSRT_PS_WORKER_ROW_CACHE_H_
#define PSRT_PS_WORKER_ROW_CACHE_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace psrt {

class RowCache {
 public:
  // `dims`: the floats per row of each table the cache holds (every table
  // is looked up with the same ids). `staleness` >= 1. The cache is
  // direct-mapped, like a CPU cache: each id has one slot (a hash of the
  // id), and an id whose slot holds another row still in use is not
  // cached: its rows are pulled and pushed every step. `max_bytes` bounds
  // the slots (values, gradient sums, id and step), allocated at once; a
  // power of two of them.
  static absl::StatusOr<RowCache> Create(std::vector<int> dims, int staleness,
                                         int64_t max_bytes);

  // What Lookup found for one step's ids, handed back to Store and
  // Accumulate for the same step (so each id is looked up once).
  struct StepRows {
    int64_t step = 0;
    uint64_t generation = 0;      // TakeAll since Lookup: nothing cached
    std::vector<int32_t> slots;   // per id: its entry, or -1
    std::vector<int32_t> misses;  // positions of the ids to pull
  };

  // Step `step` needs rows for `unique_ids` (no repeats). Writes the rows
  // of cached ids still valid for `step` into `tables` (per table,
  // unique_ids.size() rows of its dim, at the id's position) and lists in
  // rows->misses the positions of the others, which the caller pulls.
  void Lookup(int64_t step, absl::Span<const int64_t> unique_ids,
              std::vector<std::vector<float>>* tables, StepRows* rows);

  // The pull of rows->step has filled `tables` at rows->misses: keeps
  // those rows, pulled at that step, while room lasts.
  void Store(absl::Span<const int64_t> unique_ids,
             const std::vector<std::vector<float>>& tables, StepRows* rows);

  // What a step's push sends for its rows: the ids in `ids` and per table
  // their gradients in `grads` (rows of the table's dim).
  struct Push {
    std::vector<int64_t> ids;
    std::vector<std::vector<float>> grads;
    int64_t flushed = 0;   // of which: sums of cached rows' gradients
    int64_t uncached = 0;  // of which: rows the cache does not hold
  };

  // Step rows.step computed `grads` (per table, rows of `unique_ids`):
  // adds the gradients of cached rows to their sums, and fills `push` with
  // the gradients of uncached rows and the sums that are due (see the
  // guarantee above). Drops rows whose validity ended.
  // REQUIRES: steps are accumulated in order, one after another.
  void Accumulate(absl::Span<const int64_t> unique_ids,
                  const std::vector<std::vector<float>>& grads,
                  const StepRows& rows, Push* push);

  // Every gradient sum still held, and empties the cache (values too: the
  // next steps pull every row).
  void TakeAll(Push* push);

  int64_t rows() const { return rows_; }
  int64_t capacity_rows() const { return static_cast<int64_t>(mask_ + 1); }
  int staleness() const { return staleness_; }
  // Totals since creation, for the progress line and tests.
  int64_t hits() const { return hits_; }
  int64_t lookups() const { return lookups_; }

 private:
  RowCache(std::vector<int> dims, int staleness, int64_t slots);

  // pulled_at of a slot not in use: no step reads it.
  static constexpr int64_t kFree = std::numeric_limits<int64_t>::min() / 2;
  struct Slot {
    int64_t id = 0;
    int64_t pulled_at = kFree;
  };

  // The one slot `id` may occupy (direct-mapped: an id whose slot is taken
  // by another live row is not cached).
  size_t SlotOf(int64_t id) const;
  // Entry `slot`'s id and gradient sum appended to `push`; sum zeroed.
  void Flush(size_t slot, Push* push);
  // The slots stored at `step` (a ring of staleness + 2 steps).
  std::vector<int32_t>& StoredAt(int64_t step);
  // Empties `push`, with room for `most_rows` rows.
  void PreparePush(size_t most_rows, Push* push) const;
  float* values(size_t slot) { return &floats_[2 * slot * row_floats_]; }
  float* sums(size_t slot) { return values(slot) + row_floats_; }

  std::vector<int> dims_;
  int row_floats_ = 0;  // sum of dims_
  int staleness_;
  size_t mask_;  // slots - 1 (a power of two)

  std::vector<Slot> slots_;
  // Per slot: row_floats_ values then row_floats_ gradient sums.
  std::vector<float> floats_;
  std::vector<uint8_t> dirty_;
  std::vector<std::vector<int32_t>> stored_at_;  // ring, see StoredAt
  uint64_t generation_ = 1;
  int64_t rows_ = 0;

  int64_t hits_ = 0;
  int64_t lookups_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_ROW_CACHE_H_
