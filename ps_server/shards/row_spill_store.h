// The SSD tier of a hash embedding shard (StorageSpec.tier = SSD): rows the
// shard evicted from memory, each [values | slots] keyed by its id, in a
// RocksDB database of the shard's own. The shard keeps every id in exactly
// one tier: Spill adds rows it just dropped from memory, Take reads and
// deletes a row it is bringing back.
//
// Not durable by itself: the database is emptied when opened and written
// without a write-ahead log. Checkpoints, which read both tiers, are what a
// restarted PS restores from.
//
// RocksDB's memory is bounded and stated (kMemoryBytes): two write
// buffers, and a block cache that also holds the index and Bloom filter
// blocks, so a tier of any size costs the PS the same memory.
// Chosen over LevelDB and LMDB by tools/bench/kv_store_choice.sh
// (docs/benchmarks.md): LMDB maps its file (the spilled rows count in the
// PS's RSS) and LevelDB keeps every table's index and filter outside any
// bound.
#ifndef PSRT_PS_SERVER_SHARDS_ROW_SPILL_STORE_H_
#define PSRT_PS_SERVER_SHARDS_ROW_SPILL_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace rocksdb {
class DB;
class Iterator;
class Snapshot;
class WriteBatch;
}  // namespace rocksdb

namespace psrt {

class RowSpillStore {
 public:
  static constexpr int64_t kWriteBufferBytes = 2 << 20;
  static constexpr int64_t kBlockCacheBytes = 4 << 20;
  // What the store may hold in memory: its write buffers and block cache.
  static constexpr int64_t kMemoryBytes =
      2 * kWriteBufferBytes + kBlockCacheBytes;

  // Opens an empty store in `dir` (created; anything in it is deleted) for
  // rows of `row_floats` floats.
  static absl::StatusOr<std::unique_ptr<RowSpillStore>> Open(
      const std::string& dir, int64_t row_floats);
  ~RowSpillStore();

  // Spill, Commit and Take change the store: the shard calls them under its
  // lock, one at a time. Read and Export may run beside them.
  //
  // Stages row `row` of `id`; Commit writes what was staged.
  void Spill(int64_t id, const float* row);
  // Writes the staged rows; on an error they are not in the store.
  absl::Status Commit();
  int64_t staged_rows() const;

  // Reads `id`'s row into `row` and deletes it from the store; false if the
  // store has no row for it.
  absl::StatusOr<bool> Take(int64_t id, float* row);
  // Take for many ids in one batch: rows to rows + i * row floats,
  // found[i] whether ids[i] had a row. REQUIRES: ids unique.
  absl::Status TakeMany(absl::Span<const int64_t> ids, float* rows,
                        bool* found);
  // Reads the rows of `ids` (their values: the first `floats` floats of
  // each) into out + i * floats; found[i] says whether ids[i] had a row.
  absl::Status Read(absl::Span<const int64_t> ids, int64_t floats, float* out,
                    bool* found) const;

  // While pinned, Export reads the rows as they were when the first pin
  // was taken. Pins nest.
  void Pin();
  void Unpin();
  // Copies rows [first, first + count) of the store's order (by id) to
  // `ids` and `out` (either may be null); returns the number copied. Reads
  // resume where the last call ended; another `first` starts over.
  int64_t Export(int64_t first, int64_t count, int64_t* ids, float* out);

  // Bytes of the spilled rows: the store's files on disk, and its write
  // buffers not yet written to them.
  int64_t disk_bytes() const;
  const std::string& dir() const { return dir_; }

 private:
  RowSpillStore(std::string dir, int64_t row_floats, rocksdb::DB* db);

  const std::string dir_;
  const int64_t row_bytes_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<rocksdb::WriteBatch> staged_;
  absl::Mutex export_mu_;
  int pins_ ABSL_GUARDED_BY(export_mu_) = 0;
  const rocksdb::Snapshot* snapshot_ ABSL_GUARDED_BY(export_mu_) = nullptr;
  std::unique_ptr<rocksdb::Iterator> cursor_ ABSL_GUARDED_BY(export_mu_);
  int64_t cursor_position_ ABSL_GUARDED_BY(export_mu_) = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_ROW_SPILL_STORE_H_
