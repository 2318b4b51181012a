// Which PS of a replicated cluster (--replicas > 1) have failed over, as
// this PS knows it, and the vote that decides it.
//
// Each PS has a term, as every PS knows it: 0 at start, odd while its
// shards are served by its first live backup (a failover made it odd),
// even again once that backup handed them back to it (rejoiner.h). Every
// change adds one, so of two views of a PS the higher term is the newer:
// PS gossip terms (leases) and keep the highest (Learn).
//
// A PS is declared failed only when a majority of the cluster's PS cannot
// reach it: the deciding PS asks every other PS (Suspect RPC, each pings
// the suspect itself) and counts itself. One PS cut off from another can
// therefore neither take over that PS's shards nor drop it as a backup on
// its own. With 2 PS there is no majority without the suspect, so the
// cluster's workers vote too (witnesses: worker_witness.h); the voters are
// then the 2 PS and the W workers, a majority (2 + W) / 2 + 1 of them. A
// worker's vote rides its calls (Witness RPC): it counts while the
// challenge it echoes was issued here within kWitnessFresh, so it was sent
// since. With 3 PS or more the PS alone vote. With 2 PS and no workers
// (or a secured cluster, whose workers cannot prove which they are) there
// is no failover (Enabled() is false).
//
// Leases (lease_holder.h) make the vote safe against a primary that is cut
// off or paused but still running: a voter that granted PS p a lease within
// the lease term says p is reachable, and one that voted p unreachable
// grants it no lease for kVoteHold. A majority that votes p out therefore
// shares no PS with a majority that granted p its current lease: by the
// time p's shards are taken over, p's lease has ended (clocks advancing at
// the same rate; the lease is timed from before its renewal was sent).
//
// With witnesses, a worker's grant is timed from when this PS issued the
// challenge the worker echoes: the worker sent its grant after that.
//
// Stream views make a takeover safe against a stale copy: a primary that
// drops a backup (it cannot reach it) puts the view it will have without
// it into the drop's vote, so a majority records it before any push is
// acknowledged without that backup; a backup asks for the views with its
// takeover vote and takes over only if the newest lists it. The two
// majorities share a PS, so the newest view a takeover sees is at least
// the drop's. Renewals carry the primary's current view (a backup in
// sync again after a rejoin is listed again). A worker records the view
// from the primary's answers and reports it back: it counts towards a
// drop once it reported the drop's view. As a vote sent before the worker
// learned the view may still be fresh at the takeover, a primary with
// witnesses waits one lease term after the drop's vote before
// acknowledging without the backup: every grant its lease then counts was
// made after the worker learned the view, so every voter of the takeover
// that shares a lease with it reports the view.
#ifndef PSRT_PS_SERVER_REPLICATION_MEMBERSHIP_H_
#define PSRT_PS_SERVER_REPLICATION_MEMBERSHIP_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "ps_server/peers/ps_peers.h"
#include "util/clock.h"

namespace psrt {

class Membership {
 public:
  // How long a granted lease lasts (from before the holder asked).
  static constexpr absl::Duration kLeaseTerm = absl::Seconds(2);
  // How long a PS that voted another unreachable grants it no lease: long
  // enough for the failover the vote was for to finish and be gossiped.
  static constexpr absl::Duration kVoteHold = absl::Seconds(10);

  // How long a worker's vote counts: from when this PS issued the
  // challenge it echoes.
  static constexpr absl::Duration kWitnessFresh = kLeaseTerm;

  // How many workers vote in a cluster of `num_ps` PS with `replicas`
  // copies and `num_workers` workers: all of them with 2 PS, unless the
  // cluster is secured with a peer secret (its workers cannot prove which
  // they are); none otherwise.
  static int WitnessesFor(int num_ps, int replicas, int num_workers,
                          bool peer_secret) {
    return num_ps == 2 && replicas > 1 && !peer_secret ? num_workers : 0;
  }

  // `peers` and `clock` (which times grants and votes; the real clock
  // when null) must outlive this. `witnesses`: workers that vote (2 PS
  // only; 0: none).
  Membership(const PsPeers* peers, int replicas, Clock* clock = nullptr,
             int witnesses = 0);

  bool Enabled() const {
    return replicas_ > 1 &&
           (peers_->size() >= 3 || (peers_->size() == 2 && witnesses_ > 0));
  }
  int replicas() const { return replicas_; }
  int witnesses() const { return witnesses_; }
  // Who votes: the PS, then the witnesses (voter num_ps + w is worker w).
  int voters() const { return peers_->size() + witnesses_; }

  // A witness's call (WitnessRequest): its terms are learned, its views
  // recorded, its votes kept. `challenge`: the one to send back;
  // `granted_since`: when the echoed challenge was issued, if the worker
  // grants a lease with it (InfinitePast: no grant). INVALID_ARGUMENT for
  // a worker that is no witness here.
  struct WitnessCall {
    uint64_t challenge = 0;
    absl::Time granted_since = absl::InfinitePast();
  };
  absl::StatusOr<WitnessCall> Witness(const WitnessRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Asks every PS but `task` and this one whether it can reach `task`
  // (each waits up to `ping_timeout`); true if this PS, the ones that
  // cannot and the witnesses whose fresh votes name `task` are a majority
  // of the voters. Blocks up to about 2 * ping_timeout.
  bool MajorityFindsUnreachable(int task, absl::Duration ping_timeout);

  // The same vote, with a drop's or a takeover's fields (SuspectRequest):
  // `majority` as above; for a takeover, `newest` is the newest stream
  // view of `request.task` among the answers and this PS's own record
  // (witnesses' views included). A witness counts towards a drop only if
  // it reported the drop's view of this PS.
  struct Vote {
    bool majority = false;
    StreamView newest;
  };
  Vote Decide(SuspectRequest request, absl::Duration ping_timeout);

  // Whether this PS, a primary, may drop backup `task` and acknowledge
  // pushes with the stream view `without` (the Replicator's MayDrop): a
  // majority finds `task` unreachable and recorded `without`. With
  // witnesses it waits up to `lease_term` for the workers to report the
  // view, then `lease_term` more (see above); false at once when `cancel`
  // is notified (the server stops).
  bool DecideDrop(int task, const StreamView& without,
                  absl::Duration lease_term, const absl::Notification& cancel);
  // A primary's stream view (which backups it acknowledges pushes with),
  // from its drop vote or lease renewal: kept if newer than the one held.
  void RecordView(int primary, const StreamView& view) ABSL_LOCKS_EXCLUDED(mu_);
  // The newest view of `primary` recorded here (version 0: none).
  StreamView ViewOf(int primary) const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `view` lets `backup` take over: it lists it, or none was
  // recorded (every placed backup starts in sync).
  static bool Lists(const StreamView& view, int backup);

  // RenewLease from `task`, which knows its own term as `task_term` (this
  // PS learns it first): OK (the grant is recorded) unless `task` failed
  // over (FAILED_PRECONDITION with kReplacedMarker) or this PS voted it
  // unreachable within kVoteHold (UNAVAILABLE).
  absl::Status Grant(int task, int64_t task_term = 0) ABSL_LOCKS_EXCLUDED(mu_);
  // This PS granted `task` a lease that has not ended.
  bool HoldsLeaseFromHere(int task) const ABSL_LOCKS_EXCLUDED(mu_);
  // Answers a Suspect about `task`: reachable if it holds a lease from
  // here or `pinged_ok`; an unreachable answer is a vote (see kVoteHold).
  bool VoteReachable(int task, bool pinged_ok) ABSL_LOCKS_EXCLUDED(mu_);

  // Records that `task` failed over (its term becomes odd); returns the
  // epoch, which grows with every change this PS makes or learns.
  int64_t MarkFailed(int task) ABSL_LOCKS_EXCLUDED(mu_);
  // Records that `task` serves its shards again (handback: its term
  // becomes even); returns its term.
  int64_t MarkReturned(int task) ABSL_LOCKS_EXCLUDED(mu_);
  // Another PS's view: `task`'s term is `term`. True if that is newer than
  // what this PS knew (it is then recorded); out-of-range tasks are
  // ignored.
  bool Learn(int task, int64_t term) ABSL_LOCKS_EXCLUDED(mu_);
  bool IsFailed(int task) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t term(int task) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<int> failed() const ABSL_LOCKS_EXCLUDED(mu_);
  // The first of `tasks` not failed over (-1: none): who serves a PS's
  // shards, given its backups in ring order.
  int FirstLive(const std::vector<int>& tasks) const ABSL_LOCKS_EXCLUDED(mu_);
  // Failovers and handbacks this PS made or learned of, from the terms
  // (a failover makes a term odd, a handback even again).
  int64_t failovers() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t handbacks() const ABSL_LOCKS_EXCLUDED(mu_);
  // Every PS whose term is not 0.
  absl::flat_hash_map<int, int64_t> terms() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What this PS knows of one witness.
  struct WitnessState {
    // Challenges issued to it, newest last (a few kept): value, when.
    std::vector<std::pair<uint64_t, absl::Time>> challenges;
    // Its last report: sent after this time (the issue of the challenge
    // it echoed); the PS it votes unreachable; the version of this PS's
    // view it had learned.
    absl::Time sent_after = absl::InfinitePast();
    std::vector<int> unreachable;
    int64_t view_of_self = 0;
  };
  // Witnesses whose fresh votes name `task` (for a drop: that reported
  // `view_version` of this PS's view or a newer one).
  int WitnessVotesLocked(int task, bool drop, int64_t view_version) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const PsPeers* const peers_;
  const int replicas_;
  Clock* const clock_;
  const int witnesses_;
  mutable absl::Mutex mu_;
  std::vector<WitnessState> witness_ ABSL_GUARDED_BY(mu_);
  uint64_t next_challenge_ ABSL_GUARDED_BY(mu_);
  bool FailedLocked(int task) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return term_[task] % 2 == 1;
  }
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> term_ ABSL_GUARDED_BY(mu_);  // by task
  absl::flat_hash_map<int, absl::Time> granted_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, absl::Time> voted_out_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, StreamView> views_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_MEMBERSHIP_H_
