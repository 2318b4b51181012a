// CRC-32C (Castagnoli), as TFRecord framing uses it, and TF's masking.
#ifndef PSRT_PS_WORKER_DATA_CRC32C_H_
#define PSRT_PS_WORKER_DATA_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace psrt {

uint32_t Crc32c(const void* data, size_t n);

// TensorFlow's mask: rotate right by 15 and add a constant, so that a CRC
// of data containing CRCs stays well distributed.
inline uint32_t MaskCrc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_CRC32C_H_
