// The hash that routes HASH_EMBEDDING ids to shards. It is part of the
// protocol: the C++ and Python clients and every PS must agree on it.
#ifndef PSRT_PARTITIONER_ID_HASH_H_
#define PSRT_PARTITIONER_ID_HASH_H_

#include <cstdint>

namespace psrt {

// MurmurHash3's 64-bit finalizer: a bijection on 64-bit values that spreads
// sequential or clustered ids evenly.
inline uint64_t MixId(int64_t id) {
  uint64_t k = static_cast<uint64_t>(id);
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

}  // namespace psrt

#endif  // PSRT_PARTITIONER_ID_HASH_H_
