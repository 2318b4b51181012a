// What request handling needs of replication (--replicas > 1): a log that
// takes each applied update, in the order it was applied, and says when
// the backups have it. Replicator (replicator.h) is the implementation,
// sending over gRPC to the backups; this header keeps ps_server/rpc's
// handlers free of the PS-to-PS stubs.
#ifndef PSRT_PS_SERVER_REPLICATION_REPLICATION_LOG_H_
#define PSRT_PS_SERVER_REPLICATION_REPLICATION_LOG_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ps.pb.h"

namespace psrt {

// In the FAILED_PRECONDITION a backup answers a primary it has replaced
// (failover): the primary then acknowledges nothing more.
inline constexpr char kReplacedMarker[] = "has taken over the shards of";
// In the UNAVAILABLE a backup answers while it installs a snapshot of a
// primary's shards (rejoin). A primary that did not add it by that rejoin
// (its stream is not catching up) drops it: the rejoin will add it again.
inline constexpr char kRejoiningMarker[] = "is rejoining from";

class ReplicationLog {
 public:
  // What a backup re-applies: the frames as received from the worker(s)
  // and how they were applied.
  struct Update {
    std::vector<grpc::ByteBuffer> frames;
    float scale = 1.0f;
    int64_t step = 0;
    uint64_t client_id = 0;
    uint64_t request_id = 0;
    int64_t bytes = 0;  // of the frames
    // SYNC (ReplicatedUpdate): a push held for the barrier of the shards
    // placed on `for_ps`, or that barrier's combined update.
    bool held = false;
    int worker_index = 0;
    int for_ps = 0;
    bool sync_step = false;
    // Frames of each push of a combined update (empty: one push).
    std::vector<int> push_frames;
    // SSP: `worker_index`'s clock on `for_ps`'s barrier passes `step`.
    bool ssp = false;
    // The ids the primary gave no row (ReplicatedUpdate.dropped).
    std::vector<ShardIds> dropped;
    // The ids the primary evicted before it (ReplicatedUpdate.evicted):
    // an update of evictions alone has no frames.
    std::vector<ShardIds> evicted;
  };

  virtual ~ReplicationLog() = default;
  // False when this PS has no backups (nothing to log).
  virtual bool active() const = 0;
  // Called under the locks of every shard `update` touched, so two updates
  // of one shard are logged in the order they were applied. Returns the
  // update's sequence (0: not logged). Never blocks on the network.
  virtual uint64_t Append(Update update) = 0;
  // Runs `done` once every backup has `sequence` or was given up on (OK),
  // or once this PS learned it was replaced by a backup (UNAVAILABLE: the
  // update must not be acknowledged): at once on this thread if settled
  // already, else on another thread.
  virtual void WhenReplicated(uint64_t sequence,
                              std::function<void(absl::Status)> done) = 0;
  // This PS learned that a backup took over its shards (failover): it
  // must serve them no more.
  virtual bool replaced() const = 0;
  // Every backup has accepted this PS's stream or was given up on.
  virtual bool ready() const = 0;
  // Rejoin (ps_server/replication/rejoin_source.h): this process's stream id;
  // the sequence the next update gets; `task` added as a backup from there on
  // (returns that sequence).
  virtual uint64_t incarnation() const = 0;
  virtual uint64_t next_sequence() const = 0;
  virtual uint64_t AddBackup(int task) = 0;
  // A rejoin that failed: `task` is no longer replicated to.
  virtual void DropBackup(int task, const std::string& why) = 0;
  // Handback (this PS takes its shards back from `task`, which held them
  // since a failover): this PS serves again and acknowledges what its
  // backups have; `task`, whose copy holds every update this PS's shards
  // had, follows this PS's stream from the next update on, held to from
  // the first (no catching up). Returns the sequence its stream starts at.
  virtual uint64_t Reinstate(int task) = 0;
  // The highest sequence `task` applied, if it is a backup in sync that
  // has caught up (pushes wait for it); nullopt otherwise.
  virtual std::optional<uint64_t> AcknowledgedBy(int task) const = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_REPLICATION_LOG_H_
