// Ids for categorical tokens: a stable 64-bit hash of (field, token), the
// same in every process and release (FNV-1a, then MurmurHash3's finalizer).
// Ids are made non-negative.
#ifndef PSRT_PS_WORKER_DATA_FEATURE_HASH_H_
#define PSRT_PS_WORKER_DATA_FEATURE_HASH_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "partitioner/id_hash.h"

namespace psrt {

inline int64_t HashFeature(int64_t field, absl::string_view token) {
  uint64_t h = 0xcbf29ce484222325ULL ^ static_cast<uint64_t>(field);
  for (char c : token) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return static_cast<int64_t>(MixId(static_cast<int64_t>(h)) >> 1);
}

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_FEATURE_HASH_H_
