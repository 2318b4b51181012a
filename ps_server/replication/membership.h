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
// its own. With fewer than 3 PS there is no majority without the suspect:
// no failover (Enabled() is false).
//
// Leases (lease_holder.h) make the vote safe against a primary that is cut
// off or paused but still running: a PS that granted PS p a lease within
// the lease term says p is reachable, and one that voted p unreachable
// grants it no lease for kVoteHold. A majority that votes p out therefore
// shares no PS with a majority that granted p its current lease: by the
// time p's shards are taken over, p's lease has ended (clocks advancing at
// the same rate; the lease is timed from before its renewal was sent).
//
// Stream views make a takeover safe against a stale copy: a primary that
// drops a backup (it cannot reach it) puts the view it will have without
// it into the drop's vote, so a majority records it before any push is
// acknowledged without that backup; a backup asks for the views with its
// takeover vote and takes over only if the newest lists it. The two
// majorities share a PS, so the newest view a takeover sees is at least
// the drop's. Renewals carry the primary's current view (a backup in
// sync again after a rejoin is listed again).
#ifndef PSRT_PS_SERVER_REPLICATION_MEMBERSHIP_H_
#define PSRT_PS_SERVER_REPLICATION_MEMBERSHIP_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
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

  // `peers` and `clock` (which times grants and votes; the real clock
  // when null) must outlive this.
  Membership(const PsPeers* peers, int replicas, Clock* clock = nullptr);

  bool Enabled() const { return replicas_ > 1 && peers_->size() >= 3; }
  int replicas() const { return replicas_; }

  // Asks every PS but `task` and this one whether it can reach `task`
  // (each waits up to `ping_timeout`); true if this PS and the ones that
  // cannot are a majority of all PS. Blocks up to about 2 * ping_timeout.
  bool MajorityFindsUnreachable(int task, absl::Duration ping_timeout);

  // The same vote, with a drop's or a takeover's fields (SuspectRequest):
  // `majority` as above; for a takeover, `newest` is the newest stream
  // view of `request.task` among the answers and this PS's own record.
  struct Vote {
    bool majority = false;
    StreamView newest;
  };
  Vote Decide(SuspectRequest request, absl::Duration ping_timeout);

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
  const PsPeers* const peers_;
  const int replicas_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
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
