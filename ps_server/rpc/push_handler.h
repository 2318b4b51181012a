// Executes one Push call: collects the stream's messages, validates every
// item as it arrives, and applies the whole update only once the stream has
// ended and everything validated. Items for the same shard are grouped: one
// lock acquisition, one version step, duplicate ids summed first.
#ifndef PSRT_PS_SERVER_RPC_PUSH_HANDLER_H_
#define PSRT_PS_SERVER_RPC_PUSH_HANDLER_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/frame_reader.h"
#include "proto/ps.pb.h"
#include "ps_server/replication/replication_log.h"
#include "ps_server/rpc/push_dedup.h"
#include "ps_server/rpc/request_item.h"
#include "ps_server/shards/shard_store.h"

namespace psrt {

class PushHandler {
 public:
  // `store` and `dedup` must outlive the handler. `kind`: kPush for a
  // worker's push, kReplica for one a primary forwards to this backup.
  // `replicator` (optional, must outlive the handler): where an applied
  // push is forwarded to this PS's backups before it is acknowledged.
  PushHandler(ShardStore* store, PushDedup* dedup, size_t max_push_bytes,
              RequestKind kind = RequestKind::kPush,
              ReplicationLog* replicator = nullptr);
  PushHandler(const PushHandler&) = delete;
  PushHandler& operator=(const PushHandler&) = delete;

  // Takes the next message of the stream; an error ends the call.
  absl::Status AddMessage(const grpc::ByteBuffer& message);

  // Applies the push (or recognizes a retried one) after the last message.
  absl::StatusOr<PushResponse> Finish();
  // The same, answering through `done` once the backups (--replicas) have
  // the update too: on this thread if nothing needs waiting for, else on a
  // replication thread. The handler must live until `done` ran.
  void FinishAsync(std::function<void(absl::StatusOr<PushResponse>)> done);
  // How long the update itself took in Finish (0 before).
  double apply_seconds() const { return apply_seconds_; }

  size_t bytes() const { return bytes_; }
  const PushRequestHeader& first_header() const { return first_header_; }
  // The stream ended with its message marked last.
  bool complete() const { return saw_last_; }
  int64_t items() const { return static_cast<int64_t>(items_.size()); }
  // The PS the first item's shard was placed on (-1: no items): the
  // de-duplication scope of the push (set_dedup_scopes).
  int placed_primary() const;

  // Takes over the items of another validated push (a synchronous step's
  // contribution of another worker), so that one ApplyCombined applies
  // them together.
  void TakeItemsOf(PushHandler* other);
  // Applies everything held as one update with gradients multiplied by
  // `scale` (1 / workers: their mean), without request de-duplication.
  absl::Status ApplyCombined(float scale);
  // The same without waiting for the backups (then AwaitReplicated, or
  // replication_log()->WhenReplicated(replicated_sequence())).
  absl::Status ApplyCombinedUnreplicated(float scale) { return Apply(scale); }

  // SYNC with --replicas: logs this validated push, held for the barrier
  // of the shards placed on `for_ps`, for the backups (not applied there),
  // so a backup that takes those shards over has it. Call under the
  // barrier's lock (it is ordered before the step's combined update), then
  // AwaitReplicated before acknowledging it.
  void ForwardHeld(int for_ps);
  // The next ApplyCombined is the barrier of `for_ps`'s shards: backups
  // learn the step applied (and drop its held pushes).
  void MarkSyncStep(int for_ps) { sync_step_for_ = for_ps; }
  // Waits until the backups have what was forwarded last (nothing to wait
  // for without replicas): OK, or UNAVAILABLE if this PS was replaced.
  absl::Status AwaitReplicated();
  // The same for `sequence` of `log` (null: nothing to wait for), for a
  // caller that may not outlive the handler while it waits.
  static absl::Status AwaitReplicated(ReplicationLog* log, uint64_t sequence);
  ReplicationLog* replication_log() const { return replicator_; }
  uint64_t replicated_sequence() const { return replicated_sequence_; }

  // INVALID_ARGUMENT unless every item's shard was placed on PS `ps` (a
  // call for one PS's step barrier names only that PS's shards).
  absl::Status CheckPlacedOn(int ps) const;

  // FAILED_PRECONDITION unless every item's shard was placed on one of
  // `primaries` (primaries[0]: the sender; a forwarded push names only
  // shards its sender serves: its own, and those it took over).
  absl::Status CheckPrimaryIs(absl::Span<const int> primaries) const;
  // kReplica: items of shards for which `apply` is false are skipped (a
  // rejoin snapshot already holds this update's effect on them). Set
  // before the first AddMessage.
  void set_replica_filter(
      std::function<bool(const LocalVariable&, int shard)> apply) {
    replica_filter_ = std::move(apply);
  }

  // kReplica: the ids the primary gave no row, per shard it updated
  // (ReplicatedUpdate.dropped); every other id of the update gets one.
  // And the ids it evicted before this update (ReplicatedUpdate.evicted,
  // checked by CheckEvictionsFrom): taken out of this PS's copies first,
  // those a rejoin snapshot holds the effect of excepted. Set before
  // ApplyCombined.
  void FollowPrimary(
      const google::protobuf::RepeatedPtrField<ShardIds>& dropped,
      const google::protobuf::RepeatedPtrField<ShardIds>& evicted);
  // A forwarded update's evictions name hash shards, and those this PS
  // holds a copy of are placed on one of `primaries` (a primary evicts
  // only the rows of shards it serves; those it took over from a failed
  // primary have no copy here and are skipped, as a push's items are).
  static absl::Status CheckEvictionsFrom(
      const ShardStore& store,
      const google::protobuf::RepeatedPtrField<ShardIds>& evicted,
      absl::Span<const int> primaries);

  // De-duplicate under the scope of the primary the push's shards were
  // placed on (its first item's), instead of `dedup` (DedupScopes).
  void set_dedup_scopes(DedupScopes* scopes) { scopes_ = scopes; }

 private:
  absl::Status Apply(float scale);

  ShardStore* const store_;
  PushDedup* const dedup_;
  const size_t max_push_bytes_;
  const RequestKind kind_;
  DedupScopes* scopes_ = nullptr;
  std::function<bool(const LocalVariable&, int shard)> replica_filter_;
  absl::flat_hash_map<std::pair<std::string, int>, absl::flat_hash_set<int64_t>>
      primary_dropped_;
  google::protobuf::RepeatedPtrField<ShardIds> primary_evicted_;
  ReplicationLog* const replicator_;  // null or inactive: no replicas
  int sync_step_for_ = -1;            // MarkSyncStep
  // The messages as received, kept (sharing their slices) to forward them.
  std::vector<grpc::ByteBuffer> received_;
  bool combined_ = false;         // holds other pushes' items (SYNC)
  std::vector<int> push_frames_;  // combined: frames of each push
  uint64_t replicated_sequence_ = 0;
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
