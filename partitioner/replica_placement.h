// Where the backup copies of a PS task's shards live (--replicas=R).
//
// A shard's primary is placed by the ShardMap exactly as without replicas;
// its R-1 backups are the next PS tasks after the primary in ring order
// (task + 1, task + 2, ... mod N) whose host differs from the primary's and
// from every backup chosen before. Backups therefore depend only on the
// primary's task: every shard of primary p is copied to the same tasks, and
// p forwards all its pushes to them over one ordered stream each.
//
// A pure function of (PS addresses, R): every process computes the same
// answer. Hosts are compared as the address's host part, as written in the
// cluster spec (127.0.0.1 and 127.0.0.2 are different hosts; so are a name
// and its IP, which the spec should not mix). R greater than the number of
// distinct hosts is an error: a backup on its primary's host would die
// with it.
#ifndef PSRT_PARTITIONER_REPLICA_PLACEMENT_H_
#define PSRT_PARTITIONER_REPLICA_PLACEMENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace psrt {

class ReplicaPlacement {
 public:
  // INVALID_ARGUMENT: replicas < 1, a malformed address, or fewer distinct
  // hosts than replicas (named in the message).
  static absl::StatusOr<ReplicaPlacement> Create(
      const std::vector<std::string>& ps_addresses, int replicas);
  // No backups (R = 1) for `num_ps` tasks.
  static ReplicaPlacement Unreplicated(int num_ps);

  int replicas() const { return replicas_; }
  int num_ps() const { return static_cast<int>(backups_.size()); }
  // The backups of primary `task`, first backup first.
  const std::vector<int>& BackupsOf(int task) const { return backups_[task]; }
  // The primaries whose shards `task` keeps copies of.
  const std::vector<int>& BackedUpBy(int task) const {
    return backed_up_[task];
  }
  bool IsBackupOf(int task, int primary) const;

 private:
  int replicas_ = 1;
  std::vector<std::vector<int>> backups_;    // by primary task
  std::vector<std::vector<int>> backed_up_;  // by backup task
};

}  // namespace psrt

#endif  // PSRT_PARTITIONER_REPLICA_PLACEMENT_H_
