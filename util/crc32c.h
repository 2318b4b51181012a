// CRC-32C (Castagnoli), as TFRecord framing and psrt's checkpoint files use
// it, and TF's masking. Uses the SSE4.2 crc32 instruction where the CPU has
// it (several GB/s), a slicing-by-8 table otherwise.
#ifndef PSRT_UTIL_CRC32C_H_
#define PSRT_UTIL_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace psrt {

// The CRC of data[0, n) continuing from `crc`, the CRC of what came before
// (0 for nothing): Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) {
  return Crc32cExtend(0, data, n);
}

// The CRC of a + b from crc_a = Crc32c(a), crc_b = Crc32c(b) and b's
// length, without the bytes (as zlib's crc32_combine, in O(log len_b)):
// lets a reader check a file whose regions it reads out of order.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// TensorFlow's mask: rotate right by 15 and add a constant, so that a CRC
// of data containing CRCs stays well distributed.
inline uint32_t MaskCrc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace psrt

#endif  // PSRT_UTIL_CRC32C_H_
