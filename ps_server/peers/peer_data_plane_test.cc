// PeerDataPlane against a real data-plane server (tcp, in this process):
// a forward's messages arrive exactly as one call body; a peer without a
// data plane, or a body over the limit, is left to gRPC (and the peer is
// not asked again within kRetryAfter); a peer that cannot be reached
// fails the call as gRPC would (retried by the caller); a peer gone
// mid-life breaks the connection at the peer check, not at the deadline;
// once stopped, every call is left to gRPC.
#include "ps_server/peers/peer_data_plane.h"

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "dataplane/data_plane_server.h"
#include "gtest/gtest.h"
#include "proto/data_plane_call.h"

namespace psrt {
namespace {

constexpr char kToken[] = "peer-data-plane-token";

grpc::ByteBuffer Message(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

class PeerDataPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dataplane::DataPlaneServerOptions options;
    options.fabric.provider = "tcp";
    options.fabric.node = "127.0.0.1";
    options.token = kToken;
    // The handler answers with the call's method and its messages'
    // bytes joined by '|'.
    auto server = dataplane::DataPlaneServer::Start(
        options,
        [this](uint32_t, absl::Span<const uint8_t> request)
            -> absl::StatusOr<dataplane::Reply> {
          if (forget_connections_) {
            forget_connections_ = false;
            return absl::PermissionDeniedError(
                "data-plane Replicate on a connection no PS opened");
          }
          absl::StatusOr<DataPlaneCall> call =
              DecodeDataPlaneCall(request, 1 << 20);
          if (!call.ok()) return call.status();
          auto answer = std::make_shared<std::string>(
              std::to_string(static_cast<int>(call->method)));
          for (const grpc::ByteBuffer& m : call->messages) {
            *answer += "|" + Bytes(m);
          }
          ++calls_;
          return dataplane::Reply(
              absl::MakeConstSpan(
                  reinterpret_cast<const uint8_t*>(answer->data()),
                  answer->size()),
              answer);
        });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // A PeerDataPlane to "PS 1" on this host: its opener hands out the
  // server's challenges (as OpenDataPlane does) or `refusal`.
  std::unique_ptr<PeerDataPlane> Make(uint64_t max_body_bytes = 1 << 30) {
    PeerDataPlane::Options options;
    options.token = kToken;
    options.max_body_bytes = max_body_bytes;
    return std::make_unique<PeerDataPlane>(
        std::vector<std::string>{"127.0.0.1", "127.0.0.1"}, options,
        [this](int task, const OpenDataPlaneRequest& request,
               absl::Time) -> absl::StatusOr<OpenDataPlaneResponse> {
          ++opens_;
          EXPECT_EQ(task, 1);
          EXPECT_TRUE(request.from_peer());
          absl::MutexLock lock(&mu_);
          if (!refusal_.ok()) return refusal_;
          const dataplane::Challenge c = server_->IssueChallenge();
          OpenDataPlaneResponse response;
          response.set_provider("tcp");
          response.set_address(server_->address());
          response.set_connection_id(c.connection_id);
          response.set_nonce(c.nonce);
          return response;
        },
        [this](int task) -> dataplane::DataPlaneClient::PeerCheck {
          EXPECT_EQ(task, 1);
          return [this] {
            return gone_ ? absl::UnavailableError("PS 1 is gone")
                         : absl::OkStatus();
          };
        });
  }
  void Refuse(absl::Status why) {
    absl::MutexLock lock(&mu_);
    refusal_ = std::move(why);
  }

  std::unique_ptr<dataplane::DataPlaneServer> server_;
  std::atomic<int> calls_{0};
  std::atomic<int> opens_{0};
  std::atomic<bool> gone_{false};
  // The next call is refused as on a connection the peer forgot.
  std::atomic<bool> forget_connections_{false};
  absl::Mutex mu_;
  absl::Status refusal_ ABSL_GUARDED_BY(mu_);
};

absl::Time In(absl::Duration d) { return absl::Now() + d; }

// One forward of `messages` to PS 1.
std::optional<absl::StatusOr<std::string>> Forward(
    PeerDataPlane* peers,
    const std::vector<grpc::ByteBuffer>& messages = {Message("m")},
    absl::Duration timeout = absl::Seconds(10)) {
  return peers->Call(1, DataPlaneMethod::kReplicate, messages, In(timeout));
}

TEST_F(PeerDataPlaneTest, AForwardArrivesExactlyOverOneConnection) {
  std::unique_ptr<PeerDataPlane> peers = Make();
  const std::string large(3 << 20, 'x');  // sent from its slice, no copy
  const std::vector<grpc::ByteBuffer> messages = {Message("header"),
                                                  Message(large), Message("")};
  for (int i = 0; i < 3; ++i) {
    auto reply = Forward(peers.get(), messages);
    ASSERT_TRUE(reply.has_value());
    ASSERT_TRUE(reply->ok()) << reply->status();
    EXPECT_EQ(**reply, "3|header|" + large + "|");
  }
  EXPECT_EQ(calls_.load(), 3);
  EXPECT_EQ(opens_.load(), 1);  // one connection for all three
  // Stopped (a PS shutting down): later calls go over gRPC.
  peers->Stop();
  EXPECT_FALSE(Forward(peers.get(), messages).has_value());
  EXPECT_EQ(calls_.load(), 3);
}

TEST_F(PeerDataPlaneTest, APeerWithoutADataPlaneIsLeftToGrpcForAWhile) {
  std::unique_ptr<PeerDataPlane> peers = Make();
  Refuse(absl::FailedPreconditionError("this PS serves gRPC only"));
  const std::vector<grpc::ByteBuffer> messages = {Message("m")};
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(Forward(peers.get(), messages).has_value());
  }
  EXPECT_EQ(opens_.load(), 1);  // not asked again within kRetryAfter
  EXPECT_EQ(calls_.load(), 0);
  // A PS older than the data plane, the same.
  std::unique_ptr<PeerDataPlane> old = Make();
  Refuse(absl::UnimplementedError("unknown method OpenDataPlane"));
  EXPECT_FALSE(Forward(old.get(), messages).has_value());
}

TEST_F(PeerDataPlaneTest, ABodyOverTheLimitGoesOverGrpc) {
  std::unique_ptr<PeerDataPlane> peers = Make(/*max_body_bytes=*/1000);
  EXPECT_FALSE(
      Forward(peers.get(), {Message(std::string(1000, 'y'))}).has_value());
  EXPECT_EQ(opens_.load(), 0);
  // Just under (the body is the messages plus 8 + 4 bytes of framing).
  auto reply = Forward(peers.get(), {Message(std::string(988, 'y'))});
  ASSERT_TRUE(reply.has_value());
  EXPECT_TRUE(reply->ok()) << reply->status();
}

TEST_F(PeerDataPlaneTest, AnUnreachablePeerFailsTheCallRetryably) {
  std::unique_ptr<PeerDataPlane> peers = Make();
  Refuse(absl::UnavailableError("connection refused"));
  const std::vector<grpc::ByteBuffer> messages = {Message("m")};
  auto reply = Forward(peers.get(), messages);
  ASSERT_TRUE(reply.has_value());  // not sent to gRPC for good
  EXPECT_EQ(reply->status().code(), absl::StatusCode::kUnavailable);
  // Back: the next call opens a connection and goes through.
  Refuse(absl::OkStatus());
  reply = Forward(peers.get(), messages);
  ASSERT_TRUE(reply.has_value());
  EXPECT_TRUE(reply->ok()) << reply->status();
  EXPECT_EQ(opens_.load(), 2);
}

// A peer remembers which connections PS opened up to a bound: one it
// forgot refuses the call; that is a retryable failure here, and the
// retry goes over a new connection.
TEST_F(PeerDataPlaneTest, AConnectionThePeerForgotIsReplaced) {
  std::unique_ptr<PeerDataPlane> peers = Make();
  const std::vector<grpc::ByteBuffer> messages = {Message("m")};
  ASSERT_TRUE(Forward(peers.get(), messages)->ok());
  forget_connections_ = true;
  auto refused = Forward(peers.get(), messages);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status().code(), absl::StatusCode::kUnavailable)
      << refused->status();
  auto again = Forward(peers.get(), messages);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->ok()) << again->status();
  EXPECT_EQ(opens_.load(), 2);
}

TEST_F(PeerDataPlaneTest, APeerGoneBreaksTheConnectionAtTheCheck) {
  std::unique_ptr<PeerDataPlane> peers = Make();
  const std::vector<grpc::ByteBuffer> messages = {Message("m")};
  ASSERT_TRUE(Forward(peers.get(), messages)->ok());
  // The peer's process is gone (its gRPC channel says so): the server
  // stops answering, and the call fails at the check, long before its
  // deadline.
  server_.reset();
  gone_ = true;
  Refuse(absl::UnavailableError("connection refused"));
  const absl::Time start = absl::Now();
  auto reply = Forward(peers.get(), messages, absl::Seconds(30));
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status().code(), absl::StatusCode::kUnavailable)
      << reply->status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace psrt
