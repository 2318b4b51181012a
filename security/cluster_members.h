// Which network peers belong to the cluster: the addresses the cluster
// spec's PS and worker hosts resolve to. A secured PS (token or client
// certificates) serves its checkpoint RPCs (Checkpoint, SaveShards,
// CommitCheckpoint) only to these, so a leaked worker token used from
// elsewhere cannot drive checkpoints.
#ifndef PSRT_SECURITY_CLUSTER_MEMBERS_H_
#define PSRT_SECURITY_CLUSTER_MEMBERS_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace psrt {

class ClusterMembers {
 public:
  // `host_ports`: "host:port" entries (the cluster spec's ps and workers).
  // Names are resolved now and again, at most every `refresh`, when a peer
  // is not found (pods that restart get new addresses).
  explicit ClusterMembers(std::vector<std::string> host_ports,
                          absl::Duration refresh = absl::Seconds(10));

  // OK if `peer` (gRPC's ServerContext::peer(): "ipv4:10.0.0.5:41234",
  // "ipv6:[::1]:41234") is a member's address; PERMISSION_DENIED naming the
  // peer and `method` otherwise.
  absl::Status Check(const std::string& peer, const char* method)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The IP address in a gRPC peer string ("" if it has none); IPv4-mapped
  // IPv6 addresses are given as IPv4.
  static std::string PeerIp(const std::string& peer);

 private:
  void Resolve() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<std::string> hosts_;
  const absl::Duration refresh_;
  absl::Mutex mu_;
  absl::flat_hash_set<std::string> ips_ ABSL_GUARDED_BY(mu_);
  absl::Time resolved_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace psrt

#endif  // PSRT_SECURITY_CLUSTER_MEMBERS_H_
