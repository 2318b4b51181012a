#include "util/wire_dtype.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

std::vector<float> RoundTrip(const std::vector<float>& in, bool bfloat16,
                             int64_t* clamped = nullptr) {
  std::vector<uint16_t> wire(in.size());
  std::vector<float> out(in.size());
  if (bfloat16) {
    EncodeBfloat16(in.data(), in.size(), wire.data());
    DecodeBfloat16(wire.data(), wire.size(), out.data());
  } else {
    const int64_t c = EncodeFloat16(in.data(), in.size(), wire.data());
    if (clamped != nullptr) *clamped = c;
    DecodeFloat16(wire.data(), wire.size(), out.data());
  }
  return out;
}

// Random magnitudes spread over [10^lo, 10^hi], both signs.
std::vector<float> Spread(double lo, double hi, int n) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> e(lo, hi);
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) {
    v[i] = static_cast<float>((i % 2 ? -1 : 1) * std::pow(10.0, e(rng)));
  }
  return v;
}

TEST(WireDtypeTest, Bfloat16KeepsRangeAndEightBits) {
  const std::vector<float> in = Spread(-30, 30, 100000);
  const std::vector<float> out = RoundTrip(in, true);
  double worst = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    worst =
        std::max<double>(worst, std::fabs(out[i] - in[i]) / std::fabs(in[i]));
  }
  // Round to nearest with 8 significant bits: at most half a unit in the
  // last place, 2^-8 of the value (just above a power of two); reached.
  EXPECT_LE(worst, std::ldexp(1.0, -8));
  EXPECT_GT(worst, std::ldexp(1.0, -9));
  // Exact values stay exact; ties go to the even neighbour.
  const std::vector<float> exact = {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f};
  EXPECT_EQ(RoundTrip(exact, true), exact);
  const std::vector<float> ties = {1.0f + std::ldexp(1.0f, -8),
                                   1.0f + 3 * std::ldexp(1.0f, -8)};
  const std::vector<float> even = {1.0f, 1.0f + std::ldexp(1.0f, -6)};
  EXPECT_EQ(RoundTrip(ties, true), even);
}

TEST(WireDtypeTest, Bfloat16KeepsNonFiniteValuesNonFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> out =
      RoundTrip({std::nanf(""), -std::nanf("7"), inf, -inf,
                 std::numeric_limits<float>::max()},
                true);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], inf);
  EXPECT_EQ(out[3], -inf);
  EXPECT_EQ(out[4], inf);  // beyond bfloat16's largest: rounds up to Inf
}

TEST(WireDtypeTest, Float16HasElevenBitsInItsRangeAndClampsBeyond) {
  const std::vector<float> in =
      Spread(std::log10(6.11e-5), std::log10(65504), 100000);
  const std::vector<float> out = RoundTrip(in, false);
  double worst = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    worst =
        std::max<double>(worst, std::fabs(out[i] - in[i]) / std::fabs(in[i]));
  }
  // 11 significant bits: at most 2^-11 of the value; reached.
  EXPECT_LE(worst, std::ldexp(1.0, -11));
  EXPECT_GT(worst, std::ldexp(1.0, -12));

  const float inf = std::numeric_limits<float>::infinity();
  int64_t clamped = 0;
  const std::vector<float> edge = RoundTrip(
      {1e5f, -3e38f, 65504.0f, std::nanf(""), -inf, 1e-6f, 1e-8f, -1e-8f},
      false, &clamped);
  EXPECT_EQ(clamped, 2);
  EXPECT_EQ(edge[0], 65504.0f);
  EXPECT_EQ(edge[1], -65504.0f);
  EXPECT_EQ(edge[2], 65504.0f);  // the largest float16, not clamped
  EXPECT_TRUE(std::isnan(edge[3]));
  EXPECT_EQ(edge[4], -inf);
  // Subnormal: absolute error at most half of 2^-24.
  EXPECT_NEAR(edge[5], 1e-6f, std::ldexp(1.0, -25));
  EXPECT_EQ(edge[6], 0.0f);  // under float16's smallest: gone
  EXPECT_EQ(edge[7], 0.0f);
}

}  // namespace
}  // namespace psrt
