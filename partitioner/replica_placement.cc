#include "partitioner/replica_placement.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "partitioner/cluster_spec.h"

namespace psrt {

absl::StatusOr<ReplicaPlacement> ReplicaPlacement::Create(
    const std::vector<std::string>& ps_addresses, int replicas) {
  const int n = static_cast<int>(ps_addresses.size());
  if (replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replicas=", replicas, ": must be at least 1"));
  }
  std::vector<std::string> hosts(n);
  for (int t = 0; t < n; ++t) {
    int port = 0;
    if (absl::Status s = SplitHostPort(ps_addresses[t], &hosts[t], &port);
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PS ", t, " address: ", s.message()));
    }
  }
  const absl::flat_hash_set<std::string> distinct(hosts.begin(), hosts.end());
  if (replicas > static_cast<int>(distinct.size())) {
    std::vector<std::string> sorted(distinct.begin(), distinct.end());
    std::sort(sorted.begin(), sorted.end());
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas=", replicas, " needs PS on at least ", replicas,
        " different hosts (a backup on its primary's host dies with it), but "
        "the cluster's ",
        n, " PS are on ", distinct.size(), ": ", absl::StrJoin(sorted, ", ")));
  }
  ReplicaPlacement p;
  p.replicas_ = replicas;
  p.backups_.resize(n);
  p.backed_up_.resize(n);
  for (int primary = 0; primary < n; ++primary) {
    absl::flat_hash_set<std::string> used = {hosts[primary]};
    for (int step = 1;
         step < n &&
         static_cast<int>(p.backups_[primary].size()) < replicas - 1;
         ++step) {
      const int t = (primary + step) % n;
      if (!used.insert(hosts[t]).second) continue;
      p.backups_[primary].push_back(t);
      p.backed_up_[t].push_back(primary);
    }
  }
  return p;
}

ReplicaPlacement ReplicaPlacement::Unreplicated(int num_ps) {
  ReplicaPlacement p;
  p.backups_.resize(num_ps);
  p.backed_up_.resize(num_ps);
  return p;
}

bool ReplicaPlacement::IsBackupOf(int task, int primary) const {
  if (primary < 0 || primary >= num_ps()) return false;
  const std::vector<int>& b = backups_[primary];
  return std::find(b.begin(), b.end(), task) != b.end();
}

}  // namespace psrt
