#include "ps_server/server.h"

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<Server>> Server::Create(ServerOptions options) {
  if (options.ps_task < 0 || options.ps_task >= options.cluster.num_ps()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--task_index=", options.ps_task, " but the cluster has ",
                     options.cluster.num_ps(), " PS tasks"));
  }
  std::unique_ptr<Server> server(new Server());
  server->options_ = options;
  server->store_ = std::make_unique<ShardStore>(
      options.ps_task, options.cluster.num_ps(), options.memory_limit_bytes);
  if (!options.restore_uri.empty()) {
    auto restorer =
        CheckpointRestorer::Open(options.restore_uri, options.checkpoint.s3);
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
        [r](const LocalVariable& v) { return r->Fill(v); });
    LOG(INFO) << "restoring from " << options.restore_uri << " (step "
              << m.global_step() << ", " << m.variables_size()
              << " variables saved by " << m.num_ps()
              << " PS): each variable is filled when it is created";
  }
  if (auto c = MakeChannelCredentials(options.security); !c.ok()) {
    return c.status();
  }
  server->checkpoints_ = std::make_unique<CheckpointCoordinator>(
      server->store_.get(), options.cluster.ps, options.checkpoint,
      options.security);
  server->checkpoints_->set_last(absl::Now(), server->store_->global_step());
  server->service_ = std::make_unique<ParameterServerService>(
      server->store_.get(), &server->registry_, options.limits,
      server->checkpoints_.get(), options.restore_uri,
      options.security.auth_token);

  auto credentials = MakeServerCredentials(options.security);
  if (!credentials.ok()) return credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, *credentials,
                           &server->port_);
  builder.RegisterService(server->service_.get());
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
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address,
                     " (port in use? another ps_server running?)"));
  }
  if (!options.metrics_address.empty()) {
    auto metrics =
        MetricsHttpServer::Start(options.metrics_address, &server->registry_);
    if (!metrics.ok()) return metrics.status();
    server->metrics_ = std::move(*metrics);
  }
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
}

void Server::Shutdown(absl::Time deadline) {
  if (grpc_server_) {
    if (auto* health = grpc_server_->GetHealthCheckService()) {
      health->Shutdown();
    }
    grpc_server_->Shutdown(absl::ToChronoTime(deadline));
  }
  metrics_.reset();
}

void Server::Wait() {
  if (grpc_server_) grpc_server_->Wait();
}

}  // namespace psrt
