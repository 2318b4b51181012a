// One attempt of a streaming RPC to one PS, run by a gRPC callback reactor.
// BatchedCall starts calls, waits for them, and retries failed ones with a
// fresh call object.
#ifndef PSRT_CLIENTS_CPP_RPC_CALL_H_
#define PSRT_CLIENTS_CPP_RPC_CALL_H_

#include <cstdint>
#include <functional>

#include "grpcpp/support/status.h"

namespace psrt {

class RpcCall {
 public:
  virtual ~RpcCall() = default;
  // Starts the call; `on_done` runs once, on a gRPC thread, when it ends.
  virtual void Start(std::function<void()> on_done) = 0;
  // The outcome. REQUIRES: on_done has run.
  virtual const grpc::Status& status() const = 0;
};

// A pull's call, over gRPC or the data plane.
class PullRpcCall : public RpcCall {
 public:
  // The lowest sync_step of the response (SYNC pulls). REQUIRES: done.
  virtual int64_t sync_step() const = 0;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_RPC_CALL_H_
