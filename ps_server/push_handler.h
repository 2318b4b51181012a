// Executes one Push call: collects the stream's messages, validates every
// item as it arrives, and applies the whole update only once the stream has
// ended and everything validated. Items for the same shard are grouped: one
// lock acquisition, one version step, duplicate ids summed first.
#ifndef PSRT_PS_SERVER_PUSH_HANDLER_H_
#define PSRT_PS_SERVER_PUSH_HANDLER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/frame_reader.h"
#include "proto/ps.pb.h"
#include "ps_server/push_dedup.h"
#include "ps_server/request_item.h"
#include "ps_server/shard_store.h"

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

  size_t bytes() const { return bytes_; }
  const PushRequestHeader& first_header() const { return first_header_; }

 private:
  absl::Status Apply();

  ShardStore* const store_;
  PushDedup* const dedup_;
  const size_t max_push_bytes_;
  std::vector<std::unique_ptr<FrameReader>> frames_;
  std::vector<ResolvedItem> items_;
  PushRequestHeader first_header_;
  size_t bytes_ = 0;
  int64_t rows_ = 0;
  bool saw_last_ = false;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_PUSH_HANDLER_H_
