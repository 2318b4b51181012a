#include "ps_server/metrics/recent_rates.h"

#include <atomic>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

// A counter rising 100 per second for 2 minutes, then stopping: the rate
// over the last minute follows it (100/s, then falling to 0 a minute later),
// where the mean since start would still say ~67/s.
TEST(RecentRatesTest, RatesSpanTheLastWindowNotTheWholeRun) {
  std::atomic<int64_t> count{0};
  RecentRates rates(
      [&] {
        return std::vector<int64_t>{count.load(), 7};
      },
      absl::Seconds(60));
  const absl::Time start = absl::UnixEpoch() + absl::Hours(1);
  double seconds = -1;
  EXPECT_TRUE(rates.Rates({0, 7}, start, &seconds).empty());
  EXPECT_EQ(seconds, 0);
  for (int t = 0; t <= 180; t += 5) {
    count = t <= 120 ? 100 * t : 12000;
    rates.Sample(start + absl::Seconds(t));
    if (t == 10) {
      auto r = rates.Rates({1500, 7}, start + absl::Seconds(15), &seconds);
      ASSERT_EQ(r.size(), 2u);
      EXPECT_DOUBLE_EQ(seconds, 15);  // since the first sample
      EXPECT_DOUBLE_EQ(r[0], 100);
      EXPECT_DOUBLE_EQ(r[1], 0);
    }
    if (t == 120) {
      auto r = rates.Rates({12000, 7}, start + absl::Seconds(120), &seconds);
      EXPECT_DOUBLE_EQ(seconds, 60);  // the window, not the 120 s run
      EXPECT_DOUBLE_EQ(r[0], 100);
    }
  }
  // 60 s after the counter stopped, the last window saw nothing.
  auto r = rates.Rates({12000, 7}, start + absl::Seconds(180), &seconds);
  EXPECT_DOUBLE_EQ(seconds, 60);
  EXPECT_DOUBLE_EQ(r[0], 0);
  // Halfway through the stop: half the window at 100/s.
  RecentRates half([&] { return std::vector<int64_t>{count.load()}; });
  for (int t = 0; t <= 150; t += 5) {
    count = t <= 120 ? 100 * t : 12000;
    half.Sample(start + absl::Seconds(t));
  }
  r = half.Rates({12000}, start + absl::Seconds(150), &seconds);
  EXPECT_DOUBLE_EQ(seconds, 60);
  EXPECT_DOUBLE_EQ(r[0], 50);
}

TEST(RecentRatesTest, TheSamplingThreadSamplesUntilDestroyed) {
  std::atomic<int> reads{0};
  {
    RecentRates rates([&] {
      ++reads;
      return std::vector<int64_t>{1};
    });
    rates.StartSampling(absl::Milliseconds(10));
    absl::SleepFor(absl::Milliseconds(200));
    double seconds = 0;
    auto r = rates.Rates({1}, absl::Now(), &seconds);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_GT(seconds, 0);
  }
  const int after = reads.load();
  EXPECT_GE(after, 3);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(reads.load(), after);  // stopped with the object
}

}  // namespace
}  // namespace psrt
