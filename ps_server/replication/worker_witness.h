// A worker's part in a 2-PS replicated cluster (--replicas > 1): it is a
// witness, a voter beside the two PS (membership.h), so that a PS cut off
// from the other and from the workers stops serving before the other
// takes its shards over, and a PS that died is replaced within seconds.
//
// Every `renew_every` it calls each PS (Witness RPC), on its own thread:
//   - it grants that PS a lease, echoing the challenge of that PS's last
//     answer: the PS times the lease from when it issued the challenge.
//     It grants none to a PS it knows failed over (odd term), nor within
//     `vote_hold` of voting that PS unreachable;
//   - it votes unreachable every other PS that has not answered it and
//     that it granted nothing for a lease term (its grant would still
//     count); from then on it grants that PS nothing for `vote_hold`;
//   - it passes on the stream views and terms it learned from the PS's
//     answers, so a backup learns a primary's view through the workers as
//     it would from a third PS.
// A PS that answers it takes no votes (FAILED_PRECONDITION: 3 PS or more,
// no replicas) is not called again.
//
// ps_worker and psrt::Client (ClientOptions::witness) run one per worker;
// tests run them over in-process links (in_process_links.h).
#ifndef PSRT_PS_SERVER_REPLICATION_WORKER_WITNESS_H_
#define PSRT_PS_SERVER_REPLICATION_WORKER_WITNESS_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "ps_server/peers/peer_transport.h"
#include "ps_server/replication/membership.h"
#include "util/clock.h"

namespace psrt {

class WorkerWitness {
 public:
  struct Options {
    absl::Duration renew_every = absl::Milliseconds(250);
    absl::Duration call_timeout = absl::Seconds(1);
    // What the PS count a grant and a vote for (membership.h).
    absl::Duration term = Membership::kLeaseTerm;
    absl::Duration vote_hold = Membership::kVoteHold;
    // Times the calls, grants and votes (the real clock when null).
    Clock* clock = nullptr;
  };

  // Worker `worker` of a cluster of `num_ps` PS, calling them over
  // `transport`; starts calling at once. `options.clock` must outlive it.
  WorkerWitness(int worker, int num_ps,
                std::unique_ptr<PeerTransport> transport, Options options);
  ~WorkerWitness();  // stops calling
  WorkerWitness(const WorkerWitness&) = delete;
  WorkerWitness& operator=(const WorkerWitness&) = delete;

  // PS still called (they take votes); 0 once every PS declined.
  int voting_with() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether this worker votes PS `task` unreachable now (it did in its
  // last calls and still withholds grants from it).
  bool VotesOut(int task) const ABSL_LOCKS_EXCLUDED(mu_);
  // Answers received, all PS together.
  int64_t answers() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct PsState {
    uint64_t challenge = 0;  // of its last answer (0: none yet)
    absl::Time granted_at = absl::InfinitePast();  // last grant sent
    absl::Time answered_at;                        // last answer received
    absl::Time voted_out_at = absl::InfinitePast();
    bool declined = false;
  };
  void Run(int ps);
  // The call to `ps` as things stand; records its grant and votes.
  WitnessRequest NextRequestLocked(int ps, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `task` is unreachable enough to vote it out at `now`.
  bool MayVoteOutLocked(int task, absl::Time now) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const int worker_;
  const int num_ps_;
  const std::unique_ptr<PeerTransport> transport_;
  const Options options_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::vector<PsState> ps_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> terms_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int, StreamView> views_ ABSL_GUARDED_BY(mu_);
  int64_t answers_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification stop_;
  std::vector<std::thread> threads_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_WORKER_WITNESS_H_
