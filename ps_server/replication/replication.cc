#include "ps_server/replication/replication.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"

namespace psrt {
namespace {

// --replicas: how this PS's stream to its backups goes, and failovers.
void AddReplicationMetrics(MetricsRegistry* registry,
                           const Replicator* replicator,
                           const Membership* membership,
                           const LeaseHolder* lease) {
  if (lease != nullptr) {
    registry->AddGauge(
        "psrt_lease_held",
        "1 while a majority of the PS granted this PS a lease (it serves)", {},
        [lease] { return lease->Check().ok() ? 1.0 : 0.0; });
    registry->AddCounterFunction(
        "psrt_lease_lapses_total",
        "Times this PS lost its lease (cut off from most of the cluster)", {},
        [lease] { return static_cast<double>(lease->lapses()); });
  }
  registry->AddCounterFunction(
      "psrt_replication_updates_total",
      "Pushes this PS forwarded to its backups and they acknowledged", {},
      [replicator] { return static_cast<double>(replicator->updates_sent()); });
  registry->AddCounterFunction(
      "psrt_replication_calls_total",
      "Replicate calls that carried them (updates per call: the batching)", {},
      [replicator] { return static_cast<double>(replicator->calls()); });
  registry->AddCounterFunction(
      "psrt_unreplicated_pushes_total",
      "Pushes acknowledged while a backup of this PS was out of sync", {},
      [replicator] {
        return static_cast<double>(replicator->unreplicated_updates());
      });
  registry->AddCounterFunction(
      "psrt_failovers_total",
      "Failovers this PS made or learned of (a PS's shards taken over by "
      "its backup)",
      {},
      [membership] { return static_cast<double>(membership->failovers()); });
  registry->AddCounterFunction(
      "psrt_handbacks_total",
      "Handbacks this PS made or learned of (a rejoined PS serving its "
      "shards again)",
      {},
      [membership] { return static_cast<double>(membership->handbacks()); });
  registry->AddGauge("psrt_failed_over_ps",
                     "PS whose shards are served by a backup now", {},
                     [membership] {
                       return static_cast<double>(membership->failed().size());
                     });
  registry->AddGauge(
      "psrt_replaced", "1 once a backup took this PS's shards over", {},
      [replicator] { return replicator->replaced() ? 1.0 : 0.0; });
  for (const Replicator::BackupState& b : replicator->Backups()) {
    const int task = b.task;
    const MetricLabels labels = {{"backup", std::to_string(task)}};
    registry->AddGauge(
        "psrt_replication_in_sync",
        "1 while the backup follows this PS's stream, 0 once dropped", labels,
        [replicator, task] {
          for (const auto& s : replicator->Backups()) {
            if (s.task == task) return s.in_sync ? 1.0 : 0.0;
          }
          return 0.0;
        });
    registry->AddGauge(
        "psrt_replication_lag_updates",
        "Pushes applied here that the backup has not acknowledged yet", labels,
        [replicator, task] {
          const uint64_t last = replicator->last_sequence();
          for (const auto& s : replicator->Backups()) {
            if (s.task == task && s.in_sync) {
              return static_cast<double>(last - std::min(last, s.acknowledged));
            }
          }
          return 0.0;
        });
  }
}

}  // namespace

std::unique_ptr<Replication> Replication::Create(const Options& options,
                                                 ShardStore* store,
                                                 const PsPeers* peers) {
  std::unique_ptr<Replication> r(new Replication(options, store, peers));
  Clock* const clock = r->clock_;
  const int num_ps = store->num_ps();
  // With 2 PS the workers vote (membership.h), unless they cannot prove
  // which worker they are (a secured cluster's workers hold no secret).
  const int witnesses = Membership::WitnessesFor(
      num_ps, options.replicas, options.num_workers, options.peer_secret);
  if (options.replicas > 1 && num_ps == 2 && options.peer_secret) {
    LOG(WARNING) << "--replicas=" << options.replicas << " with 2 PS and "
                 << "--peer_secret_file: workers cannot prove which worker "
                    "they are, so they do not vote";
  }
  r->membership_ =
      std::make_unique<Membership>(peers, options.replicas, clock, witnesses);
  Replicator::MayDrop may_drop;
  if (r->membership_->Enabled()) {
    Membership* membership = r->membership_.get();
    const absl::Duration lease_term = options.lease.term;
    std::shared_ptr<absl::Notification> cancel = r->drop_wait_cancel_;
    may_drop = [membership, lease_term, cancel](int task,
                                                const StreamView& without) {
      return membership->DecideDrop(task, without, lease_term, *cancel);
    };
  }
  const std::vector<int> backups =
      store->replicas().BackupsOf(store->ps_task());
  r->replicator_ =
      std::make_unique<Replicator>(peers, backups, std::move(may_drop), clock);
  if (options.replicas > 1) {
    // A primary's evictions go to its backups in its stream, in the order
    // they happened among its updates of the shard (both under the shard's
    // lock): the copies stay equal.
    Replicator* replicator = r->replicator_.get();
    store->set_eviction_sink([replicator](const LocalVariable& v, int shard,
                                          std::vector<int64_t> ids) {
      ReplicationLog::Update update;
      ShardIds& evicted = update.evicted.emplace_back();
      evicted.set_variable(v.name());
      evicted.set_shard(shard);
      evicted.mutable_ids()->Add(ids.begin(), ids.end());
      replicator->Append(std::move(update));
    });
  }
  if (!backups.empty()) {
    LOG(INFO) << "--replicas=" << options.replicas << ": this PS's shards are "
              << "copied to "
              << absl::StrJoin(backups, ", ",
                               [&](std::string* out, int t) {
                                 out->append(peers->Describe(t));
                               })
              << "; every push is acknowledged after they applied it";
  }
  return r;
}

Replication::~Replication() { Stop(); }

void Replication::Start(Service service, MetricsRegistry* registry) {
  Clock* const clock = clock_;
  Replicator* replicator = replicator_.get();
  Membership* membership = membership_.get();
  ShardStore* store = store_;
  transfer_ = std::make_unique<ShardTransfer>(ShardTransfer::Parts{
      store, replicator, membership, peers_, service.applier, service.barriers,
      clock, std::move(service.may_serve),
      std::move(service.serves_live_copy)});
  // Replaced (it failed over while away): its copies stop serving, and it
  // rejoins as a backup of the PS serving them (when failovers happen).
  Rejoiner* rejoiner = nullptr;
  if (membership->Enabled()) {
    rejoiner_ =
        std::make_unique<Rejoiner>(store, service.applier, peers_, clock);
    rejoiner = rejoiner_.get();
    // Restarted while a primary it keeps copies of ran on (its stream
    // holds updates this process never got): rejoin to get copies.
    service.applier->set_on_out_of_sync([rejoiner](int primary) {
      LOG(WARNING) << "this PS holds none of PS " << primary
                   << "'s updates (it restarted since): it rejoins as a "
                      "backup to get a copy of that PS's shards";
      rejoiner->Start();
    });
    // Rejoined after its shards were taken over: it takes them back. (Set
    // before the lease holder starts: a refused lease starts a rejoin,
    // which ends seconds later, long after lease_ was set below.)
    rejoiner->set_on_rejoined([this](int serving) {
      absl::Status s =
          transfer_->ReclaimShards(serving, [this, serving](absl::Time asked) {
            if (lease_ != nullptr) lease_->Reinstate(serving, asked);
          });
      if (!s.ok()) LOG(ERROR) << s;
    });
  }
  // Set once the rejoiner is ready: it runs at once if this PS's first
  // hello to a backup was refused already (replaced while it was down).
  replicator->set_on_replaced([store, rejoiner] {
    store->Retire();
    if (rejoiner != nullptr) rejoiner->Start();
  });
  if (membership->Enabled()) {
    LeaseHolder::Options lease_options = options_.lease;
    lease_options.clock = clock;
    lease_options.view = [replicator] { return replicator->View(); };
    lease_ = std::make_unique<LeaseHolder>(
        peers_, membership,
        [replicator](const std::string& why) { replicator->MarkReplaced(why); },
        lease_options);
  }
  // Watch the primaries this PS is the first backup of.
  std::vector<int> watched;
  const ReplicaPlacement& placement = store->replicas();
  for (int primary : placement.BackedUpBy(store->ps_task())) {
    if (placement.BackupsOf(primary)[0] == store->ps_task()) {
      watched.push_back(primary);
    }
  }
  AddReplicationMetrics(registry, replicator, membership, lease_.get());
  ShardTransfer* transfer = transfer_.get();
  FailoverMonitor::Options failover = options_.failover;
  failover.clock = clock;
  failover_ = std::make_unique<FailoverMonitor>(
      peers_, membership, std::move(watched),
      [transfer, membership](int primary) {
        if (!transfer->TakeOver(primary)) return false;
        membership->MarkFailed(primary);
        return true;
      },
      failover);
  if (!membership->Enabled()) {
    LOG(WARNING) << "--replicas=" << options_.replicas << " with "
                 << store->num_ps()
                 << " PS and no workers voting: no failover (a majority "
                    "to decide that a PS is down needs 3 voters at "
                    "least); backups only copy";
  } else if (membership->witnesses() > 0) {
    LOG(INFO) << "--replicas=" << options_.replicas << " with 2 PS: the "
              << membership->witnesses() << " worker(s) vote with the PS; "
              << "this PS serves while " << membership->voters() / 2 + 1
              << " of " << membership->voters() << " voters granted it a lease";
  }
}

void Replication::Stop() {
  failover_.reset();
  lease_.reset();
  if (rejoiner_) rejoiner_->Stop();
  if (transfer_) transfer_->Stop();
}

void Replication::StopReplicator() {
  if (!drop_wait_cancel_->HasBeenNotified()) drop_wait_cancel_->Notify();
  replicator_->Stop();
}

}  // namespace psrt
