#include "util/clock.h"

#include <chrono>

#include "absl/time/clock.h"

namespace psrt {
namespace {

class RealClock : public Clock {
 public:
  RealClock()
      : start_wall_(absl::Now()),
        start_steady_(std::chrono::steady_clock::now()) {}

  absl::Time Now() const override {
    return start_wall_ +
           absl::FromChrono(std::chrono::steady_clock::now() - start_steady_);
  }
  bool WaitForNotification(const absl::Notification& done,
                           absl::Duration timeout) const override {
    return done.WaitForNotificationWithTimeout(timeout);
  }
  void SleepFor(absl::Duration duration) const override {
    absl::SleepFor(duration);
  }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition,
                         absl::Time deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    // On this clock's readings, which may drift from absl::Now().
    return mu->AwaitWithTimeout(condition, deadline - Now());
  }

 private:
  const absl::Time start_wall_;
  const std::chrono::steady_clock::time_point start_steady_;
};

}  // namespace

Clock* Clock::Real() {
  static Clock* const clock = new RealClock();
  return clock;
}

}  // namespace psrt
