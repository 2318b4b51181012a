// The workers that pushed to this PS: each one's last step and when, for
// the status page. One slot per worker of the cluster, written with relaxed
// atomics: recording is on every push and takes no lock.
#ifndef PSRT_PS_SERVER_RPC_WORKERS_SEEN_H_
#define PSRT_PS_SERVER_RPC_WORKERS_SEEN_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

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
  explicit WorkersSeen(int max_workers)
      : max_workers_(max_workers),
        slots_(std::make_unique<Slot[]>(max_workers)) {}

  void Saw(int worker, int64_t step) {
    if (worker < 0 || worker >= max_workers_) return;
    slots_[worker].step.store(step, std::memory_order_relaxed);
    slots_[worker].seen_ns.store(absl::GetCurrentTimeNanos(),
                                 std::memory_order_relaxed);
  }

  // Every worker seen, by index (a step and time read as a pair may come
  // from two pushes in a row: good enough for a status page).
  std::vector<Worker> Workers() const {
    std::vector<Worker> out;
    for (int i = 0; i < max_workers_; ++i) {
      const int64_t ns = slots_[i].seen_ns.load(std::memory_order_relaxed);
      if (ns == 0) continue;
      out.push_back({i, slots_[i].step.load(std::memory_order_relaxed),
                     absl::FromUnixNanos(ns)});
    }
    return out;
  }

 private:
  struct Slot {
    std::atomic<int64_t> step{0};
    std::atomic<int64_t> seen_ns{0};  // 0: never
  };
  const int max_workers_;
  const std::unique_ptr<Slot[]> slots_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_WORKERS_SEEN_H_
