// The serving side of a rejoin (--replicas > 1): a PS that restarted after
// its backup took its shards over asks each PS serving shards it should
// hold (its own, now served by their backup, and those it is a placed
// backup of) for copies. This PS adds it as a backup whose stream starts
// at the next update, then sends each such shard it serves as primary,
// copied under the shard's lock together with the sequence of the first
// update the copy does not hold, while pushes go on; the rejoiner applies
// the stream's later updates to each copy from that sequence on
// (ps_server/replication/replica_applier.h).
#ifndef PSRT_PS_SERVER_REPLICATION_REJOIN_SOURCE_H_
#define PSRT_PS_SERVER_REPLICATION_REJOIN_SOURCE_H_

#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "ps_server/peers/ps_peers.h"
#include "ps_server/replication/replication_log.h"
#include "ps_server/rpc/push_dedup.h"
#include "ps_server/shards/shard_store.h"

namespace psrt {

// Serves `rejoiner`'s Rejoin; all pointers must outlive the call. Blocks
// while the shards are sent (one InstallSnapshot call per shard). The
// answer carries the newest pushes `dedup` remembers as applied under the
// scopes of the shards sent (RejoinResponse.applied_pushes).
absl::StatusOr<RejoinResponse> ServeRejoin(ShardStore* store,
                                           ReplicationLog* log,
                                           const PsPeers* peers,
                                           DedupScopes* dedup, int rejoiner);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_REJOIN_SOURCE_H_
