// The link a PS calls the other PS of its cluster over (PsPeers): which
// channel reaches PS `task` now. The real one (grpc_peer_transport.h)
// dials each peer's host:port once, with the cluster's TLS and token; a
// test's (in_process_links.h) hands out in-process channels to services
// living in the test's own process, and can cut, delay or kill a link.
// Everything above it -- leases, votes, the replication stream, rejoin,
// checkpoint coordination -- is the same code either way.
#ifndef PSRT_PS_SERVER_PEERS_PEER_TRANSPORT_H_
#define PSRT_PS_SERVER_PEERS_PEER_TRANSPORT_H_

#include <memory>

#include "grpcpp/channel.h"

namespace psrt {

class PeerTransport {
 public:
  virtual ~PeerTransport() = default;
  // The channel to PS `task` (never this PS) for the next call; PsPeers
  // asks once per call, just before making it. Never null. May differ from
  // call to call (a test's link cut or healed). Thread-safe.
  virtual std::shared_ptr<grpc::Channel> ChannelTo(int task) const = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_PEERS_PEER_TRANSPORT_H_
