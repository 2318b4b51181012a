// Moving the serving of a PS's shards between PS (--replicas > 1):
//
// Takeover (failover), on the first live backup of a PS the cluster found
// down (FailoverMonitor) or that restarted faster than a failover: the
// copies in sync become primary (ShardRole::TakeOver), the old primary is
// fenced, and the step barriers of its shards resume here.
//
// Handback, once that PS rejoined as a backup (Rejoiner), in two halves:
// - ServeHandback, on the PS serving the shards: once the caller follows
//   this PS's stream and has caught up, this PS closes the shards' step
//   barrier, makes its copies backups (under each shard's lock: no push
//   applies to them here afterwards), waits until the caller applied every
//   update logged so far (so its copy equals this one), follows the
//   caller's stream for its copies from then on, records the caller's
//   return (an even term, membership.h) and answers. If the caller does not
//   catch up within kHandbackWait, everything is undone and the shards stay
//   here.
// - ReclaimShards, on the caller, after the answer: its shards are primary
//   here again, the step barrier resumes where the answer says it stands
//   (SYNC step, SSP clocks) with the pushes held for that step (they came
//   through the serving PS's stream), its lease counts the answer as a
//   grant, and last its replication to that PS restarts: it serves.
//
// Between the two halves the shards are served by neither PS: the pulls
// and pushes refused on the serving PS meanwhile are answered (UNAVAILABLE)
// only once the handback settled (HoldRefusal: the caller's first
// Replicate call after the answer, which it sends once it serves, or
// kCallerStart), so that the client, which learns the routing when
// refused, finds the caller serving and retries there at once. They wait
// in a queue that a thread of their own answers, not on gRPC's threads:
// the call that settles the handback must find one free.
#ifndef PSRT_PS_SERVER_REPLICATION_SHARD_TRANSFER_H_
#define PSRT_PS_SERVER_REPLICATION_SHARD_TRANSFER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "ps_server/peers/ps_peers.h"
#include "ps_server/replication/membership.h"
#include "ps_server/replication/replica_applier.h"
#include "ps_server/replication/replication_log.h"
#include "ps_server/rpc/step_barriers.h"
#include "ps_server/shards/shard_store.h"
#include "util/clock.h"

namespace psrt {

class ShardTransfer {
 public:
  // What a transfer acts on; every pointer must outlive this.
  struct Parts {
    ShardStore* store = nullptr;
    ReplicationLog* replicator = nullptr;
    Membership* membership = nullptr;
    const PsPeers* peers = nullptr;
    // The service's: the copies' streams, and the barriers it serves.
    ReplicaApplier* applier = nullptr;
    StepBarriers* barriers = nullptr;
    Clock* clock = nullptr;
    // OK while this PS may acknowledge pulls and pushes (a handback is
    // served only then).
    std::function<absl::Status()> may_serve;
    // This PS serves its live shards again after a handback (not what it
    // restored from a checkpoint at start).
    std::function<void()> serves_live_copy;
  };
  explicit ShardTransfer(Parts parts);
  // Stop()s.
  ~ShardTransfer();
  ShardTransfer(const ShardTransfer&) = delete;
  ShardTransfer& operator=(const ShardTransfer&) = delete;

  // Failover: `primary`'s shards are served here from now on, if this
  // PS's copy of them is in sync (else false, nothing changes).
  bool TakeOver(int primary);
  // A new process of `primary` said hello while this PS's copy follows its
  // previous one (it restarted faster than a failover): if this PS is its
  // first live backup and in sync, it takes the shards over at once (the
  // old process is gone: the new one holds its address) and records the
  // failover; the new process then rejoins as a backup.
  bool TakeOverRestarted(int primary);

  // The Handback RPC's work on the serving PS; one at a time.
  absl::StatusOr<HandbackResponse> ServeHandback(const HandbackRequest& r)
      ABSL_LOCKS_EXCLUDED(handback_mu_);
  // On a PS that failed over, restarted and rejoined: asks `serving` (the
  // PS that took its shards over) for them back and serves them once it
  // answered (retrying for a while if `serving` says this PS has not
  // caught up yet). `on_reinstated(asked)` runs before it serves again:
  // the lease holder is told, and that `serving` granted a lease with its
  // answer to the request sent at `asked`. OK once this PS serves its
  // shards.
  absl::Status ReclaimShards(
      int serving, const std::function<void(absl::Time asked)>& on_reinstated);

  // A pull or push refused `status` while this PS hands shards back: true
  // if `answer` was queued to run once the handback settled (at most
  // kMaxHandbackHold); false (the caller answers at once) otherwise.
  bool HoldRefusal(const char* method, const absl::Status& status,
                   std::function<void()> answer)
      ABSL_LOCKS_EXCLUDED(settle_mu_);
  // A Replicate call from `from` succeeded: if this PS just handed it its
  // shards, it serves them now.
  void HandbackSettledBy(int from) ABSL_LOCKS_EXCLUDED(settle_mu_);
  // Answers the refusals still held and holds none from now on (the
  // server, shut down before, waited for them at most kMaxHandbackHold).
  void Stop() ABSL_LOCKS_EXCLUDED(handback_mu_, settle_mu_);

 private:
  // A handback begins: refusals are held from now on, and answered by
  // AnswerHeldRefusals on settle_thread_ (started unless it runs).
  void StartHoldingRefusals() ABSL_EXCLUSIVE_LOCKS_REQUIRED(handback_mu_)
      ABSL_LOCKS_EXCLUDED(settle_mu_);
  void AnswerHeldRefusals() ABSL_LOCKS_EXCLUDED(settle_mu_);

  ShardStore* const store_;
  ReplicationLog* const replicator_;
  Membership* const membership_;
  const PsPeers* const peers_;
  ReplicaApplier* const applier_;
  StepBarriers* const barriers_;
  Clock* const clock_;
  const std::function<absl::Status()> may_serve_;
  const std::function<void()> serves_live_copy_;

  absl::Mutex handback_mu_;
  absl::Mutex settle_mu_;
  // Written under settle_mu_; read first without it (every Replicate call
  // asks, and almost never while a handback settles).
  std::atomic<int> settling_for_{-1};
  // InfinitePast: no handback; InfiniteFuture: one under way; else when
  // the last one settles (its answer plus the new primary's start).
  absl::Time handback_settles_at_ ABSL_GUARDED_BY(settle_mu_) =
      absl::InfinitePast();
  // Bumped when the settle instant or the held refusals change (the
  // answering thread looks again).
  uint64_t settle_changes_ ABSL_GUARDED_BY(settle_mu_) = 0;
  struct HeldRefusal {
    absl::Time until;  // kMaxHandbackHold after it came
    std::function<void()> answer;
  };
  std::deque<HeldRefusal> held_refusals_ ABSL_GUARDED_BY(settle_mu_);
  bool answering_refusals_ ABSL_GUARDED_BY(settle_mu_) = false;
  std::thread settle_thread_ ABSL_GUARDED_BY(handback_mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_SHARD_TRANSFER_H_
