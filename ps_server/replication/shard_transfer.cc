#include "ps_server/replication/shard_transfer.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace psrt {
namespace {

// How long the serving PS waits for the caller to apply the last updates.
constexpr absl::Duration kHandbackWait = absl::Seconds(10);
// The caller's tries (it may still be catching up after its rejoin).
constexpr int kReclaimAttempts = 40;
// After the answer, the longest wait for the caller's first Replicate
// call (it sends it once it serves: shards primary, barrier resumed,
// lease held, stream restarted; well under a millisecond unless its cores
// are busy). A refusal answered before that sends its client to the caller
// too early: refused again, it backs off for 100 ms.
constexpr absl::Duration kCallerStart = absl::Milliseconds(100);
// The longest a refused pull or push is held while a handback settles.
constexpr absl::Duration kMaxHandbackHold = absl::Milliseconds(500);
constexpr absl::Duration kReclaimCallTimeout = absl::Seconds(30);

}  // namespace

ShardTransfer::ShardTransfer(Parts parts)
    : store_(parts.store),
      replicator_(parts.replicator),
      membership_(parts.membership),
      peers_(parts.peers),
      applier_(parts.applier),
      barriers_(parts.barriers),
      clock_(parts.clock != nullptr ? parts.clock : Clock::Real()),
      may_serve_(std::move(parts.may_serve)),
      serves_live_copy_(std::move(parts.serves_live_copy)) {}

bool ShardTransfer::TakeOver(int primary) {
  if (!applier_->InSyncWith(primary)) {
    LOG(ERROR) << "PS " << store_->ps_task() << " cannot take over PS "
               << primary << "'s shards: its copy of them is not in sync "
               << "(this PS started after PS " << primary
               << " had applied pushes); they stay unserved until PS "
               << primary << " returns or the cluster restores them";
    return false;
  }
  // Fence first: the old primary acknowledges nothing from now on, so no
  // push it applies after this point can be lost by the takeover.
  applier_->Fence(primary);
  const int shards = store_->Promote(primary);
  // Its step barriers move here (their held pushes name shards served here
  // from now on); until then SYNC and SSP calls for them are answered
  // UNAVAILABLE and retried.
  barriers_->ResumeTakenOver(primary, applier_->SyncBarriersOf(primary));
  LOG(ERROR) << "PS " << store_->ps_task() << " took over " << shards
             << " shard(s) of PS " << primary << " (failover)";
  return true;
}

bool ShardTransfer::TakeOverRestarted(int primary) {
  if (!membership_->Enabled() || primary < 0 || primary >= store_->num_ps() ||
      membership_->IsFailed(primary)) {
    return false;
  }
  // Only the first backup still serving takes over (as after a vote).
  if (membership_->FirstLive(store_->replicas().BackupsOf(primary)) !=
      store_->ps_task()) {
    return false;
  }
  LOG(ERROR) << "PS " << primary << " restarted while this PS's copy of its "
             << "shards followed its previous process: that process is gone, "
             << "so this PS takes its shards over now";
  if (!TakeOver(primary)) return false;
  membership_->MarkFailed(primary);
  return true;
}

absl::StatusOr<HandbackResponse> ShardTransfer::ServeHandback(
    const HandbackRequest& r) {
  const int self = store_->ps_task();
  const int from = r.from_task();
  if (from < 0 || from >= store_->num_ps() || from == self) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Handback: from_task ", from, " is not another PS of this ",
        store_->num_ps(), "-PS cluster"));
  }
  if (r.incarnation() == 0 || r.stream_from() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Handback from PS ", from, ": no incarnation or stream start"));
  }
  absl::MutexLock one_at_a_time(&handback_mu_);
  HandbackResponse out;
  if (!membership_->IsFailed(from)) {
    // Answered before (the caller did not get the answer): the same again.
    if (applier_->Follows(from, r.incarnation())) {
      out.set_term(membership_->term(from));
      out.set_step(store_->global_step());
      return out;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("Handback: PS ", from, " has not failed over (term ",
                     membership_->term(from),
                     "): it serves its own shards, nothing to hand back"));
  }
  if (absl::Status s = may_serve_(); !s.ok()) return s;
  const int serving =
      membership_->FirstLive(store_->replicas().BackupsOf(from));
  if (serving != self) {
    return absl::FailedPreconditionError(
        absl::StrCat("Handback: PS ", from, "'s shards are served by PS ",
                     serving, ", not by PS ", self));
  }
  if (!replicator_->AcknowledgedBy(from).has_value()) {
    return absl::UnavailableError(absl::StrCat(
        "Handback: PS ", from, " is not (yet) a caught-up backup of PS ", self,
        " (it rejoins first); retry"));
  }
  const absl::Time paused = clock_->Now();
  StartHoldingRefusals();
  // Undone: the refusals held meanwhile are answered at once.
  absl::Cleanup settle = [this] {
    absl::MutexLock lock(&settle_mu_);
    handback_settles_at_ = clock_->Now();
    ++settle_changes_;
  };
  const StepCoordinator::Handover handover =
      barriers_
          ->CloseTakenOver(from, absl::StrCat("PS ", self, " handed PS ", from,
                                              "'s shards back to it: ask any "
                                              "PS for the routing (GetStats) "
                                              "and retry there"))
          .value_or(StepCoordinator::Handover());
  const int shards = store_->Demote(from);
  // Every update applied to them here was logged under their locks, so
  // by now: the caller must have applied everything up to here.
  const uint64_t last = replicator_->next_sequence() - 1;
  const absl::Time deadline = clock_->Now() + kHandbackWait;
  std::optional<uint64_t> acknowledged;
  while (true) {
    acknowledged = replicator_->AcknowledgedBy(from);
    if (acknowledged.has_value() && *acknowledged >= last) break;
    if (!acknowledged.has_value() || clock_->Now() > deadline) {
      store_->Promote(from);
      barriers_->ReopenTakenOver(from);
      return absl::UnavailableError(absl::StrCat(
          "Handback: PS ", from, " did not apply PS ", self,
          "'s updates through ", last, " within ",
          absl::FormatDuration(kHandbackWait), " (applied ",
          acknowledged.value_or(0),
          acknowledged.has_value() ? "" : ", and it is no backup any more",
          "): its shards stay on PS ", self, "; retry"));
    }
    // A poll of the caller's progress, not a wait on time: real time.
    absl::SleepFor(absl::Microseconds(200));
  }
  applier_->FollowHandedBack(from, r.incarnation(), r.stream_from());
  const int64_t term = membership_->MarkReturned(from);
  // The answer is a lease grant (the caller times it from its request).
  if (absl::Status s = membership_->Grant(from, term); !s.ok()) {
    LOG(WARNING) << "PS " << self << " grants PS " << from
                 << " no lease with its shards: " << s;
  }
  barriers_->RetireTakenOver(from);
  // Done: refusals are held until the caller serves (its first Replicate
  // call, HandbackSettledBy) or kCallerStart.
  std::move(settle).Cancel();
  {
    absl::MutexLock lock(&settle_mu_);
    handback_settles_at_ = clock_->Now() + kCallerStart;
    settling_for_.store(from, std::memory_order_release);
    ++settle_changes_;
  }
  LOG(WARNING) << "PS " << self << " handed " << shards
               << " shard(s) back to PS " << from << " (its term " << term
               << "; step barrier at step " << handover.next_step << " with "
               << handover.held << " held push(es)): they were unserved here "
               << "for " << absl::FormatDuration(clock_->Now() - paused)
               << " while PS " << from << " applied the last updates through "
               << last;
  out.set_shards(shards);
  out.set_term(term);
  out.set_step(store_->global_step());
  out.set_sync_next_step(handover.next_step);
  for (int64_t clock : handover.clocks) out.add_ssp_clocks(clock);
  return out;
}

void ShardTransfer::HandbackSettledBy(int from) {
  if (settling_for_.load(std::memory_order_acquire) != from) return;
  absl::MutexLock lock(&settle_mu_);
  if (settling_for_.load() != from) return;
  settling_for_.store(-1);
  const absl::Time now = clock_->Now();
  const absl::Duration after = kCallerStart - (handback_settles_at_ - now);
  if (now < handback_settles_at_) {
    handback_settles_at_ = now;
    ++settle_changes_;
    LOG(INFO) << "handback to PS " << from << " settled: it serves, "
              << absl::FormatDuration(after) << " after the answer";
  } else {
    LOG(WARNING) << "handback to PS " << from << " settled late: its first "
                 << "call came " << absl::FormatDuration(after)
                 << " after the answer, past the "
                 << absl::FormatDuration(kCallerStart)
                 << " the refusals were held for";
  }
}

bool ShardTransfer::HoldRefusal(const char* method, const absl::Status& status,
                                std::function<void()> answer) {
  if (status.code() != absl::StatusCode::kUnavailable ||
      (std::strcmp(method, "Push") != 0 && std::strcmp(method, "Pull") != 0)) {
    return false;
  }
  absl::MutexLock lock(&settle_mu_);
  const absl::Time now = clock_->Now();
  // Past the settle (or none under way): the thread may have ended.
  if (now >= handback_settles_at_) return false;
  held_refusals_.push_back({now + kMaxHandbackHold, std::move(answer)});
  ++settle_changes_;  // its cap may come before the settle
  return true;
}

void ShardTransfer::StartHoldingRefusals() {
  {
    absl::MutexLock lock(&settle_mu_);
    handback_settles_at_ = absl::InfiniteFuture();
    if (answering_refusals_) return;  // the last handback's still runs
    answering_refusals_ = true;
  }
  if (settle_thread_.joinable()) settle_thread_.join();  // it has ended
  settle_thread_ = std::thread([this] { AnswerHeldRefusals(); });
}

void ShardTransfer::AnswerHeldRefusals() {
  settle_mu_.Lock();
  while (true) {
    const absl::Time now = clock_->Now();
    const bool settled = now >= handback_settles_at_;
    std::vector<std::function<void()>> due;
    while (!held_refusals_.empty() &&
           (settled || now >= held_refusals_.front().until)) {
      due.push_back(std::move(held_refusals_.front().answer));
      held_refusals_.pop_front();
    }
    if (!due.empty()) {
      settle_mu_.Unlock();
      for (std::function<void()>& answer : due) answer();
      settle_mu_.Lock();
      continue;
    }
    if (settled) break;  // nothing is held from now on (HoldRefusal)
    absl::Time wake = handback_settles_at_;
    if (!held_refusals_.empty()) {
      wake = std::min(wake, held_refusals_.front().until);
    }
    const uint64_t seen = settle_changes_;
    auto changed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(settle_mu_) {
      return settle_changes_ != seen;
    };
    clock_->AwaitWithDeadline(&settle_mu_, absl::Condition(&changed), wake);
  }
  answering_refusals_ = false;
  settle_mu_.Unlock();
}

ShardTransfer::~ShardTransfer() { Stop(); }

void ShardTransfer::Stop() {
  absl::MutexLock one_at_a_time(&handback_mu_);
  {
    absl::MutexLock lock(&settle_mu_);
    handback_settles_at_ = absl::InfinitePast();
    ++settle_changes_;
  }
  if (settle_thread_.joinable()) settle_thread_.join();
}

absl::Status ShardTransfer::ReclaimShards(
    int serving, const std::function<void(absl::Time asked)>& on_reinstated) {
  const int self = store_->ps_task();
  // Serving already (a rejoin that ran again after the handback).
  if (!replicator_->replaced()) return absl::OkStatus();
  // This PS serves nothing until the answer, so it logs nothing: its
  // stream to `serving` starts at the next sequence.
  HandbackRequest request;
  request.set_from_task(self);
  request.set_incarnation(replicator_->incarnation());
  request.set_stream_from(replicator_->next_sequence());
  absl::StatusOr<HandbackResponse> answer;
  absl::Duration backoff = absl::Milliseconds(200);
  absl::Time asked;
  for (int attempt = 1; attempt <= kReclaimAttempts; ++attempt) {
    asked = clock_->Now();
    answer = peers_->Handback(serving, request, kReclaimCallTimeout);
    if (answer.ok()) break;
    const absl::StatusCode code = answer.status().code();
    if (code != absl::StatusCode::kUnavailable &&
        code != absl::StatusCode::kDeadlineExceeded) {
      break;
    }
    LOG(WARNING) << "PS " << self << " asks " << peers_->Describe(serving)
                 << " for its shards back (try " << attempt << " of "
                 << kReclaimAttempts << "): " << answer.status();
    clock_->SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
  if (!answer.ok()) {
    return absl::Status(
        answer.status().code(),
        absl::StrCat("PS ", self, " could not take its shards back from ",
                     peers_->Describe(serving), ": ", answer.status().message(),
                     "; it stays a backup of them"));
  }
  const absl::Time start = clock_->Now();
  membership_->Learn(self, answer->term());
  if (answer->step() > 0) store_->ObserveStep(answer->step() - 1);
  // Primary again before the barrier's held pushes are made pushes here;
  // nothing is served before the replicator and the lease are back.
  const int shards = store_->Reinstate();
  // The barrier where the serving PS left it, with the pushes it held
  // for that step (they came through its stream).
  const std::vector<int64_t> clocks(answer->ssp_clocks().begin(),
                                    answer->ssp_clocks().end());
  barriers_->ResumeOwn(
      serving,
      applier_->TakeBarrier(serving, self, answer->sync_next_step(), clocks));
  // What it serves is the live copy, not what it restored at start.
  if (serves_live_copy_) serves_live_copy_();
  if (on_reinstated) on_reinstated(asked);  // the lease
  // Last: this PS serves once its stream is accepted (its first call,
  // which also tells `serving` to let the refused calls go).
  const uint64_t stream_from = replicator_->Reinstate(serving);
  if (stream_from != request.stream_from()) {
    LOG(ERROR) << "PS " << self << "'s stream to PS " << serving
               << " restarts at update " << stream_from << ", not "
               << request.stream_from() << " as it told that PS";
  }
  LOG(WARNING) << "PS " << self << " serves its " << shards
               << " shard(s) again: " << peers_->Describe(serving) << " handed "
               << answer->shards() << " back (term " << answer->term()
               << ", step " << answer->step() << ") in "
               << absl::FormatDuration(clock_->Now() - start);
  return absl::OkStatus();
}

}  // namespace psrt
