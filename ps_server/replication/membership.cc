#include "ps_server/replication/membership.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "ps_server/replication/replication_log.h"

namespace psrt {

namespace {
// Challenges kept per witness: its call echoes the last one it was sent,
// unless an answer was lost or calls overtook each other.
constexpr size_t kChallengesKept = 4;
}  // namespace

Membership::Membership(const PsPeers* peers, int replicas, Clock* clock,
                       int witnesses)
    : peers_(peers),
      replicas_(replicas),
      clock_(clock != nullptr ? clock : Clock::Real()),
      witnesses_(peers->size() == 2 ? std::max(witnesses, 0) : 0),
      witness_(witnesses_),
      next_challenge_(std::random_device()() | 1),
      term_(peers->size(), 0) {}

absl::StatusOr<Membership::WitnessCall> Membership::Witness(
    const WitnessRequest& request) {
  const int worker = request.worker();
  if (worker < 0 || worker >= witnesses_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Witness: worker ", worker, " is not a witness of this cluster (",
        witnesses_, " workers vote; only with 2 PS and --replicas > 1)"));
  }
  for (const auto& [task, term] : request.ps_terms()) Learn(task, term);
  for (const auto& [primary, view] : request.views()) {
    RecordView(primary, view);
  }
  absl::MutexLock lock(&mu_);
  WitnessState& state = witness_[worker];
  absl::Time issued = absl::InfinitePast();
  for (const auto& [challenge, at] : state.challenges) {
    if (challenge == request.challenge()) issued = at;
  }
  // A report that overtook a newer one is not kept.
  if (issued != absl::InfinitePast() && issued >= state.sent_after) {
    state.sent_after = issued;
    state.unreachable.clear();
    for (int task : request.unreachable()) {
      // (At most one entry per PS, whatever the request repeats.)
      if (task >= 0 && task < peers_->size() &&
          std::find(state.unreachable.begin(), state.unreachable.end(), task) ==
              state.unreachable.end()) {
        state.unreachable.push_back(task);
      }
    }
    auto self_view = request.views().find(peers_->self());
    state.view_of_self =
        self_view == request.views().end() ? 0 : self_view->second.version();
  }
  WitnessCall call;
  if (request.grant()) call.granted_since = issued;
  call.challenge = next_challenge_;
  next_challenge_ += 2;  // odd: 0 stays "none"
  state.challenges.emplace_back(call.challenge, clock_->Now());
  if (state.challenges.size() > kChallengesKept) {
    state.challenges.erase(state.challenges.begin());
  }
  return call;
}

int Membership::WitnessVotesLocked(int task, bool drop,
                                   int64_t view_version) const {
  const absl::Time now = clock_->Now();
  int votes = 0;
  for (const WitnessState& state : witness_) {
    if (state.sent_after == absl::InfinitePast() ||
        now - state.sent_after > kWitnessFresh) {
      continue;
    }
    if (std::find(state.unreachable.begin(), state.unreachable.end(), task) ==
        state.unreachable.end()) {
      continue;
    }
    if (drop && state.view_of_self < view_version) continue;
    ++votes;
  }
  return votes;
}

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
  int witness_votes = 0;
  if (witnesses_ > 0) {
    absl::MutexLock lock(&mu_);
    witness_votes =
        WitnessVotesLocked(task, request.drop(), request.view().version());
  }
  // Views the witnesses reported while the PS answered.
  const StreamView recorded = ViewOf(task);
  if (recorded.version() > vote.newest.version()) vote.newest = recorded;
  const int votes = unreachable.load() + witness_votes;
  const int voting = Membership::voters();
  vote.majority = votes > voting / 2;
  LOG(WARNING) << peers_->Describe(task) << " is unreachable from " << votes
               << " of " << voting
               << (witnesses_ > 0 ? " voters (PS and workers; " : " PS (")
               << "this one included): " << (vote.majority ? "" : "not ")
               << "a majority";
  return vote;
}

bool Membership::DecideDrop(int task, const StreamView& without,
                            absl::Duration lease_term,
                            const absl::Notification& cancel) {
  SuspectRequest vote;
  vote.set_task(task);
  vote.set_drop(true);
  *vote.mutable_view() = without;
  if (witnesses_ == 0) {
    return Decide(std::move(vote), absl::Seconds(1)).majority;
  }
  // The workers learn `without` from this PS's answers and report it with
  // their next calls: a few renewal periods.
  const absl::Time give_up = clock_->Now() + lease_term;
  while (!Decide(vote, absl::Seconds(1)).majority) {
    if (clock_->Now() >= give_up ||
        clock_->WaitForNotification(cancel, lease_term / 8)) {
      return false;
    }
  }
  // A lease term on, every grant the lease counts was made by a worker
  // that knew the view.
  return !clock_->WaitForNotification(cancel, lease_term);
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
