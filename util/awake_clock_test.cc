#include "util/awake_clock.h"

#include <atomic>
#include <thread>

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

// A wait for a condition that never comes ends after its running time.
TEST(AwaitForRunningTimeTest, EndsAfterItsTimeout) {
  absl::Mutex mu;
  bool never = false;
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(AwaitForRunningTime(&mu, absl::Condition(&never),
                                   absl::Milliseconds(300)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// The clock jumps an hour while the process waits (a VM snapshot taken
// mid-run: the kernel's clock jumps on resume): it counts 1 s of a 10 s
// wait, which goes on and sees its condition come.
TEST(AwaitForRunningTimeTest, OutlastsAPauseOfTheProcess) {
  SimulatedClock real;
  absl::Mutex mu;
  bool ready = false;
  std::thread other([&] {
    absl::SleepFor(absl::Milliseconds(100));
    real.Advance(absl::Hours(1));
    absl::SleepFor(absl::Milliseconds(400));
    absl::MutexLock lock(&mu);
    ready = true;
  });
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(AwaitForRunningTime(&mu, absl::Condition(&ready),
                                    absl::Seconds(10), &real));
  }
  other.join();
}

// Running time counts in full: 100 ms of it pass in each slice, and a
// 2 s wait ends after about 20 of them, well before the condition.
TEST(AwaitForRunningTimeTest, CountsRunningTimeInFull) {
  SimulatedClock real;
  absl::Mutex mu;
  bool ready = false;
  std::atomic<bool> stop{false};
  std::thread ticking([&] {
    while (!stop.load()) {
      real.Advance(absl::Milliseconds(2));
      absl::SleepFor(absl::Milliseconds(1));
    }
  });
  const absl::Time start = real.Now();
  {
    absl::MutexLock lock(&mu);
    EXPECT_FALSE(AwaitForRunningTime(&mu, absl::Condition(&ready),
                                     absl::Seconds(2), &real));
  }
  stop.store(true);
  ticking.join();
  EXPECT_GE(real.Now() - start, absl::Seconds(2));
}

}  // namespace
}  // namespace psrt
