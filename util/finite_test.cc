#include "util/finite.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(FiniteTest, MaxAbsIsTheLargestMagnitudeOfEitherSign) {
  const std::vector<float> v = {0.5f, -3.25f, 1e-40f, -0.0f, 2.0f, 3.0f};
  float max_abs = -1;
  EXPECT_EQ(FirstNonFiniteMaxAbs(v.data(), v.size(), &max_abs), v.size());
  EXPECT_EQ(max_abs, 3.25f);
  const std::vector<float> tiny = {-1e-45f, 1e-44f, -0.0f};  // subnormals
  EXPECT_EQ(FirstNonFiniteMaxAbs(tiny.data(), tiny.size(), &max_abs), 3u);
  EXPECT_EQ(max_abs, 1e-44f);
  const std::vector<float> big = {-std::numeric_limits<float>::max(), 1.0f};
  EXPECT_EQ(FirstNonFiniteMaxAbs(big.data(), big.size(), &max_abs), 2u);
  EXPECT_EQ(max_abs, std::numeric_limits<float>::max());
  EXPECT_EQ(FirstNonFiniteMaxAbs(nullptr, 0, &max_abs), 0u);
  EXPECT_EQ(max_abs, 0.0f);
}

TEST(FiniteTest, MaxAbsNamesTheFirstNonFiniteValue) {
  std::vector<float> v(1000, 1.0f);
  v[700] = -std::numeric_limits<float>::infinity();
  v[900] = std::nanf("");
  float max_abs = 0;
  EXPECT_EQ(FirstNonFiniteMaxAbs(v.data(), v.size(), &max_abs), 700u);
  v[700] = 1e30f;
  EXPECT_EQ(FirstNonFiniteMaxAbs(v.data(), v.size(), &max_abs), 900u);
  v[900] = -1e31f;
  EXPECT_EQ(FirstNonFiniteMaxAbs(v.data(), v.size(), &max_abs), v.size());
  EXPECT_EQ(max_abs, 1e31f);
}

}  // namespace
}  // namespace psrt
