#include "ps_server/replication/membership.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "glog/logging.h"

namespace psrt {

Membership::Membership(const PsPeers* peers, int replicas)
    : peers_(peers), replicas_(replicas) {}

bool Membership::MajorityFindsUnreachable(int task,
                                          absl::Duration ping_timeout) const {
  const int n = peers_->size();
  std::atomic<int> unreachable{1};  // this PS
  std::vector<std::thread> voters;
  for (int voter = 0; voter < n; ++voter) {
    if (voter == task || voter == peers_->self()) continue;
    voters.emplace_back([&, voter] {
      auto answer = peers_->Suspect(voter, task, 2 * ping_timeout);
      if (answer.ok() && !answer->reachable()) ++unreachable;
    });
  }
  for (std::thread& t : voters) t.join();
  const bool majority = unreachable.load() > n / 2;
  LOG(WARNING) << peers_->Describe(task) << " is unreachable from "
               << unreachable.load() << " of " << n << " PS (this one "
               << "included): " << (majority ? "" : "not ") << "a majority";
  return majority;
}

int64_t Membership::MarkFailed(int task) {
  absl::MutexLock lock(&mu_);
  if (failed_.insert(task).second) ++epoch_;
  return epoch_;
}

bool Membership::IsFailed(int task) const {
  absl::MutexLock lock(&mu_);
  return failed_.contains(task);
}

int64_t Membership::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

std::vector<int> Membership::failed() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> out(failed_.begin(), failed_.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace psrt
