#include "util/awake_clock.h"

#include <algorithm>

namespace psrt {
namespace {

// AwaitForRunningTime's slice, and the most one slice counts.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(50);
constexpr absl::Duration kLongestSliceGap = absl::Seconds(1);

}  // namespace

AwakeClock::AwakeClock(absl::Duration longest_gap, const Clock* real)
    : longest_gap_(longest_gap), real_(real) {
  const absl::Time now = real_->Now();
  absl::MutexLock lock(&mu_);
  last_tick_real_ = now;
  last_tick_awake_ = now;
  stalled_ = absl::ZeroDuration();
}

absl::Time AwakeClock::Now() const {
  const absl::Time now = real_->Now();
  absl::MutexLock lock(&mu_);
  return last_tick_awake_ +
         std::clamp(now - last_tick_real_, absl::ZeroDuration(), longest_gap_);
}

absl::Time AwakeClock::Tick() {
  const absl::Time now = real_->Now();
  absl::MutexLock lock(&mu_);
  const absl::Duration gap =
      std::max(now - last_tick_real_, absl::ZeroDuration());
  const absl::Duration counted = std::min(gap, longest_gap_);
  stalled_ += gap - counted;
  last_tick_awake_ += counted;
  last_tick_real_ = now;
  return last_tick_awake_;
}

absl::Duration AwakeClock::stalled() const {
  absl::MutexLock lock(&mu_);
  return stalled_;
}

bool AwaitForRunningTime(absl::Mutex* mu, const absl::Condition& condition,
                         absl::Duration timeout, const Clock* real) {
  AwakeClock running(kLongestSliceGap, real);
  const absl::Time give_up = running.Now() + timeout;
  while (!mu->AwaitWithTimeout(condition, kWaitSlice)) {
    if (running.Tick() >= give_up) return false;
  }
  return true;
}

}  // namespace psrt
