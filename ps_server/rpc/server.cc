#include "ps_server/rpc/server.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/server_builder.h"
#include "ps_server/metrics/grpc_server_metrics.h"
#include "ps_server/rpc/data_plane_metrics.h"

namespace psrt {

namespace {

// The request bodies a PS's data plane takes: a whole push, or a pull's
// request, with room for their framing.
uint64_t DataPlaneMaxBodyBytes(const ServiceLimits& limits) {
  return std::max<uint64_t>(limits.max_push_bytes + (16 << 20),
                            limits.max_message_bytes + (16 << 20));
}

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

// Holds the TCP port of `listen_address` ("host:port") bound, on every
// address, until destroyed: the data planes, which start before gRPC
// listens, bind ports the kernel picks, and without this one could pick
// the port this PS is configured to serve gRPC on (seen in a test:
// "cannot listen on 0.0.0.0:45565", the data plane at 127.0.0.1:45565).
// No-op for an address SplitHostPort refuses (port 0 among them); gRPC's
// own bind reports those.
class PortReservation {
 public:
  explicit PortReservation(const std::string& listen_address) {
    std::string host;
    int port = 0;
    if (!SplitHostPort(listen_address, &host, &port).ok()) return;
    // Every address: IPv6's wildcard with IPv4 too, else (no IPv6 on this
    // host) IPv4's.
    sockaddr_in6 v6{};
    v6.sin6_family = AF_INET6;
    v6.sin6_addr = in6addr_any;
    v6.sin6_port = htons(static_cast<uint16_t>(port));
    sockaddr_in v4{};
    v4.sin_family = AF_INET;
    v4.sin_addr.s_addr = htonl(INADDR_ANY);
    v4.sin_port = htons(static_cast<uint16_t>(port));
    if (!Bind(AF_INET6, reinterpret_cast<sockaddr*>(&v6), sizeof(v6))) {
      Bind(AF_INET, reinterpret_cast<sockaddr*>(&v4), sizeof(v4));
    }
  }
  ~PortReservation() {
    if (fd_ >= 0) close(fd_);
  }
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;

 private:
  bool Bind(int family, const sockaddr* address, socklen_t size) {
    fd_ = socket(family, SOCK_STREAM, 0);
    if (fd_ < 0) return false;
    const int v6only = 0;  // IPv4 too
    if (family == AF_INET6) {
      setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
    }
    if (bind(fd_, address, size) == 0) return true;
    close(fd_);
    fd_ = -1;
    return false;
  }

  int fd_ = -1;
};

// Whether StartDataPlanes starts any (a provider may still not open).
bool ServesDataPlane(const ServerOptions& options) {
  return options.data_plane == "fabric" && !options.listen_address.empty() &&
         !options.security.tls();
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
  // The R=2 forward over the data plane where this PS serves one (the
  // same conditions as StartDataPlanes'; a peer without one gets gRPC).
  // Not over a test's links (peer_transport): their faults must reach
  // every PS-to-PS call.
  if (ServesDataPlane(options) && !options.peer_transport) {
    // A peer's data plane takes the bodies this PS's would (every PS of
    // a cluster has the same limits); a larger forward goes over gRPC.
    server->peers_->UseDataPlane(PeerDataPlane::Options{
        options.data_plane_providers, options.security.auth_token,
        DataPlaneMaxBodyBytes(options.limits)});
  }
  server->replication_ = Replication::Create(
      Replication::Options{options.replicas,
                           static_cast<int>(options.cluster.workers.size()),
                           !options.security.peer_secret.empty(), options.lease,
                           options.failover, clock},
      server->store_.get(), server->peers_.get());
  // A forward waiting on a backup the cluster declares failed over (a
  // process paused or hung) ends when this PS learns it (ps_peers.h).
  {
    Membership* membership = server->replication_->membership();
    server->peers_->set_failover_terms(
        [membership](int task) { return membership->term(task); });
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
      server->replication_->replicator(), clock);
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
    ParameterServerService* service = server->service_.get();
    Replication* replication = server->replication_.get();
    replication->Start(Replication::Service{
                           service->replica_applier(), service->step_barriers(),
                           [service] { return service->CheckNotReplaced(); },
                           [service] { service->ServesLiveCopy(); }},
                       &server->registry_);
    service->EnableReplication(replication->membership(), server->peers_.get(),
                               replication->lease(), replication->transfer());
    Membership* membership = replication->membership();
    server->checkpoints_->set_failover_view(
        [membership](int task) { return membership->IsFailed(task); });
  }

  {
    const PortReservation grpc_port(options.listen_address);
    if (absl::Status s = server->StartDataPlanes(options); !s.ok()) return s;
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

absl::Status Server::StartDataPlanes(const ServerOptions& options) {
  if (options.data_plane == "grpc" || options.listen_address.empty()) {
    return absl::OkStatus();
  }
  if (options.data_plane != "fabric") {
    return absl::InvalidArgumentError(
        absl::StrCat("--data_plane=", options.data_plane,
                     ": expected fabric (libfabric beside gRPC) or grpc"));
  }
  if (options.security.tls()) {
    LOG(WARNING) << "data plane off: TLS is configured and the data plane "
                    "carries no encryption, so pushes and pulls stay on "
                    "gRPC (over TLS)";
    return absl::OkStatus();
  }
  DataPlanesOptions planes;
  planes.providers = options.data_plane_providers;
  // Clients on other hosts reach this PS where the cluster spec says.
  int port;
  if (absl::Status s = SplitHostPort(options.cluster.ps[options.ps_task],
                                     &planes.tcp_node, &port);
      !s.ok()) {
    return s;
  }
  planes.tcp_port = options.data_plane_port;
  planes.token = options.security.auth_token;
  planes.max_body_bytes = DataPlaneMaxBodyBytes(options.limits);
  ParameterServerService* service = service_.get();
  data_planes_ = DataPlanes::Start(
      planes, [service](dataplane::Request request, DataPlaneCaller caller,
                        dataplane::Respond respond) {
        service->ServeDataPlane(std::move(request), caller, std::move(respond));
      });
  service->set_data_planes(data_planes_.get());
  if (data_planes_ != nullptr) {
    ExportDataPlaneMetrics(data_planes_.get(), &registry_);
  }
  return absl::OkStatus();
}

Server::~Server() {
  Shutdown(absl::Now());
  Wait();
  // Threads that call into the service (failovers, leases, a rejoin, held
  // refusals) stop before it goes; a rejoin started late by the replicator
  // does nothing. Pushes still waiting for a backup (a data-plane push is
  // no gRPC call, so gRPC's shutdown did not wait for it) are answered
  // now, while the service whose dedup table they finish in exists: the
  // replicator's destructor settled them after it (a heap-use-after-free
  // under ASan at exit, PS 0 of data_plane_cluster_test with its backup
  // killed and no majority left).
  if (replication_) {
    replication_->StopReplicator();
    replication_->Stop();
    peers_->set_failover_terms(nullptr);  // the membership goes first
  }
  evictor_.reset();
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
    if (replication_ != nullptr && replication_->replicator()->active()) {
      stop_replicator = std::thread([this, deadline, &shut_down] {
        if (!shut_down.WaitForNotificationWithDeadline(deadline)) {
          replication_->StopReplicator();
        }
      });
    }
    grpc_server_->Shutdown(absl::ToChronoTime(deadline));
    shut_down.Notify();
    // No new data-plane connections (gRPC stopped), and none served now.
    // This PS's own connections to its peers close first (a forward still
    // to go takes gRPC): no endpoint of this process is in use while the
    // servers' close.
    peers_->StopDataPlane();
    service_->set_data_planes(nullptr);
    data_planes_.reset();
    if (stop_replicator.joinable()) stop_replicator.join();
  }
  metrics_.reset();
}

void Server::Wait() {
  if (grpc_server_) grpc_server_->Wait();
}

}  // namespace psrt
