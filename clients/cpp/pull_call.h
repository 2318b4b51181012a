// A Pull call: sends one request message and scatters the streamed response
// pieces into the callers' output buffers as they arrive.
#ifndef PSRT_CLIENTS_CPP_PULL_CALL_H_
#define PSRT_CLIENTS_CPP_PULL_CALL_H_

#include <vector>

#include "absl/time/time.h"
#include "clients/cpp/ps_connection.h"
#include "clients/cpp/rpc_call.h"
#include "clients/cpp/step_plan.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"

namespace psrt {

// Where one request item's values go: a planned item, or part of one.
struct PullTarget {
  const PlannedItem* item;
  // DENSE: first float of the item this request covers; embeddings: first
  // id (index into item->ids).
  int64_t first = 0;
  int64_t floats = 0;  // values expected for this request item
};

class PullCall final : public RpcCall,
                       public grpc::ClientReadReactor<grpc::ByteBuffer> {
 public:
  // `connection` and `targets` must outlive the call.
  PullCall(PsConnection* connection, grpc::ByteBuffer request,
           const std::vector<PullTarget>* targets, absl::Duration timeout);

  void Start(std::function<void()> on_done) override;
  const grpc::Status& status() const override { return status_; }
  // The lowest sync_step of the response messages (SYNC pulls).
  int64_t sync_step() const { return sync_step_; }

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  // Copies one response message's pieces into place; false (with
  // error_ set) if the message is malformed.
  bool Scatter();

  PsConnection* const connection_;
  const grpc::ByteBuffer request_;
  const std::vector<PullTarget>* const targets_;
  const absl::Duration timeout_;
  std::vector<int64_t> received_;  // floats received per target
  grpc::ClientContext context_;
  grpc::ByteBuffer message_;
  grpc::Status status_;
  grpc::Status error_;  // a malformed response, reported instead of status
  std::function<void()> on_done_;
  int64_t sync_step_ = INT64_MAX;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_PULL_CALL_H_
