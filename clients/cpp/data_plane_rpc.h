// A push's or pull's call over the data plane (data_plane_link.h): the
// messages its gRPC call (PushCall, PullCall) would stream, as one body
// (proto/data_plane_call.h), on a lane of the PS's link. Same outcome as
// the gRPC call's: the PS's answer with its code, UNAVAILABLE when the
// connection broke (retried), DEADLINE_EXCEEDED at the call timeout.
#ifndef PSRT_CLIENTS_CPP_DATA_PLANE_RPC_H_
#define PSRT_CLIENTS_CPP_DATA_PLANE_RPC_H_

#include <functional>
#include <vector>

#include "absl/time/time.h"
#include "clients/cpp/data_plane_link.h"
#include "clients/cpp/pull_scatter.h"
#include "clients/cpp/rpc_call.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ps.pb.h"

namespace psrt {

class DataPlanePushCall final : public RpcCall {
 public:
  // `link` and `messages` must outlive the call.
  DataPlanePushCall(DataPlaneLink* link,
                    const std::vector<grpc::ByteBuffer>* messages,
                    absl::Duration timeout)
      : link_(link), messages_(messages), timeout_(timeout) {}

  void Start(std::function<void()> on_done) override;
  const grpc::Status& status() const override { return status_; }
  const PushResponse& response() const { return response_; }

 private:
  DataPlaneLink* const link_;
  const std::vector<grpc::ByteBuffer>* const messages_;
  const absl::Duration timeout_;
  PushResponse response_;
  grpc::Status status_;
};

class DataPlanePullCall final : public PullRpcCall {
 public:
  // `link` and `targets` must outlive the call.
  DataPlanePullCall(DataPlaneLink* link, grpc::ByteBuffer request,
                    const std::vector<PullTarget>* targets,
                    absl::Duration timeout)
      : link_(link),
        request_(std::move(request)),
        timeout_(timeout),
        scatter_(targets) {}

  void Start(std::function<void()> on_done) override;
  const grpc::Status& status() const override { return status_; }
  int64_t sync_step() const override { return scatter_.sync_step(); }

 private:
  grpc::Status Run(const DataPlaneLink::Lane& lane);

  DataPlaneLink* const link_;
  const grpc::ByteBuffer request_;
  const absl::Duration timeout_;
  PullScatter scatter_;
  grpc::Status status_;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_DATA_PLANE_RPC_H_
