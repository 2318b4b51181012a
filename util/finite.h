// Whether float buffers hold only finite values (no NaN, no +-Inf): the
// check every push gets, on the client before anything is sent and on the
// server before anything is applied. Branch-free, so it vectorizes.
#ifndef PSRT_UTIL_FINITE_H_
#define PSRT_UTIL_FINITE_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace psrt {

// True if none of v[0, n) is NaN or +-Inf.
inline bool SpanFinite(const float* v, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof(bits));
    bad |= (bits & 0x7f800000u) + 0x00800000u;  // top bit set iff exponent 255
  }
  return (bad & 0x80000000u) == 0;
}

// The index of the first NaN or +-Inf in v[0, n), or n if there is none.
inline size_t FirstNonFinite(const float* v, size_t n) {
  if (SpanFinite(v, n)) return n;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof(bits));
    if ((bits & 0x7f800000u) == 0x7f800000u) return i;
  }
  return n;
}

// FirstNonFiniteMaxAbs (below) of n float32 values stored at `bytes`, which
// need not be float-aligned (a payload as gRPC received it): read in place,
// no aligned copy first.
inline size_t FirstNonFiniteMaxAbsBytes(const char* bytes, size_t n,
                                        float* max_abs) {
  uint32_t bad = 0;
  uint32_t top = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, bytes + i * sizeof(bits), sizeof(bits));
    bad |= (bits & 0x7f800000u) + 0x00800000u;
    const uint32_t magnitude = bits & 0x7fffffffu;
    top = magnitude > top ? magnitude : top;
  }
  if ((bad & 0x80000000u) != 0) {
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, bytes + i * sizeof(bits), sizeof(bits));
      if ((bits & 0x7f800000u) == 0x7f800000u) return i;
    }
  }
  std::memcpy(max_abs, &top, sizeof(top));
  return n;
}

// FirstNonFinite, and in *max_abs the largest magnitude of v[0, n) when all
// are finite. One branch-free pass: the magnitudes of finite floats order as
// their bit patterns without the sign do, so the maximum is an integer one.
inline size_t FirstNonFiniteMaxAbs(const float* v, size_t n, float* max_abs) {
  return FirstNonFiniteMaxAbsBytes(reinterpret_cast<const char*>(v), n,
                                   max_abs);
}

// The largest magnitude of v[0, n), or +Inf if any of them is NaN or +-Inf
// (a magnitude nothing finite can be proven from).
inline float MaxAbsOrInf(const float* v, size_t n) {
  float max_abs = 0;
  return FirstNonFiniteMaxAbs(v, n, &max_abs) == n ? max_abs : INFINITY;
}

}  // namespace psrt

#endif  // PSRT_UTIL_FINITE_H_
