// A running ps_server: the gRPC service, the health service and the metrics
// endpoint around one ShardStore.
//
// Lifecycle:  Create() --> serving --Shutdown()--> stopped
// Create starts serving (or fails with the reason); Shutdown stops accepting
// calls, lets calls in flight finish until the deadline, then cancels them.
#ifndef PSRT_PS_SERVER_RPC_SERVER_H_
#define PSRT_PS_SERVER_RPC_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "partitioner/cluster_spec.h"
#include "ps_server/checkpoint/checkpoint_coordinator.h"
#include "ps_server/checkpoint/checkpoint_restorer.h"
#include "ps_server/metrics/metrics.h"
#include "ps_server/metrics/metrics_http_server.h"
#include "ps_server/peers/peer_transport.h"
#include "ps_server/peers/ps_peers.h"
#include "ps_server/replication/replication.h"
#include "ps_server/rpc/data_planes.h"
#include "ps_server/rpc/ps_service.h"
#include "ps_server/shards/row_evictor.h"
#include "ps_server/shards/shard_store.h"
#include "security/cluster_members.h"
#include "security/peer_identity.h"
#include "security/security.h"
#include "util/clock.h"

namespace psrt {

struct ServerOptions {
  ClusterSpec cluster;
  int ps_task = 0;
  // Address to listen on; port 0 picks a free one (see Server::port()).
  // Empty: no port at all (a test's in-process PS, reached through
  // in-process channels only: Server::grpc_server()).
  std::string listen_address = "0.0.0.0:2223";
  // "" disables the metrics endpoint; "host:0" picks a free port.
  std::string metrics_address;
  ServiceLimits limits;
  int64_t memory_limit_bytes = 0;
  // At memory_limit_bytes, hash embeddings evict their least recently
  // updated rows instead of refusing (--memory_budget_mb).
  bool evict_at_memory_limit = false;
  // Where SSD-tier hash embeddings spill rows (--ssd_tier_dir).
  std::string ssd_tier_dir;
  CheckpointOptions checkpoint;
  // TLS for the listening port, the token every call must carry, and the
  // credentials this PS uses to call the other PS.
  SecurityOptions security;
  // One checkpoint's URI to restore from ("" = start empty); see
  // ResolveRestore for --restore=latest|auto.
  std::string restore_uri;
  // gRPC server reflection (grpcurl lists and calls the methods without
  // ps.proto). It answers without the auth token, like the health service,
  // and tells only the schema.
  bool reflection = true;
  // Copies of each shard (--replicas): 1 = none; R keeps R-1 backups on
  // the next PS of other hosts (partitioner/replica_placement.h), which
  // every push reaches before it is acknowledged.
  int replicas = 1;
  // How often hash embeddings with eviction (VariableSpec.eviction) are
  // swept for idle rows.
  absl::Duration eviction_interval = absl::Seconds(1);
  // Where leases, votes and failover probes read time (util/clock.h);
  // null: the real clock. Tests pass a SimulatedClock; it must outlive
  // the server.
  Clock* clock = nullptr;
  // How this PS reaches the other PS (given its own task); unset: gRPC
  // channels to cluster.ps with `security`. Tests connect PS of one
  // process with InProcessLinks (ps_server/peers/in_process_links.h).
  std::function<std::unique_ptr<PeerTransport>(int self)> peer_transport;
  // How pushes and pulls travel (data_planes.h): "grpc", or "fabric"
  // (libfabric beside gRPC, where a provider opens; not with TLS).
  std::string data_plane = "fabric";
  // The data plane's providers: one for clients on any host ("tcp"), and
  // "shm" for those on this host in other processes (opt-in:
  // docs/architecture.md).
  std::vector<std::string> data_plane_providers = {"tcp"};
  // The port the tcp provider listens on, on this PS's cluster-spec
  // host; 0: one the kernel picks.
  int data_plane_port = 0;
  // Lease and failover timing (--replicas, 3 PS or more).
  LeaseHolder::Options lease;
  FailoverMonitor::Options failover;
};

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Create(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  ShardStore* store() { return store_.get(); }
  CheckpointCoordinator* checkpoints() { return checkpoints_.get(); }
  ParameterServerService* service() { return service_.get(); }
  Replicator* replicator() { return replication_->replicator(); }
  Membership* membership() { return replication_->membership(); }
  // Null without --replicas > 1 and a majority to fail over with (3 PS,
  // or 2 PS and workers voting).
  const LeaseHolder* lease() const { return replication_->lease(); }
  // The gRPC server (its InProcessChannel reaches this PS without a port).
  grpc::Server* grpc_server() { return grpc_server_.get(); }
  const SecurityOptions& security() const { return options_.security; }

  // Draining (SIGTERM): the health service answers NOT_SERVING from now
  // on, so load balancers and Kubernetes' readiness probe stop sending
  // work here, while the PS still serves (a final checkpoint).
  void SetNotServing();
  // Stops serving; calls in flight get until `deadline` to finish.
  void Shutdown(absl::Time deadline);
  // Blocks until Shutdown has completed.
  void Wait();

 private:
  Server() = default;
  // --data_plane=fabric: the data plane's servers (data_planes.h), unless
  // TLS is configured or no provider opens (logged either way).
  absl::Status StartDataPlanes(const ServerOptions& options);

  ServerOptions options_;
  MetricsRegistry registry_;
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<CheckpointRestorer> restorer_;
  std::unique_ptr<PsPeers> peers_;
  // Outlives service_; its threads are stopped before service_ goes.
  std::unique_ptr<Replication> replication_;
  std::unique_ptr<CheckpointCoordinator> checkpoints_;
  std::unique_ptr<ClusterMembers> checkpoint_callers_;
  std::unique_ptr<PeerIdentity> peer_identity_;  // outlives service_
  std::unique_ptr<ParameterServerService> service_;
  // Stopped at Shutdown, before service_ goes.
  std::unique_ptr<DataPlanes> data_planes_;
  std::unique_ptr<RowEvictor> evictor_;  // stopped before store_
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<MetricsHttpServer> metrics_;
  int port_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_SERVER_H_
