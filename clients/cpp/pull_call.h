// A Pull call: sends one request message and scatters the streamed response
// pieces into the callers' output buffers as they arrive.
#ifndef PSRT_CLIENTS_CPP_PULL_CALL_H_
#define PSRT_CLIENTS_CPP_PULL_CALL_H_

#include <vector>

#include "absl/time/time.h"
#include "clients/cpp/ps_connection.h"
#include "clients/cpp/pull_scatter.h"
#include "clients/cpp/rpc_call.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"

namespace psrt {

class PullCall final : public PullRpcCall,
                       public grpc::ClientReadReactor<grpc::ByteBuffer> {
 public:
  // `connection` and `targets` must outlive the call.
  PullCall(PsConnection* connection, grpc::ByteBuffer request,
           const std::vector<PullTarget>* targets, absl::Duration timeout);

  void Start(std::function<void()> on_done) override;
  const grpc::Status& status() const override { return status_; }
  int64_t sync_step() const override { return scatter_.sync_step(); }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  PsConnection* const connection_;
  const grpc::ByteBuffer request_;
  const absl::Duration timeout_;
  PullScatter scatter_;
  grpc::ClientContext context_;
  grpc::ByteBuffer message_;
  grpc::Status status_;
  grpc::Status error_;  // a malformed response, reported instead of status
  std::function<void()> on_done_;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_PULL_CALL_H_
