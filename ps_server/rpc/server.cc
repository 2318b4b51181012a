#include "ps_server/rpc/server.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/server_builder.h"
#include "ps_server/metrics/grpc_server_metrics.h"

namespace psrt {
namespace {

// The name libgrpc++_reflection's ServerBuilderPlugin reports.
constexpr char kReflectionPlugin[] = "proto_server_reflection";

// Removes one plugin from a ServerBuilder (gRPC adds every registered
// plugin to every builder of the process).
class WithoutPlugin : public grpc::ServerBuilderOption {
 public:
  explicit WithoutPlugin(std::string name) : name_(std::move(name)) {}
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    plugins->erase(
        std::remove_if(plugins->begin(), plugins->end(),
                       [this](const auto& p) { return p->name() == name_; }),
        plugins->end());
  }

 private:
  std::string name_;
};

bool IsLoopbackHost(absl::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" ||
         absl::StartsWith(host, "127.");
}

// Anyone who reaches an unsecured port can read and change every parameter
// and trigger checkpoints: say so where operators look.
void WarnIfExposed(const ServerOptions& options) {
  if (!options.security.auth_token.empty() || options.security.serves_tls()) {
    return;
  }
  const size_t colon = options.listen_address.rfind(':');
  const absl::string_view host =
      absl::string_view(options.listen_address).substr(0, colon);
  if (IsLoopbackHost(host)) return;
  LOG(WARNING) << "SECURITY: listening on " << options.listen_address
               << " with neither TLS nor an auth token: anyone who can reach "
                  "this port can read and overwrite every parameter and "
                  "trigger checkpoints. Use --auth_token_file (and "
                  "--tls_cert_file/--tls_key_file) on any network you do not "
                  "fully trust, or --bind_address=127.0.0.1 on one machine "
                  "(docs/operations.md, Security model).";
}

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

absl::StatusOr<std::unique_ptr<Server>> Server::Create(ServerOptions options) {
  if (options.ps_task < 0 || options.ps_task >= options.cluster.num_ps()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--task_index=", options.ps_task, " but the cluster has ",
                     options.cluster.num_ps(), " PS tasks"));
  }
  options.limits.max_workers = std::max(1, options.cluster.num_workers());
  const SecurityOptions& security = options.security;
  if ((!security.auth_token.empty() || security.require_client_cert) &&
      options.cluster.num_ps() > 1 && security.peer_secret.empty()) {
    // Workers hold the token (and client certificates): without a secret
    // of the PS alone, any of them could speak as a PS to the others.
    return absl::InvalidArgumentError(absl::StrCat(
        "this cluster of ", options.cluster.num_ps(),
        " PS is secured (auth token or client certificates) but has no "
        "--peer_secret_file: give every ps_server the same secret file, "
        "which workers and clients never get, so that a PS proves which PS "
        "it is on the calls it makes to the others (docs/operations.md, "
        "Security model)"));
  }
  std::unique_ptr<Server> server(new Server());
  server->options_ = options;
  auto replicas =
      ReplicaPlacement::Create(options.cluster.ps, options.replicas);
  if (!replicas.ok()) return replicas.status();
  const std::vector<int> backups = replicas->BackupsOf(options.ps_task);
  Clock* const clock = options.clock != nullptr ? options.clock : Clock::Real();
  server->store_ = std::make_unique<ShardStore>(
      options.ps_task, options.cluster.num_ps(), options.memory_limit_bytes,
      *std::move(replicas), clock);
  if (options.evict_at_memory_limit) {
    if (options.memory_limit_bytes <= 0) {
      return absl::InvalidArgumentError(
          "--memory_budget_mb needs a budget > 0");
    }
    server->store_->set_evict_at_memory_limit(true);
  }
  server->store_->set_ssd_tier_dir(options.ssd_tier_dir);
  if (!options.restore_uri.empty()) {
    auto restorer = CheckpointRestorer::Open(options.restore_uri,
                                             options.checkpoint.open_storage);
    if (!restorer.ok()) {
      return absl::Status(
          restorer.status().code(),
          absl::StrCat("cannot restore: ", restorer.status().message()));
    }
    server->restorer_ = std::move(*restorer);
    const CheckpointManifest& m = server->restorer_->manifest();
    server->store_->set_global_step(m.global_step());
    CheckpointRestorer* r = server->restorer_.get();
    server->store_->set_fill_hook(
        [r](const LocalVariable& v, const std::atomic<bool>& cancelled) {
          return r->Fill(v, cancelled);
        },
        [r](const VariableLayout& layout) { return r->FillsEveryRow(layout); });
    LOG(INFO) << "restoring from " << options.restore_uri << " (step "
              << m.global_step() << ", " << m.variables_size()
              << " variables saved by " << m.num_ps()
              << " PS): each variable is filled when it is created";
  }
  server->peer_identity_ =
      std::make_unique<PeerIdentity>(options.security.peer_secret);
  if (options.peer_transport) {
    server->peers_ = PsPeers::Create(options.cluster.ps, options.ps_task,
                                     options.peer_transport(options.ps_task),
                                     options.security.peer_secret);
  } else {
    auto peers =
        PsPeers::Create(options.cluster.ps, options.ps_task, options.security);
    if (!peers.ok()) return peers.status();
    server->peers_ = std::move(*peers);
  }
  // With 2 PS the workers vote (membership.h), unless they cannot prove
  // which worker they are (a secured cluster's workers hold no secret).
  const int witnesses =
      Membership::WitnessesFor(options.cluster.num_ps(), options.replicas,
                               static_cast<int>(options.cluster.workers.size()),
                               !options.security.peer_secret.empty());
  if (options.replicas > 1 && options.cluster.num_ps() == 2 &&
      !options.security.peer_secret.empty()) {
    LOG(WARNING) << "--replicas=" << options.replicas << " with 2 PS and "
                 << "--peer_secret_file: workers cannot prove which worker "
                    "they are, so they do not vote";
  }
  server->membership_ = std::make_unique<Membership>(
      server->peers_.get(), options.replicas, clock, witnesses);
  Replicator::MayDrop may_drop;
  if (server->membership_->Enabled()) {
    Membership* membership = server->membership_.get();
    const absl::Duration lease_term = options.lease.term;
    std::shared_ptr<absl::Notification> cancel = server->drop_wait_cancel_;
    may_drop = [membership, lease_term, cancel](int task,
                                                const StreamView& without) {
      return membership->DecideDrop(task, without, lease_term, *cancel);
    };
  }
  server->replicator_ = std::make_unique<Replicator>(
      server->peers_.get(), backups, std::move(may_drop), clock);
  if (options.replicas > 1) {
    // A primary's evictions go to its backups in its stream, in the order
    // they happened among its updates of the shard (both under the shard's
    // lock): the copies stay equal.
    Replicator* replicator = server->replicator_.get();
    server->store_->set_eviction_sink([replicator](const LocalVariable& v,
                                                   int shard,
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
                                 out->append(server->peers_->Describe(t));
                               })
              << "; every push is acknowledged after they applied it";
  }
  CheckpointOptions checkpoint_options = options.checkpoint;
  if (checkpoint_options.clock == nullptr) checkpoint_options.clock = clock;
  server->checkpoints_ = std::make_unique<CheckpointCoordinator>(
      server->store_.get(), server->peers_.get(), checkpoint_options);
  server->checkpoints_->set_last(checkpoint_options.clock->Now(),
                                 server->store_->global_step());
  // Secured clusters serve checkpoint RPCs only to their own hosts.
  if (!options.security.auth_token.empty() ||
      options.security.require_client_cert) {
    std::vector<std::string> members = options.cluster.ps;
    members.insert(members.end(), options.cluster.workers.begin(),
                   options.cluster.workers.end());
    server->checkpoint_callers_ =
        std::make_unique<ClusterMembers>(std::move(members));
  }
  server->service_ = std::make_unique<ParameterServerService>(
      server->store_.get(), &server->registry_, options.limits,
      server->checkpoints_.get(), options.restore_uri,
      options.security.auth_token, server->checkpoint_callers_.get(),
      server->replicator_.get(), clock);
  server->service_->set_peer_identity(server->peer_identity_.get());
  {
    ParameterServerService* service = server->service_.get();
    server->registry_.AddGauge(
        "psrt_push_dedup_bytes",
        "Memory the push de-duplication tables count against the PS's "
        "memory limit (bounded: the oldest pushes are forgotten first)",
        {}, [service] { return static_cast<double>(service->dedup_bytes()); });
  }
  if (options.replicas > 1) {
    Replicator* replicator = server->replicator_.get();
    ShardStore* store = server->store_.get();
    // Replaced (it failed over while away): its copies stop serving, and
    // it rejoins as a backup of the PS serving them (3 PS or more).
    Rejoiner* rejoiner = nullptr;
    if (server->membership_->Enabled()) {
      server->rejoiner_ =
          std::make_unique<Rejoiner>(store, server->service_->replica_applier(),
                                     server->peers_.get(), clock);
      rejoiner = server->rejoiner_.get();
    }
    if (rejoiner != nullptr) {
      // Restarted while a primary it keeps copies of ran on (its stream
      // holds updates this process never got): rejoin to get copies.
      server->service_->replica_applier()->set_on_out_of_sync(
          [rejoiner](int primary) {
            LOG(WARNING) << "this PS holds none of PS " << primary
                         << "'s updates (it restarted since): it rejoins as "
                            "a backup to get a copy of that PS's shards";
            rejoiner->Start();
          });
    }
    if (rejoiner != nullptr) {
      // Rejoined after its shards were taken over: it takes them back. (Set
      // before the lease holder starts: a refused lease starts a rejoin,
      // which ends seconds later, long after lease_ was set below.)
      ParameterServerService* service = server->service_.get();
      std::unique_ptr<LeaseHolder>* lease = &server->lease_;
      rejoiner->set_on_rejoined([service, lease](int serving) {
        absl::Status s =
            service->ReclaimShards(serving, [lease, serving](absl::Time asked) {
              if (*lease != nullptr) (*lease)->Reinstate(serving, asked);
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
    if (server->membership_->Enabled()) {
      LeaseHolder::Options lease_options = options.lease;
      lease_options.clock = clock;
      lease_options.view = [replicator] { return replicator->View(); };
      server->lease_ = std::make_unique<LeaseHolder>(
          server->peers_.get(), server->membership_.get(),
          [replicator](const std::string& why) {
            replicator->MarkReplaced(why);
          },
          lease_options);
    }
    server->service_->EnableReplication(
        server->membership_.get(), server->peers_.get(), server->lease_.get());
    // Watch the primaries this PS is the first backup of.
    std::vector<int> watched;
    const ReplicaPlacement& placement = server->store_->replicas();
    for (int primary : placement.BackedUpBy(options.ps_task)) {
      if (placement.BackupsOf(primary)[0] == options.ps_task) {
        watched.push_back(primary);
      }
    }
    ParameterServerService* service = server->service_.get();
    Membership* membership = server->membership_.get();
    server->checkpoints_->set_failover_view(
        [membership](int task) { return membership->IsFailed(task); });
    AddReplicationMetrics(&server->registry_, server->replicator_.get(),
                          membership, server->lease_.get());
    server->failover_ = std::make_unique<FailoverMonitor>(
        server->peers_.get(), membership, std::move(watched),
        [service, membership](int primary) {
          if (!service->TakeOver(primary)) return false;
          membership->MarkFailed(primary);
          return true;
        },
        [&options, clock] {
          FailoverMonitor::Options failover = options.failover;
          failover.clock = clock;
          return failover;
        }());
    if (!server->membership_->Enabled()) {
      LOG(WARNING) << "--replicas=" << options.replicas << " with "
                   << options.cluster.num_ps()
                   << " PS and no workers voting: no failover (a majority "
                      "to decide that a PS is down needs 3 voters at "
                      "least); backups only copy";
    } else if (witnesses > 0) {
      LOG(INFO) << "--replicas=" << options.replicas << " with 2 PS: the "
                << witnesses << " worker(s) vote with the PS; this PS "
                << "serves while " << server->membership_->voters() / 2 + 1
                << " of " << server->membership_->voters()
                << " voters granted it a lease";
    }
  }

  auto credentials = MakeServerCredentials(options.security);
  if (!credentials.ok()) return credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  // (Also keeps libgrpc++_reflection linked; loading it registers the
  // plugin for every ServerBuilder, which WithoutPlugin undoes.)
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!options.reflection) {
    builder.SetOption(std::make_unique<WithoutPlugin>(kReflectionPlugin));
  }
  if (!options.listen_address.empty()) {
    builder.AddListeningPort(options.listen_address, *credentials,
                             &server->port_);
  }
  builder.RegisterService(server->service_.get());
  // grpc_server_{started,handled}_total and grpc_server_handling_seconds,
  // as gRPC's Prometheus interceptors name them.
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(MakeGrpcServerMetricsFactory(&server->registry_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // Pull responses are cut to max_message_bytes; requests may be a little
  // larger (headers, ids), never unbounded.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(options.limits.max_message_bytes + (1 << 20)));
  builder.SetMaxSendMessageSize(
      static_cast<int>(options.limits.max_message_bytes + (1 << 20)));
  // Clients ping every 10 s to find a cut network (see clients/cpp/
  // ps_connection.cc); accept those pings, also between calls.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // gRPC sets SO_REUSEPORT by default: a second ps_server started on this
  // port (a PS restarted while the old one still runs, two tests picking
  // the same port) would bind it too and the kernel would split the
  // connections between two processes holding different shards. One port,
  // one PS: the second one fails to start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr ||
      (!options.listen_address.empty() && server->port_ == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address,
                     " (port in use? another ps_server running?)"));
  }
  server->evictor_ = std::make_unique<RowEvictor>(server->store_.get(),
                                                  options.eviction_interval);
  AddProcessMetrics(&server->registry_, "ps_server");
  if (!options.metrics_address.empty()) {
    auto metrics =
        MetricsHttpServer::Start(options.metrics_address, &server->registry_,
                                 [service = server->service_.get()] {
                                   return service->StatusPageHtml();
                                 });
    if (!metrics.ok()) return metrics.status();
    server->metrics_ = std::move(*metrics);
  }
  WarnIfExposed(options);
  LOG(INFO) << "ps_server task " << options.ps_task << " of "
            << options.cluster.num_ps() << " serving on port " << server->port_
            << (server->metrics_ ? absl::StrCat(", metrics on port ",
                                                server->metrics_->port())
                                 : std::string(", metrics disabled"));
  return server;
}

Server::~Server() {
  Shutdown(absl::Now());
  Wait();
  // Threads that call into the service (failovers, leases, a rejoin) stop
  // before it goes; a rejoin started late by the replicator does nothing.
  failover_.reset();
  lease_.reset();
  evictor_.reset();
  if (rejoiner_) rejoiner_->Stop();
  // A restore still running in the background uses the restorer, which is
  // destroyed before the store.
  if (store_) store_->CancelFill();
}

void Server::SetNotServing() {
  if (grpc_server_ == nullptr) return;
  if (auto* health = grpc_server_->GetHealthCheckService()) {
    health->SetServingStatus(false);
  }
}

void Server::Shutdown(absl::Time deadline) {
  if (grpc_server_) {
    if (auto* health = grpc_server_->GetHealthCheckService()) {
      health->Shutdown();
    }
    // gRPC's shutdown waits for every call in flight, and a push waits for
    // its backups: one that cannot be reached (and is not voted out) would
    // hold it for ever. At the deadline such pushes are answered
    // UNAVAILABLE (the replicator stops).
    // (No backups: nothing to stop, no thread.)
    absl::Notification shut_down;
    std::thread stop_replicator;
    if (replicator_ != nullptr && replicator_->active()) {
      stop_replicator = std::thread([this, deadline, &shut_down] {
        if (!shut_down.WaitForNotificationWithDeadline(deadline)) {
          if (!drop_wait_cancel_->HasBeenNotified()) {
            drop_wait_cancel_->Notify();
          }
          replicator_->Stop();
        }
      });
    }
    grpc_server_->Shutdown(absl::ToChronoTime(deadline));
    shut_down.Notify();
    if (stop_replicator.joinable()) stop_replicator.join();
  }
  metrics_.reset();
}

void Server::Wait() {
  if (grpc_server_) grpc_server_->Wait();
}

}  // namespace psrt
