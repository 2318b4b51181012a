// A Push call: streams a push's messages and reads the PushResponse.
#ifndef PSRT_CLIENTS_CPP_PUSH_CALL_H_
#define PSRT_CLIENTS_CPP_PUSH_CALL_H_

#include <vector>

#include "absl/time/time.h"
#include "clients/cpp/ps_connection.h"
#include "clients/cpp/rpc_call.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"
#include "proto/ps.pb.h"

namespace psrt {

class PushCall final : public RpcCall,
                       public grpc::ClientWriteReactor<grpc::ByteBuffer> {
 public:
  // `connection` and `messages` must outlive the call.
  PushCall(PsConnection* connection,
           const std::vector<grpc::ByteBuffer>* messages,
           absl::Duration timeout);

  void Start(std::function<void()> on_done) override;
  const grpc::Status& status() const override { return status_; }
  const PushResponse& response() const { return parsed_; }

  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void WriteNext();

  PsConnection* const connection_;
  const std::vector<grpc::ByteBuffer>* const messages_;
  const absl::Duration timeout_;
  size_t next_ = 0;
  grpc::ClientContext context_;
  grpc::ByteBuffer response_;
  PushResponse parsed_;
  grpc::Status status_;
  std::function<void()> on_done_;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_PUSH_CALL_H_
