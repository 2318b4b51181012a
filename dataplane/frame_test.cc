#include "dataplane/frame.h"

#include <cstring>
#include <string>
#include <vector>

#include "dataplane/connection_gate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt::dataplane {
namespace {

std::vector<uint8_t> Encode(const FrameHeader& header) {
  std::vector<uint8_t> bytes(kFrameHeaderBytes);
  EncodeFrameHeader(header, bytes.data());
  return bytes;
}

TEST(FrameTest, AHeaderRoundTrips) {
  FrameHeader header;
  header.kind = FrameKind::kResponse;
  header.connection_id = 0xdeadbeef;
  header.sequence = 12345;
  header.body_bytes = (uint64_t{1} << 30) - 7;
  header.status_code = absl::StatusCode::kResourceExhausted;
  header.connection_key = 0x0123456789abcdefull;
  std::vector<uint8_t> bytes = Encode(header);
  absl::StatusOr<FrameHeader> parsed = ParseFrameHeader(bytes, FrameLimits());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->kind, FrameKind::kResponse);
  EXPECT_EQ(parsed->connection_id, 0xdeadbeef);
  EXPECT_EQ(parsed->sequence, 12345u);
  EXPECT_EQ(parsed->body_bytes, (uint64_t{1} << 30) - 7);
  EXPECT_EQ(parsed->status_code, absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(parsed->connection_key, 0x0123456789abcdefull);
}

TEST(FrameTest, EveryCorruptedFieldIsRefusedByName) {
  FrameHeader header;
  header.body_bytes = 100;
  const std::vector<uint8_t> good = Encode(header);
  struct Case {
    size_t offset;
    uint8_t value;
    const char* expected;
  };
  // Each changes one byte; the CRC then fails unless the field's own check
  // comes first, which is what the message says.
  for (const Case& c :
       {Case{0, 'X', "bad magic"}, Case{4, 2, "version 2"},
        Case{6, 9, "unknown kind 9"}, Case{28, 1, "unknown flags"},
        Case{32, 1, "reserved bytes"}, Case{24, 99, "status code 99"},
        Case{12, 1, "header CRC mismatch"}, Case{40, 1, "header CRC mismatch"},
        Case{45, 0, "header CRC mismatch"}}) {
    std::vector<uint8_t> bytes = good;
    if (bytes[c.offset] == c.value)
      bytes[c.offset] ^= 0xff;
    else
      bytes[c.offset] = c.value;
    absl::StatusOr<FrameHeader> parsed = ParseFrameHeader(bytes, FrameLimits());
    ASSERT_FALSE(parsed.ok()) << "offset " << c.offset;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.expected), std::string::npos)
        << parsed.status();
  }
  std::vector<uint8_t> short_header(good.begin(), good.end() - 1);
  EXPECT_FALSE(ParseFrameHeader(short_header, FrameLimits()).ok());
}

TEST(FrameTest, BodiesOverTheLimitsAreRefused) {
  FrameLimits limits;
  limits.max_body_bytes = 1 << 20;
  limits.max_hello_bytes = 512;
  FrameHeader request;
  request.body_bytes = (1 << 20) + 1;
  absl::StatusOr<FrameHeader> parsed =
      ParseFrameHeader(Encode(request), limits);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("over the limit 1048576"),
            std::string::npos)
      << parsed.status();
  request.body_bytes = 1 << 20;
  EXPECT_TRUE(ParseFrameHeader(Encode(request), limits).ok());
  FrameHeader hello;
  hello.kind = FrameKind::kHello;
  hello.body_bytes = 513;
  EXPECT_FALSE(ParseFrameHeader(Encode(hello), limits).ok());
  request.body_bytes = ~uint64_t{0};
  EXPECT_FALSE(ParseFrameHeader(Encode(request), limits).ok());
  // A ready frame carries nothing.
  FrameHeader ready;
  ready.kind = FrameKind::kReady;
  EXPECT_TRUE(ParseFrameHeader(Encode(ready), limits).ok());
  ready.body_bytes = 1;
  parsed = ParseFrameHeader(Encode(ready), limits);
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("ready body of 1 bytes"),
            std::string::npos)
      << parsed.status();
}

TEST(FrameTest, AMessageIsAHeaderAndExactlyItsInlineBody) {
  FrameHeader header;
  header.body_bytes = 10;
  std::vector<uint8_t> message = Encode(header);
  message.resize(kFrameHeaderBytes + 10, 7);
  absl::StatusOr<FrameMessage> frame =
      ParseFrameMessage(message, FrameLimits());
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_FALSE(frame->body_follows);
  EXPECT_EQ(frame->inline_body.size(), 10u);
  EXPECT_EQ(frame->inline_body[9], 7);
  // One byte short, one over.
  for (size_t size : {kFrameHeaderBytes + 9, kFrameHeaderBytes + 11}) {
    std::vector<uint8_t> wrong = message;
    wrong.resize(size, 7);
    EXPECT_FALSE(ParseFrameMessage(wrong, FrameLimits()).ok()) << size;
  }
  // A body over the inline size travels apart: the message is the header
  // and the sizes of the messages the body comes in.
  header.body_bytes = kInlineBodyBytes + 1;
  std::vector<uint8_t> apart = Encode(header);
  EXPECT_FALSE(ParseFrameMessage(apart, FrameLimits()).ok());  // no sizes
  AppendBodySends({1000, kInlineBodyBytes + 1 - 1000}, &apart);
  frame = ParseFrameMessage(apart, FrameLimits());
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_TRUE(frame->body_follows);
  EXPECT_EQ(frame->body_sends,
            (std::vector<uint32_t>{1000, kInlineBodyBytes + 1 - 1000}));
  EXPECT_TRUE(frame->inline_body.empty());
  apart.push_back(0);  // not a whole size
  EXPECT_FALSE(ParseFrameMessage(apart, FrameLimits()).ok());
  EXPECT_FALSE(
      ParseFrameMessage(absl::MakeConstSpan(apart.data(), 3), FrameLimits())
          .ok());
  // Sizes that do not add up to the body, a message of nothing, too many
  // messages: each refused by name.
  auto with_sends = [&](const std::vector<uint32_t>& sizes) {
    std::vector<uint8_t> m = Encode(header);
    AppendBodySends(sizes, &m);
    return ParseFrameMessage(m, FrameLimits()).status();
  };
  EXPECT_THAT(with_sends({1000, 1000}).message(),
              testing::HasSubstr("add up to 2000 bytes"));
  EXPECT_THAT(with_sends({0, kInlineBodyBytes + 1}).message(),
              testing::HasSubstr("message of 0 bytes"));
  std::vector<uint32_t> many(kMaxBodySends + 1, 1);
  many.back() = kInlineBodyBytes + 1 - kMaxBodySends;
  EXPECT_THAT(with_sends(many).message(), testing::HasSubstr("expected 1 to"));
  many.erase(many.begin());
  many.back() += 1;
  EXPECT_TRUE(with_sends(many).ok());
  EXPECT_TRUE(CheckFrameBody(header, kInlineBodyBytes + 1).ok());
  EXPECT_FALSE(CheckFrameBody(header, kInlineBodyBytes).ok());
}

TEST(FrameTest, TagsSeparateConnectionsCallsAndBodies) {
  EXPECT_NE(HeaderTag(1, 2), HeaderTag(2, 2));
  EXPECT_NE(HeaderTag(1, 2), HeaderTag(1, 3));
  EXPECT_EQ(BodyTag(1, 2), HeaderTag(1, 2) | 1);
  EXPECT_EQ(HeaderTag(7, 9) & ~kAnyHeaderIgnoreBits, 0u);
  EXPECT_EQ(BodyTag(7, 9) & ~kAnyHeaderIgnoreBits, 1u);
}

TEST(ConnectionGateTest, AHelloWithTheTokensProofOpensOnce) {
  ConnectionGate gate("cluster-token");
  const Challenge challenge = gate.Issue();
  EXPECT_EQ(challenge.nonce.size(), kNonceBytes);
  Hello hello{"client-address",
              HelloProof("cluster-token", challenge, "client-address")};
  bool outstanding = false;
  EXPECT_TRUE(gate.Redeem(challenge.connection_id, hello, &outstanding).ok());
  EXPECT_TRUE(outstanding);
  absl::Status again =
      gate.Redeem(challenge.connection_id, hello, &outstanding);
  EXPECT_EQ(again.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(outstanding);
  EXPECT_EQ(gate.pending(), 0u);
}

TEST(ConnectionGateTest, AWrongTokenAnotherAddressOrAnotherChallengeFail) {
  ConnectionGate gate("cluster-token");
  const Challenge a = gate.Issue(), b = gate.Issue();
  EXPECT_NE(a.connection_id, b.connection_id);
  EXPECT_NE(a.nonce, b.nonce);
  bool outstanding = false;
  absl::Status wrong_token =
      gate.Redeem(a.connection_id,
                  Hello{"addr", HelloProof("guess", a, "addr")}, &outstanding);
  EXPECT_EQ(wrong_token.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(outstanding);
  EXPECT_NE(wrong_token.message().find("does not check"), std::string::npos);
  // The failed attempt burned challenge a.
  EXPECT_FALSE(
      gate.Redeem(a.connection_id,
                  Hello{"addr", HelloProof("cluster-token", a, "addr")})
          .ok());
  // b's proof bound to another address does not open b from this one.
  EXPECT_FALSE(
      gate.Redeem(b.connection_id,
                  Hello{"attacker", HelloProof("cluster-token", b, "addr")})
          .ok());
  // An empty proof is no proof when the cluster has a token.
  const Challenge c = gate.Issue();
  EXPECT_FALSE(gate.Redeem(c.connection_id, Hello{"addr", ""}).ok());
}

TEST(ConnectionGateTest, ChallengesExpireAndStayBounded) {
  ConnectionGate expiring("t", 16, absl::Milliseconds(1));
  const Challenge old = expiring.Issue();
  absl::SleepFor(absl::Milliseconds(5));
  EXPECT_FALSE(
      expiring.Redeem(old.connection_id, Hello{"a", HelloProof("t", old, "a")})
          .ok());
  ConnectionGate bounded("t", 16);
  std::vector<Challenge> issued;
  for (int i = 0; i < 1000; ++i) issued.push_back(bounded.Issue());
  EXPECT_EQ(bounded.pending(), 16u);
  EXPECT_FALSE(bounded
                   .Redeem(issued[0].connection_id,
                           Hello{"a", HelloProof("t", issued[0], "a")})
                   .ok());
  EXPECT_TRUE(bounded
                  .Redeem(issued.back().connection_id,
                          Hello{"a", HelloProof("t", issued.back(), "a")})
                  .ok());
}

TEST(ConnectionGateTest, HelloBodiesAreCheckedFieldByField) {
  const std::string body = EncodeHello("fabric-address", "proof-bytes");
  absl::StatusOr<Hello> hello = DecodeHello(body);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->client_address, "fabric-address");
  EXPECT_EQ(hello->proof, "proof-bytes");
  // Every cut, and one byte over, is refused.
  for (size_t n = 0; n < body.size(); ++n) {
    EXPECT_FALSE(DecodeHello(body.substr(0, n)).ok()) << n;
  }
  EXPECT_FALSE(DecodeHello(body + "x").ok());
  std::string overrun = body;
  overrun[0] = '\xff';
  overrun[1] = '\xff';
  EXPECT_FALSE(DecodeHello(overrun).ok());
}

}  // namespace
}  // namespace psrt::dataplane
