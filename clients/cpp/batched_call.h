// A batched pull or push in flight: the plan, the messages built from it
// (lending the plan's and the caller's buffers to gRPC without copying),
// one or more calls per PS, and the retry loop.
#ifndef PSRT_CLIENTS_CPP_BATCHED_CALL_H_
#define PSRT_CLIENTS_CPP_BATCHED_CALL_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "clients/cpp/client_options.h"
#include "clients/cpp/cluster_routing.h"
#include "clients/cpp/ops.h"
#include "clients/cpp/ps_connection.h"
#include "clients/cpp/pull_call.h"
#include "clients/cpp/push_call.h"
#include "clients/cpp/step_plan.h"
#include "proto/slice_lease.h"

namespace psrt {

class BatchedCall {
 public:
  struct Context {
    const std::vector<std::unique_ptr<PsConnection>>* connections;
    const ClientOptions* options;
    uint64_t client_id;
    std::atomic<uint64_t>* next_request_id;
    StepOptions step;
    // Failovers (--replicas > 1); null: every call goes to its own PS.
    ClusterRouting* routing = nullptr;
  };

  static std::unique_ptr<BatchedCall> ForPull(const Context& context,
                                              StepPlan plan);
  static std::unique_ptr<BatchedCall> ForPush(const Context& context,
                                              StepPlan plan);
  ~BatchedCall();

  void Start();
  // Waits for every call, retrying retryable failures; then finishes the
  // step (copies rows of repeated ids) and waits until gRPC has released
  // every buffer lent to it.
  absl::Status Wait();
  // SYNC pulls: the lowest sync step the servers reported (after Wait).
  int64_t sync_step() const { return sync_step_; }

 private:
  struct Call {
    int ps = 0;                     // the PS task whose shards the call carries
    PsConnection* connection;       // where it goes (another PS after failover)
    grpc::ByteBuffer pull_request;  // pull
    std::vector<PullTarget> targets;              // pull
    std::vector<grpc::ByteBuffer> push_messages;  // push
    int attempts = 0;
    std::unique_ptr<RpcCall> rpc;
  };

  BatchedCall(const Context& context, StepPlan plan, bool push);
  void BuildPullCalls();
  void BuildPushCalls();
  // `item`'s gradient in 16-bit `dtype`, in a buffer of narrowed_.
  const char* Narrow(WireDtype dtype, const PlannedItem& item);
  void Launch(Call* call);
  // Small enough for one data-plane body each way.
  bool FitsDataPlane(const Call& call) const;
  PsConnection* ConnectionFor(int ps) const;
  bool Retryable(const grpc::Status& status) const;
  // `failure` with what each PS did with this push appended ("applied on
  // PS 0 (...); not applied on PS 1 (...)"). REQUIRES: no call in flight.
  absl::Status WithPushOutcomes(const absl::Status& failure) const;

  const Context context_;
  const bool push_;
  // Destroyed last: owns the memory lent to gRPC.
  StepPlan plan_;
  // Push with a 16-bit wire dtype: each item's gradient narrowed, lent to
  // gRPC like the plan's buffers.
  std::vector<std::unique_ptr<uint16_t[]>> narrowed_;
  SliceLease lease_;
  std::vector<Call> calls_;

  absl::Mutex mu_;
  int outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sync_step_ = 0;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_BATCHED_CALL_H_
