#include "ps_server/replication/lease_holder.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "ps_server/replication/replication_log.h"

namespace psrt {

LeaseHolder::LeaseHolder(const PsPeers* peers, Membership* membership,
                         std::function<void(const std::string&)> on_replaced,
                         Options options)
    : peers_(peers),
      membership_(membership),
      on_replaced_(std::move(on_replaced)),
      options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      granted_at_(membership->voters(), absl::InfinitePast()) {
  for (int peer = 0; peer < peers_->size(); ++peer) {
    if (peer == peers_->self()) continue;
    threads_.emplace_back([this, peer] { Renew(peer); });
  }
}

LeaseHolder::~LeaseHolder() {
  stop_.Notify();
  for (std::thread& t : threads_) t.join();
}

void LeaseHolder::Replaced(const std::string& why) {
  {
    absl::MutexLock lock(&mu_);
    if (replaced_) return;
    replaced_ = true;
  }
  LOG(ERROR) << "PS " << peers_->self() << " learned it was replaced: " << why;
  if (on_replaced_) on_replaced_(why);
}

void LeaseHolder::Reinstate(int granted_by, absl::Time asked) {
  absl::MutexLock lock(&mu_);
  replaced_ = false;
  if (granted_by >= 0 && granted_by < peers_->size() &&
      granted_by != peers_->self()) {
    granted_at_[granted_by] = std::max(granted_at_[granted_by], asked);
  }
}

void LeaseHolder::Witnessed(int worker, absl::Time since) {
  const int voter = peers_->size() + worker;
  if (worker >= 0 && voter < membership_->voters() &&
      since != absl::InfinitePast()) {
    absl::MutexLock lock(&mu_);
    granted_at_[voter] = std::max(granted_at_[voter], since);
    HeldLocked(clock_->Now());  // logs when the lease returns
  }
  if (membership_->IsFailed(peers_->self())) {
    Replaced(absl::StrCat("worker ", worker,
                          " (a witness) knows this PS failed over"));
  }
}

void LeaseHolder::Renew(int peer) {
  do {
    const absl::Time sent = clock_->Now();
    const int self = peers_->self();
    const int64_t own_term = membership_->term(self);
    auto answer =
        peers_->RenewLease(peer, own_term, options_.call_timeout,
                           options_.view ? options_.view() : StreamView());
    if (answer.ok()) {
      {
        absl::MutexLock lock(&mu_);
        granted_at_[peer] = std::max(granted_at_[peer], sent);
      }
      for (const auto& [task, term] : answer->ps_terms()) {
        if (!membership_->Learn(task, term)) continue;
        if (task == self) {
          if (term % 2 == 1) {
            Replaced(absl::StrCat(peers_->Describe(peer),
                                  " knows this PS failed over"));
          }
        } else if (term % 2 == 1) {
          LOG(WARNING) << peers_->Describe(peer) << " reports that "
                       << peers_->Describe(task)
                       << " failed over (its shards are served by its backup)";
        } else {
          LOG(WARNING) << peers_->Describe(peer) << " reports that "
                       << peers_->Describe(task)
                       << " serves its shards again (handback)";
        }
      }
    } else if (answer.status().code() ==
                   absl::StatusCode::kFailedPrecondition &&
               absl::StrContains(answer.status().message(), kReplacedMarker) &&
               membership_->term(self) == own_term) {
      // (A refusal of a request that carried an older term of this PS --
      // it took its shards back meanwhile -- says nothing about now.)
      Replaced(std::string(answer.status().message()));
    }
    const absl::Time now = clock_->Now();
    {
      absl::MutexLock lock(&mu_);
      HeldLocked(now);  // logs when the lease ends or returns
    }
    const absl::Time next = sent + options_.renew_every;
    if (next > now && clock_->WaitForNotification(stop_, next - now)) {
      return;
    }
  } while (!stop_.HasBeenNotified());
}

absl::Time LeaseHolder::EndLocked() const {
  // This PS plus the (majority - 1) voters that granted most recently.
  const int majority = membership_->voters() / 2 + 1;
  std::vector<absl::Time> grants;
  for (int t = 0; t < membership_->voters(); ++t) {
    if (t != peers_->self()) grants.push_back(granted_at_[t]);
  }
  if (majority - 1 <= 0) return absl::InfiniteFuture();
  std::nth_element(grants.begin(), grants.begin() + (majority - 2),
                   grants.end(), std::greater<>());
  const absl::Time oldest_needed = grants[majority - 2];
  if (oldest_needed == absl::InfinitePast()) return oldest_needed;
  return oldest_needed + options_.term;
}

int LeaseHolder::GrantingLocked(absl::Time now) const {
  int granting = 1;  // this PS
  for (int t = 0; t < membership_->voters(); ++t) {
    if (t == peers_->self()) continue;
    granting += granted_at_[t] != absl::InfinitePast() &&
                now - granted_at_[t] < options_.term;
  }
  return granting;
}

bool LeaseHolder::HeldLocked(absl::Time now) const {
  const bool held = !replaced_ && now < EndLocked();
  if (held != held_) {
    held_ = held;
    if (held) {
      LOG(INFO) << "PS " << peers_->self()
                << " holds a lease: " << GrantingLocked(now) << " of "
                << membership_->voters() << VoterKind()
                << " (itself included) granted one; it serves";
    } else {
      ++lapses_;
      LOG(ERROR) << "PS " << peers_->self()
                 << " lost its lease: " << GrantingLocked(now) << " of "
                 << membership_->voters() << VoterKind()
                 << " (itself included) granted one in the last "
                 << absl::FormatDuration(options_.term)
                 << "; it refuses pulls and pushes until a majority does";
    }
  }
  return held;
}

absl::Status LeaseHolder::Check() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  if (HeldLocked(now)) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "PS ", peers_->self(), " holds no lease (--replicas): ",
      GrantingLocked(now), " of ", membership_->voters(), VoterKind(),
      " (itself included) granted one in the last ",
      absl::FormatDuration(options_.term), ", a majority is ",
      membership_->voters() / 2 + 1,
      replaced_ ? "; it was replaced by its backup (failover)" : "",
      ". A PS cut off from most of the cluster serves nothing, as its "
      "backup may take over its shards; ask another PS (GetStats) where "
      "they are served",
      membership_->witnesses() > 0
          ? ". With 2 PS the workers vote: each worker's client must know "
            "its index (TF_CONFIG, psrt.Client(worker=...), "
            "ClientOptions.worker_index or witness_index)"
          : ""));
}

const char* LeaseHolder::VoterKind() const {
  return membership_->witnesses() > 0 ? " voters (PS and workers)" : " PS";
}

int64_t LeaseHolder::lapses() const {
  absl::MutexLock lock(&mu_);
  return lapses_;
}

}  // namespace psrt
