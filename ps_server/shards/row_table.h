// The rows of a hash embedding shard that are in memory: fixed-size blocks
// of rows, an id -> row index, and per row its id and (where eviction
// tracks it) the global step of its last update. Rows are dense: the
// table holds rows [0, size()), in the order they were appended, and
// Remove moves the last row into the hole (checkpoints and snapshots read
// rows by position). A block, once allocated, never moves, so a row's
// floats stay where they are until it is removed or moved.
//
// Each row is `stride` floats ([values | slot 0 | slot 1]); the table does
// not know what they mean: HashEmbeddingShard decides which ids get rows
// (admission), which go (eviction) and where they go (its cold tier).
//
// Not thread-safe: the shard guards it with its lock. Find and FindAll
// only read, so they may run on several threads under a shared hold.
#ifndef PSRT_PS_SERVER_SHARDS_ROW_TABLE_H_
#define PSRT_PS_SERVER_SHARDS_ROW_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "ps_server/shards/float_array.h"

namespace psrt {

class RowTable {
 public:
  static constexpr int64_t kRowsPerBlock = 4096;
  static constexpr uint32_t kNoRow = ~uint32_t{0};

  // `tracks_steps`: keep each row's last update step (eviction).
  RowTable(int64_t stride, bool tracks_steps);

  // Rows held, and rows the allocated blocks have room for.
  int64_t size() const { return size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t room() const { return num_blocks() * kRowsPerBlock; }

  float* row(uint32_t r) {
    return blocks_[r / kRowsPerBlock].get() + (r % kRowsPerBlock) * stride_;
  }
  const float* row(uint32_t r) const {
    return blocks_[r / kRowsPerBlock].get() + (r % kRowsPerBlock) * stride_;
  }
  int64_t id(int64_t r) const { return ids_[r]; }
  // The last update step of row r (-1: restored, not updated since).
  // REQUIRES: tracks_steps.
  int64_t& last_step(int64_t r) { return last_steps_[r]; }
  absl::Span<const int64_t> last_steps() const {
    return absl::MakeConstSpan(last_steps_.data(), last_steps_.size());
  }

  // The row of `id`, or kNoRow.
  uint32_t Find(int64_t id) const {
    auto it = index_.find(id);
    return it == index_.end() ? kNoRow : it->second;
  }
  // Find for each of `ids` into rows[i], each id's index slot prefetched
  // `prefetch_distance` ids ahead; runs of at least `parallel_rows` ids
  // are split over the thread pool.
  void FindAll(absl::Span<const int64_t> ids, uint32_t* rows,
               int64_t prefetch_distance, int64_t parallel_rows) const;

  // Room in the index for `rows` rows, made before a batch of Appends.
  void ReserveIndex(int64_t rows) { index_.reserve(rows); }
  // Allocates one more block, and room for its rows' ids and steps.
  void AddBlock();
  // Appends a row for `id` (not in the table), last updated at `step`,
  // allocating a block if the blocks are full, and returns its index. Its
  // floats are the caller's to fill.
  // (Inline: a push creating many rows calls it once per row.)
  uint32_t Append(int64_t id, int64_t step) {
    const uint32_t r = static_cast<uint32_t>(size_++);
    if (r / kRowsPerBlock == blocks_.size()) AddBlock();
    // Room made by reserve(), not by the insert: an index whose growth
    // erased slots used up is rebuilt at the same size (reserve), where an
    // insert would double it unless its live load is under 25/32 -- a
    // shard holding rows one at a time (admission) at the memory budget
    // sat just above that, with its index at twice the size
    // (docs/benchmarks.md).
    index_.reserve(index_.size() + 1);
    index_.emplace(id, r);
    ids_.push_back(id);
    if (tracks_steps_) last_steps_.push_back(step);
    return r;
  }
  // Removes row r; the last row (floats, id, step) moves into its place.
  void Remove(int64_t r);
  // Frees every block after the first `keep`. REQUIRES: size() <= keep *
  // kRowsPerBlock.
  void KeepBlocks(int64_t keep);

  // Bytes of the blocks, and of the index and per-row entries.
  int64_t block_memory() const {
    return room() * stride_ * static_cast<int64_t>(sizeof(float));
  }
  int64_t index_memory() const;

 private:
  const int64_t stride_;
  const bool tracks_steps_;
  std::vector<FloatArray> blocks_;
  absl::flat_hash_map<int64_t, uint32_t> index_;
  std::vector<int64_t> ids_;         // row -> id
  std::vector<int64_t> last_steps_;  // row -> last update step
  int64_t size_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_ROW_TABLE_H_
