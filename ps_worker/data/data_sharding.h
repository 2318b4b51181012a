// How a worker's share of the training data is chosen
// (ps_worker --data_sharding):
//   record: record i of each epoch to worker i % num_workers (every worker
//           reads every file and keeps its records);
//   file:   file i to worker i % num_workers (tf.data's FILE auto-shard);
//   none:   every worker trains on all it is given: its input is already
//           its own share (SageMaker's ShardedByS3Key channels, per-host
//           Pipe mode FIFOs);
//   auto:   file when the first epoch's files divide evenly over the
//           workers (each gets as many) and none is per-epoch ("{epoch}"),
//           else record (tf.data's AUTO policy, without its unequal
//           shares).
#ifndef PSRT_PS_WORKER_DATA_DATA_SHARDING_H_
#define PSRT_PS_WORKER_DATA_DATA_SHARDING_H_

#include <string>

#include "absl/status/statusor.h"
#include "ps_worker/data/dataset.h"

namespace psrt {

struct ShardedData {
  DatasetOptions options;   // num_shards, shard_index and shard_by set
  std::string description;  // for the log: the policy and why
};

// `data` sharded for worker `worker_index` of `num_workers` by `policy`.
// INVALID_ARGUMENT for an unknown policy.
absl::StatusOr<ShardedData> ShardData(DatasetOptions data,
                                      const std::string& policy,
                                      int num_workers, int worker_index);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DATA_DATA_SHARDING_H_
