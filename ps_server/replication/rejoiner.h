// A PS whose copies are out of sync (--replicas > 1) rejoins as a backup:
// it restarted after its backup took its shards over, or it restarted and
// a primary it keeps copies of ran on meanwhile (its stream was refused:
// replica_applier.h). It learns the catalog and the cluster's failovers
// from the other PS, creates its copies, and asks each other PS that
// serves shards it should hold (its own shards' new primary, and the
// primaries it is a placed backup of) for a snapshot and the stream after
// it (rejoin_source.h). It then follows those streams like any backup, so
// every shard is on R copies again. Shards it still serves itself (nobody
// took them over) need no copy. If its own shards were taken over, it then
// takes its primary role back (`on_rejoined`: the Handback of
// shard_transfer.h), so the load is as placed again.
#ifndef PSRT_PS_SERVER_REPLICATION_REJOINER_H_
#define PSRT_PS_SERVER_REPLICATION_REJOINER_H_

#include <functional>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/client_context.h"
#include "ps_server/peers/ps_peers.h"
#include "ps_server/replication/replica_applier.h"
#include "ps_server/shards/shard_store.h"
#include "util/clock.h"

namespace psrt {

class Rejoiner {
 public:
  // All must outlive the rejoiner (or Stop it first). `clock` paces the
  // attempts.
  Rejoiner(ShardStore* store, ReplicaApplier* applier, const PsPeers* peers,
           Clock* clock = Clock::Real())
      : store_(store), applier_(applier), peers_(peers), clock_(clock) {}
  ~Rejoiner() { Stop(); }
  Rejoiner(const Rejoiner&) = delete;
  Rejoiner& operator=(const Rejoiner&) = delete;

  // Starts rejoining on a thread of its own; a call while a rejoin runs
  // makes it run once more when done (what it saw may predate the call).
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels a rejoin under way and waits for its thread.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs on the rejoin's thread after a rejoin that found this PS's own
  // shards served by PS `serving` (it took them over). Set before Start.
  void set_on_rejoined(std::function<void(int serving)> on_rejoined) {
    on_rejoined_ = std::move(on_rejoined);
  }

 private:
  // Rejoins (up to kAttempts tries), as often as Start asked meanwhile.
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  void RunAttempts() ABSL_LOCKS_EXCLUDED(mu_);
  // One attempt: OK once every source sent its copies.
  absl::Status RejoinOnce() ABSL_LOCKS_EXCLUDED(mu_);

  ShardStore* const store_;
  ReplicaApplier* const applier_;
  const PsPeers* const peers_;
  Clock* const clock_;
  std::function<void(int)> on_rejoined_;
  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool again_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* call_ ABSL_GUARDED_BY(mu_) = nullptr;  // in flight
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_REJOINER_H_
