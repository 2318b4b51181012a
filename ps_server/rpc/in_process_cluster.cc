#include "ps_server/rpc/in_process_cluster.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "util/awake_clock.h"

namespace psrt {

namespace {
int WorkersOf(const InProcessCluster::Options& options) {
  // One worker per host, as in SageMaker's layout, unless told otherwise.
  return options.num_workers > 0 ? options.num_workers : options.num_ps;
}
}  // namespace

InProcessCluster::InProcessCluster(Options options)
    : options_(options),
      links_(options.num_ps, options.auth_token, WorkersOf(options)),
      client_ports_(options.num_ps, 0),
      servers_(options.num_ps),
      workers_vote_(Membership::WitnessesFor(options.num_ps, options.replicas,
                                             WorkersOf(options),
                                             !options.peer_secret.empty()) > 0),
      witnesses_(WorkersOf(options)) {
  for (int t = 0; t < options.num_ps; ++t) {
    cluster_.ps.push_back(absl::StrCat("127.0.0.", t + 1, ":2223"));
  }
  for (int w = 0; w < WorkersOf(options); ++w) {
    cluster_.workers.push_back(absl::StrCat("127.0.0.", w % options.num_ps + 1,
                                            ":",
                                            2222 + 100 * (w / options.num_ps)));
  }
}

absl::StatusOr<std::unique_ptr<InProcessCluster>> InProcessCluster::Start(
    Options options) {
  std::unique_ptr<InProcessCluster> cluster(new InProcessCluster(options));
  for (int t = 0; t < options.num_ps; ++t) {
    auto server = cluster->MakeServer(t);
    if (!server.ok()) return server.status();
    cluster->servers_[t] = *std::move(server);
  }
  for (int w = 0; w < WorkersOf(options); ++w) cluster->RestartWorker(w);
  // With witnesses a PS holds no lease before they granted one: a renewal
  // period for the challenges, another for the grants.
  if (cluster->workers_vote_) cluster->Advance(2 * options.step);
  if (!cluster->Settle() || !cluster->AwaitStreams()) {
    return absl::DeadlineExceededError(
        "the in-process PS did not settle on the simulated clock, or their "
        "backups did not accept their replication streams");
  }
  return cluster;
}

void InProcessCluster::RestartWorker(int w) {
  if (!workers_vote_) return;
  witnesses_[w].reset();
  WorkerWitness::Options o;
  o.renew_every = options_.lease.renew_every;
  o.term = options_.lease.term;
  o.clock = &clock_;
  witnesses_[w] = std::make_unique<WorkerWitness>(
      w, options_.num_ps, links_.TransportFor(links_.worker_node(w)), o);
}

InProcessCluster::~InProcessCluster() {
  for (auto& witness : witnesses_) witness.reset();
  for (int t = 0; t < num_ps(); ++t) links_.Kill(t);
  // Their threads may wait on the clock: wake them as the servers stop.
  for (auto& server : servers_) {
    if (server != nullptr) server->Shutdown(absl::Now());
  }
  for (auto& server : servers_) server.reset();
}

absl::StatusOr<std::unique_ptr<Server>> InProcessCluster::MakeServer(int task) {
  ServerOptions o;
  o.cluster = cluster_;
  o.ps_task = task;
  o.replicas = options_.replicas;
  o.reflection = false;
  o.security.auth_token = options_.auth_token;
  o.security.peer_secret = options_.peer_secret;
  o.clock = &clock_;
  o.lease = options_.lease;
  o.failover = options_.failover;
  o.peer_transport = [this](int self) { return links_.TransportFor(self); };
  if (options_.memory_budget_bytes > 0) {
    o.memory_limit_bytes = options_.memory_budget_bytes;
    o.evict_at_memory_limit = true;
  }
  if (!options_.ssd_tier_dir.empty()) {
    o.ssd_tier_dir = absl::StrCat(options_.ssd_tier_dir, "/ps-", task);
  }
  o.listen_address =
      options_.client_ports
          ? absl::StrCat("127.0.0.", task + 1, ":", client_ports_[task])
          : "";
  auto server = Server::Create(o);
  if (!server.ok()) return server.status();
  if (options_.client_ports) client_ports_[task] = (*server)->port();
  links_.Attach(task, (*server)->grpc_server());
  return server;
}

std::vector<std::string> InProcessCluster::client_addresses() const {
  std::vector<std::string> out;
  for (int t = 0; t < options_.num_ps; ++t) {
    out.push_back(absl::StrCat("127.0.0.", t + 1, ":", client_ports_[t]));
  }
  return out;
}

void InProcessCluster::Kill(int task) {
  links_.Kill(task);
  servers_[task].reset();
}

absl::Status InProcessCluster::Restart(int task) {
  if (servers_[task] != nullptr) Kill(task);
  links_.Restarting(task);
  auto server = MakeServer(task);
  if (!server.ok()) {
    links_.Kill(task);
    return server.status();
  }
  servers_[task] = *std::move(server);
  return absl::OkStatus();
}

int InProcessCluster::LoopThreads() {
  int threads = 0;
  for (const auto& witness : witnesses_) {
    if (witness != nullptr) threads += witness->voting_with();
  }
  for (int t = 0; t < num_ps(); ++t) {
    Server* server = servers_[t].get();
    if (server == nullptr) continue;
    // The step barriers' timeout threads.
    threads += server->service()->step_barriers()->count();
    if (server->lease() == nullptr) continue;
    threads += num_ps() - 1;  // a renewal thread per other PS
    const ReplicaPlacement& placement = server->store()->replicas();
    for (int primary : placement.BackedUpBy(t)) {
      if (placement.BackupsOf(primary)[0] == t) {
        ++threads;  // the failover monitor
        break;
      }
    }
  }
  return threads;
}

bool InProcessCluster::AwaitStreams() {
  // The replicators' hellos retry on real time (a PS made before its
  // backup was attached was refused at first). 10 s of this process's
  // running time: a pause of its VM does not count (awake_clock.h).
  AwakeClock running(absl::Seconds(1));
  const absl::Time give_up = running.Now() + absl::Seconds(10);
  for (auto& server : servers_) {
    if (server == nullptr) continue;
    while (!server->replicator()->ready()) {
      if (running.Tick() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  return true;
}

bool InProcessCluster::Settle() {
  return clock_.AwaitWaiters(LoopThreads(), absl::Seconds(10));
}

void InProcessCluster::Advance(absl::Duration total,
                               const std::function<void()>& each_step) {
  for (absl::Duration done; done < total; done += options_.step) {
    clock_.Advance(std::min(options_.step, total - done));
    if (!Settle()) {
      // How many were still running says where to look (a loop thread
      // held on real time: a lock, an RPC's own deadline).
      ADD_FAILURE() << "the PS threads did not settle at "
                    << absl::FormatTime(clock_.Now()) << ": "
                    << clock_.waiters() << " thread(s) wait on the clock, "
                    << LoopThreads() << " loop thread(s) should";
      return;
    }
    if (each_step) each_step();
  }
}

bool InProcessCluster::AdvanceUntil(const std::function<bool()>& condition,
                                    absl::Duration limit) {
  for (absl::Duration done; done < limit; done += options_.step) {
    if (condition()) return true;
    Advance(options_.step);
    // As in AdvanceDuring: work paced in real time (a rejoin's snapshot
    // calls) goes on between the steps.
    absl::SleepFor(kRealTimePerStep);
  }
  return condition();
}

absl::Status InProcessCluster::AdvanceDuring(
    const std::function<absl::Status()>& call, absl::Duration limit) {
  absl::Notification done;
  absl::Status result;
  std::thread caller([&] {
    result = call();
    done.Notify();
  });
  // A few real milliseconds pass at each step: the call's RPCs, and the
  // retries paced in real time, go on meanwhile.
  for (absl::Duration advanced;
       !done.WaitForNotificationWithTimeout(kRealTimePerStep) &&
       advanced < limit;
       advanced += options_.step) {
    Advance(options_.step);
  }
  caller.join();
  return result;
}

bool InProcessCluster::Serves(int task, int owner) {
  Server* server = servers_[task].get();
  if (server == nullptr) return false;
  if (!server->service()->CheckNotReplaced().ok()) return false;
  if (task == owner) return !server->store()->retired();
  return server->store()->TookOver(owner);
}

}  // namespace psrt
