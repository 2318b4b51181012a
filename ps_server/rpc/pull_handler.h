// Answers one Pull. Every item is validated before anything is sent; each
// dense shard range is copied at once under the shard's lock (a dense shard
// is always read at one version); embedding rows are gathered message by
// message as the response is written, so that gathering overlaps sending.
// Each row is copied under its shard's lock, so rows are never torn; the
// rows of one large pull may come from successive versions of a shard.
#ifndef PSRT_PS_SERVER_RPC_PULL_HANDLER_H_
#define PSRT_PS_SERVER_RPC_PULL_HANDLER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/frame_reader.h"
#include "ps_server/rpc/request_item.h"
#include "ps_server/shards/shard_store.h"

namespace psrt {

class PullResponder {
 public:
  // Messages carry at most `max_message_bytes` of values (the request may
  // ask for less), one row at least.
  static absl::StatusOr<std::unique_ptr<PullResponder>> Create(
      const ShardStore& store, const FrameReader& request,
      size_t max_message_bytes);

  // Builds the next response message (the first may be empty: a pull of
  // nothing still gets one answer). An error (rows on an SSD tier that
  // could not be read) ends the pull: the call fails with it.
  absl::Status Next(grpc::ByteBuffer* message);
  bool done() const { return item_ == items_.size(); }

  // SYNC: written into every response header (PullResponseHeader.sync_step).
  void set_sync_step(int64_t step) { sync_step_ = step; }

  int64_t rows() const { return rows_; }  // embedding rows + dense items
  int64_t value_bytes() const { return value_bytes_; }

 private:
  PullResponder() = default;

  std::vector<ResolvedItem> items_;
  std::vector<grpc::Slice> range_values_;  // per item; empty for rows
  std::vector<int64_t> range_versions_;
  size_t limit_ = 0;
  size_t item_ = 0;    // next item to send
  size_t offset_ = 0;  // bytes of it already sent
  int64_t rows_ = 0;
  int64_t value_bytes_ = 0;
  int64_t sync_step_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_PULL_HANDLER_H_
