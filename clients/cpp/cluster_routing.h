// Which PS serves each PS task's shards now (--replicas > 1): the task
// itself, or after a failover its first backup still alive. Shared by a
// client's calls; the shard map (placement) never changes, only this
// indirection.
//
// The client learns failovers by asking every PS (GetStats: replicas and
// the PS each knows to have failed over) when a call fails with a
// retryable error, at most once per `min_refresh_interval`. A redirected
// push keeps its request id; the new primary de-duplicates it under the
// failed primary's scope, where the pushes that primary forwarded were
// recorded, so a push is applied once whether or not it was forwarded.
#ifndef PSRT_CLIENTS_CPP_CLUSTER_ROUTING_H_
#define PSRT_CLIENTS_CPP_CLUSTER_ROUTING_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "clients/cpp/ps_connection.h"
#include "util/clock.h"

namespace psrt {

class ClusterRouting {
 public:
  // `clock` times the refresh interval (it must outlive the routing).
  ClusterRouting(std::vector<std::string> ps_addresses,
                 Clock* clock = Clock::Real());

  // The PS to send task `ps`'s requests to.
  int Serving(int ps) const {
    return serving_[ps].load(std::memory_order_acquire);
  }
  // Copies of each shard as the servers reported (0: not asked yet).
  int replicas() const { return replicas_.load(std::memory_order_acquire); }

  // Asks every PS for its failovers (each within `timeout`) unless that
  // was done less than `min_refresh_interval` ago. True if routing
  // changed.
  bool Refresh(const std::vector<std::unique_ptr<PsConnection>>& connections,
               absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  static constexpr absl::Duration kMinRefreshInterval = absl::Milliseconds(250);

 private:
  const std::vector<std::string> addresses_;
  Clock* const clock_;
  std::unique_ptr<std::atomic<int>[]> serving_;
  std::atomic<int> replicas_{0};
  absl::Mutex mu_;
  absl::Time last_refresh_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_CLUSTER_ROUTING_H_
