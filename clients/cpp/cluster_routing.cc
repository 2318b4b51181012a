#include "clients/cpp/cluster_routing.h"

#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "partitioner/replica_placement.h"

namespace psrt {

ClusterRouting::ClusterRouting(std::vector<std::string> ps_addresses,
                               Clock* clock)
    : addresses_(std::move(ps_addresses)),
      clock_(clock),
      serving_(new std::atomic<int>[addresses_.size()]) {
  for (size_t i = 0; i < addresses_.size(); ++i) serving_[i].store(i);
}

bool ClusterRouting::Refresh(
    const std::vector<std::unique_ptr<PsConnection>>& connections,
    absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (clock_->Now() - last_refresh_ < kMinRefreshInterval) return false;
  const int n = static_cast<int>(connections.size());
  std::vector<StatsResponse> answers(n);
  std::vector<bool> answered(n, false);
  std::vector<std::thread> asks;
  for (int i = 0; i < n; ++i) {
    asks.emplace_back([&, i] {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
      answered[i] = connections[i]
                        ->stub()
                        ->GetStats(&context, StatsRequest(), &answers[i])
                        .ok();
    });
  }
  for (std::thread& t : asks) t.join();
  last_refresh_ = clock_->Now();
  int replicas = 0;
  // Each PS's newest term any answer knows (odd: failed over, even: it
  // serves its shards, again after a handback).
  std::vector<int64_t> terms(n, 0);
  for (int i = 0; i < n; ++i) {
    if (!answered[i]) continue;
    replicas = std::max(replicas, answers[i].replicas());
    for (const auto& [t, term] : answers[i].ps_terms()) {
      if (t >= 0 && t < n) terms[t] = std::max(terms[t], term);
    }
  }
  absl::flat_hash_set<int> failed;
  for (int t = 0; t < n; ++t) {
    if (terms[t] % 2 == 1) failed.insert(t);
  }
  if (replicas == 0) return false;  // nobody answered
  replicas_.store(replicas, std::memory_order_release);
  auto placement = ReplicaPlacement::Create(addresses_, replicas);
  if (!placement.ok()) return false;
  bool changed = false;
  for (int p = 0; p < n; ++p) {
    int serving = p;
    if (failed.contains(p)) {
      for (int backup : placement->BackupsOf(p)) {
        if (!failed.contains(backup)) {
          serving = backup;
          break;
        }
      }
    }
    if (serving_[p].exchange(serving) != serving) {
      changed = true;
      if (serving == p) {
        LOG(WARNING) << "PS " << p << " (" << addresses_[p]
                     << ") serves its shards again (handback)";
      } else {
        LOG(WARNING) << "PS " << p << " (" << addresses_[p]
                     << ") failed over: its shards are served by PS " << serving
                     << " (" << addresses_[serving] << ")";
      }
    }
  }
  return changed;
}

}  // namespace psrt
