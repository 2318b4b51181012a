// Time that passes only while a process runs: a server's timeouts for its
// peers ("no ready frame within 5 s", "a body not whole within 30 s") must
// not expire while the server itself was stopped (SIGSTOP, a paused VM, a
// process swapped out or starved of CPU), for what its live peers sent
// meanwhile waits, unread, in its own queues. One thread that runs in a
// loop (a progress thread) Ticks after each wait; between ticks this clock
// advances with the real clock, but never further past the last tick than
// that loop's longest expected gap. A gap longer than that is time the
// loop was not running, and does not count. So after a stop, a deadline
// measured on this clock still has as long to go as it had at the stop.
//
// Never goes back. Thread-safe: any thread reads it.
#ifndef PSRT_UTIL_AWAKE_CLOCK_H_
#define PSRT_UTIL_AWAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "util/clock.h"

namespace psrt {

class AwakeClock {
 public:
  // `longest_gap`: the most the ticking loop takes between two ticks when
  // it runs (its longest wait plus its work). `real` must outlive this.
  explicit AwakeClock(absl::Duration longest_gap,
                      const Clock* real = Clock::Real());

  // The time that has counted: the real time at construction plus the
  // time since, less the stalls seen.
  absl::Time Now() const ABSL_LOCKS_EXCLUDED(mu_);
  // The ticking loop's beat. The real time since the last tick counts up
  // to `longest_gap`. Returns Now() (one reading of the real clock for
  // both).
  absl::Time Tick() ABSL_LOCKS_EXCLUDED(mu_);
  // The time that did not count, in all.
  absl::Duration stalled() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const absl::Duration longest_gap_;
  const Clock* const real_;
  mutable absl::Mutex mu_;
  absl::Time last_tick_real_ ABSL_GUARDED_BY(mu_);
  absl::Time last_tick_awake_ ABSL_GUARDED_BY(mu_);
  absl::Duration stalled_ ABSL_GUARDED_BY(mu_);
};

// Waits on `mu` (held by the caller) until `condition` holds, for up to
// `timeout` of this process's running time: the wait is sliced, and a
// slice that took far longer than asked (the process or its VM was
// paused, or the thread starved) counts for at most 1 s. A test waiting
// for threads it started uses this instead of a plain real-time bound,
// which a VM snapshot taken mid-run (seen on CI machines: 13 s) would end
// at once. True if `condition` held. `real` must outlive the call.
bool AwaitForRunningTime(absl::Mutex* mu, const absl::Condition& condition,
                         absl::Duration timeout,
                         const Clock* real = Clock::Real())
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

}  // namespace psrt

#endif  // PSRT_UTIL_AWAKE_CLOCK_H_
