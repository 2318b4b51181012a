// The primary's side of --replicas > 1: every push this PS applies is
// forwarded to the backups of its shards (ReplicaPlacement), in the order
// it was applied, and the push is acknowledged to its worker only after
// every backup in sync acknowledged it (synchronous replication: an
// acknowledged push is on R copies).
//
// Order: Append is called under the locks of every shard the update
// touched, so two updates of one shard get sequences in the order they were
// applied; a backup applies sequences strictly in order
// (ps_server/replication/replica_applier.h), so its copy goes through the same
// states as the primary's, bit for bit.
//
// Batching: one sender thread per backup sends everything queued as one
// Replicate call while the previous one is in flight (group commit): with
// many workers a round trip carries many pushes.
//
// A backup that cannot be reached for `give_up_after` (kHelloPatience for
// the first call, at start) -- or at once, when the cluster declares it
// failed over while a call to it waits (PsPeers::CheckServing) -- and that
// a majority of the cluster cannot reach either (MayDrop), or that refuses (its
// copy is not in sync: it restarted, or this PS did), is dropped from the
// stream: pushes are then acknowledged with fewer copies (counted in
// unreplicated_updates and logged), as a PS without replicas would be, rather
// than failing training.
#ifndef PSRT_PS_SERVER_REPLICATION_REPLICATOR_H_
#define PSRT_PS_SERVER_REPLICATION_REPLICATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"
#include "ps_server/peers/ps_peers.h"
#include "ps_server/replication/replication_log.h"
#include "util/clock.h"

namespace psrt {

class Replicator final : public ReplicationLog {
 public:
  struct BackupState {
    int task = 0;
    uint64_t acknowledged = 0;  // highest sequence the backup applied
    bool in_sync = true;
    bool established = false;  // the backup accepted this stream (hello)
    // Added by Rejoin: pushes are not held for it until it caught up, or
    // until it has been catching up for kCatchUpGrace (then they wait
    // while it is more than one call behind, so that it does catch up).
    bool catching_up = false;
    std::string error;  // why it was dropped
  };

  // Whether a backup this PS cannot reach may be dropped: a majority of
  // the cluster must find it unreachable (membership.h), or a backup that
  // is alive could take over this PS's shards while this PS goes on alone.
  // `without`: the stream view this PS will have once `task` is dropped,
  // for the voters to record (membership.h) before a push is acknowledged
  // without it.
  using MayDrop = std::function<bool(int task, const StreamView& without)>;

  // `peers` must outlive the replicator; `backups` are this PS's backup
  // tasks (none: Append and WhenReplicated do nothing). `may_drop` null:
  // any backup unreachable for `give_up_after` is dropped. `clock` times
  // the patience with an unreachable backup (it must outlive the
  // replicator); the retries within it are paced in real time.
  Replicator(const PsPeers* peers, std::vector<int> backups,
             MayDrop may_drop = nullptr, Clock* clock = Clock::Real(),
             absl::Duration call_timeout = absl::Seconds(10),
             absl::Duration give_up_after = absl::Seconds(3));
  ~Replicator();
  Replicator(const Replicator&) = delete;
  // Stops forwarding (a backup still unreachable is waited for no more)
  // and answers every push waiting for its backups, and any later one,
  // UNAVAILABLE: a PS shutting down answers its pending calls.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  Replicator& operator=(const Replicator&) = delete;

  bool active() const override {
    return has_streams_.load(std::memory_order_acquire);
  }
  // Queues `update` for every backup in sync; returns its sequence (0 when
  // there is none). Never blocks on the network.
  uint64_t Append(Update update) override ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `done` once every backup acknowledged `sequence` or was dropped:
  // at once (on this thread) if that is so already, else on a sender
  // thread. Lets a push's gRPC thread go back to serving while the backups
  // apply (a blocked thread per push would starve gRPC's callback threads,
  // which the backups' Replicate calls need too).
  void WhenReplicated(uint64_t sequence,
                      std::function<void(absl::Status)> done) override
      ABSL_LOCKS_EXCLUDED(mu_);
  // Set once a backup refused this PS's stream because it took over this
  // PS's shards: from then on nothing is acknowledged.
  bool replaced() const override ABSL_LOCKS_EXCLUDED(mu_);
  // This PS learned otherwise (a lease refused, lease_holder.h) that a
  // backup took over its shards: as if a backup had refused its stream.
  void MarkReplaced(const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Called once, on a sender or lease thread, when this PS learns it was
  // replaced -- or at once, on this thread, if it learned that before the
  // callback was set (the senders say hello as soon as the replicator is
  // built, and a restarted PS's first hello may already be refused).
  void set_on_replaced(std::function<void()> on_replaced)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every backup accepted this PS's stream or was dropped: until then this
  // PS must not serve (it may have been replaced while it was down).
  bool ready() const override ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t incarnation() const override { return incarnation_; }

  // Rejoin: `task` (re)starts as a backup from the next update on; what
  // came before reaches it as a snapshot. Until it caught up (its queue
  // fits one call), pushes are acknowledged without waiting for it.
  // Returns the sequence its stream starts at.
  uint64_t AddBackup(int task) override ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t Reinstate(int task) override ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<uint64_t> AcknowledgedBy(int task) const override
      ABSL_LOCKS_EXCLUDED(mu_);
  // Stops replicating to `task` (a rejoin that failed): as if dropped.
  void DropBackup(int task, const std::string& why) override
      ABSL_LOCKS_EXCLUDED(mu_);
  // The sequence the next appended update gets. Read under a shard's lock,
  // it splits the updates of that shard: those below are applied to it.
  uint64_t next_sequence() const override ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<BackupState> Backups() const ABSL_LOCKS_EXCLUDED(mu_);
  // Which backups this PS acknowledges pushes with now (in sync, not
  // catching up, not being dropped); its version grows with every change
  // (and across restarts: it starts from the clock's microseconds).
  StreamView View() ABSL_LOCKS_EXCLUDED(mu_);
  // Updates acknowledged to workers while some backup was out of sync.
  int64_t unreplicated_updates() const ABSL_LOCKS_EXCLUDED(mu_);
  // Replicate calls made and updates they carried (batching shows as the
  // ratio).
  int64_t calls() const ABSL_LOCKS_EXCLUDED(mu_);
  // The sequence of the last update appended (0: none yet).
  uint64_t last_sequence() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t updates_sent() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Stream {
    BackupState state;
    std::vector<std::shared_ptr<const Update>> pending;  // queued, unsent
    uint64_t first_pending = 0;    // sequence of pending[0]
    bool needs_hello = true;       // the stream (re)starts with a hello
    uint64_t generation = 0;       // AddBackup restarts count
    absl::Time catching_up_since;  // when a rejoin added it
    bool told_held = false;        // logged that pushes wait for it
    std::thread sender;
  };
  // How long a rejoined backup catches up before pushes wait for it: most
  // catch up within a second on their own; one slower than the pushes
  // coming in never would (its queue grows as fast as it drains), and its
  // handback and its copy's use for a failover would wait forever.
  static constexpr absl::Duration kCatchUpGrace = absl::Seconds(2);
  // Whether pushes wait for `stream`'s catching-up backup now.
  bool HoldsPushesLocked(const Stream& stream) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  void Send(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  // AddBackup and Reinstate: (re)starts `task`'s stream from the next
  // update.
  Stream* RestartStreamLocked(int task, bool catching_up)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One Replicate call's messages to `task`, retried as described above;
  // OK once the backup applied through `last`.
  // `patience`: how long transport errors are retried before the backup
  // may be dropped. `rejoin_adds_it`: the backup was not added by its
  // rejoin (the stream is not catching up), so its answer that it is
  // rejoining from this PS is final: that rejoin adds it again.
  absl::Status Deliver(int task, const std::vector<grpc::ByteBuffer>& messages,
                       uint64_t last, absl::Duration patience,
                       bool rejoin_adds_it) ABSL_LOCKS_EXCLUDED(mu_);
  // How long a backup may take to come up after this PS started.
  static constexpr absl::Duration kHelloPatience = absl::Seconds(60);
  // Records the outcome of a Deliver of `updates` updates through `last`
  // and runs the callbacks it settles.
  void Settle(Stream* stream, uint64_t generation, const absl::Status& error,
              uint64_t last, size_t updates) ABSL_LOCKS_EXCLUDED(mu_);
  bool SettledLocked(uint64_t sequence) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Stops replicating to `stream`'s backup (out of sync from now on); `why`
  // goes into its state and the log.
  void StopLocked(Stream* stream, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records that this PS was replaced (`why`); false if it knew already.
  bool SetReplacedLocked(std::string why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The callbacks whose sequences are settled, taken out of waiting_.
  std::vector<std::function<void(absl::Status)>> TakeSettledLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The Replicate call's messages for updates [first, first + n).
  std::vector<grpc::ByteBuffer> Messages(
      uint64_t first,
      const std::vector<std::shared_ptr<const Update>>& batch) const;

  const PsPeers* const peers_;
  const MayDrop may_drop_;
  const absl::Duration call_timeout_;
  Clock* const clock_;
  const absl::Duration give_up_after_;
  const uint64_t incarnation_;
  mutable absl::Mutex mu_;
  // Streams are added (AddBackup), never removed: a sender keeps its
  // Stream* for the replicator's life.
  std::vector<std::unique_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> has_streams_{false};
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t unreplicated_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t updates_sent_ ABSL_GUARDED_BY(mu_) = 0;
  // WhenReplicated callbacks by sequence (ascending).
  std::multimap<uint64_t, std::function<void(absl::Status)>> waiting_
      ABSL_GUARDED_BY(mu_);
  std::string replaced_by_ ABSL_GUARDED_BY(mu_);  // empty: not replaced
  // Backups a drop vote is for (left out of the view from the vote on).
  std::vector<int> dropping_ ABSL_GUARDED_BY(mu_);
  StreamView view_ ABSL_GUARDED_BY(mu_);
  StreamView ViewLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::function<void()> on_replaced_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_REPLICATOR_H_
