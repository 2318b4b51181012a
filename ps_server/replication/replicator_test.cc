// When a replicator tells its PS that it was replaced (replicator.h): once,
// whether the PS learned it before or after it set the callback.
#include "ps_server/replication/replicator.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ps_server/replication/unreachable_peers.h"
#include "util/simulated_clock.h"

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

// A push waiting for a backup this PS cannot reach, which no vote lets it
// drop, when the PS stops (SIGTERM, or a test's kill): its answer is
// UNAVAILABLE. The sender's call, cut short by the stop, once marked the
// backup lost and so settled the push OK: acknowledged on no backup, then
// lost when the backup took over (replicated_push_test's kill after a
// refused forward saw it under ASan: -3 after 4 acknowledged pushes).
TEST(ReplicatorTest, APushWaitingForItsBackupIsRefusedWhenThePsStops) {
  auto peers = UnreachablePeers();
  Replicator replicator(
      peers.get(), /*backups=*/{1},
      /*may_drop=*/[](int, const StreamView&) { return false; });
  ReplicationLog::Update update;
  update.step = 1;
  const uint64_t sequence = replicator.Append(std::move(update));
  absl::Notification answered;
  absl::Status answer;
  replicator.WhenReplicated(sequence, [&](absl::Status s) {
    answer = s;
    answered.Notify();
  });
  // The sender retries the unreachable backup meanwhile.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(answered.HasBeenNotified());
  replicator.Stop();
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(answer.code(), absl::StatusCode::kUnavailable) << answer;
  EXPECT_EQ(replicator.unreplicated_updates(), 0);
}

// A rejoined backup catching up: pushes are acknowledged without it for
// kCatchUpGrace (2 s); after that, while more than one call's updates
// (256) are queued for it, they wait for it, so that pushes coming in
// faster than it drains cannot keep it from ever catching up (a 2-host
// failover run where the rejoined PS never got its shards back). The
// backup here is unreachable, so what is queued for it stays queued.
TEST(ReplicatorTest, PushesWaitForABackupStillCatchingUpAfterTheGrace) {
  for (const int queued : {257, 256}) {
    SCOPED_TRACE(absl::StrCat(queued, " updates queued"));
    auto peers = UnreachablePeers();
    SimulatedClock clock;
    Replicator replicator(
        peers.get(), /*backups=*/{},
        /*may_drop=*/[](int, const StreamView&) { return false; }, &clock);
    replicator.AddBackup(1);
    uint64_t last = 0;
    auto push = [&](int n) {
      for (int i = 0; i < n; ++i) {
        ReplicationLog::Update update;
        update.step = 1;
        last = replicator.Append(std::move(update));
      }
      return last;
    };
    auto answer = std::make_shared<absl::Status>();
    auto answered = std::make_shared<absl::Notification>();
    auto wait_for = [&](uint64_t sequence) {
      answer = std::make_shared<absl::Status>();
      answered = std::make_shared<absl::Notification>();
      replicator.WhenReplicated(sequence, [answer, answered](absl::Status s) {
        *answer = s;
        answered->Notify();
      });
    };
    // Within the grace: acknowledged without it, however far behind.
    wait_for(push(queued - 1));
    EXPECT_TRUE(answered->HasBeenNotified());
    EXPECT_TRUE(answer->ok()) << *answer;
    clock.Advance(absl::Milliseconds(1999));
    wait_for(last);
    EXPECT_TRUE(answered->HasBeenNotified());
    // Past it, with `queued` updates queued.
    clock.Advance(absl::Milliseconds(1));
    wait_for(push(1));
    if (queued > 256) {
      absl::SleepFor(absl::Milliseconds(200));
      EXPECT_FALSE(answered->HasBeenNotified()) << "not held past the grace";
      replicator.Stop();
      ASSERT_TRUE(answered->WaitForNotificationWithTimeout(absl::Seconds(10)));
      EXPECT_EQ(answer->code(), absl::StatusCode::kUnavailable) << *answer;
    } else {
      EXPECT_TRUE(answered->HasBeenNotified()) << "held with one call queued";
      EXPECT_TRUE(answer->ok()) << *answer;
      replicator.Stop();
    }
  }
}

}  // namespace
}  // namespace psrt
