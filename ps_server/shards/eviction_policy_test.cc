#include "ps_server/shards/eviction_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

EvictionSpec Spec(int64_t ttl_steps, int64_t max_rows) {
  EvictionSpec spec;
  spec.set_ttl_steps(ttl_steps);
  spec.set_max_rows(max_rows);
  return spec;
}

TEST(EvictionPolicyTest, RowsTrackStepsOnlyWhereSomeRuleEvicts) {
  EXPECT_FALSE(EvictionPolicy(Spec(0, 0), 4, false).tracks_steps());
  EXPECT_TRUE(EvictionPolicy(Spec(10, 0), 4, false).tracks_steps());
  EXPECT_TRUE(EvictionPolicy(Spec(0, 100), 4, false).tracks_steps());
  EXPECT_TRUE(EvictionPolicy(Spec(0, 0), 4, true).tracks_steps());
}

// Each shard's share of max_rows is rounded up, so the table holds at
// least max_rows; near 2^63 without overflow.
TEST(EvictionPolicyTest, EachShardGetsItsShareRoundedUp) {
  EXPECT_EQ(EvictionPolicy(Spec(0, 100), 4, false).max_rows(), 25);
  EXPECT_EQ(EvictionPolicy(Spec(0, 101), 4, false).max_rows(), 26);
  EXPECT_EQ(EvictionPolicy(Spec(0, 3), 4, false).max_rows(), 1);
  const int64_t most = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(EvictionPolicy(Spec(0, most), 3, false).max_rows(), most / 3 + 1);
}

TEST(EvictionPolicyTest, TtlMakesRowsIdleBeforeGlobalStepLessT) {
  EXPECT_EQ(EvictionPolicy(Spec(50, 0), 1, false).IdleBefore(1000), 950);
  EXPECT_EQ(EvictionPolicy(Spec(0, 10), 1, false).IdleBefore(1000),
            std::numeric_limits<int64_t>::min());
}

TEST(EvictionPolicyTest, SweepsTrimToNinetyPercentAndPushesLeaveOneSpare) {
  const EvictionPolicy policy(Spec(0, 1000), 1, false);
  EXPECT_EQ(policy.SweepExcess(800), 0);
  EXPECT_EQ(policy.SweepExcess(900), 0);
  EXPECT_EQ(policy.SweepExcess(1000), 100);
  EXPECT_EQ(EvictionPolicy(Spec(30, 0), 1, false).SweepExcess(1'000'000), 0);
  // 1,000 rows at the limit, 40 new: 40 plus 10 spare go.
  EXPECT_EQ(EvictionPolicy::RoomFor(1000, 40, 1000), 50);
  EXPECT_EQ(EvictionPolicy::RoomFor(900, 40, 1000), -50);  // fits
}

// The cutoff is the sampled quantile of the rows' last steps: on rows
// last updated at steps 0..99,999 in random places, the step below which
// 10% (30%) of them lie is found within the sample's error; rows
// restored from a checkpoint (-1) count as recent, never as the oldest.
TEST(EvictionPolicyTest, TheCutoffIsTheSampledQuantileOfLastSteps) {
  constexpr int64_t kRows = 100'000;
  std::vector<int64_t> steps(kRows);
  for (int64_t i = 0; i < kRows; ++i) steps[i] = i;
  std::shuffle(steps.begin(), steps.end(), std::mt19937_64(3));
  for (double fraction : {0.1, 0.3}) {
    for (uint64_t first = 0; first < 5 * EvictionPolicy::kSample;
         first += EvictionPolicy::kSample) {
      const int64_t cutoff =
          EvictionPolicy::CutoffStep(steps, kRows, fraction, first);
      // Four standard errors of a quantile from kSample rows.
      const double error =
          4 * std::sqrt(fraction * (1 - fraction) / EvictionPolicy::kSample);
      EXPECT_NEAR(static_cast<double>(cutoff) / kRows, fraction, error)
          << fraction << " from sample " << first;
    }
  }
  // Half the rows restored (-1): the oldest tenth of all rows is the
  // oldest fifth of the others.
  for (int64_t i = 0; i < kRows; i += 2) steps[i] = -1;
  const int64_t cutoff = EvictionPolicy::CutoffStep(steps, kRows, 0.1, 0);
  EXPECT_GE(cutoff, 0);
  EXPECT_NEAR(static_cast<double>(cutoff) / kRows, 0.2,
              4 * std::sqrt(0.1 * 0.9 / EvictionPolicy::kSample) * 2);
  // Fewer rows than the sample: as many samples as rows (here they find
  // the oldest row).
  const std::vector<int64_t> few = {7, 3, 9, 1};
  EXPECT_EQ(EvictionPolicy::CutoffStep(few, 100, 0.0, 0), 1);
}

}  // namespace
}  // namespace psrt
