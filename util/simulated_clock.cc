#include "util/simulated_clock.h"

#include <iterator>

#include "util/awake_clock.h"

namespace psrt {

SimulatedClock::SimulatedClock(absl::Time start) : now_(start) {}

absl::Time SimulatedClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

bool SimulatedClock::WaitForNotification(const absl::Notification& done,
                                         absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = now_ + timeout;
  const auto waiting = deadlines_.insert(deadline);
  // The notification has no hook into this mutex: look at it every real
  // millisecond, and at once when time moves.
  while (!done.HasBeenNotified() && now_ < deadline) {
    advanced_.WaitWithTimeout(&mu_, absl::Milliseconds(1));
  }
  deadlines_.erase(waiting);
  return done.HasBeenNotified();
}

void SimulatedClock::SleepFor(absl::Duration duration) const {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = now_ + duration;
  const auto waiting = deadlines_.insert(deadline);
  while (now_ < deadline) advanced_.Wait(&mu_);
  deadlines_.erase(waiting);
}

bool SimulatedClock::AwaitWithDeadline(absl::Mutex* mu,
                                       const absl::Condition& condition,
                                       absl::Time deadline) const {
  std::multiset<absl::Time>::iterator waiting;
  {
    absl::MutexLock lock(&mu_);
    waiting = deadlines_.insert(deadline);
  }
  // Time moves under this clock's mutex, the condition under `mu`: wait on
  // `mu` for a real millisecond at a time and look at the clock between.
  // (Order: `mu`, then this clock's; Advance never takes `mu`.)
  bool holds = condition.Eval();
  while (!holds && Now() < deadline) {
    holds = mu->AwaitWithTimeout(condition, absl::Milliseconds(1));
  }
  absl::MutexLock lock(&mu_);
  deadlines_.erase(waiting);
  return holds;
}

void SimulatedClock::Advance(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  if (duration > absl::ZeroDuration()) now_ += duration;
  advanced_.SignalAll();
}

int SimulatedClock::waiters() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(deadlines_.size());
}

bool SimulatedClock::AwaitWaiters(int count, absl::Duration timeout) const {
  auto enough = [this, count]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const auto later = deadlines_.upper_bound(now_);
    return std::distance(later, deadlines_.end()) >= count;
  };
  absl::MutexLock lock(&mu_);
  return AwaitForRunningTime(&mu_, absl::Condition(&enough), timeout);
}

bool SimulatedClock::AwaitWaiterFor(absl::Time instant,
                                    absl::Duration timeout) const {
  auto waited_for = [this, instant]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return deadlines_.count(instant) > 0;
  };
  absl::MutexLock lock(&mu_);
  return AwaitForRunningTime(&mu_, absl::Condition(&waited_for), timeout);
}

}  // namespace psrt
