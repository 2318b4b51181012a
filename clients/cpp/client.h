// psrt::Client: the C++ client of a psrt cluster, used by ps_worker and by
// users' own training code. Thread-safe.
//
//   psrt::ClientOptions options;
//   options.ps_addresses = {"host1:2223", "host2:2223"};
//   auto client = psrt::Client::Connect(options);
//   (*client)->CreateVariables({embedding_spec, dense_spec});
//
//   // One training step: one Pull and one Push call per PS.
//   std::vector<float> rows(ids.size() * 16), weights(64 * 32);
//   (*client)->Pull({psrt::PullOp::Rows("emb", ids, rows.data()),
//                    psrt::PullOp::Dense("w", weights.data())});
//   ... compute gradients ...
//   (*client)->Push({psrt::PushOp::Rows("emb", ids, row_grads.data()),
//                    psrt::PushOp::Dense("w", weight_grads.data())});
//
// Embedding ids are de-duplicated, routed to their shards, and rows are put
// back in request order; pushed rows of a repeated id are summed. Dense
// variables are split into and joined from their shards. Every call has a
// deadline; calls that fail with UNAVAILABLE are retried with exponential
// backoff (pushes carry an id so a retried push is never applied twice).
#ifndef PSRT_CLIENTS_CPP_CLIENT_H_
#define PSRT_CLIENTS_CPP_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "clients/cpp/client_options.h"
#include "clients/cpp/cluster_routing.h"
#include "clients/cpp/ops.h"
#include "partitioner/shard_map.h"
#include "proto/ps.pb.h"
#include "ps_server/replication/worker_witness.h"

namespace psrt {

class PsConnection;
struct StepPlan;
class BatchedCall;

// A pull or push in flight (from Client::StartPull / StartPush).
class PendingCall {
 public:
  ~PendingCall();  // waits
  PendingCall(const PendingCall&) = delete;
  PendingCall& operator=(const PendingCall&) = delete;
  // Blocks until every PS has answered (retrying as needed).
  absl::Status Wait();
  // After a SYNC pull: the lowest step not yet applied on the shards read.
  int64_t sync_step() const;

 private:
  friend class Client;
  explicit PendingCall(std::unique_ptr<BatchedCall> request);
  std::unique_ptr<BatchedCall> request_;
  bool waited_ = false;
  absl::Status status_;
};

class Client {
 public:
  // Connects lazily: the first call (or WaitForServers) opens connections.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Waits until every PS answers its health check.
  absl::Status WaitForServers(absl::Duration timeout);

  // Creates variables (idempotent: specs that already exist identically are
  // accepted), appending new ones to the cluster's catalog, on every PS or
  // on none: each PS prepares them (PS 0 first, which orders concurrent
  // creators), and only if all succeed does each
  // commit; otherwise the prepared ones are aborted and the error says
  // nothing was created. Servers started with --restore fill the new
  // shards from the checkpoint in the background after preparing, all PS
  // at once, and the client waits for each before committing (logging
  // every 10 s while it waits). Every PS is sent the whole catalog, so one
  // that restarted empty learns it again. The client's catalog is
  // refreshed first, so processes creating the same model agree. While
  // another process's creation is in progress (perhaps a long restore) it
  // waits for up to kCreationWaitLimit.
  static constexpr absl::Duration kCreationWaitLimit = absl::Minutes(30);
  absl::Status CreateVariables(std::vector<VariableSpec> specs);

  // Reloads the catalog (specs and their order) from PS 0, for processes that
  // use variables someone else created.
  absl::Status RefreshCatalog();

  // The layout of a variable in the client's catalog; nullptr if unknown.
  const VariableLayout* Find(absl::string_view name) const;

  // Batched pull and push: one call per PS, all PS in parallel.
  absl::Status Pull(absl::Span<const PullOp> ops,
                    const StepOptions& step = StepOptions());
  absl::Status Push(absl::Span<const PushOp> ops,
                    const StepOptions& step = StepOptions());
  // The same, returning immediately (e.g. to prefetch the next step's rows
  // while this one computes). The ops' buffers must stay valid until Wait.
  absl::StatusOr<std::unique_ptr<PendingCall>> StartPull(
      absl::Span<const PullOp> ops, const StepOptions& step = StepOptions());
  absl::StatusOr<std::unique_ptr<PendingCall>> StartPush(
      absl::Span<const PushOp> ops, const StepOptions& step = StepOptions());

  // Single-variable conveniences.
  absl::Status PullDense(const std::string& variable, float* out);
  absl::Status PushDense(const std::string& variable, const float* grad);
  absl::Status PullRows(const std::string& variable,
                        absl::Span<const int64_t> ids, float* out);
  absl::Status PushRows(const std::string& variable,
                        absl::Span<const int64_t> ids, const float* grads);

  // Per-PS views (index = PS task).
  absl::StatusOr<std::vector<ListVariablesResponse>> ListVariables(
      const ListVariablesRequest& request = ListVariablesRequest());
  absl::StatusOr<std::vector<StatsResponse>> Stats();

  // Asks PS 0 for a checkpoint of every PS under the servers'
  // --checkpoint_uri and waits up to `timeout` for it. A non-empty `uri`
  // must name that same root (PERMISSION_DENIED otherwise).
  absl::StatusOr<CheckpointResponse> Checkpoint(
      const std::string& uri = "", absl::Duration timeout = absl::Hours(1));

  // The all-reduce ring's meeting point on PS 0 (ps_worker
  // --dense_sync=allreduce; ps_server/rpc/rendezvous_store.h): stores
  // `request.set`, answers the keys of `request.get` present.
  absl::StatusOr<RendezvousResponse> Rendezvous(
      const RendezvousRequest& request);

  int num_ps() const { return static_cast<int>(connections_.size()); }
  // The PS task serving PS `ps`'s shards now: `ps` itself, or after a
  // failover (--replicas) the backup that took them over.
  int ServingPs(int ps) const { return routing_.Serving(ps); }
  const ClientOptions& options() const { return options_; }

 private:
  explicit Client(ClientOptions options);
  absl::StatusOr<std::unique_ptr<PendingCall>> Start(
      absl::StatusOr<StepPlan> plan, bool push, const StepOptions& step);
  absl::Status RefreshCatalogLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);

  const ClientOptions options_;
  const uint64_t client_id_;
  std::atomic<uint64_t> next_request_id_{1};
  std::vector<std::unique_ptr<PsConnection>> connections_;

  absl::Mutex create_mu_;  // serializes CreateVariables/RefreshCatalog
  // Grows only (variables are appended), so layouts found stay valid.
  mutable absl::Mutex catalog_mu_;
  ShardMap catalog_ ABSL_GUARDED_BY(catalog_mu_);
  // Where each PS's shards are served after failovers (--replicas).
  ClusterRouting routing_;
  // This worker's votes with 2 PS (options_.witness_index); null: none.
  std::unique_ptr<WorkerWitness> witness_;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_CLIENT_H_
