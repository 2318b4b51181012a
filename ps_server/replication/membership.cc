#include "ps_server/replication/membership.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "ps_server/replication/replication_log.h"

namespace psrt {

Membership::Membership(const PsPeers* peers, int replicas)
    : peers_(peers), replicas_(replicas) {}

bool Membership::MajorityFindsUnreachable(int task,
                                          absl::Duration ping_timeout) {
  const int n = peers_->size();
  // This PS's own vote, under the same rule as its answers to Suspect.
  std::atomic<int> unreachable{VoteReachable(task, false) ? 0 : 1};
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

absl::Status Membership::Grant(int task) {
  absl::MutexLock lock(&mu_);
  if (failed_.contains(task)) {
    return absl::FailedPreconditionError(
        absl::StrCat("PS ", task, " failed over: its backup ", kReplacedMarker,
                     " it; PS ", peers_->self(), " grants it no lease"));
  }
  const Clock::time_point now = Clock::now();
  auto vote = voted_out_.find(task);
  if (vote != voted_out_.end() &&
      now - vote->second < absl::ToChronoNanoseconds(kVoteHold)) {
    return absl::UnavailableError(absl::StrCat(
        "PS ", peers_->self(), " voted PS ", task, " unreachable less than ",
        absl::FormatDuration(kVoteHold),
        " ago (a failover may be under way): no lease until then"));
  }
  granted_[task] = now;
  return absl::OkStatus();
}

bool Membership::HoldsLeaseFromHere(int task) const {
  absl::MutexLock lock(&mu_);
  auto it = granted_.find(task);
  return it != granted_.end() &&
         Clock::now() - it->second < absl::ToChronoNanoseconds(kLeaseTerm);
}

bool Membership::VoteReachable(int task, bool pinged_ok) {
  if (pinged_ok || HoldsLeaseFromHere(task)) return true;
  absl::MutexLock lock(&mu_);
  voted_out_[task] = Clock::now();
  return false;
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
