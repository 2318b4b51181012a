#include "ps_server/shards/initializer.h"

#include <cmath>

#include "partitioner/id_hash.h"

namespace psrt {
namespace {

// 64 random bits for (seed, row, column, draw): a counter-based generator
// built from the MurmurHash3 finalizer (a bijection), so any element can be
// computed alone.
uint64_t Bits(uint64_t seed, int64_t row, int64_t column, uint64_t draw) {
  uint64_t x = MixId(static_cast<int64_t>(seed ^ 0x9e3779b97f4a7c15ULL));
  x = MixId(static_cast<int64_t>(x ^ static_cast<uint64_t>(row)));
  x = MixId(static_cast<int64_t>(x + static_cast<uint64_t>(column) *
                                         0xd6e8feb86659fd93ULL));
  return MixId(static_cast<int64_t>(x + draw));
}

// Uniform in (0, 1), never exactly 0 or 1.
double Unit(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Two independent standard normals from 64 random bits: Box-Muller with
// both of its outputs, in float (values are stored as float; a sample
// takes a quarter of the double-precision log and cos it used to). u1 has
// 23 bits, so |z| <= sqrt(-2 ln(2^-24)) = 5.8: tails beyond are cut, as
// they are for 32-bit generators.
struct NormalPair {
  float z[2];
};
NormalPair StandardNormalPair(uint64_t bits) {
  const float u1 =
      (static_cast<float>(bits >> 41) + 0.5f) * (1.0f / 8388608.0f);
  const float u2 =
      static_cast<float>((bits >> 17) & 0xffffff) * (1.0f / 16777216.0f);
  const float r = std::sqrt(-2.0f * std::log(u1));
  float sin, cos;
  sincosf(2.0f * static_cast<float>(M_PI) * u2, &sin, &cos);
  return {{r * cos, r * sin}};
}

// Column c's standard normal for `draw`: one of the pair drawn for
// columns (c & ~1, c | 1).
float StandardNormal(uint64_t seed, int64_t row, int64_t column,
                     uint64_t draw) {
  return StandardNormalPair(Bits(seed, row, column >> 1, draw)).z[column & 1];
}

}  // namespace

float Initializer::Value(int64_t row, int64_t column) const {
  switch (spec_.kind()) {
    case InitializerSpec::ZEROS:
      return 0.0f;
    case InitializerSpec::CONSTANT:
      return spec_.value();
    case InitializerSpec::UNIFORM: {
      const double u = Unit(Bits(spec_.seed(), row, column, 0));
      return static_cast<float>(spec_.min() + u * (spec_.max() - spec_.min()));
    }
    case InitializerSpec::NORMAL:
      return spec_.mean() +
             spec_.stddev() * StandardNormal(spec_.seed(), row, column, 0);
    case InitializerSpec::TRUNCATED_NORMAL: {
      // As TF's truncated_normal: draws beyond two standard deviations are
      // discarded and redrawn.
      for (uint64_t draw = 0;; ++draw) {
        const float z = StandardNormal(spec_.seed(), row, column, draw);
        if (std::fabs(z) <= 2.0f) return spec_.mean() + spec_.stddev() * z;
      }
    }
    default:
      return 0.0f;
  }
}

void Initializer::FillRow(int64_t row, int64_t width, float* out) const {
  if (spec_.kind() == InitializerSpec::ZEROS ||
      spec_.kind() == InitializerSpec::CONSTANT) {
    const float v =
        spec_.kind() == InitializerSpec::ZEROS ? 0.0f : spec_.value();
    for (int64_t c = 0; c < width; ++c) out[c] = v;
    return;
  }
  const bool truncated = spec_.kind() == InitializerSpec::TRUNCATED_NORMAL;
  if (truncated || spec_.kind() == InitializerSpec::NORMAL) {
    // Both values of each pair from one draw (Value computes one of them);
    // a truncated value beyond 2 standard deviations (4.6% of them) is
    // redrawn alone, as Value does.
    for (int64_t c = 0; c < width; c += 2) {
      const NormalPair p =
          StandardNormalPair(Bits(spec_.seed(), row, c >> 1, 0));
      for (int64_t k = 0; k < 2 && c + k < width; ++k) {
        const bool redraw = truncated && !(std::fabs(p.z[k]) <= 2.0f);
        out[c + k] =
            redraw ? Value(row, c + k) : spec_.mean() + spec_.stddev() * p.z[k];
      }
    }
    return;
  }
  for (int64_t c = 0; c < width; ++c) out[c] = Value(row, c);
}

void Initializer::FillRows(int64_t first_row, int64_t num_rows, int64_t width,
                           float* out) const {
  for (int64_t r = 0; r < num_rows; ++r) {
    FillRow(first_row + r, width, out + r * width);
  }
}

}  // namespace psrt
