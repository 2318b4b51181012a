// Deterministic parameter initializers.
//
// A value is a pure function of (seed, row, column): row is the global row
// (dense and EMBEDDING) or the id (HASH_EMBEDDING). Values therefore do not
// depend on how a variable is partitioned, on which PS a row lives, or on
// when a hash-embedding row is first touched -- a restore onto a different
// number of PS tasks, or a row evicted and re-created, sees the same values.
#ifndef PSRT_PS_SERVER_SHARDS_INITIALIZER_H_
#define PSRT_PS_SERVER_SHARDS_INITIALIZER_H_

#include <cstdint>

#include "proto/ps.pb.h"

namespace psrt {

class Initializer {
 public:
  explicit Initializer(const InitializerSpec& spec) : spec_(spec) {}

  // Fills out[0, width) with row `row`'s values.
  void FillRow(int64_t row, int64_t width, float* out) const;

  // Fills `num_rows` consecutive rows starting at `first_row`.
  void FillRows(int64_t first_row, int64_t num_rows, int64_t width,
                float* out) const;

  // The value of one element.
  float Value(int64_t row, int64_t column) const;

 private:
  InitializerSpec spec_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_INITIALIZER_H_
