// A ColdTier (cold_tier.h) held in memory, on which tests make the disk
// misbehave: full (every Commit fails, its rows handed back), failing
// (every read of a row fails with a given status) or corrupt (a record
// holds another id than the one it is indexed under, as the file store
// finds when a disk gives back wrong bytes). It keeps the contract of
// RowSpillStore, order of export and pins included
// (cold_tier_contract_test.cc), so a shard's policy tests run on it in
// place of a disk. As LevelDB's memenv stands in for the file system.
#ifndef PSRT_PS_SERVER_SHARDS_MEMORY_COLD_TIER_H_
#define PSRT_PS_SERVER_SHARDS_MEMORY_COLD_TIER_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "ps_server/shards/cold_tier.h"

namespace psrt {

class MemoryColdTier : public ColdTier {
 public:
  // Rows of `row_floats` floats (values and optimizer slots).
  explicit MemoryColdTier(int64_t row_floats);

  // The faults. Full: every Commit fails as a full disk's write does
  // (INTERNAL, "No space left on device") and hands its rows back.
  void SetFull(bool full) ABSL_LOCKS_EXCLUDED(mu_);
  // Every read of a row (Take, TakeMany, Read, Export) fails with `error`
  // (an I/O error); OkStatus: reads work again.
  void FailReads(absl::Status error) ABSL_LOCKS_EXCLUDED(mu_);
  // The record of `id` now holds `stored` as its id (a changed record);
  // false if the tier has no row for `id`. SetStoredId(id, id) heals it.
  bool SetStoredId(int64_t id, int64_t stored) ABSL_LOCKS_EXCLUDED(mu_);

  // ColdTier.
  void Spill(int64_t id, const float* row) override ABSL_LOCKS_EXCLUDED(mu_);
  using ColdTier::Commit;
  absl::Status Commit(const Unwritten& unwritten) override
      ABSL_LOCKS_EXCLUDED(mu_);
  int64_t staged_rows() const override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status TakeMany(absl::Span<const int64_t> ids, float* rows,
                        bool* found) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Read(absl::Span<const int64_t> ids, int64_t floats, float* out,
                    bool* found) const override ABSL_LOCKS_EXCLUDED(mu_);
  void Pin() override ABSL_LOCKS_EXCLUDED(mu_);
  void Unpin() override ABSL_LOCKS_EXCLUDED(mu_);
  // In the order the rows were committed.
  int64_t Export(int64_t first, int64_t count, int64_t* ids,
                 float* out) override ABSL_LOCKS_EXCLUDED(mu_);
  int64_t rows() const override ABSL_LOCKS_EXCLUDED(mu_);
  int64_t disk_bytes() const override ABSL_LOCKS_EXCLUDED(mu_);
  int64_t memory_bytes() const override ABSL_LOCKS_EXCLUDED(mu_);
  int64_t index_bytes() const override ABSL_LOCKS_EXCLUDED(mu_);
  int64_t fixed_memory_bytes() const override { return 0; }

 private:
  struct Record {
    int64_t id;         // indexed under
    int64_t stored_id;  // what a read finds: `id` unless a test changed it
    std::vector<float> row;
    bool live = true;
  };
  // Checks that the records at `at` (indexed under `ids`) can be read:
  // the read fault, then each record's id.
  absl::Status CheckReadable(absl::Span<const int64_t> ids,
                             absl::Span<const size_t> at) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The live records' positions, in order (the pinned ones while pinned).
  std::vector<size_t> ExportOrderLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Drops dead records once they outnumber twice the live ones (never
  // while pinned: the pinned records stay where they are).
  void CompactLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t row_floats_;
  mutable absl::Mutex mu_;
  std::vector<Record> records_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, size_t> index_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, std::vector<float>>> staged_
      ABSL_GUARDED_BY(mu_);
  int pins_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<size_t> pinned_ ABSL_GUARDED_BY(mu_);
  bool full_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status read_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_MEMORY_COLD_TIER_H_
