// The workers that pushed to this PS: each one's last step and when, for
// the status page. Bounded by the cluster's worker count.
#ifndef PSRT_PS_SERVER_RPC_WORKERS_SEEN_H_
#define PSRT_PS_SERVER_RPC_WORKERS_SEEN_H_

#include <cstdint>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace psrt {

class WorkersSeen {
 public:
  struct Worker {
    int index = 0;
    int64_t last_step = 0;
    absl::Time last_seen;
  };

  // Workers with an index outside [0, max_workers) are not recorded (the
  // push handler has refused them already, or they did not say).
  explicit WorkersSeen(int max_workers) : max_workers_(max_workers) {}

  void Saw(int worker, int64_t step) ABSL_LOCKS_EXCLUDED(mu_) {
    if (worker < 0 || worker >= max_workers_) return;
    absl::MutexLock lock(&mu_);
    if (seen_.size() <= static_cast<size_t>(worker)) seen_.resize(worker + 1);
    seen_[worker] = {worker, step, absl::Now()};
  }

  // Every worker seen, by index.
  std::vector<Worker> Workers() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    std::vector<Worker> out;
    for (const Worker& w : seen_) {
      if (w.last_seen != absl::Time()) out.push_back(w);
    }
    return out;
  }

 private:
  const int max_workers_;
  mutable absl::Mutex mu_;
  std::vector<Worker> seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_WORKERS_SEEN_H_
