// Executes a Pull: validates every item, copies each shard's requested
// values under the shard's lock (one copy per item, into a pooled buffer),
// and packs them into response messages that reference those buffers.
#ifndef PSRT_PS_SERVER_PULL_HANDLER_H_
#define PSRT_PS_SERVER_PULL_HANDLER_H_

#include <vector>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/frame_reader.h"
#include "ps_server/shard_store.h"

namespace psrt {

struct PullResult {
  std::vector<grpc::ByteBuffer> messages;
  int64_t rows = 0;  // embedding rows, plus dense items
  int64_t value_bytes = 0;
};

// `max_message_bytes` caps the size of each response message (the client's
// request can lower it).
absl::Status HandlePull(const ShardStore& store, const FrameReader& request,
                        size_t max_message_bytes, PullResult* result);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_PULL_HANDLER_H_
