// Maps int64 ids to dense indices 0, 1, 2, ... in order of first appearance:
// the client's de-duplication of a batch's ids. Open addressing with linear
// probing; a slot is only the int32 index of an id in ids(), so the table
// for a 100k-id batch is 1 MiB and stays in L2 (a table of {id, index}
// slots was 4 MiB and cost a cache miss per probe).
#ifndef PSRT_CLIENTS_CPP_ID_INDEX_H_
#define PSRT_CLIENTS_CPP_ID_INDEX_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "partitioner/id_hash.h"

namespace psrt {

class IdIndex {
 public:
  // Room for `expected` distinct ids at a load factor of at most 1/2.
  explicit IdIndex(size_t expected) {
    size_t capacity = 16;
    while (capacity < 2 * expected) capacity <<= 1;
    mask_ = capacity - 1;
    slots_.reset(new int32_t[capacity]);
    std::fill_n(slots_.get(), capacity, -1);
    ids_.reserve(expected);
  }

  // The index of `id`, appending it to ids() if new.
  // REQUIRES: at most `expected` distinct ids are inserted.
  int32_t Insert(int64_t id, bool* inserted) {
    for (size_t i = MixId(id) & mask_;; i = (i + 1) & mask_) {
      const int32_t index = slots_[i];
      if (index < 0) {
        slots_[i] = static_cast<int32_t>(ids_.size());
        ids_.push_back(id);
        *inserted = true;
        return slots_[i];
      }
      if (ids_[index] == id) {
        *inserted = false;
        return index;
      }
    }
  }

  // Starts loading the slot `id` hashes to: call it kPrefetchDistance ids
  // ahead of their Insert (the table is larger than L1 and its slots are
  // random; id_index_benchmark: 8-10% less time per batch at 16, none more
  // at 32).
  static constexpr size_t kPrefetchDistance = 16;
  void Prefetch(int64_t id) const {
    __builtin_prefetch(&slots_[MixId(id) & mask_]);
  }

  // Distinct ids in order of first appearance.
  const std::vector<int64_t>& ids() const { return ids_; }
  std::vector<int64_t> TakeIds() { return std::move(ids_); }

 private:
  std::unique_ptr<int32_t[]> slots_;
  size_t mask_;
  std::vector<int64_t> ids_;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_ID_INDEX_H_
