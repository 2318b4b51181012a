// Which PS of a replicated cluster (--replicas > 1) have failed over, as
// this PS knows it, and the vote that decides it.
//
// A PS is declared failed only when a majority of the cluster's PS cannot
// reach it: the deciding PS asks every other PS (Suspect RPC, each pings
// the suspect itself) and counts itself. One PS cut off from another can
// therefore neither take over that PS's shards nor drop it as a backup on
// its own. With fewer than 3 PS there is no majority without the suspect:
// no failover (Enabled() is false).
#ifndef PSRT_PS_SERVER_REPLICATION_MEMBERSHIP_H_
#define PSRT_PS_SERVER_REPLICATION_MEMBERSHIP_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps_server/peers/ps_peers.h"

namespace psrt {

class Membership {
 public:
  // `peers` must outlive this.
  Membership(const PsPeers* peers, int replicas);

  bool Enabled() const { return replicas_ > 1 && peers_->size() >= 3; }
  int replicas() const { return replicas_; }

  // Asks every PS but `task` and this one whether it can reach `task`
  // (each waits up to `ping_timeout`); true if this PS and the ones that
  // cannot are a majority of all PS. Blocks up to about 2 * ping_timeout.
  bool MajorityFindsUnreachable(int task, absl::Duration ping_timeout) const;

  // Records that `task` failed over; returns the new epoch.
  int64_t MarkFailed(int task) ABSL_LOCKS_EXCLUDED(mu_);
  bool IsFailed(int task) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<int> failed() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const PsPeers* const peers_;
  const int replicas_;
  mutable absl::Mutex mu_;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<int> failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_MEMBERSHIP_H_
