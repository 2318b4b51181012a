// The step barriers (SYNC, SSP; step_coordinator.h) of the shards this PS
// serves: its own shards' barrier, and after a failover those of each PS
// whose shards it took over, resumed where that PS's stream left this PS's
// copy. A handback closes a taken-over barrier and keeps it until this
// object goes: requests in flight hold pointers to it.
//
// The replication module (ps_server/replication/shard_transfer.h) moves
// barriers here on a takeover and away on a handback; pulls and pushes find
// theirs with For.
#ifndef PSRT_PS_SERVER_RPC_STEP_BARRIERS_H_
#define PSRT_PS_SERVER_RPC_STEP_BARRIERS_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "ps_server/replication/replica_applier.h"
#include "ps_server/replication/replication_log.h"
#include "ps_server/rpc/push_dedup.h"
#include "ps_server/rpc/step_coordinator.h"
#include "ps_server/shards/shard_store.h"
#include "util/clock.h"

namespace psrt {

class StepBarriers {
 public:
  // Everything must outlive this. `replicator` may be null (no replicas).
  StepBarriers(ShardStore* store, DedupScopes* dedup, size_t max_push_bytes,
               int max_workers, ReplicationLog* replicator, Clock* clock);
  StepBarriers(const StepBarriers&) = delete;
  StepBarriers& operator=(const StepBarriers&) = delete;

  // This PS's own shards' barrier.
  StepCoordinator* own() { return &own_; }

  // The barrier a pull or push with `header`'s for_ps waits on: this PS's
  // own (unset, or this PS), or that of a PS whose shards it took over;
  // INVALID_ARGUMENT for no PS of the cluster, UNAVAILABLE (retryable: the
  // client learns the routing again) if it serves no such shards.
  template <typename Header>
  absl::StatusOr<StepCoordinator*> For(const Header& header)
      ABSL_LOCKS_EXCLUDED(mu_) {
    if (!header.has_for_ps()) return &own_;
    return ForPs(header.for_ps());
  }
  absl::StatusOr<StepCoordinator*> ForPs(int for_ps) ABSL_LOCKS_EXCLUDED(mu_);

  // The barriers kept (each has a thread that always waits on the clock).
  int count() ABSL_LOCKS_EXCLUDED(mu_);

  // Failover: `primary`'s barriers (keyed by the PS whose shards each is
  // for: its own and those it had taken over), as its stream left this
  // PS's copy, with their held pushes made pushes to this PS (their shards
  // must be served here). Each resumes before a call can reach it.
  void ResumeTakenOver(
      int primary,
      absl::flat_hash_map<int, ReplicaApplier::SyncBarrier> barriers)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Handback, on the PS serving `primary`'s shards: closes their barrier
  // (answering its waiters UNAVAILABLE with `why`) and returns where it
  // stood; nullopt if none was taken over here.
  std::optional<StepCoordinator::Handover> CloseTakenOver(
      int primary, const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  // The handback failed: the closed barrier serves again.
  void ReopenTakenOver(int primary) ABSL_LOCKS_EXCLUDED(mu_);
  // The handback succeeded: the barrier is no longer found by For.
  void RetireTakenOver(int primary) ABSL_LOCKS_EXCLUDED(mu_);
  // Handback, on the PS taking its shards back from `serving`: its own
  // barrier resumes as `serving` left it (the pushes `serving` held for
  // it came through its stream).
  void ResumeOwn(int serving, const ReplicaApplier::SyncBarrier& barrier);

 private:
  // A barrier's held pushes (SYNC), as `primary`'s stream left them here,
  // made pushes to this PS again; those that fail to parse are logged and
  // dropped.
  std::vector<std::unique_ptr<PushHandler>> HeldPushes(
      const ReplicaApplier::SyncBarrier& barrier, int primary);
  StepCoordinator* FindTakenOver(int primary) ABSL_LOCKS_EXCLUDED(mu_);

  ShardStore* const store_;
  DedupScopes* const dedup_;
  const size_t max_push_bytes_;
  const int max_workers_;
  ReplicationLog* const replicator_;
  Clock* const clock_;
  StepCoordinator own_;
  absl::Mutex mu_;
  absl::flat_hash_map<int, std::unique_ptr<StepCoordinator>> taken_over_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<StepCoordinator>> handed_back_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_STEP_BARRIERS_H_
