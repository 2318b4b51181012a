// Writes this PS's shards into one checkpoint (the SaveShards RPC). Each
// shard is copied out chunk by chunk under its lock (shard_file.h) and
// written outside it, so training continues during the save; shards are
// written by `threads` threads at once, at most `max_bytes_per_sec` in all
// (0: as fast as the storage takes them), paced on `clock`.
#ifndef PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_SAVER_H_
#define PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_SAVER_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "ps_server/shards/shard_store.h"
#include "storage/storage.h"
#include "util/clock.h"

namespace psrt {

absl::StatusOr<SaveShardsResponse> SaveLocalShards(
    const ShardStore& store, const std::string& checkpoint_uri,
    const StorageOpener& open_storage, int threads,
    int64_t max_bytes_per_sec = 0, Clock* clock = Clock::Real());

}  // namespace psrt

#endif  // PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_SAVER_H_
