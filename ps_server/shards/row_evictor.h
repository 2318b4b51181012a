// The background sweep of eviction (VariableSpec.eviction): every
// `interval`, each hash shard of a variable with eviction drops the rows
// idle for more than its ttl_steps global steps, and the least recently
// updated rows above 90% of its max_rows share (HashEmbeddingShard::
// EvictIdleRows: a bounded number of rows per hold of the shard's lock, so
// pushes and pulls wait at most that long).
#ifndef PSRT_PS_SERVER_SHARDS_ROW_EVICTOR_H_
#define PSRT_PS_SERVER_SHARDS_ROW_EVICTOR_H_

#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "ps_server/shards/shard_store.h"

namespace psrt {

class RowEvictor {
 public:
  // `store` must outlive the evictor.
  RowEvictor(ShardStore* store, absl::Duration interval);
  ~RowEvictor();  // stops the sweeps
  RowEvictor(const RowEvictor&) = delete;
  RowEvictor& operator=(const RowEvictor&) = delete;

  // One sweep of every shard with eviction, now; returns the rows evicted.
  int64_t SweepOnce();

 private:
  void Run();

  ShardStore* const store_;
  const absl::Duration interval_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_ROW_EVICTOR_H_
