// The SSD tier of a hash embedding shard (StorageSpec.tier = SSD), the
// ColdTier (cold_tier.h) ps_server uses: rows the shard evicted from
// memory, each [values | slots] with its id, in an append-only file of the
// shard's own, found through an in-memory index (id -> record).
//
// The file is a sequence of fixed-size records ([id | row]) in segments of
// about kSegmentBytes. Spilled rows are appended (one write per Commit);
// a taken row's record becomes garbage. When garbage outgrows twice the
// live records, Commit moves the live records of the emptiest segments to
// the end (one read and one write a segment, a bounded number each
// Commit) and reuses those segments: the file holds at most about three
// times the live rows. Reads of cold rows are one read each, submitted
// together through io_uring where the kernel allows it (else pread).
//
// Memory: the index costs about 17 bytes per slot of its capacity (20-40
// bytes per spilled row; a dim-16 Adagrad row is 128 bytes), plus a bit a
// record and a fixed kMemoryBytes of buffers. memory_bytes() is exact;
// the shard counts it in its bytes. Chosen over RocksDB (bounded memory,
// ~13 us a row crossing the tiers here) for speed: one read from the page
// cache, ~0.6 us a row batched (docs/benchmarks.md, "SSD tier").
//
// Not durable by itself: the file is emptied when opened. Checkpoints,
// which read both tiers, are what a restarted PS restores from.
#ifndef PSRT_PS_SERVER_SHARDS_ROW_SPILL_STORE_H_
#define PSRT_PS_SERVER_SHARDS_ROW_SPILL_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "ps_server/shards/cold_tier.h"

namespace psrt {

class RowSpillStore : public ColdTier {
 public:
  static constexpr int64_t kSegmentBytes = 1 << 20;
  // The fixed part of the store's memory (a segment's buffer for moving
  // and exporting records, and the records staged by Spill); the index
  // and bitmaps grow with the spilled rows (memory_bytes()).
  static constexpr int64_t kMemoryBytes = 2 * kSegmentBytes;

  // Opens an empty store in `dir` (created; anything in it is deleted) for
  // rows of `row_floats` floats. `use_io_uring` false reads with pread
  // only (the fallback where io_uring is unavailable).
  static absl::StatusOr<std::unique_ptr<RowSpillStore>> Open(
      const std::string& dir, int64_t row_floats, bool use_io_uring = true);
  ~RowSpillStore() override;

  // ColdTier. A commit that cannot write (a full or failing disk) is
  // INTERNAL naming the store and the system's error.
  void Spill(int64_t id, const float* row) override;
  using ColdTier::Commit;
  absl::Status Commit(const Unwritten& unwritten) override;
  int64_t staged_rows() const override;
  absl::Status TakeMany(absl::Span<const int64_t> ids, float* rows,
                        bool* found) override;
  absl::Status Read(absl::Span<const int64_t> ids, int64_t floats, float* out,
                    bool* found) const override;
  // While pinned, records are neither moved nor reused until the last
  // unpin.
  void Pin() override;
  void Unpin() override;
  // In the records' order in the file. Reads resume where the last call
  // ended; another `first` starts over.
  int64_t Export(int64_t first, int64_t count, int64_t* ids,
                 float* out) override;
  int64_t rows() const override { return static_cast<int64_t>(index_.size()); }
  // Bytes of the store's file in use (its segments holding records).
  int64_t disk_bytes() const override;
  // Index, bitmaps, buffers.
  int64_t memory_bytes() const override;
  // Index, bitmap, segment counts.
  int64_t index_bytes() const override;
  int64_t fixed_memory_bytes() const override { return kMemoryBytes; }
  // Whether reads go through io_uring (false: pread).
  bool uses_io_uring() const { return use_io_uring_; }
  const std::string& dir() const { return dir_; }

 private:
  RowSpillStore(std::string dir, int fd, int64_t row_floats, bool use_io_uring);

  int64_t SlotOffset(uint32_t slot) const;
  // Reads records `slots` into records + i * record_bytes_, checking that
  // each holds ids[i].
  absl::Status ReadRecords(absl::Span<const uint32_t> slots,
                           absl::Span<const int64_t> ids, char* records) const;
  absl::Status WriteStaged(const Unwritten& unwritten);
  // Marks a record garbage; a segment left empty is reused (after the last
  // unpin while pinned).
  void DropRecord(uint32_t slot);
  void FreeSegment(uint32_t segment);
  // Records written to segments in use, live or garbage.
  int64_t used_records() const;
  // Moves the live records of the emptiest segments to the end while
  // garbage outgrows twice them, at most `budget` segments.
  absl::Status MoveLiveRecords(int budget);
  // The records of those of `ids` the store holds (found[i] for each):
  // their positions in `ids` to `at`, their records, in that order, to
  // `records` (read only when `read`).
  struct Found {
    std::vector<size_t> at;
    std::vector<uint32_t> slots;
    std::vector<char> records;
  };
  absl::Status FindAndRead(absl::Span<const int64_t> ids, bool read,
                           bool* found, Found* records) const;
  static bool Bit(const std::vector<uint64_t>& bits, uint64_t slot) {
    return (bits[slot / 64] >> (slot % 64)) & 1;
  }
  bool Live(uint32_t slot) const { return Bit(live_, slot); }

  const std::string dir_;
  const int fd_;
  const int64_t row_bytes_;
  const int64_t record_bytes_;  // id + row
  const uint32_t segment_records_;
  const bool use_io_uring_;

  absl::flat_hash_map<int64_t, uint32_t> index_;  // id -> slot
  std::vector<uint64_t> live_;                    // a bit per slot
  std::vector<uint32_t> segment_live_;            // live records per segment
  std::vector<bool> segment_in_use_;
  std::vector<uint32_t> free_segments_;
  std::atomic<int64_t> segments_in_use_{0};
  static constexpr uint32_t kNoSegment = ~uint32_t{0};
  uint32_t active_segment_ = kNoSegment;  // where records are appended
  uint32_t active_fill_ = 0;              // its records written
  std::vector<char> staged_;              // records [id | row]
  std::vector<char> segment_buffer_;      // a segment being moved

  // Pins are taken under the shard's shared lock: no change runs beside
  // them, but two checkpoints may.
  mutable absl::Mutex export_mu_;
  std::atomic<int> pins_{0};
  std::vector<uint32_t> freed_while_pinned_ ABSL_GUARDED_BY(export_mu_);
  std::vector<uint64_t> pinned_live_ ABSL_GUARDED_BY(export_mu_);
  int64_t cursor_position_ ABSL_GUARDED_BY(export_mu_) = -1;
  uint64_t cursor_slot_ ABSL_GUARDED_BY(export_mu_) = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_ROW_SPILL_STORE_H_
