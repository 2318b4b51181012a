#include "tools/ctr_datagen/zipf_sampler.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(ZipfSamplerTest, FrequenciesFollowThePowerLaw) {
  for (double s : {0.8, 1.0, 1.15}) {
    const int n = 50;
    ZipfSampler zipf(n, s);
    std::mt19937_64 rng(9);
    std::vector<int> counts(n + 1);
    const int draws = 400000;
    for (int i = 0; i < draws; ++i) {
      const int64_t k = zipf.Sample(rng);
      ASSERT_GE(k, 1);
      ASSERT_LE(k, n);
      ++counts[k];
    }
    double norm = 0;
    for (int k = 1; k <= n; ++k) norm += std::pow(k, -s);
    for (int k : {1, 2, 5, 20, 50}) {
      const double expected = draws * std::pow(k, -s) / norm;
      EXPECT_NEAR(counts[k], expected, 5 * std::sqrt(expected) + 1)
          << "s=" << s << " k=" << k;
    }
  }
  // Huge vocabularies need no tables.
  ZipfSampler big(5000000, 1.02);
  std::mt19937_64 rng(1);
  int64_t max = 0;
  for (int i = 0; i < 100000; ++i) max = std::max(max, big.Sample(rng));
  EXPECT_GT(max, 1000000);
}

}  // namespace
}  // namespace psrt
