// When a replicator tells its PS that it was replaced (replicator.h): once,
// whether the PS learned it before or after it set the callback.
#include "ps_server/replication/replicator.h"

#include <memory>

#include "gtest/gtest.h"
#include "ps_server/replication/unreachable_peers.h"

namespace psrt {
namespace {

TEST(ReplicatorTest, TheReplacedCallbackRunsOnceWhenSetBeforeIt) {
  auto peers = UnreachablePeers();
  Replicator replicator(peers.get(), /*backups=*/{});
  int calls = 0;
  replicator.set_on_replaced([&] { ++calls; });
  EXPECT_EQ(calls, 0);
  replicator.MarkReplaced("PS 1 took over");
  EXPECT_TRUE(replicator.replaced());
  EXPECT_EQ(calls, 1);
  replicator.MarkReplaced("PS 1 took over, said again");
  EXPECT_EQ(calls, 1);
}

// A restarted PS's senders say hello while its server is still being
// built, and a backup that took its shards over refuses at once: the
// callback set after that must still run (else the PS never rejoins).
TEST(ReplicatorTest, TheReplacedCallbackRunsAtOnceWhenSetAfterIt) {
  auto peers = UnreachablePeers();
  Replicator replicator(peers.get(), /*backups=*/{});
  replicator.MarkReplaced("PS 1 took over");
  int calls = 0;
  replicator.set_on_replaced([&] { ++calls; });
  EXPECT_EQ(calls, 1);
  replicator.MarkReplaced("PS 1 took over, said again");
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace psrt
