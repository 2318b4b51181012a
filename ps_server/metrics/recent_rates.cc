#include "ps_server/metrics/recent_rates.h"

#include <utility>

#include "absl/time/clock.h"

namespace psrt {

RecentRates::RecentRates(ReadCounters read, absl::Duration window)
    : read_(std::move(read)), window_(window) {}

RecentRates::~RecentRates() {
  stop_.Notify();
  if (sampler_.joinable()) sampler_.join();
}

void RecentRates::StartSampling(absl::Duration interval) {
  sampler_ = std::thread([this, interval] {
    do {
      Sample(absl::Now());
    } while (!stop_.WaitForNotificationWithTimeout(interval));
  });
}

void RecentRates::Sample(absl::Time now) {
  std::vector<int64_t> values = read_();
  absl::MutexLock lock(&mu_);
  samples_.push_back({now, std::move(values)});
  while (samples_.size() >= 2 && samples_[1].time <= now - window_) {
    samples_.pop_front();
  }
}

std::vector<double> RecentRates::Rates(const std::vector<int64_t>& values,
                                       absl::Time now, double* seconds) const {
  absl::MutexLock lock(&mu_);
  *seconds = 0;
  if (samples_.empty() || samples_.front().time >= now) return {};
  const Counters& oldest = samples_.front();
  *seconds = absl::ToDoubleSeconds(now - oldest.time);
  std::vector<double> rates(values.size(), 0.0);
  for (size_t i = 0; i < values.size() && i < oldest.values.size(); ++i) {
    rates[i] = (values[i] - oldest.values[i]) / *seconds;
  }
  return rates;
}

}  // namespace psrt
