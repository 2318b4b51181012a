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

// A standard normal sample (Box-Muller on two 32-bit halves).
double StandardNormal(uint64_t bits) {
  const double u1 =
      (static_cast<double>(bits >> 32) + 0.5) * (1.0 / 4294967296.0);
  const double u2 =
      static_cast<double>(bits & 0xffffffffULL) * (1.0 / 4294967296.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
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
      return static_cast<float>(
          spec_.mean() +
          spec_.stddev() * StandardNormal(Bits(spec_.seed(), row, column, 0)));
    case InitializerSpec::TRUNCATED_NORMAL: {
      // As TF's truncated_normal: draws beyond two standard deviations are
      // discarded and redrawn.
      for (uint64_t draw = 0;; ++draw) {
        const double z = StandardNormal(Bits(spec_.seed(), row, column, draw));
        if (std::fabs(z) <= 2.0) {
          return static_cast<float>(spec_.mean() + spec_.stddev() * z);
        }
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
  for (int64_t c = 0; c < width; ++c) out[c] = Value(row, c);
}

void Initializer::FillRows(int64_t first_row, int64_t num_rows, int64_t width,
                           float* out) const {
  for (int64_t r = 0; r < num_rows; ++r) {
    FillRow(first_row + r, width, out + r * width);
  }
}

}  // namespace psrt
