#include "ps_server/shards/row_table.h"

#include <algorithm>
#include <cstring>

#include "util/thread_pool.h"

namespace psrt {

RowTable::RowTable(int64_t stride, bool tracks_steps)
    : stride_(stride), tracks_steps_(tracks_steps) {}

void RowTable::FindAll(absl::Span<const int64_t> ids, uint32_t* rows,
                       int64_t prefetch_distance, int64_t parallel_rows) const {
  auto find = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (i + prefetch_distance < end) {
        index_.prefetch(ids[i + prefetch_distance]);
      }
      rows[i] = Find(ids[i]);
    }
  };
  PoolParallelFor(static_cast<int64_t>(ids.size()), parallel_rows, find);
}

void RowTable::AddBlock() {
  blocks_.push_back(AllocateFloats(kRowsPerBlock * stride_));
  // Grown by an eighth at a time, not doubled: the entries' memory stays
  // close to what the blocks account for.
  const size_t rows = static_cast<size_t>(room());
  auto make_room = [rows](std::vector<int64_t>& entries) {
    if (entries.capacity() < rows) {
      entries.reserve(
          std::max(rows, entries.capacity() + entries.capacity() / 8));
    }
  };
  make_room(ids_);
  if (tracks_steps_) make_room(last_steps_);
}

void RowTable::Remove(int64_t r) {
  index_.erase(ids_[r]);
  const int64_t last = size_ - 1;
  if (r != last) {
    std::memcpy(row(static_cast<uint32_t>(r)), row(static_cast<uint32_t>(last)),
                stride_ * sizeof(float));
    ids_[r] = ids_[last];
    if (tracks_steps_) last_steps_[r] = last_steps_[last];
    index_[ids_[r]] = static_cast<uint32_t>(r);
  }
  ids_.pop_back();
  if (tracks_steps_) last_steps_.pop_back();
  --size_;
}

void RowTable::KeepBlocks(int64_t keep) { blocks_.resize(keep); }

int64_t RowTable::index_memory() const {
  return static_cast<int64_t>(
      index_.capacity() * (sizeof(std::pair<int64_t, uint32_t>) + 1) +
      (ids_.capacity() + last_steps_.capacity()) * sizeof(int64_t));
}

}  // namespace psrt
