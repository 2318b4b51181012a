// Everything one PS runs for --replicas, in one object the server holds:
//
//   Replicator      this PS's stream of applied updates to its backups
//   Membership      terms, failovers, votes and lease grants of the cluster
//   LeaseHolder     this PS's lease (it serves only while a majority, with
//                   2 PS the workers among them, granted it one)
//   FailoverMonitor watches the primaries this PS is the first backup of
//   ShardTransfer   takeover and handback of a PS's shards
//   Rejoiner        a PS back from a failover gets copies and its shards
//
// Create makes the first two (the service logs pushes to the replicator);
// Start, once the service exists, the rest, wired to the service's
// replica applier and step barriers. Without --replicas > 1 Start is not
// called: the replicator has no backups and logs nothing.
#ifndef PSRT_PS_SERVER_REPLICATION_REPLICATION_H_
#define PSRT_PS_SERVER_REPLICATION_REPLICATION_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "ps_server/metrics/metrics.h"
#include "ps_server/peers/ps_peers.h"
#include "ps_server/replication/failover_monitor.h"
#include "ps_server/replication/lease_holder.h"
#include "ps_server/replication/membership.h"
#include "ps_server/replication/rejoiner.h"
#include "ps_server/replication/replica_applier.h"
#include "ps_server/replication/replicator.h"
#include "ps_server/replication/shard_transfer.h"
#include "ps_server/rpc/step_barriers.h"
#include "ps_server/shards/shard_store.h"
#include "util/clock.h"

namespace psrt {

class Replication {
 public:
  struct Options {
    int replicas = 1;  // copies of each shard (--replicas)
    int num_workers = 0;
    // --peer_secret_file was given: PS prove which PS they are, workers
    // cannot prove which worker they are (so with 2 PS they do not vote).
    bool peer_secret = false;
    LeaseHolder::Options lease;
    FailoverMonitor::Options failover;
    Clock* clock = nullptr;  // null: the real clock
  };
  // The replicator (to the backups the store's placement gives this PS)
  // and the membership; with replicas, `store`'s evictions go into the
  // stream. `store` and `peers` must outlive this.
  static std::unique_ptr<Replication> Create(const Options& options,
                                             ShardStore* store,
                                             const PsPeers* peers);
  ~Replication();
  Replication(const Replication&) = delete;
  Replication& operator=(const Replication&) = delete;

  // What Start wires the rest to: the service's parts (they must outlive
  // this, or Stop it first).
  struct Service {
    ReplicaApplier* applier = nullptr;
    StepBarriers* barriers = nullptr;
    // OK while this PS may acknowledge pulls and pushes.
    std::function<absl::Status()> may_serve;
    // After a handback this PS serves its live shards again.
    std::function<void()> serves_live_copy;
  };
  // --replicas > 1: the shard transfer, the rejoiner, the lease holder and
  // the failover monitor start, and their metrics join `registry`.
  void Start(Service service, MetricsRegistry* registry);
  // Stops what calls into the service's parts: failovers, leases, a
  // rejoin, the refusals held for a handback. Idempotent.
  void Stop();
  // A shutdown's deadline passed: pushes waiting for backups are answered
  // UNAVAILABLE, and a drop's wait for its lease term ends.
  void StopReplicator();

  Replicator* replicator() { return replicator_.get(); }
  Membership* membership() { return membership_.get(); }
  // Null before Start, and with fewer than 3 voters (no failover).
  LeaseHolder* lease() { return lease_.get(); }
  const LeaseHolder* lease() const { return lease_.get(); }
  // Null before Start.
  ShardTransfer* transfer() { return transfer_.get(); }

 private:
  Replication(const Options& options, ShardStore* store, const PsPeers* peers)
      : options_(options),
        clock_(options.clock != nullptr ? options.clock : Clock::Real()),
        store_(store),
        peers_(peers) {}

  const Options options_;
  Clock* const clock_;
  ShardStore* const store_;
  const PsPeers* const peers_;
  // Ends a drop's wait for its lease term (2 PS) when the server stops.
  std::shared_ptr<absl::Notification> drop_wait_cancel_ =
      std::make_shared<absl::Notification>();
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<Replicator> replicator_;
  std::unique_ptr<ShardTransfer> transfer_;
  std::unique_ptr<Rejoiner> rejoiner_;
  std::unique_ptr<LeaseHolder> lease_;
  std::unique_ptr<FailoverMonitor> failover_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_REPLICATION_H_
