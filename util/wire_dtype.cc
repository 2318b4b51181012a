#include "util/wire_dtype.h"

#include <cmath>
#include <cstring>

#include "Eigen/Core"

namespace psrt {

void EncodeBfloat16(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], sizeof(bits));
    // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to
    // even; a carry into the exponent is the correct rounding up (to Inf
    // past the largest value). A NaN's payload could carry into Inf, so
    // NaN is mapped to a quiet NaN instead.
    const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    out[i] = nan ? static_cast<uint16_t>((bits >> 16) | 0x0040u)
                 : static_cast<uint16_t>(rounded >> 16);
  }
}

void DecodeBfloat16(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &bits, sizeof(bits));
  }
}

int64_t EncodeFloat16(const float* in, size_t n, uint16_t* out) {
  constexpr float kLargest = 65504.0f;
  int64_t clamped = 0;
  for (size_t i = 0; i < n; ++i) {
    float v = in[i];
    if (std::isfinite(v) && std::fabs(v) > kLargest) {
      v = std::copysign(kLargest, v);
      ++clamped;
    }
    out[i] = Eigen::numext::bit_cast<uint16_t>(Eigen::half(v));
  }
  return clamped;
}

void DecodeFloat16(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(in[i]));
  }
}

}  // namespace psrt
