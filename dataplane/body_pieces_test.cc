#include "dataplane/body_pieces.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace psrt::dataplane {
namespace {

std::vector<uint8_t> Bytes(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// The body as the receiver reads it: every send's pieces back to back.
std::vector<uint8_t> Gathered(const OutgoingBody& body) {
  std::vector<uint8_t> out(body.bytes());
  body.CopyTo(out.data());
  return out;
}

std::vector<uint8_t> Joined(const std::vector<std::vector<uint8_t>>& parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(OutgoingBodyTest, LargeSegmentsLeaveFromWhereTheyAreFramingIsStaged) {
  // A pull reply of 4 messages: a size prefix and a header (small), then
  // the tensor's bytes (large), each.
  std::vector<std::vector<uint8_t>> parts;
  for (int m = 0; m < 4; ++m) {
    parts.push_back(Bytes(4, 1));
    parts.push_back(Bytes(40, 9));
    parts.push_back(Bytes(1 << 20, static_cast<uint8_t>(m)));
  }
  std::vector<Segment> segments(parts.begin(), parts.end());
  OutgoingBody body(segments, 4);
  EXPECT_EQ(body.bytes(), 4u * (44 + (1 << 20)));
  // Prefix and header join into one staged piece: 8 pieces, 2 sends.
  ASSERT_EQ(body.sends().size(), 2u);
  EXPECT_EQ(body.staged_bytes(), 4u * 44);
  for (const OutgoingBody::Send& send : body.sends()) {
    ASSERT_EQ(send.count, 4u);
    // The tensors' pieces point at the caller's memory, not a copy.
    EXPECT_EQ(send.iov[1].iov_len, size_t{1} << 20);
  }
  EXPECT_EQ(body.sends()[0].iov[1].iov_base, parts[2].data());
  EXPECT_EQ(body.sends()[1].iov[3].iov_base, parts[11].data());
  EXPECT_EQ(Gathered(body), Joined(parts));
  std::vector<uint32_t> sizes = body.send_bytes();
  EXPECT_EQ(sizes, (std::vector<uint32_t>{2 * (44 + (1 << 20)),
                                          2 * (44 + (1 << 20))}));
}

TEST(OutgoingBodyTest, OneIovecPerSendStillSendsEverything) {
  std::vector<std::vector<uint8_t>> parts = {Bytes(8, 0), Bytes(10000, 3),
                                             Bytes(4, 7), Bytes(9000, 5)};
  std::vector<Segment> segments(parts.begin(), parts.end());
  OutgoingBody body(segments, 1);
  EXPECT_EQ(body.sends().size(), 4u);
  for (const auto& send : body.sends()) EXPECT_EQ(send.count, 1u);
  EXPECT_EQ(Gathered(body), Joined(parts));
}

TEST(OutgoingBodyTest, TooManySendsAreCopiedIntoOne) {
  // Large pieces alternating with small ones: more than kMaxBodySends
  // sends of 4 pieces would be needed.
  std::vector<std::vector<uint8_t>> parts;
  for (size_t i = 0; i < 2 * kMaxBodySends + 2; ++i) {
    parts.push_back(Bytes(4, 1));
    parts.push_back(Bytes(kStagedSegmentBytes + 1, static_cast<uint8_t>(i)));
  }
  std::vector<Segment> segments(parts.begin(), parts.end());
  OutgoingBody body(segments, 4);
  ASSERT_EQ(body.sends().size(), 1u);
  EXPECT_EQ(body.sends()[0].count, 1u);
  EXPECT_EQ(body.staged_bytes(), body.bytes());
  EXPECT_EQ(Gathered(body), Joined(parts));
}

TEST(OutgoingBodyTest, EmptySegmentsAndEmptyBodies) {
  std::vector<uint8_t> a = Bytes(5, 0);
  std::vector<Segment> segments = {Segment(), Segment(a), Segment()};
  OutgoingBody body(segments, 4);
  EXPECT_EQ(body.bytes(), 5u);
  EXPECT_EQ(Gathered(body), a);
  OutgoingBody none(absl::Span<const Segment>(), 4);
  EXPECT_EQ(none.bytes(), 0u);
  EXPECT_TRUE(none.sends().empty());
}

}  // namespace
}  // namespace psrt::dataplane
