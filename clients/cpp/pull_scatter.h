// Where a pull's response values go: each response message's pieces are
// checked against what the call asked for and copied into the callers'
// buffers (a gRPC stream's messages, or a data-plane reply's).
#ifndef PSRT_CLIENTS_CPP_PULL_SCATTER_H_
#define PSRT_CLIENTS_CPP_PULL_SCATTER_H_

#include <cstdint>
#include <vector>

#include "clients/cpp/step_plan.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace psrt {

// Where one request item's values go: a planned item, or part of one.
struct PullTarget {
  const PlannedItem* item;
  // DENSE: first float of the item this request covers; embeddings: first
  // id (index into item->ids).
  int64_t first = 0;
  int64_t floats = 0;  // values expected for this request item
};

class PullScatter {
 public:
  // `targets` must outlive the scatter.
  explicit PullScatter(const std::vector<PullTarget>* targets)
      : targets_(targets), received_(targets->size(), 0) {}

  // Copies one response message's pieces into place; INTERNAL naming what
  // is wrong if the message is malformed (nothing more is copied then).
  grpc::Status Add(const grpc::ByteBuffer& message);
  // After the last message: INTERNAL naming a target that got fewer (or
  // more) values than it asked for.
  grpc::Status Finish() const;
  // The lowest sync_step of the messages (SYNC pulls).
  int64_t sync_step() const { return sync_step_; }

 private:
  const std::vector<PullTarget>* const targets_;
  std::vector<int64_t> received_;  // floats received per target
  int64_t sync_step_ = INT64_MAX;
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_PULL_SCATTER_H_
