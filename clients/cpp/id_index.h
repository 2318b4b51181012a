// Maps int64 ids to dense indices 0, 1, 2, ... in order of first appearance:
// the client's de-duplication of a batch's ids. Open addressing with linear
// probing over a power-of-two table sized for the batch; about 3x faster
// than a general-purpose hash map here (clients/cpp/id_index_benchmark).
#ifndef PSRT_CLIENTS_CPP_ID_INDEX_H_
#define PSRT_CLIENTS_CPP_ID_INDEX_H_

#include <cstdint>
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
    slots_.assign(capacity, Slot{0, -1});
  }

  // The index of `id`, inserting it with index size() if new.
  // REQUIRES: at most `expected` distinct ids are inserted.
  int32_t Insert(int64_t id, bool* inserted) {
    for (size_t i = MixId(id) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.index < 0) {
        s = {id, size_++};
        *inserted = true;
        return s.index;
      }
      if (s.id == id) {
        *inserted = false;
        return s.index;
      }
    }
  }

  int32_t size() const { return size_; }

 private:
  struct Slot {
    int64_t id;
    int32_t index;  // -1: empty
  };
  std::vector<Slot> slots_;
  size_t mask_;
  int32_t size_ = 0;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_ID_INDEX_H_
