#include "util/crc32c.h"

#include <array>
#include <cstring>

namespace psrt {
namespace {

// Slicing-by-8 tables for the reflected polynomial 0x82f63b78.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t;
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (c & 1 ? 0x82f63b78u : 0);
      t[0][i] = c;
    }
    for (int s = 1; s < 8; ++s) {
      for (uint32_t i = 0; i < 256; ++i) {
        t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
      }
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

// Works on the inverted register c (as both paths do).
uint32_t TableExtend(uint32_t c, const uint8_t* p, size_t n) {
  const auto& t = GetTables().t;
  while (n >= 8) {
    const uint32_t lo =
        (p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24) ^ c;
    const uint32_t hi =
        p[4] | p[5] << 8 | p[6] << 16 | static_cast<uint32_t>(p[7]) << 24;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^
        t[4][lo >> 24] ^ t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^
        t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xff];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t HardwareExtend(uint32_t c,
                                                          const uint8_t* p,
                                                          size_t n) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = __builtin_ia32_crc32di(c64, word);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n-- > 0) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

// A 32x32 matrix over GF(2) (column i = the image of bit i) times `vec`.
uint32_t Gf2Times(const std::array<uint32_t, 32>& matrix, uint32_t vec) {
  uint32_t sum = 0;
  for (int i = 0; vec != 0; ++i, vec >>= 1) {
    if (vec & 1) sum ^= matrix[i];
  }
  return sum;
}

std::array<uint32_t, 32> Gf2Square(const std::array<uint32_t, 32>& matrix) {
  std::array<uint32_t, 32> square;
  for (int i = 0; i < 32; ++i) square[i] = Gf2Times(matrix, matrix[i]);
  return square;
}

}  // namespace

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  if (len_b == 0) return crc_a;
  // `odd` shifts the register by one zero bit; squaring doubles the shift.
  std::array<uint32_t, 32> odd, even;
  odd[0] = 0x82f63b78u;
  for (int i = 1; i < 32; ++i) odd[i] = 1u << (i - 1);
  even = Gf2Square(odd);  // 2 bits
  odd = Gf2Square(even);  // 4 bits
  // Apply len_b zero bytes to crc_a: one squaring per bit of len_b,
  // starting at 8 bits (one byte).
  while (true) {
    even = Gf2Square(odd);
    if (len_b & 1) crc_a = Gf2Times(even, crc_a);
    len_b >>= 1;
    if (len_b == 0) break;
    odd = Gf2Square(even);
    if (len_b & 1) crc_a = Gf2Times(odd, crc_a);
    len_b >>= 1;
    if (len_b == 0) break;
  }
  return crc_a ^ crc_b;
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = crc ^ 0xffffffffu;
#if defined(__x86_64__)
  if (HasSse42()) return HardwareExtend(c, p, n) ^ 0xffffffffu;
#endif
  return TableExtend(c, p, n) ^ 0xffffffffu;
}

}  // namespace psrt
