// Per-second rates of a few counters over about the last minute, for the
// status page (Prometheus computes its own from /metrics). A thread samples
// the counters every few seconds; a rate is (the values now - the oldest
// sample kept) / the time between them.
#ifndef PSRT_PS_SERVER_METRICS_RECENT_RATES_H_
#define PSRT_PS_SERVER_METRICS_RECENT_RATES_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace psrt {

class RecentRates {
 public:
  using ReadCounters = std::function<std::vector<int64_t>()>;

  // `read` returns the counters, always as many; it is called from the
  // sampling thread and must be thread-safe.
  explicit RecentRates(ReadCounters read,
                       absl::Duration window = absl::Seconds(60));
  ~RecentRates();  // stops the sampling thread
  RecentRates(const RecentRates&) = delete;
  RecentRates& operator=(const RecentRates&) = delete;

  // Samples every `interval` on a thread of its own (the first at once).
  void StartSampling(absl::Duration interval);

  // Records the counters as they are at `now`, and forgets samples the
  // window no longer needs: it keeps the newest one at least `window` old,
  // so rates span a full window once the process is that old.
  void Sample(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // Rates of `values` (the counters read at `now`) since the oldest sample
  // kept, and in *seconds the time they span; empty (and 0) without a
  // sample before `now`.
  std::vector<double> Rates(const std::vector<int64_t>& values, absl::Time now,
                            double* seconds) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Counters {
    absl::Time time;
    std::vector<int64_t> values;
  };
  const ReadCounters read_;
  const absl::Duration window_;
  mutable absl::Mutex mu_;
  std::deque<Counters> samples_ ABSL_GUARDED_BY(mu_);
  absl::Notification stop_;
  std::thread sampler_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_METRICS_RECENT_RATES_H_
