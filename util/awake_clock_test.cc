#include "util/awake_clock.h"

#include "gtest/gtest.h"
#include "util/simulated_clock.h"

namespace psrt {
namespace {

constexpr absl::Duration kGap = absl::Milliseconds(300);

TEST(AwakeClockTest, FollowsTheRealClockWhileTheLoopTicks) {
  SimulatedClock real;
  AwakeClock awake(kGap, &real);
  const absl::Time start = awake.Now();
  for (int i = 0; i < 50; ++i) {
    real.Advance(absl::Milliseconds(100));
    EXPECT_EQ(awake.Now() - start, absl::Milliseconds(100) * (i + 1)) << i;
    awake.Tick();
  }
  EXPECT_EQ(awake.Now() - start, absl::Seconds(5));
  EXPECT_EQ(awake.stalled(), absl::ZeroDuration());
}

// Stopped for 12 s between two ticks: at most the loop's longest gap of
// them counts, read before or after the next tick, by any thread.
TEST(AwakeClockTest, AStopBetweenTicksCountsOnlyTheLongestGap) {
  SimulatedClock real;
  AwakeClock awake(kGap, &real);
  const absl::Time start = awake.Now();
  const absl::Time deadline = start + absl::Seconds(5);
  real.Advance(absl::Seconds(12));
  EXPECT_EQ(awake.Now() - start, kGap);  // before the loop ticked again
  EXPECT_LT(awake.Now(), deadline);
  awake.Tick();
  EXPECT_EQ(awake.Now() - start, kGap);
  EXPECT_EQ(awake.stalled(), absl::Seconds(12) - kGap);
  // From there it runs on: the deadline comes 5 s of running later.
  for (int i = 0; i < 46; ++i) {
    real.Advance(absl::Milliseconds(100));
    awake.Tick();
  }
  EXPECT_LT(awake.Now(), deadline);
  real.Advance(absl::Milliseconds(100));
  awake.Tick();
  EXPECT_GE(awake.Now(), deadline);
}

TEST(AwakeClockTest, NeverGoesBack) {
  SimulatedClock real;
  AwakeClock awake(kGap, &real);
  absl::Time last = awake.Now();
  for (int i = 0; i < 200; ++i) {
    real.Advance(absl::Milliseconds((i * 37) % 700));
    const absl::Time before_tick = awake.Now();
    EXPECT_GE(before_tick, last) << i;
    if (i % 3 != 0) awake.Tick();
    last = awake.Now();
    EXPECT_GE(last, before_tick) << i;
  }
}

}  // namespace
}  // namespace psrt
