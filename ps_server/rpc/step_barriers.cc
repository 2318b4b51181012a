#include "ps_server/rpc/step_barriers.h"

#include <utility>

#include "glog/logging.h"

namespace psrt {

StepBarriers::StepBarriers(ShardStore* store, DedupScopes* dedup,
                           size_t max_push_bytes, int max_workers,
                           ReplicationLog* replicator, Clock* clock)
    : store_(store),
      dedup_(dedup),
      max_push_bytes_(max_push_bytes),
      max_workers_(max_workers),
      replicator_(replicator),
      clock_(clock),
      own_(store->ps_task(), max_workers, clock) {}

absl::StatusOr<StepCoordinator*> StepBarriers::ForPs(int for_ps) {
  const int self = store_->ps_task();
  if (for_ps == self) return &own_;
  if (for_ps < 0 || for_ps >= store_->num_ps()) {
    return absl::InvalidArgumentError(
        absl::StrCat("for_ps ", for_ps, " is not a PS of this ",
                     store_->num_ps(), "-PS cluster"));
  }
  if (StepCoordinator* barrier = FindTakenOver(for_ps)) return barrier;
  return absl::UnavailableError(
      absl::StrCat("PS ", self, " does not serve PS ", for_ps,
                   "'s shards (no failover of PS ", for_ps,
                   " to this PS): ask any PS for the cluster's failovers"));
}

int StepBarriers::count() {
  absl::MutexLock lock(&mu_);
  return 1 + static_cast<int>(taken_over_.size() + handed_back_.size());
}

StepCoordinator* StepBarriers::FindTakenOver(int primary) {
  absl::MutexLock lock(&mu_);
  auto it = taken_over_.find(primary);
  return it == taken_over_.end() ? nullptr : it->second.get();
}

std::vector<std::unique_ptr<PushHandler>> StepBarriers::HeldPushes(
    const ReplicaApplier::SyncBarrier& barrier, int primary) {
  const int self = store_->ps_task();
  std::vector<std::unique_ptr<PushHandler>> held;
  for (const auto& frames : barrier.held) {
    auto push = std::make_unique<PushHandler>(store_, dedup_->For(self),
                                              max_push_bytes_,
                                              RequestKind::kPush, replicator_);
    push->set_dedup_scopes(dedup_);
    absl::Status s;
    for (const grpc::ByteBuffer& frame : frames) {
      if (s.ok()) s = push->AddMessage(frame);
    }
    if (!s.ok() || !push->complete()) {
      LOG(ERROR) << "a push PS " << primary << " held for step "
                 << barrier.next_step << " is dropped: " << s;
      continue;
    }
    held.push_back(std::move(push));
  }
  return held;
}

void StepBarriers::ResumeTakenOver(
    int primary,
    absl::flat_hash_map<int, ReplicaApplier::SyncBarrier> barriers) {
  barriers.try_emplace(primary);  // its own, even if no step was seen
  const int self = store_->ps_task();
  for (auto& [for_ps, barrier] : barriers) {
    std::vector<std::unique_ptr<PushHandler>> held =
        HeldPushes(barrier, primary);
    if (for_ps == self) {
      own_.Resume(barrier.next_step, std::move(held), barrier.clocks);
      continue;
    }
    // Resumed before calls can reach it.
    auto resumed =
        std::make_unique<StepCoordinator>(for_ps, max_workers_, clock_);
    resumed->Resume(barrier.next_step, std::move(held), barrier.clocks);
    absl::MutexLock lock(&mu_);
    auto& slot = taken_over_[for_ps];
    if (slot == nullptr) slot = std::move(resumed);
  }
}

std::optional<StepCoordinator::Handover> StepBarriers::CloseTakenOver(
    int primary, const std::string& why) {
  StepCoordinator* barrier = FindTakenOver(primary);
  if (barrier == nullptr) return std::nullopt;
  return barrier->Close(why);
}

void StepBarriers::ReopenTakenOver(int primary) {
  if (StepCoordinator* barrier = FindTakenOver(primary)) barrier->Reopen();
}

void StepBarriers::RetireTakenOver(int primary) {
  absl::MutexLock lock(&mu_);
  auto it = taken_over_.find(primary);
  if (it == taken_over_.end()) return;
  handed_back_.push_back(std::move(it->second));
  taken_over_.erase(it);
}

void StepBarriers::ResumeOwn(int serving,
                             const ReplicaApplier::SyncBarrier& barrier) {
  own_.Resume(barrier.next_step, HeldPushes(barrier, serving), barrier.clocks);
}

}  // namespace psrt
