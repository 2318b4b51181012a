// The backup's side of --replicas > 1: applies the pushes a primary
// forwards (ps_server/replication/replicator.h) to the copies of its shards
// kept here, strictly in the primary's sequence order, so that each copy
// goes through the same states as the primary's.
//
// A backup copy is in sync with a primary's stream only if both started
// from the same state: the stream's first update must be sequence 1 of
// that primary process (its incarnation), received before anything else
// from that primary. A stream that starts later (this PS restarted while
// the primary ran on), or a new incarnation of the primary (it restarted
// while this copy holds its previous run's updates), is refused with
// FAILED_PRECONDITION; the primary then drops this backup and carries on
// alone. A stream that starts later also calls the out-of-sync callback:
// this PS then rejoins (rejoiner.h) to get a copy of those shards. Updates
// already applied (a retried call) are acknowledged again and not
// re-applied.
#ifndef PSRT_PS_SERVER_REPLICATION_REPLICA_APPLIER_H_
#define PSRT_PS_SERVER_REPLICATION_REPLICA_APPLIER_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ps.pb.h"
#include "ps_server/rpc/push_dedup.h"
#include "ps_server/rpc/push_handler.h"
#include "ps_server/shards/shard_store.h"

namespace psrt {

// In the FAILED_PRECONDITION a backup answers a primary's new process
// while its copy follows the previous one.
inline constexpr char kRestartedMarker[] = "restarted (new incarnation)";

class ReplicaApplier {
 private:
  // Per (variable, shard): the first sequence of the stream the shard's
  // snapshot does not hold.
  using SnapshotSequences =
      absl::flat_hash_map<std::pair<std::string, int>, uint64_t>;
  // What a call needs of its stream once the header arrived: the
  // primaries its updates may name, the snapshot sequences (null: none),
  // or why the call is refused.
  struct CallView {
    std::vector<int> primaries;
    std::shared_ptr<const SnapshotSequences> snapshot;
  };

 public:
  // All must outlive the applier.
  ReplicaApplier(ShardStore* store, DedupScopes* dedup, size_t max_push_bytes);

  // One Replicate call: its messages in order, then Finish.
  class Call {
   public:
    // `proven_from`: the PS the call proved to come from (peer identity;
    // -1: not proven): a header naming another sender is refused.
    explicit Call(ReplicaApplier* applier, int proven_from = -1)
        : applier_(applier), proven_from_(proven_from) {}
    absl::Status AddMessage(const grpc::ByteBuffer& message);
    absl::StatusOr<ReplicateResponse> Finish();
    // The sender, once the header arrived (-1 before).
    int from() const { return have_header_ ? header_.from_task() : -1; }

   private:
    // A handler for the update of `sequence` (kReplica, the rejoin
    // snapshot's filter set).
    std::unique_ptr<PushHandler> NewHandler(uint64_t sequence) const;
    // The next update of the header begins (its handler).
    void StartUpdate();

    ReplicaApplier* const applier_;
    const int proven_from_;
    bool have_header_ = false;
    ReplicationHeader header_;
    std::vector<std::unique_ptr<PushHandler>> updates_;
    // The frames of each update that is a held SYNC push (kept, not
    // applied); empty for the others.
    std::vector<std::vector<grpc::ByteBuffer>> held_frames_;
    int frames_in_current_ = 0;
    // A combined SYNC update's pushes after its first, per update.
    std::vector<std::vector<std::unique_ptr<PushHandler>>> more_parts_;
    int part_ = 0;
    int frames_in_part_ = 0;
    CallView view_;
  };

  // Called (on a gRPC thread, without locks held) with the primary whose
  // stream this PS was sent but holds nothing of: it restarted while that
  // primary ran on. Set before the service serves.
  void set_on_out_of_sync(std::function<void(int primary)> on_out_of_sync) {
    on_out_of_sync_ = std::move(on_out_of_sync);
  }

  // SYNC (step_coordinator.h): for each PS whose step barrier `primary`'s
  // stream carried (its own shards', and those it had taken over), the
  // first step not applied and the pushes held for it, as the stream left
  // this copy. A barrier none of whose steps was seen is left out.
  struct SyncBarrier {
    int64_t next_step = 0;
    std::vector<std::vector<grpc::ByteBuffer>> held;  // each push's frames
    std::vector<int64_t> clocks;  // SSP: steps pushed per worker
  };
  absl::flat_hash_map<int, SyncBarrier> SyncBarriersOf(int primary) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Handback: `primary` served `for_ps`'s barrier, which stands at
  // `next_step` with SSP `clocks` (its answer): that barrier with the
  // pushes `primary`'s stream held for that step, taken out of this copy
  // (`for_ps` serves it from now on).
  SyncBarrier TakeBarrier(int primary, int for_ps, int64_t next_step,
                          const std::vector<int64_t>& clocks)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Failover: this PS took over `primary`'s shards; its stream is refused
  // from now on (with kReplacedMarker), so it acknowledges nothing more.
  void Fence(int primary) ABSL_LOCKS_EXCLUDED(mu_);

  // Handback: this PS gave `primary` its shards back (it had taken them
  // over); its copies of them, which hold every update they had, follow
  // `primary`'s stream `incarnation` from `stream_from` on (unfenced).
  void FollowHandedBack(int primary, uint64_t incarnation, uint64_t stream_from)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The stream of `primary` this PS follows is `incarnation` (a handback
  // answered before was for it).
  bool Follows(int primary, uint64_t incarnation) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // This PS's copy of `primary`'s shards has followed `primary`'s stream
  // from its start (so it may take them over): the stream was accepted,
  // nothing diverged, not fenced.
  bool InSyncWith(int primary) const ABSL_LOCKS_EXCLUDED(mu_);

  // Highest sequence applied from `primary`'s current stream (0: none).
  uint64_t applied_through(int primary) const ABSL_LOCKS_EXCLUDED(mu_);

  // Rejoin (this PS restarted after it failed over): copies of the shards
  // `serving` serves are installed here (InstallSnapshot) between
  // BeginRejoin and FinishRejoin; meanwhile its Replicate calls are
  // answered UNAVAILABLE (it retries). RecordSnapshot notes that a shard's
  // copy holds `serving`'s updates below `sequence`, so later ones from
  // its stream skip it. FinishRejoin makes `serving`'s stream (from
  // `answer.stream_from`) the one this PS's copies follow; its updates may
  // name the shards of `answer.serves_for`.
  void BeginRejoin(int serving) ABSL_LOCKS_EXCLUDED(mu_);
  bool Rejoining(int serving) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status RecordSnapshot(int serving, const std::string& variable,
                              int shard, uint64_t sequence)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status FinishRejoin(int serving, const RejoinResponse& answer)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr uint64_t kDiverged = ~uint64_t{0};
  // All guarded by apply_mu.
  struct Stream {
    uint64_t incarnation = 0;  // 0: nothing received yet
    uint64_t applied_through = 0;
    absl::Mutex apply_mu;  // one call of this primary applies at a time
    bool fenced = false;
    bool rejoining = false;  // a snapshot is being installed
    // Set up by a rejoin, not by the placement.
    bool adopted = false;
    // Placed primaries whose shards this stream's updates may name.
    std::vector<int> primaries;
    SnapshotSequences building;                         // while rejoining
    std::shared_ptr<const SnapshotSequences> snapshot;  // after
    // SYNC barriers the stream carried, by the PS whose shards they are
    // for: held pushes per (step, worker) of the current step.
    struct Barrier {
      int64_t next_step = 0;
      std::map<std::pair<int64_t, int>, std::vector<grpc::ByteBuffer>> held;
      std::vector<int64_t> clocks;  // SSP
      // Steps below `step` are applied: their held pushes are dropped.
      void AdvanceTo(int64_t step) {
        next_step = std::max(next_step, step);
        held.erase(held.begin(), held.lower_bound({next_step, 0}));
      }
    };
    absl::flat_hash_map<int, Barrier> barriers;
  };
  absl::StatusOr<CallView> ViewFor(const ReplicationHeader& header)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The refusal of a stream from `from` that starts at `first` > 1 while
  // this PS holds nothing of it; calls on_out_of_sync_.
  absl::Status NotFollowing(int from, uint64_t first) const;
  absl::Status CheckHeader(const ReplicationHeader& header) const;
  absl::Status FencedError(int primary) const;
  absl::StatusOr<ReplicateResponse> Apply(
      const ReplicationHeader& header,
      std::vector<std::unique_ptr<PushHandler>>& updates,
      std::vector<std::vector<grpc::ByteBuffer>>& held_frames);
  Stream* StreamOf(int primary) ABSL_LOCKS_EXCLUDED(mu_);

  ShardStore* const store_;
  DedupScopes* const dedup_;
  const size_t max_push_bytes_;
  std::function<void(int)> on_out_of_sync_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, std::unique_ptr<Stream>> streams_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_REPLICA_APPLIER_H_
