// Executes one Push call: collects the stream's messages, validates every
// item as it arrives, and applies the whole update only once the stream has
// ended and everything validated. Items for the same shard are grouped: one
// lock acquisition, one version step, duplicate ids summed first.
#ifndef PSRT_PS_SERVER_RPC_PUSH_HANDLER_H_
#define PSRT_PS_SERVER_RPC_PUSH_HANDLER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/frame_reader.h"
#include "proto/ps.pb.h"
#include "ps_server/rpc/push_dedup.h"
#include "ps_server/rpc/request_item.h"
#include "ps_server/shards/shard_store.h"

namespace psrt {

class PushHandler {
 public:
  // `store` and `dedup` must outlive the handler.
  PushHandler(ShardStore* store, PushDedup* dedup, size_t max_push_bytes);
  PushHandler(const PushHandler&) = delete;
  PushHandler& operator=(const PushHandler&) = delete;

  // Takes the next message of the stream; an error ends the call.
  absl::Status AddMessage(const grpc::ByteBuffer& message);

  // Applies the push (or recognizes a retried one) after the last message.
  absl::StatusOr<PushResponse> Finish();
  // How long the update itself took in Finish (0 before).
  double apply_seconds() const { return apply_seconds_; }

  size_t bytes() const { return bytes_; }
  const PushRequestHeader& first_header() const { return first_header_; }
  // The stream ended with its message marked last.
  bool complete() const { return saw_last_; }
  int64_t items() const { return static_cast<int64_t>(items_.size()); }

  // Takes over the items of another validated push (a synchronous step's
  // contribution of another worker), so that one ApplyCombined applies
  // them together.
  void TakeItemsOf(PushHandler* other);
  // Applies everything held as one update with gradients multiplied by
  // `scale` (1 / workers: their mean), without request de-duplication.
  absl::Status ApplyCombined(float scale);

 private:
  absl::Status Apply(float scale);

  ShardStore* const store_;
  PushDedup* const dedup_;
  const size_t max_push_bytes_;
  std::vector<std::unique_ptr<FrameReader>> frames_;
  std::vector<ResolvedItem> items_;
  PushRequestHeader first_header_;
  size_t bytes_ = 0;
  int64_t rows_ = 0;
  bool saw_last_ = false;
  double apply_seconds_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_PUSH_HANDLER_H_
