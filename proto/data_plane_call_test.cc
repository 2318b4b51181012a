#include "proto/data_plane_call.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/byte_buffer_bytes.h"

namespace psrt {
namespace {

grpc::ByteBuffer Message(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::vector<uint8_t> Encode(DataPlaneMethod method,
                            const std::vector<grpc::ByteBuffer>& messages) {
  std::vector<uint8_t> body(DataPlaneCallBytes(messages));
  EncodeDataPlaneCall(method, messages, body.data());
  return body;
}

TEST(DataPlaneCallTest, MessagesComeBackByteForByte) {
  // A message of two slices, an empty one and a 1 MB one.
  grpc::Slice parts[2] = {grpc::Slice(std::string("head")),
                          grpc::Slice(std::string("tail"))};
  std::vector<grpc::ByteBuffer> messages = {grpc::ByteBuffer(parts, 2),
                                            Message(""),
                                            Message(std::string(1 << 20, 'x'))};
  std::vector<uint8_t> body = Encode(DataPlaneMethod::kPush, messages);
  EXPECT_EQ(body.size(), 8u + 4 + 8 + 4 + 4 + (1 << 20));
  absl::StatusOr<DataPlaneCall> call = DecodeDataPlaneCall(body, 16);
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->method, DataPlaneMethod::kPush);
  ASSERT_EQ(call->messages.size(), 3u);
  std::string bytes;
  ASSERT_TRUE(ByteBufferBytes(call->messages[0], &bytes));
  EXPECT_EQ(bytes, "headtail");
  EXPECT_EQ(call->messages[1].Length(), 0u);
  ASSERT_TRUE(ByteBufferBytes(call->messages[2], &bytes));
  EXPECT_EQ(bytes, std::string(1 << 20, 'x'));
}

TEST(DataPlaneCallTest, MessagesHoldTheOwnerUntilTheLastGoes) {
  // (gRPC copies a part of a few bytes rather than share it.)
  const std::string kLong(1000, 'y');
  auto body = std::make_shared<std::vector<uint8_t>>(
      Encode(DataPlaneMethod::kPush, {Message("abc"), Message(kLong)}));
  std::weak_ptr<std::vector<uint8_t>> watch = body;
  std::vector<grpc::ByteBuffer> kept;
  {
    absl::Span<const uint8_t> bytes = *body;
    absl::StatusOr<DataPlaneCall> call =
        DecodeDataPlaneCall(bytes, 16, std::move(body));
    ASSERT_TRUE(call.ok()) << call.status();
    kept.push_back(call->messages[1]);
  }
  body.reset();
  EXPECT_FALSE(watch.expired());  // a message (a push being forwarded) holds it
  std::string bytes;
  ASSERT_TRUE(ByteBufferBytes(kept[0], &bytes));
  EXPECT_EQ(bytes, kLong);
  kept.clear();
  EXPECT_TRUE(watch.expired());
}

TEST(DataPlaneCallTest, HostileBodiesAreRefusedByName) {
  std::vector<uint8_t> good =
      Encode(DataPlaneMethod::kPull, {Message("abc"), Message("de")});
  ASSERT_TRUE(DecodeDataPlaneCall(good, 16).ok());
  auto refused = [](std::vector<uint8_t> body, size_t max_messages,
                    const std::string& says) {
    absl::StatusOr<DataPlaneCall> call =
        DecodeDataPlaneCall(body, max_messages);
    ASSERT_FALSE(call.ok()) << says;
    EXPECT_EQ(call.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(call.status().message().find(says), std::string::npos)
        << call.status();
  };
  refused({1, 0, 0}, 16, "shorter than its 8-byte preamble");
  std::vector<uint8_t> b = good;
  b[0] = 7;
  refused(b, 16, "unknown method 7");
  b = good;
  b[2] = 1;
  refused(b, 16, "reserved preamble bytes");
  b = good;
  b[4] = 0xff;  // 255 messages announced in 21 bytes
  refused(b, 1000, "announces 255 messages");
  refused(good, 1, "at most 1");
  b = good;
  b[8] = 200;  // first message's size past the end
  refused(b, 16, "runs past the body's end");
  b = good;
  b.push_back(0);
  refused(b, 16, "1 bytes after its last message");
  b = good;
  b.resize(b.size() - 1);  // second message's bytes cut
  refused(b, 16, "message 1 of 2 bytes runs past");
  // Every cut of a good body is refused, never read past its end.
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    EXPECT_FALSE(DecodeDataPlaneCall(cut, 16).ok()) << n;
  }
}

}  // namespace
}  // namespace psrt
