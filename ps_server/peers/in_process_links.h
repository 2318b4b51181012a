// For tests: the links between PS services living in one test process,
// with faults injected per link -- the PeerTransport (peer_transport.h)
// that lets leases, failover, the replication stream and checkpoint
// coordination run between real ParameterServer services in milliseconds,
// under ASan, without ports or processes.
//
// Each link (from, to) is an in-process gRPC channel to `to`'s server
// (grpc::Server::InProcessChannel), so calls go through the real service
// code, interceptors and status codes. Faults:
//   Cut(from, to)       calls from -> to fail at once (UNAVAILABLE), as
//                       when a packet filter drops them; Heal undoes it;
//   Partition(sides)    every link between two sides cut, both ways;
//   Delay(from, to, d)  each call waits `d` of real time before it is made
//                       (on the calling thread);
//   Kill(task)          `task`'s server is gone: every call to it fails
//                       (the test shuts the server down itself).
// Calls in flight when a link is cut complete; later ones fail.
//
// Thread-safe. Outlives every transport it made.
#ifndef PSRT_PS_SERVER_PEERS_IN_PROCESS_LINKS_H_
#define PSRT_PS_SERVER_PEERS_IN_PROCESS_LINKS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "ps_server/peers/peer_transport.h"

namespace psrt {

class InProcessLinks {
 public:
  // `auth_token`: what every call carries (as a secured cluster's PS
  // send it); empty: none. `num_workers`: nodes that call the PS but serve
  // nothing (witnesses, worker_witness.h): node num_ps + w is worker w, and
  // its links are cut, partitioned and counted as a PS's are.
  explicit InProcessLinks(int num_ps, std::string auth_token = "",
                          int num_workers = 0);
  // The node of worker `w`.
  int worker_node(int w) const { return num_ps_ + w; }

  // PS `task` serves on `server` from now on (a restart attaches again).
  // `server` must stay alive until Kill(task) or another Attach.
  void Attach(int task, grpc::Server* server) ABSL_LOCKS_EXCLUDED(mu_);
  // PS `task` is gone: calls to it fail until it is attached again.
  void Kill(int task) ABSL_LOCKS_EXCLUDED(mu_);
  // A new server of `task` is being made (a restart): calls to it wait
  // until it is attached, as calls to a process that is starting wait for
  // its port, instead of failing while it makes them itself.
  void Restarting(int task) ABSL_LOCKS_EXCLUDED(mu_);
  void Cut(int from, int to) ABSL_LOCKS_EXCLUDED(mu_);
  void Heal(int from, int to) ABSL_LOCKS_EXCLUDED(mu_);
  // Cuts every link between nodes on different sides, both ways (nodes
  // on no side keep all their links).
  void Partition(const std::vector<std::vector<int>>& sides)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Heals every cut link (not kills, not delays).
  void HealAll() ABSL_LOCKS_EXCLUDED(mu_);
  void Delay(int from, int to, absl::Duration delay) ABSL_LOCKS_EXCLUDED(mu_);

  // Calls PS `from` made to PS `to` (those that failed on a cut too).
  int64_t calls(int from, int to) const ABSL_LOCKS_EXCLUDED(mu_);

  // The transport node `self` (a PS, or worker_node(w)) calls the PS
  // through.
  std::unique_ptr<PeerTransport> TransportFor(int self);

 private:
  class Transport;
  // The channel for one call from -> to (counted; held for the delay).
  std::shared_ptr<grpc::Channel> ChannelFor(int from, int to)
      ABSL_LOCKS_EXCLUDED(mu_);

  const int num_ps_;
  const int nodes_;  // PS, then workers
  const std::string auth_token_;
  // A channel nobody answers on: calls fail at once (not wait_for_ready).
  const std::shared_ptr<grpc::Channel> dead_;
  mutable absl::Mutex mu_;
  std::vector<grpc::Server*> servers_ ABSL_GUARDED_BY(mu_);
  // By from * nodes_ + to.
  std::vector<bool> cut_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> restarting_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> delay_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_PEERS_IN_PROCESS_LINKS_H_
