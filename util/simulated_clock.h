// A Clock that moves only when a test advances it (util/clock.h). Threads
// that wait on it (leases renewing, a failover monitor probing, a barrier's
// deadline) wake when an Advance reaches their deadline, so a test walks a
// distributed protocol through seconds of its time in microseconds of
// real time, and can wait (AwaitWaiters) until every loop thread has done
// its step and waits for a later instant again.
//
// Thread-safe. Waits on it also end when their notification fires (checked
// every millisecond of real time).
#ifndef PSRT_UTIL_SIMULATED_CLOCK_H_
#define PSRT_UTIL_SIMULATED_CLOCK_H_

#include <set>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "util/clock.h"

namespace psrt {

class SimulatedClock : public Clock {
 public:
  // Starts at `start` (a fixed instant: runs are repeatable).
  explicit SimulatedClock(absl::Time start = absl::FromUnixSeconds(1800000000));

  absl::Time Now() const override ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitForNotification(const absl::Notification& done,
                           absl::Duration timeout) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  void SleepFor(absl::Duration duration) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition,
                         absl::Time deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_LOCKS_EXCLUDED(mu_);

  // Moves time forward by `duration` (>= 0) and wakes the waits it ends.
  void Advance(absl::Duration duration) ABSL_LOCKS_EXCLUDED(mu_);
  // Threads blocked in WaitForNotification or SleepFor now (some may be
  // about to wake: their instant has come).
  int waiters() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks, up to `timeout` of the process's running time (real time less
  // pauses: awake_clock.h), until at least `count` threads wait on this
  // clock for an instant after Now() -- after an Advance, until the
  // threads it woke have done their step and wait again. False if they
  // did not in time.
  bool AwaitWaiters(int count, absl::Duration timeout) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks, up to `timeout` of running time as above, until some thread
  // waits for exactly `instant` (a timeout the test knows was just set).
  // False if none did in time.
  bool AwaitWaiterFor(absl::Time instant, absl::Duration timeout) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  // The instants the blocked threads wait for.
  mutable std::multiset<absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
  mutable absl::CondVar advanced_;
};

}  // namespace psrt

#endif  // PSRT_UTIL_SIMULATED_CLOCK_H_
