// PsPeers::CheckAlive against a real gRPC server in this process: the
// check the data plane's forward waits make.
#include "ps_server/peers/ps_peers.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

// Answers GetStats after `delay` (the rest: UNIMPLEMENTED, as generated).
class StatsOnly final : public ParameterServer::Service {
 public:
  explicit StatsOnly(absl::Duration delay) : delay_(delay) {}
  grpc::Status GetStats(grpc::ServerContext*, const StatsRequest*,
                        StatsResponse*) override {
    absl::SleepFor(delay_);
    return grpc::Status::OK;
  }

 private:
  const absl::Duration delay_;
};

struct Peer {
  std::unique_ptr<StatsOnly> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

Peer StartPeer(absl::Duration delay) {
  Peer peer;
  peer.service = std::make_unique<StatsOnly>(delay);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &peer.port);
  builder.RegisterService(peer.service.get());
  peer.server = builder.BuildAndStart();
  return peer;
}

std::unique_ptr<PsPeers> PeersOf(const Peer& peer) {
  auto peers =
      PsPeers::Create({"127.0.0.1:1", absl::StrCat("127.0.0.1:", peer.port)}, 0,
                      SecurityOptions());
  EXPECT_TRUE(peers.ok()) << peers.status();
  return peers.ok() ? *std::move(peers) : nullptr;
}

// A peer whose process is gone is seen within about a second, although
// the channel no call reads never turns TRANSIENT_FAILURE by itself (the
// check before this one read only that, and a forward over the data plane
// to a killed backup waited out its deadline: an ASan CI run).
TEST(PsPeersTest, CheckAliveSeesAPeerGoneWithinASecond) {
  Peer peer = StartPeer(absl::ZeroDuration());
  std::unique_ptr<PsPeers> peers = PeersOf(peer);
  ASSERT_NE(peers, nullptr);
  ASSERT_EQ(peers->Ping(1, absl::Seconds(5)), absl::OkStatus());
  EXPECT_EQ(peers->CheckAlive(1), absl::OkStatus());

  peer.server->Shutdown();
  peer.server.reset();
  const absl::Time gone = absl::Now();
  absl::Status alive;
  while ((alive = peers->CheckAlive(1)).ok() &&
         absl::Now() - gone < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(50));  // the data plane's cadence
  }
  const absl::Duration seen = absl::Now() - gone;
  EXPECT_TRUE(absl::IsUnavailable(alive)) << alive;
  EXPECT_NE(alive.message().find("PS 1 (127.0.0.1:"), std::string::npos)
      << alive;
  EXPECT_LT(seen, absl::Milliseconds(2500)) << "seen after " << seen;
}

// A peer that answers slowly is alive: its forward waits, it is not
// broken off.
TEST(PsPeersTest, CheckAliveTakesASlowPeerForAlive) {
  Peer peer = StartPeer(absl::Milliseconds(1500));
  std::unique_ptr<PsPeers> peers = PeersOf(peer);
  ASSERT_NE(peers, nullptr);
  EXPECT_EQ(peers->CheckAlive(1), absl::OkStatus());
  peer.server->Shutdown();
}

// A peer the cluster declares failed over while a wait on it goes on ends
// that wait, though its process still answers pings (a PS paused or hung
// behind open sockets; CheckAlive alone waited for gRPC's keepalive, 8 s
// in an ASan CI run, past a client's deadline). A wait that began after
// the failover (a forward to it while it rejoins) is not ended by it; after
// the peer's handback nothing is, until its next failover.
TEST(PsPeersTest, CheckServingEndsAWaitOnAPeerDeclaredFailedOver) {
  Peer peer = StartPeer(absl::ZeroDuration());
  std::unique_ptr<PsPeers> peers = PeersOf(peer);
  ASSERT_NE(peers, nullptr);
  EXPECT_EQ(peers->FailoverTerm(1), 0);  // no terms set: never failed
  std::atomic<int64_t> term{0};
  peers->set_failover_terms(
      [&term](int task) { return task == 1 ? term.load() : int64_t{0}; });
  const int64_t before = peers->FailoverTerm(1);
  EXPECT_EQ(peers->CheckServing(1, before), absl::OkStatus());

  term = 1;  // failed over
  const absl::Status ended = peers->CheckServing(1, before);
  EXPECT_TRUE(absl::IsUnavailable(ended)) << ended;
  EXPECT_NE(ended.message().find(kFailedOverMarker), std::string::npos)
      << ended;
  EXPECT_NE(ended.message().find("PS 1 (127.0.0.1:"), std::string::npos)
      << ended;
  EXPECT_EQ(peers->CheckServing(1, peers->FailoverTerm(1)), absl::OkStatus());

  term = 2;  // handed back
  EXPECT_EQ(peers->CheckServing(1, before), absl::OkStatus());
  EXPECT_EQ(peers->CheckServing(1, 1), absl::OkStatus());
  term = 3;  // failed over again
  EXPECT_TRUE(absl::IsUnavailable(peers->CheckServing(1, 1)));
  EXPECT_TRUE(absl::IsUnavailable(peers->CheckServing(1, 2)));

  peers->set_failover_terms(nullptr);
  EXPECT_EQ(peers->FailoverTerm(1), 0);
  EXPECT_EQ(peers->CheckServing(1, 2), absl::OkStatus());
  peer.server->Shutdown();
}

}  // namespace
}  // namespace psrt
