#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "proto/buffer_pool.h"
#include "proto/frame_reader.h"
#include "proto/frame_writer.h"
#include "proto/ps.pb.h"
#include "proto/slice_lease.h"

namespace psrt {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// Re-slices `bytes` at random cut points, as a network receive might, and
// places each piece at an odd address so that floats are misaligned.
grpc::ByteBuffer Reslice(const std::string& bytes, std::mt19937* rng,
                         size_t max_piece) {
  std::vector<grpc::Slice> slices;
  size_t pos = 0;
  std::uniform_int_distribution<size_t> piece(1, max_piece);
  while (pos < bytes.size()) {
    const size_t n = std::min(piece(*rng), bytes.size() - pos);
    std::string padded = "x" + bytes.substr(pos, n);  // misalign by one byte
    grpc::Slice s(padded);
    slices.push_back(s.sub(1, s.size()));
    pos += n;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(FrameTest, RoundTripsHeaderAndPayloadsAcrossArbitrarySlices) {
  PushRequestHeader header;
  header.set_client_id(42);
  header.add_items()->set_variable("emb");
  std::vector<int64_t> ids = {5, 7, 9000000000LL};
  std::vector<float> grads(1000);
  std::iota(grads.begin(), grads.end(), 0.5f);

  SliceLease lease;
  FrameWriter writer(header);
  EXPECT_EQ(writer.AddPayload(lease.Lend(ids.data(), ids.size() * 8)), 0);
  EXPECT_EQ(writer.AddPayload(lease.Lend(grads.data(), grads.size() * 4)), 1);
  EXPECT_EQ(writer.AddPayload(grpc::Slice()), 2);
  const std::string bytes = Flatten(writer.Finish());

  std::mt19937 rng(1);
  for (size_t max_piece : {1, 3, 7, 64, 4096, 1 << 20}) {
    grpc::ByteBuffer received = Reslice(bytes, &rng, max_piece);
    FrameReader frame;
    ASSERT_TRUE(frame.Parse(received).ok()) << max_piece;
    PushRequestHeader parsed;
    ASSERT_TRUE(frame.ParseHeader(&parsed).ok());
    EXPECT_EQ(parsed.client_id(), 42u);
    ASSERT_EQ(frame.num_payloads(), 3);
    std::vector<int64_t> got_ids(3);
    ASSERT_EQ(frame.payload(0).size(), 24u);
    frame.payload(0).CopyTo(got_ids.data());
    EXPECT_EQ(got_ids, ids);
    EXPECT_EQ(frame.payload(2).size(), 0u);

    std::vector<float> got(grads.size(), -1.0f);
    size_t visited = 0;
    ForEachFloatRun(frame.payload(1),
                    [&](const float* v, size_t n, size_t first) {
                      ASSERT_EQ(reinterpret_cast<uintptr_t>(v) % 4, 0u);
                      ASSERT_EQ(first, visited);
                      std::memcpy(got.data() + first, v, n * 4);
                      visited += n;
                    });
    EXPECT_EQ(visited, grads.size());
    EXPECT_EQ(got, grads);

    std::vector<float> rows(grads.size(), -1.0f);
    size_t num_rows = 0;
    ForEachRow(frame.payload(1), 8, [&](size_t row, const float* v) {
      ASSERT_EQ(row, num_rows);
      std::memcpy(rows.data() + row * 8, v, 8 * 4);
      ++num_rows;
    });
    EXPECT_EQ(num_rows, 125u);
    EXPECT_EQ(rows, grads);
  }
}

TEST(FrameTest, BytesAreAValidProtobufFrame) {
  PullRequestHeader header;
  header.add_items()->set_variable("w");
  std::vector<float> values = {1, 2, 3};
  SliceLease lease;
  FrameWriter writer(header);
  writer.AddPayload(lease.Lend(values.data(), 12));
  const std::string bytes = Flatten(writer.Finish());

  Frame frame;
  ASSERT_TRUE(frame.ParseFromString(bytes));
  PullRequestHeader parsed;
  ASSERT_TRUE(parsed.ParseFromString(frame.header()));
  EXPECT_EQ(parsed.items(0).variable(), "w");
  ASSERT_EQ(frame.payload_size(), 1);
  EXPECT_EQ(frame.payload(0).size(), 12u);

  // And a Frame written by the protobuf library reads back by hand.
  Frame generic;
  generic.set_header(header.SerializeAsString());
  generic.add_payload(std::string(reinterpret_cast<char*>(values.data()), 12));
  generic.add_payload("");
  grpc::Slice slice(generic.SerializeAsString());
  grpc::ByteBuffer message(&slice, 1);
  FrameReader reader;
  ASSERT_TRUE(reader.Parse(message).ok());
  EXPECT_EQ(reader.num_payloads(), 2);
  EXPECT_EQ(reader.payload(0).size(), 12u);
}

TEST(FrameTest, RejectsMalformedFramesWithTheirPosition) {
  auto parse = [](const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer message(&slice, 1);
    FrameReader frame;
    return frame.Parse(message);
  };
  // Field 3 is not part of a Frame.
  absl::Status s = parse(std::string("\x1a\x01x", 3));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unexpected field 3"), std::string::npos) << s;
  // Header claims 100 bytes, 2 present.
  s = parse(std::string("\x0a\x64xx", 4));
  EXPECT_NE(s.message().find("claims 100 bytes but only 2 remain"),
            std::string::npos)
      << s;
  // Truncated varint length.
  s = parse(std::string("\x0a\xff", 2));
  EXPECT_NE(s.message().find("truncated length"), std::string::npos) << s;
  // Payload first, then header.
  s = parse(std::string("\x12\x00\x0a\x00", 4));
  EXPECT_NE(s.message().find("before any payload"), std::string::npos) << s;
  // Random garbage never crashes and is almost always rejected.
  std::mt19937 rng(7);
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string junk(1 + rng() % 64, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (!parse(junk).ok()) ++rejected;
  }
  EXPECT_GT(rejected, 1900);
}

TEST(FrameTest, HeaderThatIsNotTheExpectedMessageIsRejected) {
  std::string bytes("\x0a\x03\xff\xff\xff", 5);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer message(&slice, 1);
  FrameReader frame;
  ASSERT_TRUE(frame.Parse(message).ok());
  PushRequestHeader header;
  absl::Status s = frame.ParseHeader(&header);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("psrt.PushRequestHeader"), std::string::npos) << s;
}

TEST(SliceLeaseTest, WaitsUntilGrpcReleasesEverySlice) {
  std::vector<char> memory(1 << 16, 'a');
  SliceLease lease;
  auto* held = new grpc::Slice(lease.Lend(memory.data(), memory.size()));
  std::thread releaser([held] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    delete held;
  });
  const auto start = std::chrono::steady_clock::now();
  lease.WaitReturned();
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(40));
  releaser.join();
}

// Sizes beyond the pool's largest class (a row width from the wire once
// indexed past its classes: SIGSEGV) and sizes no allocator grants are
// refused, not crashed on.
TEST(BufferPoolTest, RefusesSizesBeyondItsClassesAndWhatCannotBeHad) {
  BufferPool pool(size_t{8} << 20);
  for (size_t bytes :
       {BufferPool::kMaxBytes + 1, size_t{400000000000000}, ~size_t{0}}) {
    absl::StatusOr<PooledBuffer> b = pool.TryAcquire(bytes);
    ASSERT_FALSE(b.ok()) << bytes;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_TRUE(absl::StrContains(b.status().message(), std::to_string(bytes)))
        << b.status();
  }
  EXPECT_THROW(pool.Acquire(BufferPool::kMaxBytes + 1), std::bad_alloc);
  absl::StatusOr<PooledBuffer> ok = pool.TryAcquire(1 << 20);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->size(), size_t{1} << 20);
}

TEST(BufferPoolTest, ReusesLargeBuffersAndBoundsTheCache) {
  BufferPool pool(size_t{8} << 20);
  char* first;
  {
    PooledBuffer a = pool.Acquire(3 << 20);
    EXPECT_EQ(a.size(), size_t{3} << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    first = a.data();
  }
  EXPECT_EQ(pool.cached_bytes(), size_t{4} << 20);
  PooledBuffer b = pool.Acquire(4 << 20);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  {
    grpc::Slice slice = std::move(b).ReleaseAsSlice();
    EXPECT_EQ(slice.size(), size_t{4} << 20);
    EXPECT_EQ(pool.cached_bytes(), 0u);
  }
  EXPECT_EQ(pool.cached_bytes(), size_t{4} << 20);
  // Over the cap: freed, not cached.
  { PooledBuffer c = pool.Acquire(16 << 20); }
  EXPECT_EQ(pool.cached_bytes(), size_t{4} << 20);
}

}  // namespace
}  // namespace psrt
