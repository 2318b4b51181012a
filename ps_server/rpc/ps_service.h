// The psrt.ParameterServer gRPC service (callback API). Control RPCs are
// plain protobuf; Pull and Push are registered as raw methods so their
// Frames are read and written by hand (proto/frame_*.h). Everything an RPC
// does is in the handlers; this file translates statuses and keeps metrics.
#ifndef PSRT_PS_SERVER_RPC_PS_SERVICE_H_
#define PSRT_PS_SERVER_RPC_PS_SERVICE_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/data_plane_server.h"
#include "proto/frame_reader.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/checkpoint/checkpoint_coordinator.h"
#include "ps_server/metrics/metrics.h"
#include "ps_server/metrics/recent_rates.h"
#include "ps_server/peers/ps_peers.h"
#include "ps_server/replication/lease_holder.h"
#include "ps_server/replication/membership.h"
#include "ps_server/replication/replica_applier.h"
#include "ps_server/replication/replication_log.h"
#include "ps_server/replication/shard_transfer.h"
#include "ps_server/rpc/data_planes.h"
#include "ps_server/rpc/pull_handler.h"
#include "ps_server/rpc/push_dedup.h"
#include "ps_server/rpc/push_handler.h"
#include "ps_server/rpc/rendezvous_store.h"
#include "ps_server/rpc/step_barriers.h"
#include "ps_server/rpc/step_coordinator.h"
#include "ps_server/rpc/workers_seen.h"
#include "ps_server/shards/shard_store.h"
#include "security/cluster_members.h"
#include "security/peer_identity.h"
#include "util/clock.h"

namespace psrt {

struct ServiceLimits {
  size_t max_message_bytes = 16 << 20;      // one Pull response message at most
  size_t max_push_bytes = size_t{2} << 30;  // one Push call at most
  // Workers a SYNC/SSP request may declare: the cluster spec's worker count
  // (at least 1). Server::Create sets it from the cluster.
  int max_workers = 1;
};

// Metrics of one RPC method.
struct MethodMetrics {
  prometheus::Counter* requests;
  prometheus::Counter* bytes_in;
  prometheus::Counter* bytes_out;
  prometheus::Counter* rows;
  prometheus::Histogram* latency;
};

// Every method takes raw bytes: requests are parsed here, so that one that
// does not parse is INVALID_ARGUMENT naming the method.
using ParameterServerCallbackBase = ParameterServer::WithRawCallbackMethod_CommitCheckpoint<
    ParameterServer::WithRawCallbackMethod_Checkpoint<ParameterServer::WithRawCallbackMethod_SaveShards<
        ParameterServer::WithRawCallbackMethod_CreateVariables<ParameterServer::WithRawCallbackMethod_ListVariables<
            ParameterServer::WithRawCallbackMethod_GetStats<ParameterServer::WithRawCallbackMethod_Pull<
                ParameterServer::WithRawCallbackMethod_Push<ParameterServer::WithRawCallbackMethod_Replicate<
                    ParameterServer::WithRawCallbackMethod_Suspect<
                        ParameterServer::WithRawCallbackMethod_RenewLease<
                            ParameterServer::WithRawCallbackMethod_Rejoin<
                                ParameterServer::WithRawCallbackMethod_InstallSnapshot<
                                    ParameterServer::WithRawCallbackMethod_Handback<
                                        ParameterServer::WithRawCallbackMethod_Witness<
                                            ParameterServer::WithRawCallbackMethod_Rendezvous<
                                                ParameterServer::
                                                    WithRawCallbackMethod_OpenDataPlane<
                                                        ParameterServer::
                                                            Service>>>>>>>>>>>>>>>>>;

class ParameterServerService final : public ParameterServerCallbackBase {
 public:
  // `store` and `metrics` must outlive the service.
  // `checkpoints` may be null (Checkpoint and SaveShards then fail).
  // `checkpoint_callers`: when set, the checkpoint RPCs (Checkpoint,
  // SaveShards, CommitCheckpoint) are served only to these peers; it must
  // outlive the service.
  // `clock` times the step barrier's waits and a handback's pause (null:
  // the real clock); it must outlive the service.
  ParameterServerService(ShardStore* store, MetricsRegistry* metrics,
                         ServiceLimits limits,
                         CheckpointCoordinator* checkpoints = nullptr,
                         std::string restored_from = "",
                         std::string auth_token = "",
                         ClusterMembers* checkpoint_callers = nullptr,
                         ReplicationLog* replicator = nullptr,
                         Clock* clock = nullptr);
  ~ParameterServerService() override = default;

  // Unary methods; request and response are the serialized messages of
  // proto/ps.proto (CheckpointRequest -> CheckpointResponse, ...).
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* SaveShards(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CommitCheckpoint(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CreateVariables(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListVariables(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Pull(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Push(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;
  // PS to PS (--replicas > 1): can this PS reach another?
  grpc::ServerUnaryReactor* Suspect(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  // PS to PS (--replicas > 1): grants the caller a lease.
  grpc::ServerUnaryReactor* RenewLease(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  // PS to PS (--replicas > 1): a restarted PS's rejoin (rejoin_source.h)
  // and the shard copies it is sent (snapshot_installer.h).
  grpc::ServerUnaryReactor* Rejoin(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  // PS to PS (--replicas > 1): gives the caller back the shards this PS
  // took over from it (ShardTransfer::ServeHandback).
  grpc::ServerUnaryReactor* Handback(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  // Worker to PS (--replicas > 1, 2 PS): a witness's lease grant and
  // votes (membership.h).
  grpc::ServerUnaryReactor* Witness(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  // Worker to PS 0 (ps_worker --dense_sync=allreduce): where the workers
  // form their all-reduce ring (rendezvous_store.h).
  grpc::ServerUnaryReactor* Rendezvous(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* InstallSnapshot(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;
  // Worker (or PS, from_peer) to PS: a challenge for a data-plane
  // connection (data_planes.h). from_peer is granted only to a call
  // proven to come from a PS, as Replicate over gRPC is.
  grpc::ServerUnaryReactor* OpenDataPlane(grpc::CallbackServerContext* context,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  // This PS's data-plane servers (null: none; OpenDataPlane then answers
  // FAILED_PRECONDITION). Set before serving; they must outlive the calls.
  void set_data_planes(DataPlanes* planes) { data_planes_ = planes; }
  // A push, pull or (from a PS's connection) forward that came over the
  // data plane: the same checks, waits, metrics and answers as the gRPC
  // call (data_plane_calls.cc).
  void ServeDataPlane(dataplane::Request request, DataPlaneCaller caller,
                      dataplane::Respond respond);
  ReplicaApplier* replica_applier() { return &replica_applier_; }
  // The step barriers of the shards this PS serves.
  StepBarriers* step_barriers() { return &step_barriers_; }
  // From this PS's primaries (--replicas > 1): their applied pushes.
  grpc::ServerReadReactor<grpc::ByteBuffer>* Replicate(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;

  // --replicas > 1: where GetStats reads the failovers, Suspect pings
  // from and votes, RenewLease grants; `lease` (null: none, fewer than 3
  // PS) must be held to serve pulls and pushes; `transfer` serves
  // Handback, takes over a restarted primary, and holds refusals while a
  // handback settles. All must outlive the service; call before serving.
  void EnableReplication(Membership* membership, const PsPeers* peers,
                         LeaseHolder* lease, ShardTransfer* transfer) {
    membership_ = membership;
    peers_ = peers;
    lease_ = lease;
    transfer_ = transfer;
  }
  // PS-to-PS calls (Replicate, RenewLease, Rejoin, ...) must prove which
  // PS makes them (security/peer_identity.h) when `identity` is enabled.
  // Must outlive the service; call before serving.
  void set_peer_identity(const PeerIdentity* identity) {
    peer_identity_ = identity;
  }
  // OK while this PS may acknowledge pulls and pushes; UNAVAILABLE once it
  // was replaced by a backup (failover), while it holds no lease, or while
  // its backups have not accepted its stream.
  absl::Status CheckNotReplaced() const;
  // After a handback it serves its live shards, not what it restored at
  // start: the warning that updates after the checkpoint were lost is
  // not due.
  void ServesLiveCopy() { told_serving_restored_ = true; }

  // Counts a failed RPC under psrt_errors_total{method, code} and returns it
  // as a gRPC status.
  grpc::Status Fail(const char* method, const absl::Status& status);
  // Fail, then finishes `reactor` with the failure: at once, or -- a pull
  // or push refused UNAVAILABLE while this PS hands shards back -- once the
  // handback settled (the new primary serves): the client, which learns
  // the routing when refused, then finds it changed and retries there at
  // once (ShardTransfer::HoldRefusal).
  template <typename Reactor>
  void FinishFailed(Reactor* reactor, const char* method,
                    const absl::Status& status) {
    grpc::Status answer = Fail(method, status);
    if (transfer_ == nullptr ||
        !transfer_->HoldRefusal(
            method, status, [reactor, answer] { reactor->Finish(answer); })) {
      reactor->Finish(std::move(answer));
    }
  }

  // The HTML of the status page (/statusz on the metrics port).
  std::string StatusPageHtml() const;

  // Bytes the push de-dup tables count (push_dedup.h).
  int64_t dedup_bytes() const { return dedup_scopes_.bytes(); }

  // A SaveShards marked final (PS 0's shutdown checkpoint) has completed.
  bool final_checkpoint_saved() const { return final_saved_.load(); }

  const MethodMetrics& pull_metrics() const { return pull_; }
  const MethodMetrics& push_metrics() const { return push_; }
  prometheus::Counter* rejected_nonfinite() const {
    return rejected_nonfinite_;
  }

 private:
  template <typename Request, typename Handle>
  grpc::ServerUnaryReactor* ServeUnary(grpc::CallbackServerContext* context,
                                       const char* method,
                                       const grpc::ByteBuffer* request_bytes,
                                       grpc::ByteBuffer* response_bytes,
                                       bool detached, Handle handle);
  // OK if `context`'s peer may call the checkpoint RPC `method`.
  // A PS-to-PS method's caller: the PS task it proves to be (peer
  // identity enabled), or -1 (none: a secured PS then takes the call only
  // from a cluster host, as the checkpoint RPCs). PERMISSION_DENIED
  // otherwise, logged.
  absl::StatusOr<int> CheckPeerCaller(grpc::CallbackServerContext* context,
                                      const char* method);
  absl::Status CheckCheckpointCaller(grpc::CallbackServerContext* context,
                                     const char* method);

  class PullReactor;
  class PushReactor;
  // A pull's request read and checked (counted in the pull metrics): its
  // frame, header, and the step barrier it waits on.
  absl::Status ReadPullRequest(const grpc::ByteBuffer& request,
                               FrameReader* frame, PullRequestHeader* header,
                               StepCoordinator** coordinator);
  // Once the pull may proceed: its responder (counted).
  absl::StatusOr<std::unique_ptr<PullResponder>> MakePullResponder(
      const FrameReader& frame, StepCoordinator* coordinator);
  std::unique_ptr<PushHandler> NewPushHandler();
  // A push's messages have all arrived: checks its step fields, applies it
  // (SYNC: holds it for its step's barrier, taking `*handler`), counts it,
  // then `done` on any thread. `*handler` must live until `done` ran.
  void FinishPush(std::unique_ptr<PushHandler>* handler,
                  std::function<void(absl::StatusOr<PushResponse>)> done);
  // Fail for a data-plane call, answered as FinishFailed answers.
  void FailDataPlane(const char* method, const absl::Status& status,
                     dataplane::Respond respond);
  void ServeDataPlanePull(grpc::ByteBuffer request, dataplane::Respond respond);
  void ServeDataPlanePush(std::vector<grpc::ByteBuffer> messages,
                          dataplane::Respond respond);
  void ServeDataPlaneReplicate(std::vector<grpc::ByteBuffer> messages,
                               int proven_from, dataplane::Respond respond);
  template <typename Call>
  class ReadAllReactor;
  class ReplicateCall;
  MethodMetrics MakeMethodMetrics(const char* method);
  // Checkpoint metrics (cluster ones on PS 0 only).
  // Per-variable series (rows, bytes, admission counts), computed when
  // scraped.
  void AddVariableMetrics();
  void AddCheckpointMetrics(int ps_task);

  ShardStore* const store_;
  MetricsRegistry* const metrics_;
  CheckpointCoordinator* const checkpoints_;
  const std::string restored_from_;
  // The shards served are the checkpoint's: said once in the log.
  mutable std::atomic<bool> told_serving_restored_{false};
  const std::string auth_token_;                 // empty: no check
  ClusterMembers* const checkpoint_callers_;     // null: anyone with the token
  const PeerIdentity* peer_identity_ = nullptr;  // null: PS not proven
  std::atomic<bool> final_saved_{false};
  const ServiceLimits limits_;
  DedupScopes dedup_scopes_;
  ReplicationLog* const replicator_;  // null: no replicas
  ReplicaApplier replica_applier_;
  Membership* membership_ = nullptr;
  Clock* const clock_;
  const PsPeers* peers_ = nullptr;
  LeaseHolder* lease_ = nullptr;
  ShardTransfer* transfer_ = nullptr;
  DataPlanes* data_planes_ = nullptr;
  // This PS's own shards' step barrier (SYNC, SSP) and those it took over.
  StepBarriers step_barriers_;
  WorkersSeen workers_seen_;
  RendezvousStore rendezvous_;
  MethodMetrics pull_, push_, create_;
  prometheus::Counter* rejected_nonfinite_;
  prometheus::Histogram* push_apply_seconds_;
  const absl::Time started_ = absl::Now();
  // The status page's last-minute rates of the six request counters
  // (RequestCounters); sampled every 5 s.
  std::vector<int64_t> RequestCounters() const;
  RecentRates recent_rates_{[this] { return RequestCounters(); }};
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_PS_SERVICE_H_
