// Where psrt reads time: every deadline, lease, timeout, schedule, TTL and
// rate of a PS (and the client's retries) asks a Clock, never absl::Now()
// or a steady clock directly, so a test can run the same logic on a
// SimulatedClock (util/simulated_clock.h) that it advances by hand:
// leases, failovers and barriers are then proven in milliseconds, in one
// process, as LevelDB's Env and TensorFlow's EnvTime allow.
//
// Now() never goes back (leases depend on it): the real clock is the wall
// clock read once at start, advanced by the steady clock from then on.
// Thread-safe; a Clock outlives everything that was handed it.
#ifndef PSRT_UTIL_CLOCK_H_
#define PSRT_UTIL_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace psrt {

class Clock {
 public:
  virtual ~Clock() = default;

  // The current time on this clock; never earlier than a previous reading.
  virtual absl::Time Now() const = 0;
  // Blocks until `done` is notified (true) or `timeout` has passed on this
  // clock (false, unless `done` was notified meanwhile).
  virtual bool WaitForNotification(const absl::Notification& done,
                                   absl::Duration timeout) const = 0;
  // Blocks for `duration` on this clock.
  virtual void SleepFor(absl::Duration duration) const = 0;
  // With `mu` held (and held again on return): waits, releasing it, until
  // `condition` holds (true) or `deadline` on this clock has come (false,
  // unless `condition` holds by then). Loops that wait for "something
  // changed, or the earliest deadline" use this instead of a CondVar.
  virtual bool AwaitWithDeadline(absl::Mutex* mu,
                                 const absl::Condition& condition,
                                 absl::Time deadline) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // The process's real clock (never destroyed).
  static Clock* Real();
};

}  // namespace psrt

#endif  // PSRT_UTIL_CLOCK_H_
