#include "util/simulated_clock.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(SimulatedClockTest, MovesOnlyWhenAdvanced) {
  SimulatedClock clock(absl::FromUnixSeconds(100));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100));
  clock.Advance(absl::Milliseconds(250));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100) + absl::Milliseconds(250));
  clock.Advance(-absl::Seconds(1));  // never backwards
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100) + absl::Milliseconds(250));
}

TEST(SimulatedClockTest, AWaitEndsExactlyAtItsDeadline) {
  SimulatedClock clock;
  absl::Notification never;
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    EXPECT_FALSE(clock.WaitForNotification(never, absl::Seconds(2)));
    returned = true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1, absl::Seconds(10)));
  clock.Advance(absl::Seconds(2) - absl::Nanoseconds(1));
  // Still waiting one nanosecond before its deadline...
  ASSERT_TRUE(clock.AwaitWaiters(1, absl::Seconds(10)));
  EXPECT_FALSE(returned);
  clock.Advance(absl::Nanoseconds(1));  // ...and done at it.
  waiter.join();
  EXPECT_TRUE(returned);
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(SimulatedClockTest, ANotificationEndsTheWaitWithoutTimeMoving) {
  SimulatedClock clock;
  absl::Notification stop;
  bool notified = false;
  std::thread waiter(
      [&] { notified = clock.WaitForNotification(stop, absl::Hours(1)); });
  ASSERT_TRUE(clock.AwaitWaiters(1, absl::Seconds(10)));
  stop.Notify();
  waiter.join();
  EXPECT_TRUE(notified);
}

TEST(SimulatedClockTest, SleepForNeedsTheWholeDuration) {
  SimulatedClock clock;
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    clock.SleepFor(absl::Seconds(1));
    woke = true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1, absl::Seconds(10)));
  clock.Advance(absl::Milliseconds(999));
  ASSERT_TRUE(clock.AwaitWaiters(1, absl::Seconds(10)));
  EXPECT_FALSE(woke);
  clock.Advance(absl::Milliseconds(1));
  sleeper.join();
  EXPECT_TRUE(woke);
}

TEST(SimulatedClockTest, AThreadWhoseInstantCameIsNotIdle) {
  SimulatedClock clock;
  absl::Notification never, release;
  std::thread waiter([&] {
    clock.WaitForNotification(never, absl::Seconds(1));
    // Its step: it has not waited again until `release`.
    release.WaitForNotification();
    clock.WaitForNotification(never, absl::Seconds(1));
  });
  ASSERT_TRUE(clock.AwaitWaiters(1, absl::Seconds(10)));
  clock.Advance(absl::Seconds(1));
  EXPECT_FALSE(clock.AwaitWaiters(1, absl::Milliseconds(20)));
  release.Notify();
  EXPECT_TRUE(clock.AwaitWaiters(1, absl::Seconds(10)));
  clock.Advance(absl::Seconds(1));
  waiter.join();
}

TEST(SimulatedClockTest, AwaitWithDeadlineEndsOnTheConditionOrTheDeadline) {
  SimulatedClock clock;
  absl::Mutex mu;
  bool changed = false;
  bool result = true;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&changed),
                                     clock.Now() + absl::Seconds(3));
  });
  ASSERT_TRUE(
      clock.AwaitWaiterFor(clock.Now() + absl::Seconds(3), absl::Seconds(10)));
  EXPECT_FALSE(clock.AwaitWaiterFor(clock.Now() + absl::Seconds(2),
                                    absl::Milliseconds(5)));
  clock.Advance(absl::Seconds(3) - absl::Nanoseconds(1));
  ASSERT_TRUE(clock.AwaitWaiters(1, absl::Seconds(10)));  // not yet
  clock.Advance(absl::Nanoseconds(1));
  waiter.join();
  EXPECT_FALSE(result);
  // The condition ends it with no time passing.
  std::thread second([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&changed),
                                     absl::InfiniteFuture());
  });
  ASSERT_TRUE(clock.AwaitWaiters(1, absl::Seconds(10)));
  {
    absl::MutexLock lock(&mu);
    changed = true;
  }
  second.join();
  EXPECT_TRUE(result);
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(SimulatedClockTest, AwaitWaitersTimesOutWhenNobodyWaits) {
  SimulatedClock clock;
  EXPECT_FALSE(clock.AwaitWaiters(1, absl::Milliseconds(5)));
}

TEST(RealClockTest, NeverGoesBackAndTracksTheWallClock) {
  Clock* clock = Clock::Real();
  const absl::Time a = clock->Now();
  const absl::Time b = clock->Now();
  EXPECT_LE(a, b);
  EXPECT_LT(absl::AbsDuration(a - absl::Now()), absl::Seconds(1));
  absl::Notification never;
  EXPECT_FALSE(clock->WaitForNotification(never, absl::Milliseconds(1)));
  absl::Mutex mu;
  bool never_true = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(clock->AwaitWithDeadline(&mu, absl::Condition(&never_true),
                                        clock->Now() + absl::Milliseconds(1)));
}

}  // namespace
}  // namespace psrt
