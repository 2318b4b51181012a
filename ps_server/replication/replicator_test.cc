// The Replicator: when it tells its PS that it was replaced (once, whether
// the PS learned it before or after it set the callback); pushes waiting
// for a backup when the PS stops, and for a rejoined backup that is not
// catching up; a forward to a backup that the cluster declares failed over
// while it waits (over a real data plane and gRPC server, in this process).
#include "ps_server/replication/replicator.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "dataplane/data_plane_server.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "ps_server/peers/peer_data_plane.h"
#include "ps_server/replication/unreachable_peers.h"
#include "util/simulated_clock.h"

namespace psrt {
namespace {

// One push's answer from the replicator (WhenReplicated), once it came.
struct PushAnswer {
  absl::Notification answered;
  absl::Status status;
};

// Appends one update and asks for its answer.
std::shared_ptr<PushAnswer> PushOne(Replicator* replicator) {
  ReplicationLog::Update update;
  update.step = 1;
  auto push = std::make_shared<PushAnswer>();
  replicator->WhenReplicated(replicator->Append(std::move(update)),
                             [push](absl::Status s) {
                               push->status = s;
                               push->answered.Notify();
                             });
  return push;
}

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
  std::shared_ptr<PushAnswer> push = PushOne(&replicator);
  // The sender retries the unreachable backup meanwhile.
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(push->answered.HasBeenNotified());
  replicator.Stop();
  ASSERT_TRUE(push->answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(push->status.code(), absl::StatusCode::kUnavailable)
      << push->status;
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

// A backup whose process stops answering (paused, hung) keeps its
// sockets open: a forward to it over the data plane waits, and its pings
// time out, which is not taken for gone. Once the cluster declares it
// failed over, the forward ends and the vote that drops it is asked at
// once, not after the call's deadline or the patience: the push waiting
// for it is acknowledged. (A primary waited 8 s for gRPC's keepalive to
// give up on its paused backup, past a client's 8 s deadline, in an ASan
// CI run of replication_test.)
class PausedBackup final : public ParameterServer::Service {
 public:
  explicit PausedBackup(dataplane::DataPlaneServer* data_plane)
      : data_plane_(data_plane) {}
  grpc::Status GetStats(grpc::ServerContext*, const StatsRequest*,
                        StatsResponse*) override {
    return grpc::Status::OK;  // its pings answer: a slow PS, not a gone one
  }
  grpc::Status OpenDataPlane(grpc::ServerContext*, const OpenDataPlaneRequest*,
                             OpenDataPlaneResponse* response) override {
    const dataplane::Challenge challenge = data_plane_->IssueChallenge();
    response->set_provider("tcp");
    response->set_address(data_plane_->address());
    response->set_connection_id(challenge.connection_id);
    response->set_nonce(challenge.nonce);
    return grpc::Status::OK;
  }

 private:
  dataplane::DataPlaneServer* const data_plane_;
};

TEST(ReplicatorTest, ABackupDeclaredFailedOverMidForwardIsDroppedAtOnce) {
  // PS 1's data plane answers the hello, then holds every call until
  // `resume` (as a paused process would, for ever).
  absl::Notification resume;
  std::atomic<int> forwards{0};
  dataplane::DataPlaneServerOptions data_plane_options;
  data_plane_options.fabric.provider = "tcp";
  data_plane_options.fabric.node = "127.0.0.1";
  // Its answer after the test finds the connection closed: given up on
  // at once, not after the default 5 s.
  data_plane_options.stuck_send_timeout = absl::Milliseconds(100);
  auto data_plane = dataplane::DataPlaneServer::Start(
      data_plane_options,
      [&](uint32_t,
          absl::Span<const uint8_t>) -> absl::StatusOr<dataplane::Reply> {
        if (forwards++ > 0) {
          resume.WaitForNotification();
          return absl::UnavailableError("resumed after the test");
        }
        ReplicateResponse hello;
        auto bytes = std::make_shared<std::string>(hello.SerializeAsString());
        return dataplane::Reply(
            absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes->data()),
                                bytes->size()),
            bytes);
      });
  ASSERT_TRUE(data_plane.ok()) << data_plane.status();
  absl::Cleanup release = [&] { resume.Notify(); };
  PausedBackup service(data_plane->get());
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  auto peers = PsPeers::Create(
      {"127.0.0.1:1", absl::StrCat("127.0.0.1:", port)}, 0, SecurityOptions());
  ASSERT_TRUE(peers.ok()) << peers.status();
  (*peers)->UseDataPlane(PeerDataPlane::Options());
  std::atomic<int64_t> term{0};
  (*peers)->set_failover_terms(
      [&term](int task) { return task == 1 ? term.load() : int64_t{0}; });
  std::atomic<int> votes{0};
  {
    // Patience and deadline far beyond the test's bounds: only the
    // failover can end the wait in time.
    Replicator replicator(
        peers->get(), /*backups=*/{1},
        /*may_drop=*/
        [&votes](int task, const StreamView&) {
          EXPECT_EQ(task, 1);
          ++votes;
          return true;
        },
        Clock::Real(), /*call_timeout=*/absl::Seconds(20),
        /*give_up_after=*/absl::Seconds(60));
    std::shared_ptr<PushAnswer> push = PushOne(&replicator);
    const absl::Time asked = absl::Now();
    while (forwards.load() < 2 && absl::Now() - asked < absl::Seconds(10)) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_EQ(forwards.load(), 2) << "the forward never reached PS 1";
    EXPECT_FALSE(
        push->answered.WaitForNotificationWithTimeout(absl::Seconds(1)))
        << "acknowledged while its backup held it: " << push->status;

    term = 1;  // the cluster declared PS 1 failed over
    const absl::Time declared = absl::Now();
    ASSERT_TRUE(push->answered.WaitForNotificationWithTimeout(absl::Seconds(5)))
        << "the push still waits for its failed-over backup";
    const absl::Duration took = absl::Now() - declared;
    EXPECT_EQ(push->status, absl::OkStatus());
    EXPECT_LT(took, absl::Seconds(2)) << "dropped " << took << " after";
    EXPECT_EQ(votes.load(), 1);
    const std::vector<Replicator::BackupState> backups = replicator.Backups();
    ASSERT_EQ(backups.size(), 1u);
    EXPECT_FALSE(backups[0].in_sync);
    EXPECT_NE(backups[0].error.find(kFailedOverMarker), std::string::npos)
        << backups[0].error;
    std::printf("push acknowledged %lld ms after its backup failed over\n",
                static_cast<long long>(absl::ToInt64Milliseconds(took)));
  }
  std::move(release).Invoke();
  (*peers)->StopDataPlane();
  server->Shutdown();
}

}  // namespace
}  // namespace psrt
