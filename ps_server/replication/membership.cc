#include "ps_server/replication/membership.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "ps_server/replication/replication_log.h"

namespace psrt {

Membership::Membership(const PsPeers* peers, int replicas, Clock* clock)
    : peers_(peers),
      replicas_(replicas),
      clock_(clock != nullptr ? clock : Clock::Real()),
      term_(peers->size(), 0) {}

bool Membership::MajorityFindsUnreachable(int task,
                                          absl::Duration ping_timeout) {
  SuspectRequest request;
  request.set_task(task);
  return Decide(std::move(request), ping_timeout).majority;
}

Membership::Vote Membership::Decide(SuspectRequest request,
                                    absl::Duration ping_timeout) {
  const int n = peers_->size();
  const int task = request.task();
  // This PS's own vote, under the same rule as its answers to Suspect.
  std::atomic<int> unreachable{VoteReachable(task, false) ? 0 : 1};
  absl::Mutex newest_mu;
  Vote vote;
  vote.newest = ViewOf(task);
  std::vector<std::thread> voters;
  for (int voter = 0; voter < n; ++voter) {
    if (voter == task || voter == peers_->self()) continue;
    voters.emplace_back([&, voter] {
      auto answer = peers_->Suspect(voter, request, 2 * ping_timeout);
      if (!answer.ok()) return;
      if (!answer->reachable()) ++unreachable;
      absl::MutexLock lock(&newest_mu);
      if (answer->view().version() > vote.newest.version()) {
        vote.newest = answer->view();
      }
    });
  }
  for (std::thread& t : voters) t.join();
  vote.majority = unreachable.load() > n / 2;
  LOG(WARNING) << peers_->Describe(task) << " is unreachable from "
               << unreachable.load() << " of " << n << " PS (this one "
               << "included): " << (vote.majority ? "" : "not ")
               << "a majority";
  return vote;
}

void Membership::RecordView(int primary, const StreamView& view) {
  absl::MutexLock lock(&mu_);
  if (primary < 0 || primary >= static_cast<int>(term_.size())) return;
  StreamView& held = views_[primary];
  if (view.version() > held.version()) held = view;
}

StreamView Membership::ViewOf(int primary) const {
  absl::MutexLock lock(&mu_);
  auto it = views_.find(primary);
  return it == views_.end() ? StreamView() : it->second;
}

bool Membership::Lists(const StreamView& view, int backup) {
  if (view.version() == 0) return true;
  for (int t : view.in_sync()) {
    if (t == backup) return true;
  }
  return false;
}

absl::Status Membership::Grant(int task, int64_t task_term) {
  Learn(task, task_term);
  absl::MutexLock lock(&mu_);
  if (task < 0 || task >= static_cast<int>(term_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PS ", task, " is not a PS of this ", term_.size(), "-PS cluster"));
  }
  if (FailedLocked(task)) {
    return absl::FailedPreconditionError(
        absl::StrCat("PS ", task, " failed over: its backup ", kReplacedMarker,
                     " it; PS ", peers_->self(), " grants it no lease"));
  }
  const absl::Time now = clock_->Now();
  auto vote = voted_out_.find(task);
  if (vote != voted_out_.end() && now - vote->second < kVoteHold) {
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
  return it != granted_.end() && clock_->Now() - it->second < kLeaseTerm;
}

bool Membership::VoteReachable(int task, bool pinged_ok) {
  if (pinged_ok || HoldsLeaseFromHere(task)) return true;
  absl::MutexLock lock(&mu_);
  voted_out_[task] = clock_->Now();
  return false;
}

int64_t Membership::MarkFailed(int task) {
  absl::MutexLock lock(&mu_);
  if (task < 0 || task >= static_cast<int>(term_.size())) return epoch_;
  if (!FailedLocked(task)) {
    ++term_[task];
    ++epoch_;
  }
  return epoch_;
}

int64_t Membership::MarkReturned(int task) {
  absl::MutexLock lock(&mu_);
  if (task < 0 || task >= static_cast<int>(term_.size())) return 0;
  if (FailedLocked(task)) {
    ++term_[task];
    ++epoch_;
    voted_out_.erase(task);  // that vote was for the failover just undone
  }
  return term_[task];
}

bool Membership::Learn(int task, int64_t term) {
  absl::MutexLock lock(&mu_);
  if (task < 0 || task >= static_cast<int>(term_.size()) ||
      term <= term_[task]) {
    return false;
  }
  term_[task] = term;
  ++epoch_;
  // A handback (even term) ends what a vote against `task` was for.
  if (term % 2 == 0) voted_out_.erase(task);
  return true;
}

bool Membership::IsFailed(int task) const {
  absl::MutexLock lock(&mu_);
  return task >= 0 && task < static_cast<int>(term_.size()) &&
         FailedLocked(task);
}

int64_t Membership::term(int task) const {
  absl::MutexLock lock(&mu_);
  if (task < 0 || task >= static_cast<int>(term_.size())) return 0;
  return term_[task];
}

int64_t Membership::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

std::vector<int> Membership::failed() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> out;
  for (int t = 0; t < static_cast<int>(term_.size()); ++t) {
    if (FailedLocked(t)) out.push_back(t);
  }
  return out;
}

int Membership::FirstLive(const std::vector<int>& tasks) const {
  absl::MutexLock lock(&mu_);
  for (int t : tasks) {
    if (t >= 0 && t < static_cast<int>(term_.size()) && !FailedLocked(t)) {
      return t;
    }
  }
  return -1;
}

int64_t Membership::failovers() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (int64_t term : term_) n += (term + 1) / 2;
  return n;
}

int64_t Membership::handbacks() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (int64_t term : term_) n += term / 2;
  return n;
}

absl::flat_hash_map<int, int64_t> Membership::terms() const {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<int, int64_t> out;
  for (int t = 0; t < static_cast<int>(term_.size()); ++t) {
    if (term_[t] != 0) out[t] = term_[t];
  }
  return out;
}

}  // namespace psrt
