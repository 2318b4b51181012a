// Watches the primaries this PS is the first backup of (--replicas > 1,
// at least 3 PS) and takes over a primary's shards once it has been
// unreachable for `failover_after` and a majority of the cluster agrees
// (Membership::MajorityFindsUnreachable). Taking over is the caller's
// `promote` (ps_server/rpc/server.cc: the store serves the backup copies
// as primaries, the replica applier refuses the old primary's stream from
// then on, Membership records the failure); it returns false when this
// PS's copy cannot take over (not in sync), and the primary is no longer
// watched.
#ifndef PSRT_PS_SERVER_REPLICATION_FAILOVER_MONITOR_H_
#define PSRT_PS_SERVER_REPLICATION_FAILOVER_MONITOR_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "ps_server/peers/ps_peers.h"
#include "ps_server/replication/membership.h"
#include "util/clock.h"

namespace psrt {

class FailoverMonitor {
 public:
  struct Options {
    absl::Duration probe_every = absl::Milliseconds(500);
    absl::Duration ping_timeout = absl::Seconds(1);
    absl::Duration failover_after = absl::Seconds(3);
    // Times the probes and the silence (the real clock when null).
    Clock* clock = nullptr;
  };

  // Watches `primaries` (those whose first backup this PS is). All
  // pointers must outlive the monitor.
  FailoverMonitor(const PsPeers* peers, Membership* membership,
                  std::vector<int> primaries,
                  std::function<bool(int primary)> promote, Options options);
  ~FailoverMonitor();  // stops watching

 private:
  void Run();

  const PsPeers* const peers_;
  Membership* const membership_;
  const std::vector<int> primaries_;
  const std::function<bool(int)> promote_;
  const Options options_;
  Clock* const clock_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_FAILOVER_MONITOR_H_
