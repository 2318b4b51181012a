// For tests: the peers of PS 0 in a 3-PS cluster whose addresses nobody
// listens on (port 1 on loopback: every call is refused at once).
#ifndef PSRT_PS_SERVER_REPLICATION_UNREACHABLE_PEERS_H_
#define PSRT_PS_SERVER_REPLICATION_UNREACHABLE_PEERS_H_

#include <memory>

#include "gtest/gtest.h"
#include "ps_server/peers/ps_peers.h"

namespace psrt {

inline std::unique_ptr<PsPeers> UnreachablePeers() {
  auto peers = PsPeers::Create({"127.0.0.1:1", "127.0.0.2:1", "127.0.0.3:1"}, 0,
                               SecurityOptions());
  EXPECT_TRUE(peers.ok()) << peers.status();
  return std::move(*peers);
}

}  // namespace psrt

#endif  // PSRT_PS_SERVER_REPLICATION_UNREACHABLE_PEERS_H_
