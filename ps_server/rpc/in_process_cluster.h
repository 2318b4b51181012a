// For tests: a whole PS cluster in one process. Each PS is a real Server
// (service, store, replicator, leases, failover monitor) reached by the
// others through InProcessLinks (faults per link) and timed by one
// SimulatedClock, so a test walks leases, votes, failovers and
// partitions through simulated seconds in milliseconds, under ASan too.
//
// With 2 PS and replicas the workers vote (membership.h): each worker's
// witness (worker_witness.h) runs here too, over the same links (node
// links()->worker_node(w)), so a test can cut a worker off as it cuts a PS.
//
// PS i is host 127.0.0.(i+1) in the cluster spec (replica placement puts
// backups on other hosts). With `client_ports`, each PS also listens on
// 127.0.0.(i+1):<free port> so a psrt::Client can push and pull
// (client_addresses()); PS-to-PS calls stay in-process either way.
//
//   auto cluster = InProcessCluster::Start({.num_ps = 3, .replicas = 2});
//   (*cluster)->links()->Partition({{0}, {1, 2}});
//   (*cluster)->Advance(absl::Seconds(5), [&] { /* checks each step */ });
#ifndef PSRT_PS_SERVER_RPC_IN_PROCESS_CLUSTER_H_
#define PSRT_PS_SERVER_RPC_IN_PROCESS_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps_server/peers/in_process_links.h"
#include "ps_server/replication/worker_witness.h"
#include "ps_server/rpc/server.h"
#include "util/simulated_clock.h"

namespace psrt {

class InProcessCluster {
 public:
  struct Options {
    int num_ps = 3;
    int replicas = 2;
    // Workers in the cluster spec (what SYNC and SSP requests are checked
    // against); 0: one per PS.
    int num_workers = 0;
    bool client_ports = false;
    // A secured cluster: every call must carry `auth_token` (PS-to-PS
    // calls too), and PS prove their task with `peer_secret`.
    std::string auth_token;
    std::string peer_secret;
    // --memory_budget_mb (0: none) and --ssd_tier_dir (each PS in a
    // folder "ps-<task>" of its own under it; empty: none).
    int64_t memory_budget_bytes = 0;
    std::string ssd_tier_dir;
    // Timing (the clock is the cluster's own).
    LeaseHolder::Options lease;
    FailoverMonitor::Options failover;
    // How far the clock moves in one step of Advance: the lease renewal
    // period, so every renewal and probe happens at a step.
    absl::Duration step = absl::Milliseconds(250);
  };

  // Real time let pass at each step of AdvanceUntil and AdvanceDuring.
  static constexpr absl::Duration kRealTimePerStep = absl::Milliseconds(2);

  static absl::StatusOr<std::unique_ptr<InProcessCluster>> Start(
      Options options);
  ~InProcessCluster();

  SimulatedClock* clock() { return &clock_; }
  InProcessLinks* links() { return &links_; }
  int num_ps() const { return options_.num_ps; }
  // Null while PS `task` is killed.
  Server* ps(int task) { return servers_[task].get(); }
  // host:port of each PS's client port (client_ports only).
  std::vector<std::string> client_addresses() const;

  // PS `task` dies: its links are gone, then its server.
  void Kill(int task);
  // Worker `w`'s witness (null: stopped, or the cluster takes no votes
  // from workers: 3 PS or more).
  WorkerWitness* witness(int w) { return witnesses_[w].get(); }
  // Worker `w` dies (its witness stops calling), or starts again.
  void KillWorker(int w) { witnesses_[w].reset(); }
  void RestartWorker(int w);
  // A new, empty process of PS `task` (it was killed): as a restarted
  // ps_server, it learns it was replaced, rejoins as a backup and takes its
  // shards back (handback).
  absl::Status Restart(int task);

  // Moves the clock on by `total` in steps of options.step; after each
  // step, once every live PS's loop threads (lease renewals, failover
  // probes) have done their work and wait again, calls `each_step` (if
  // set): the cluster as it is at that instant. Fails (ADD_FAILURE) if the
  // threads do not settle within 10 s of the process's running time (real
  // time less a pause of the process or its VM: util/awake_clock.h).
  void Advance(absl::Duration total,
               const std::function<void()>& each_step = nullptr);
  // Advances step by step until `condition` holds (true) or `limit` of
  // simulated time passed (false), letting kRealTimePerStep of real time
  // pass at each step.
  bool AdvanceUntil(const std::function<bool()>& condition,
                    absl::Duration limit);
  // Runs `call` (a client's pull or push) on a thread, advancing the clock
  // step by step while it runs, up to `limit` of simulated time; returns
  // its answer. For calls that wait on the PS's time: a push whose backup
  // is gone is acknowledged once the primary gave up on it.
  absl::Status AdvanceDuring(const std::function<absl::Status()>& call,
                             absl::Duration limit);

  // PS `task` acknowledges pulls and pushes for `owner`'s shards now: its
  // own (it serves: not replaced, lease held) or those it took over.
  bool Serves(int task, int owner);

 private:
  explicit InProcessCluster(Options options);
  absl::StatusOr<std::unique_ptr<Server>> MakeServer(int task);
  // Threads of live PS that wait on the clock between their steps: lease
  // renewals, failover probes, step barriers' timeouts. (A rejoin's and a
  // handback's retries are not counted: while a PS rejoins, a step may be
  // looked at before its renewals are done; AdvanceUntil looks again at
  // the next step.)
  int LoopThreads();
  bool Settle();
  // Polls (up to 10 s of running time) until every live PS's backups
  // accepted its stream.
  bool AwaitStreams();

  const Options options_;
  SimulatedClock clock_;
  InProcessLinks links_;
  ClusterSpec cluster_;
  std::vector<int> client_ports_;
  std::vector<std::unique_ptr<Server>> servers_;
  const bool workers_vote_;
  std::vector<std::unique_ptr<WorkerWitness>> witnesses_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_IN_PROCESS_CLUSTER_H_
