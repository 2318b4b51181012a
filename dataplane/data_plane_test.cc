// The data plane end to end over real libfabric providers (tcp and shm) in
// one process: calls, the token, hostile frames and bodies, deadlines.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dataplane/data_plane_client.h"
#include "dataplane/data_plane_server.h"
#include "dataplane/forked_server.h"
#include "gtest/gtest.h"
#include "util/spawn.h"

namespace psrt::dataplane {
namespace {

constexpr char kToken[] = "cluster-token";

absl::Time In(absl::Duration d) { return absl::Now() + d; }

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

// `bytes` cut into pieces of `sizes` (cycled), as a body made of
// prefixes, headers and tensors is.
std::vector<Segment> Cut(absl::Span<const uint8_t> bytes,
                         const std::vector<size_t>& sizes) {
  std::vector<Segment> pieces;
  for (size_t at = 0, i = 0; at < bytes.size(); ++i) {
    const size_t n = std::min(sizes[i % sizes.size()], bytes.size() - at);
    pieces.push_back(bytes.subspan(at, n));
    at += n;
  }
  return pieces;
}

// Requests cut so that large pieces alternate with staged ones (a body
// of several sends); the in-process server's replies cut finer than 64
// sends allow at 8 MiB (the copied fallback).
const std::vector<size_t> kRequestCuts = {3, 5000, 7, 70000, 1, 300000};
const std::vector<size_t> kReplyCuts = {4097, 1};

// Calls with bodies inline (0, 1 and 4096 bytes), just apart, and of
// 8 MiB, sent in pieces, come back reversed (the handlers' answer),
// exactly, into the caller's own buffer and not a byte past it.
void ExpectExactRoundTrips(DataPlaneClient* client) {
  for (size_t n : {size_t{0}, size_t{1}, kInlineBodyBytes, kInlineBodyBytes + 1,
                   size_t{8} << 20}) {
    const std::vector<uint8_t> request = Pattern(n, static_cast<uint8_t>(n));
    std::vector<uint8_t> mine(n + 1, 0xee);  // the caller's buffer
    const std::vector<Segment> pieces = Cut(request, kRequestCuts);
    absl::Status s = client->Call(
        pieces,
        [&](uint64_t bytes) -> absl::StatusOr<absl::Span<uint8_t>> {
          if (bytes != n) return absl::InternalError("unexpected size");
          return absl::MakeSpan(mine.data(), bytes);
        },
        In(absl::Seconds(10)));
    ASSERT_TRUE(s.ok()) << n << ": " << s;
    EXPECT_TRUE(std::equal(request.rbegin(), request.rend(), mine.begin()))
        << n;
    EXPECT_EQ(mine[n], 0xee) << "written past the " << n << " bytes";
  }
}

// A handler that answers a request with its bytes reversed, and counts.
class DataPlaneTest : public ::testing::TestWithParam<std::string> {
 protected:
  void StartServer(FrameLimits limits = FrameLimits(),
                   absl::Duration peer_timeouts = absl::Seconds(5)) {
    DataPlaneServerOptions options;
    options.stuck_send_timeout = peer_timeouts;
    options.body_receive_timeout = peer_timeouts;
    options.fabric = Fabric();
    options.token = kToken;
    options.limits = limits;
    absl::StatusOr<std::unique_ptr<DataPlaneServer>> server =
        DataPlaneServer::Start(
            options,
            [this](uint32_t,
                   absl::Span<const uint8_t> request) -> absl::StatusOr<Reply> {
              ++handled_;
              if (request.size() == 5 &&
                  std::memcmp(request.data(), "sleep", 5) == 0) {
                absl::SleepFor(absl::Seconds(1));
              }
              if (request.size() == 4 &&
                  std::memcmp(request.data(), "fail", 4) == 0) {
                return absl::FailedPreconditionError("asked to fail");
              }
              auto reversed = std::make_shared<std::vector<uint8_t>>(
                  request.rbegin(), request.rend());
              return Reply(Cut(*reversed, kReplyCuts), reversed);
            });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  FabricOptions Fabric() const {
    FabricOptions fabric;
    fabric.provider = GetParam();
    return fabric;
  }

  absl::StatusOr<std::unique_ptr<DataPlaneClient>> Connect(
      absl::string_view token = kToken,
      absl::Time deadline = In(absl::Seconds(10))) {
    return DataPlaneClient::Connect(Fabric(), server_->address(),
                                    server_->IssueChallenge(), token, deadline);
  }

  std::atomic<int> handled_{0};
  std::unique_ptr<DataPlaneServer> server_;
};

TEST_P(DataPlaneTest, CallsCarryExactBytesIntoTheCallersMemory) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto client = Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_NE((*client)->provider().find(GetParam()), std::string::npos);
  ExpectExactRoundTrips(client->get());
  EXPECT_EQ(handled_, 5);
  EXPECT_EQ(server_->stats().bytes_in,
            static_cast<int64_t>(1 + 2 * kInlineBodyBytes + 1 + (8 << 20)));
}

TEST_P(DataPlaneTest, AClientWithoutTheTokenIsRefusedAndNothingIsHandled) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto refused = Connect("not-the-token");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied)
      << refused.status();
  EXPECT_NE(refused.status().message().find("does not check"),
            std::string::npos)
      << refused.status();
  // A challenge can open one connection: its second hello is not answered.
  const Challenge challenge = server_->IssueChallenge();
  auto first = DataPlaneClient::Connect(Fabric(), server_->address(), challenge,
                                        kToken, In(absl::Seconds(10)));
  ASSERT_TRUE(first.ok()) << first.status();
  // Long enough for the hello to leave on a loaded machine under ASan
  // (a connection takes 40-50 ms to set up there, 10 ms optimized).
  auto second = DataPlaneClient::Connect(
      Fabric(), server_->address(), challenge, kToken, In(absl::Seconds(2)));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable)
      << second.status();
  EXPECT_EQ(server_->stats().refused_hellos, 2);
  EXPECT_EQ(server_->connections(), 1u);
  EXPECT_EQ(handled_, 0);
  auto reply = (*first)->Call(Pattern(3, 1), In(absl::Seconds(10)));
  EXPECT_TRUE(reply.ok()) << reply.status();
}

// A connect whose time runs out before its hello can leave (tcp: the
// connection still being set up) is the PS not answering in time, as a
// hello that got no welcome is, not a full queue; the PS serves on.
TEST_P(DataPlaneTest, AConnectOutOfTimeBeforeItsHelloLeavesIsUnavailable) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto late = Connect(kToken, absl::Now());
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable)
      << late.status();
  EXPECT_NE(late.status().message().find("no welcome"), std::string::npos)
      << late.status();
  auto client = Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  auto reply = (*client)->Call(Pattern(3, 1), In(absl::Seconds(10)));
  EXPECT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(handled_, 1);
}

// A peer speaking the framing by hand, to send what a client never would.
class RawPeer {
 public:
  RawPeer(const FabricOptions& fabric, const std::string& server_address) {
    endpoint_ = *FabricEndpoint::Open(fabric);
    server_ = *endpoint_->InsertPeer(server_address);
  }
  // Sends `bytes` and waits for the send to complete, unless `wait` is
  // false (a body the server drains may never complete its sender).
  void Send(uint64_t tag, const std::vector<uint8_t>& bytes, bool wait = true) {
    ops_.push_back(std::make_unique<Op>());
    kept_.push_back(bytes);
    Op& op = *ops_.back();
    const std::vector<uint8_t>& kept = kept_.back();
    absl::Status posted;
    Completion c;
    // The first send to a peer waits for its connection (tcp).
    while (absl::IsResourceExhausted(
        posted = endpoint_->PostSend(server_, tag, kept.data(), kept.size(),
                                     nullptr, &op))) {
      endpoint_->Poll(&c, 1, absl::Milliseconds(1));
    }
    ASSERT_TRUE(posted.ok()) << posted;
    while (wait) {
      ASSERT_EQ(endpoint_->Poll(&c, 1, absl::Seconds(10)), 1u);
      if (c.op == &op) return;
    }
  }
  // Waits for the server's ready frame for `sequence`'s separate body.
  void AwaitReady(uint32_t connection, uint32_t sequence) {
    absl::StatusOr<FrameMessage> ready = Answer(connection, sequence);
    ASSERT_TRUE(ready.ok()) << ready.status();
    EXPECT_EQ(ready->header.kind, FrameKind::kReady);
    EXPECT_EQ(ready->header.connection_key, key_);
  }
  // `request`'s header, then, once the server is ready for it, `body`
  // apart; the server's answer.
  absl::StatusOr<FrameMessage> CallWithBodyApart(const FrameHeader& request,
                                                 size_t body_bytes) {
    Send(HeaderTag(request.connection_id, request.sequence), Message(request));
    AwaitReady(request.connection_id, request.sequence);
    Send(BodyTag(request.connection_id, request.sequence),
         std::vector<uint8_t>(body_bytes, 2));
    return Answer(request.connection_id, request.sequence);
  }
  // A request with `body` inline, on `connection_id` with `key`.
  void SendRequest(uint32_t connection_id, uint32_t sequence, uint64_t key,
                   absl::string_view body) {
    FrameHeader request;
    request.kind = FrameKind::kRequest;
    request.connection_id = connection_id;
    request.sequence = sequence;
    request.connection_key = key;
    request.body_bytes = body.size();
    Send(HeaderTag(connection_id, sequence), Message(request, body));
  }
  static std::vector<uint8_t> Message(const FrameHeader& header,
                                      absl::string_view inline_body = "") {
    std::vector<uint8_t> m(kFrameHeaderBytes);
    EncodeFrameHeader(header, m.data());
    m.insert(m.end(), inline_body.begin(), inline_body.end());
    // A separate body: announced as one message.
    if (header.body_bytes > kInlineBodyBytes) {
      AppendBodySends({static_cast<uint32_t>(header.body_bytes)}, &m);
    }
    return m;
  }
  // The answer to `sequence` on `connection`, or an error within 1 s.
  absl::StatusOr<FrameMessage> Answer(uint32_t connection, uint32_t sequence) {
    absl::StatusOr<size_t> bytes =
        Receive(HeaderTag(connection, sequence), absl::Seconds(1));
    if (!bytes.ok()) return bytes.status();
    return ParseFrameMessage(absl::MakeConstSpan(answer_, *bytes),
                             FrameLimits());
  }
  // The size of the first body message of `sequence` on `connection`.
  absl::StatusOr<size_t> BodyMessage(uint32_t connection, uint32_t sequence) {
    return Receive(BodyTag(connection, sequence), absl::Seconds(5));
  }
  // Opens a connection as a client would; key() is then its key.
  uint64_t key() const { return key_; }
  uint32_t Open(const Challenge& challenge) {
    FrameHeader hello;
    hello.kind = FrameKind::kHello;
    hello.connection_id = challenge.connection_id;
    const std::string body =
        EncodeHello(endpoint_->address(),
                    HelloProof(kToken, challenge, endpoint_->address()));
    hello.body_bytes = body.size();
    Send(HeaderTag(challenge.connection_id, 0), Message(hello, body));
    absl::StatusOr<FrameMessage> welcome = Answer(challenge.connection_id, 0);
    EXPECT_TRUE(welcome.ok()) << welcome.status();
    if (welcome.ok()) {
      EXPECT_EQ(welcome->header.kind, FrameKind::kWelcome);
      EXPECT_EQ(welcome->inline_body.size(), 8u);
      std::memcpy(&key_, welcome->inline_body.data(), 8);  // little-endian
    }
    return challenge.connection_id;
  }

 private:
  std::unique_ptr<FabricEndpoint> endpoint_;
  fi_addr_t server_;
  std::vector<std::unique_ptr<Op>> ops_;
  uint64_t key_ = 0;
  std::deque<std::vector<uint8_t>> kept_;
  uint8_t answer_[kHeaderMessageBytes];

  // A message tagged `tag` received into answer_ within `timeout`: its
  // size.
  absl::StatusOr<size_t> Receive(uint64_t tag, absl::Duration timeout) {
    Op op;
    EXPECT_TRUE(
        endpoint_
            ->PostRecv(server_, tag, 0, answer_, sizeof(answer_), nullptr, &op)
            .ok());
    Completion c;
    if (endpoint_->Poll(&c, 1, timeout) == 0) {
      endpoint_->Cancel(&op);
      while (endpoint_->Poll(&c, 1, absl::Seconds(1)) == 0) {
      }
      return absl::DeadlineExceededError("no message");
    }
    return c.bytes;
  }
};

TEST_P(DataPlaneTest, ForgedFramesAreDroppedAndTheServerKeepsServing) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto client = Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  RawPeer attacker(Fabric(), server_->address());
  // A request naming the client's connection, from another address.
  attacker.SendRequest((*client)->connection_id(), 1, 0, "abc");
  // Garbage, and a frame kind only a server sends.
  attacker.Send(HeaderTag(5, 5), std::vector<uint8_t>(64, 0x41));
  FrameHeader welcome;
  welcome.kind = FrameKind::kWelcome;
  attacker.Send(HeaderTag(0, 0), RawPeer::Message(welcome));
  // One with a separate body, naming a connection never opened: no ready
  // comes for it, and the body sent anyway is never received (the
  // attacker's send of it may never complete). Over rxm's eager limit, so
  // that it waits at the attacker; one under it rxm would buffer until
  // the process ends (docs/operations.md), a leak to LeakSanitizer.
  FrameHeader request;
  request.kind = FrameKind::kRequest;
  request.connection_id = 77;
  request.sequence = 1;
  request.body_bytes = 8 << 20;  // the eager limit: 4.25 MiB
  attacker.Send(HeaderTag(77, 1), RawPeer::Message(request));
  attacker.Send(BodyTag(77, 1), std::vector<uint8_t>(8 << 20, 1), false);
  const absl::Time until = In(absl::Seconds(10));
  while (server_->stats().refused_frames < 4 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(server_->stats().refused_frames, 4);
  EXPECT_EQ(handled_, 0);
  auto reply = (*client)->Call(Pattern(10, 3), In(absl::Seconds(10)));
  EXPECT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(handled_, 1);
}

// (Not over shm: libfabric 1.17's shm jams its receive queue for every
// sender once a message is truncated into a shorter receive, seen here as
// the next client's send spinning forever; docs/architecture.md.)
TEST_P(DataPlaneTest, ABodyNotItsHeadersSizeIsRefusedWithNothingHandled) {
  FrameLimits limits;
  limits.max_body_bytes = 1 << 20;
  ASSERT_NO_FATAL_FAILURE(StartServer(limits));
  FrameHeader request;
  request.kind = FrameKind::kRequest;
  request.body_bytes = 10000;
  {
    // Longer than announced: the fabric truncates it into the 10000 bytes
    // posted, and the server refuses it. (rxm may then close the
    // connection before the refusal reaches it: the answer is not waited
    // for.)
    RawPeer liar(Fabric(), server_->address());
    request.connection_id = liar.Open(server_->IssueChallenge());
    request.connection_key = liar.key();
    request.sequence = 1;
    liar.Send(HeaderTag(request.connection_id, 1), RawPeer::Message(request));
    ASSERT_NO_FATAL_FAILURE(liar.AwaitReady(request.connection_id, 1));
    liar.Send(BodyTag(request.connection_id, 1),
              std::vector<uint8_t>(10100, 2));
    const absl::Time until = In(absl::Seconds(10));
    while (server_->stats().refused_bodies < 1 && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_EQ(server_->stats().refused_bodies, 1);
  }
  RawPeer peer(Fabric(), server_->address());
  const uint32_t id = peer.Open(server_->IssueChallenge());
  request.connection_id = id;
  request.connection_key = peer.key();
  // Shorter than announced: refused, and said so.
  request.sequence = 2;
  absl::StatusOr<FrameMessage> answer = peer.CallWithBodyApart(request, 9000);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->header.status_code, absl::StatusCode::kInvalidArgument);
  const std::string message(answer->inline_body.begin(),
                            answer->inline_body.end());
  EXPECT_NE(message.find("nothing applied"), std::string::npos) << message;
  // Over the server's limit: not even received (no ready); the frame is
  // dropped.
  request.sequence = 3;
  request.body_bytes = (1 << 20) + 1;
  peer.Send(HeaderTag(id, 3), RawPeer::Message(request));
  EXPECT_FALSE(peer.Answer(id, 3).ok());
  // An inline body one byte off its header.
  request.sequence = 4;
  request.body_bytes = 5;
  peer.Send(HeaderTag(id, 4), RawPeer::Message(request, "four"));
  EXPECT_FALSE(peer.Answer(id, 4).ok());
  EXPECT_EQ(handled_, 0);
  EXPECT_EQ(server_->stats().refused_bodies, 2);
  EXPECT_EQ(server_->stats().refused_frames, 2);
  // The same connection's well-formed call is served.
  request.sequence = 5;
  request.body_bytes = 10000;
  answer = peer.CallWithBodyApart(request, 10000);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->header.status_code, absl::StatusCode::kOk);
  EXPECT_EQ(answer->header.body_bytes, 10000u);
  EXPECT_EQ(handled_, 1);
}

TEST_P(DataPlaneTest, AReplyBodyMovesOnlyOnItsClientsReadyFrame) {
  ASSERT_NO_FATAL_FAILURE(StartServer(FrameLimits(), absl::Seconds(1)));
  RawPeer peer(Fabric(), server_->address());
  const uint32_t id = peer.Open(server_->IssueChallenge());
  FrameHeader request;
  request.kind = FrameKind::kRequest;
  request.connection_id = id;
  request.connection_key = peer.key();
  request.sequence = 1;
  request.body_bytes = 10000;
  // The reply's header lists a separate body, which does not come: this
  // peer never says it is ready. The server drops it after its
  // stuck_send_timeout (1 s here).
  absl::StatusOr<FrameMessage> answer = peer.CallWithBodyApart(request, 10000);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->header.kind, FrameKind::kResponse);
  EXPECT_TRUE(answer->body_follows);
  EXPECT_EQ(answer->header.body_bytes, 10000u);
  const absl::Time until = In(absl::Seconds(10));
  while (server_->stats().unclaimed_replies < 1 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(server_->stats().unclaimed_replies, 1);
  // A ready frame too late is told that the reply was dropped (a body
  // message of 0 bytes), once.
  FrameHeader ready = ReadyHeader(id, 1, peer.key());
  peer.Send(HeaderTag(id, 1), RawPeer::Message(ready));
  absl::StatusOr<size_t> notice = peer.BodyMessage(id, 1);
  ASSERT_TRUE(notice.ok()) << notice.status();
  EXPECT_EQ(*notice, 0u);
  EXPECT_EQ(server_->stats().late_readies, 1);
  // The same again, one for a call never made, and one without the
  // connection's key: each counted and dropped.
  peer.Send(HeaderTag(id, 1), RawPeer::Message(ready));
  ready.sequence = 9;
  peer.Send(HeaderTag(id, 9), RawPeer::Message(ready));
  ready.connection_key = peer.key() + 1;
  ready.sequence = 1;
  peer.Send(HeaderTag(id, 1), RawPeer::Message(ready));
  while (server_->stats().refused_frames < 3 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(server_->stats().refused_frames, 3);
  EXPECT_EQ(server_->stats().late_readies, 1);
  EXPECT_EQ(server_->stats().bytes_out, 10000);  // counted when answered
  // Clients that say ready get their replies, exactly.
  auto client = Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  ExpectExactRoundTrips(client->get());
  EXPECT_EQ(server_->stats().unclaimed_replies, 1);
}

TEST_P(DataPlaneTest, ErrorsComeBackAndDeadlinesBreakOnlyTheirConnection) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  auto client = Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string fail = "fail";
  auto failed = (*client)->Call(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(fail.data()), 4),
      In(absl::Seconds(10)));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(failed.status().message(), "asked to fail");
  EXPECT_FALSE((*client)->broken());
  const std::string sleep = "sleep";
  const absl::Time start = absl::Now();
  auto late = (*client)->Call(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(sleep.data()), 5),
      In(absl::Milliseconds(200)));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(900));
  EXPECT_TRUE((*client)->broken());
  auto after = (*client)->Call(Pattern(3, 1), In(absl::Seconds(10)));
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable);
  auto fresh = Connect();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  auto reply = (*fresh)->Call(Pattern(3, 1), In(absl::Seconds(10)));
  EXPECT_TRUE(reply.ok()) << reply.status();
}

// A killable_sender started against this server with a challenge of its
// own; its stdout (its progress lines) comes back through `progress`.
pid_t SpawnSender(DataPlaneServer* server, const std::string& provider,
                  FILE** progress) {
  const Challenge challenge = server->IssueChallenge();
  std::vector<std::string> args = {
      "dataplane/killable_sender",
      "--provider=" + provider,
      "--address_hex=" + absl::BytesToHexString(server->address()),
      absl::StrCat("--connection_id=", challenge.connection_id),
      "--nonce_hex=" + absl::BytesToHexString(challenge.nonce),
      absl::StrCat("--token=", kToken)};
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return -1;
  SpawnOptions options;
  options.stdout_fd = out[1];
  auto pid = SpawnProcess(args, options);
  close(out[1]);
  if (!pid.ok()) {
    close(out[0]);
    return -1;
  }
  *progress = fdopen(out[0], "r");
  return *pid;
}

// Senders killed -9 in the middle of their 8 MiB bodies (rxm's rendezvous,
// 64 pieces) and of their replies leave the server serving, exactly: what
// it had posted for a dead sender completes in error, late or never, and
// is never freed under the provider (a late completion of a freed body
// receive crashed a PS: heap-use-after-free under ASan), and the budget
// the dead bodies held is given back.
TEST_P(DataPlaneTest, SendersKilledMidBodyLeaveTheServerServing) {
  ASSERT_NO_FATAL_FAILURE(StartServer(FrameLimits(), absl::Seconds(1)));
  constexpr int kSenders = 12;
  for (int round = 0; round < kSenders; ++round) {
    FILE* progress = nullptr;
    const pid_t pid = SpawnSender(server_.get(), GetParam(), &progress);
    ASSERT_GT(pid, 0) << "could not start dataplane/killable_sender";
    ASSERT_NE(progress, nullptr);
    char line[64] = {};
    // Connected, and one call done.
    int lines = 0;
    while (lines < 2 && std::fgets(line, sizeof(line), progress) != nullptr) {
      ++lines;
    }
    ASSERT_EQ(lines, 2) << "round " << round << ": the sender ended early";
    // Killed at once (the next call's header on its way, or the server
    // posting its body's receives), once the server posted them (the
    // body on its way), or 10 ms later (its reply on the way, mostly).
    // Before bodies waited for the server's ready frame, a sender killed
    // between its header reaching the server and the server posting the
    // body's receives crashed rxm (libfabric 1.17) itself, a SEGV inside
    // fi_trecv (1 run in 12 of this test; docs/architecture.md).
    if (round % 3 != 0) {
      const int64_t posted = server_->stats().bodies_posted;
      const absl::Time give_up = In(absl::Seconds(10));
      while (server_->stats().bodies_posted == posted &&
             absl::Now() < give_up) {
        absl::SleepFor(absl::Microseconds(50));
      }
    }
    if (round % 3 == 2) absl::SleepFor(absl::Milliseconds(10));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    fclose(progress);
    EXPECT_TRUE(WIFSIGNALED(status)) << "round " << round;
  }
  auto client = Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  ExpectExactRoundTrips(client->get());
  EXPECT_GE(server_->stats().calls, kSenders + 5);
  // What the dead senders' bodies held of the budget comes back once
  // their receives end (cancelled after body_receive_timeout at most).
  const absl::Time give_up = In(absl::Seconds(10));
  while (server_->stats().inflight_body_bytes > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(server_->stats().inflight_body_bytes, 0);
  std::printf("late completions dropped: %lld\n",
              static_cast<long long>(server_->stats().late_completions));
}

// In one process over tcp only: two shm endpoints in one process crashed
// in libfabric (3 runs in 40); shm runs across processes below, as a PS
// and its clients do.
INSTANTIATE_TEST_SUITE_P(InProcess, DataPlaneTest, ::testing::Values("tcp"));

// The server in a child process. Its handler answers "count" with the
// number of calls it handled before, anything else with the request
// reversed.
class ForkedDataPlaneTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    DataPlaneServerOptions options;
    options.fabric.provider = GetParam();
    options.token = kToken;
    auto calls = std::make_shared<std::atomic<int>>(0);
    auto server = ForkedServer::Start(
        options,
        [calls](uint32_t,
                absl::Span<const uint8_t> request) -> absl::StatusOr<Reply> {
          if (request.size() == 5 &&
              std::memcmp(request.data(), "count", 5) == 0) {
            auto text =
                std::make_shared<std::string>(std::to_string(calls->load()));
            return Reply{absl::MakeConstSpan(
                             reinterpret_cast<const uint8_t*>(text->data()),
                             text->size()),
                         text};
          }
          ++*calls;
          auto reversed = std::make_shared<std::vector<uint8_t>>(
              request.rbegin(), request.rend());
          // Sent in several gathered messages (the in-process server's
          // replies take the copied fallback).
          return Reply(Cut(*reversed, kRequestCuts), reversed);
        },
        kChallenges);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  absl::StatusOr<std::unique_ptr<DataPlaneClient>> Connect(
      int challenge, absl::string_view token = kToken) {
    return ConnectTo(*server_, challenge, token);
  }
  absl::StatusOr<std::unique_ptr<DataPlaneClient>> ConnectTo(
      const ForkedServer& server, int challenge,
      absl::string_view token = kToken) {
    FabricOptions fabric;
    fabric.provider = GetParam();
    return DataPlaneClient::Connect(fabric, server.address(),
                                    server.challenges()[challenge], token,
                                    In(absl::Seconds(10)));
  }
  // Another server in a child, answering each request reversed, whose
  // peer timeouts (a ready frame, a body) are `timeout`.
  absl::StatusOr<std::unique_ptr<ForkedServer>> StartReversing(
      absl::Duration timeout, int challenges) {
    DataPlaneServerOptions options;
    options.fabric.provider = GetParam();
    options.token = kToken;
    options.stuck_send_timeout = timeout;
    options.body_receive_timeout = timeout;
    return ForkedServer::Start(
        options,
        [](uint32_t,
           absl::Span<const uint8_t> request) -> absl::StatusOr<Reply> {
          auto reversed = std::make_shared<std::vector<uint8_t>>(
              request.rbegin(), request.rend());
          return Reply(Cut(*reversed, kRequestCuts), reversed);
        },
        challenges);
  }

  // Enough for the many-endpoints case's connections.
  static constexpr int kChallenges = 3 + 4 * 6;
  std::unique_ptr<ForkedServer> server_;
};

TEST_P(ForkedDataPlaneTest, CallsCarryExactBytesBetweenProcesses) {
  auto client = Connect(0);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_NE((*client)->provider().find(GetParam()), std::string::npos);
  ExpectExactRoundTrips(client->get());
}

TEST_P(ForkedDataPlaneTest, AWrongTokenIsRefusedAndAForgedRequestNotHandled) {
  auto refused = Connect(0, "not-the-token");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied)
      << refused.status();
  auto client = Connect(1);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Call(Pattern(10, 1), In(absl::Seconds(10))).ok());
  // Another process names the client's connection without its key (over
  // shm the provider reports such a sender as the client itself).
  RawPeer attacker(FabricOptions{GetParam(), "127.0.0.1"}, server_->address());
  attacker.SendRequest((*client)->connection_id(), 1000, 0, "abc");
  EXPECT_FALSE(attacker.Answer((*client)->connection_id(), 1000).ok());
  const std::string count = "count";
  auto calls = (*client)->Call(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(count.data()), 5),
      In(absl::Seconds(10)));
  ASSERT_TRUE(calls.ok()) << calls.status();
  EXPECT_EQ(*calls, "1");  // the client's call only
}

// CPU seconds `pid` used so far (user and system).
double CpuSeconds(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string all((std::istreambuf_iterator<char>(stat)),
                  std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis: utime is the 12th.
  std::vector<std::string> fields =
      absl::StrSplit(all.substr(all.rfind(')') + 2), ' ');
  if (fields.size() < 13) return -1;
  return (std::stod(fields[11]) + std::stod(fields[12])) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A server with nothing to do sleeps (shm has nothing to wake a waiter:
// its clients ring the server's doorbell), and a call after a pause is
// answered at once rather than at the server's next timeout (100 ms).
TEST_P(ForkedDataPlaneTest, AnIdleServerSleepsAndWakesForACall) {
  auto client = Connect(0);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Call(Pattern(10, 1), In(absl::Seconds(10))).ok());
  const double before = CpuSeconds(server_->pid());
  absl::SleepFor(absl::Seconds(2));
  const double idle = CpuSeconds(server_->pid()) - before;
  std::printf("%s server idle 2 s: %.3f CPU seconds\n", GetParam().c_str(),
              idle);
  // Polled every 50 us it took 0.35 s of 2 s here; asleep, under 0.02.
  EXPECT_LT(idle, 0.1);
  std::vector<double> ms;
  for (int i = 0; i < 21; ++i) {
    absl::SleepFor(absl::Milliseconds(5));  // the server goes back to sleep
    const absl::Time start = absl::Now();
    ASSERT_TRUE((*client)->Call(Pattern(100, 2), In(absl::Seconds(10))).ok());
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%s call after a pause: median %.3f ms\n", GetParam().c_str(),
              ms[ms.size() / 2]);
  EXPECT_LT(ms[ms.size() / 2], 20);
}

// A worker holds an endpoint per lane per PS: several endpoints of one
// process call the same server at once, each closed and opened again.
TEST_P(ForkedDataPlaneTest, ManyEndpointsOfOneProcessCallAtOnce) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 6;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        auto client = Connect(3 + t * kRounds + round);
        if (!client.ok()) {
          ADD_FAILURE() << "thread " << t << " round " << round << ": "
                        << client.status();
          ++failures;
          return;
        }
        ExpectExactRoundTrips(client->get());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

// A client whose ready frame comes after the server stopped waiting for
// it (the client was stopped or starved between the reply's header and
// its ready; here its sink takes 1 s) is told at once that the reply was
// dropped: UNAVAILABLE, which callers retry, not its call's deadline.
TEST_P(ForkedDataPlaneTest, AClientLateForItsReplyIsToldAtOnce) {
  auto server = StartReversing(absl::Milliseconds(300), 2);
  ASSERT_TRUE(server.ok()) << server.status();
  auto late = ConnectTo(**server, 0);
  ASSERT_TRUE(late.ok()) << late.status();
  const std::vector<uint8_t> request = Pattern(size_t{64} << 10, 5);
  std::vector<uint8_t> reply(request.size());
  const absl::Time start = absl::Now();
  absl::Status s = (*late)->Call(
      Cut(request, kRequestCuts),
      [&](uint64_t bytes) -> absl::StatusOr<absl::Span<uint8_t>> {
        absl::SleepFor(absl::Seconds(1));  // past the server's 300 ms
        return absl::MakeSpan(reply.data(), bytes);
      },
      In(absl::Seconds(20)));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("%s: late client answered %s after %.2f s\n", GetParam().c_str(),
              s.ToString().c_str(), seconds);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("dropped its reply"), std::string::npos) << s;
  EXPECT_LT(seconds, 5);  // its deadline was 20 s off
  // The server serves on: a client in time gets its reply, exactly.
  auto on_time = ConnectTo(**server, 1);
  ASSERT_TRUE(on_time.ok()) << on_time.status();
  s = (*on_time)->Call(
      Cut(request, kRequestCuts),
      [&](uint64_t bytes) -> absl::StatusOr<absl::Span<uint8_t>> {
        return absl::MakeSpan(reply.data(), bytes);
      },
      In(absl::Seconds(10)));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(std::equal(request.rbegin(), request.rend(), reply.begin()));
}

// A server stopped (SIGSTOP: a paused VM, a process swapped out, a
// debugger) longer than its peer timeouts finishes every call once it runs
// again: its clients were alive all along, and what they sent meanwhile
// (ready frames, bodies) waits in the provider's queue. Only the time the
// server ran counts against them. Calls in flight from several connections
// at each stop catch some of them in each step of a call.
TEST_P(ForkedDataPlaneTest, AServerStoppedLongerThanItsTimeoutsLosesNoCall) {
  constexpr int kConnections = 6;
  auto server = StartReversing(absl::Milliseconds(500), kConnections);
  ASSERT_TRUE(server.ok()) << server.status();
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0};
  std::vector<std::string> failures(kConnections);
  std::vector<double> slowest_ms(kConnections, 0);
  std::vector<std::thread> threads;
  for (int c = 0; c < kConnections; ++c) {
    threads.emplace_back([&, c] {
      auto client = ConnectTo(**server, c);
      if (!client.ok()) {
        failures[c] = client.status().ToString();
        return;
      }
      // Bodies apart from their headers both ways: each call has a ready
      // frame each way.
      const std::vector<uint8_t> request =
          Pattern(size_t{64} << 10, static_cast<uint8_t>(c));
      std::vector<uint8_t> reply(request.size());
      while (!stop) {
        const absl::Time start = absl::Now();
        absl::Status s = (*client)->Call(
            Cut(request, kRequestCuts),
            [&](uint64_t bytes) -> absl::StatusOr<absl::Span<uint8_t>> {
              if (bytes != reply.size()) {
                return absl::InternalError("unexpected size");
              }
              return absl::MakeSpan(reply);
            },
            // Well past a stop; a call the server dropped fails here.
            In(absl::Seconds(6)));
        if (s.ok() &&
            !std::equal(request.rbegin(), request.rend(), reply.begin())) {
          s = absl::DataLossError("reply not the request reversed");
        }
        if (!s.ok()) {
          failures[c] = s.ToString();
          return;
        }
        slowest_ms[c] = std::max(
            slowest_ms[c], absl::ToDoubleMilliseconds(absl::Now() - start));
        ++calls;
      }
    });
  }
  constexpr int kStops = 3;
  int calls_after_last_stop = 0;
  for (int i = 0; i < kStops; ++i) {
    absl::SleepFor(absl::Milliseconds(200));
    ASSERT_EQ(kill((*server)->pid(), SIGSTOP), 0);
    absl::SleepFor(absl::Seconds(1));  // twice the server's timeouts
    const int before = calls.load();
    ASSERT_EQ(kill((*server)->pid(), SIGCONT), 0);
    absl::SleepFor(absl::Milliseconds(200));
    calls_after_last_stop = calls.load() - before;
  }
  stop = true;
  for (std::thread& thread : threads) thread.join();
  std::printf("%s: %d calls over %d stops of 1 s; slowest %.0f ms\n",
              GetParam().c_str(), calls.load(), kStops,
              *std::max_element(slowest_ms.begin(), slowest_ms.end()));
  for (int c = 0; c < kConnections; ++c) {
    EXPECT_EQ(failures[c], "") << "connection " << c;
  }
  EXPECT_GT(calls_after_last_stop, 0);
}

INSTANTIATE_TEST_SUITE_P(Providers, ForkedDataPlaneTest,
                         ::testing::Values("tcp", "shm"));

TEST(FabricEndpointTest, AMissingProviderIsUnavailableByName) {
  FabricOptions fabric;
  fabric.provider = "no_such_provider";
  auto endpoint = FabricEndpoint::Open(fabric);
  ASSERT_FALSE(endpoint.ok());
  EXPECT_EQ(endpoint.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(endpoint.status().message().find("no_such_provider"),
            std::string::npos)
      << endpoint.status();
}

TEST(FabricEndpointTest, PeerAddressesAreCheckedBeforeLibfabricReadsThem) {
  auto endpoint = FabricEndpoint::Open(FabricOptions());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  EXPECT_FALSE((*endpoint)->InsertPeer("").ok());
  EXPECT_FALSE((*endpoint)->InsertPeer(std::string(3, 'x')).ok());
  EXPECT_FALSE((*endpoint)->InsertPeer(std::string(1000, 'x')).ok());
  EXPECT_TRUE((*endpoint)->InsertPeer((*endpoint)->address()).ok());
}

}  // namespace
}  // namespace psrt::dataplane
