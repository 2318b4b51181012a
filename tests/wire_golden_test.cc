// The protocol's fixed computations -- the id hash, id-to-shard routing and
// Frame bytes -- against testdata/wire_golden.txt, which the Python client's
// test_wire_golden.py checks too: both languages compute them identically
// (the file is the contract, not either implementation).
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "partitioner/id_hash.h"
#include "partitioner/shard_map.h"
#include "proto/frame_writer.h"
#include "proto/ps.pb.h"

namespace psrt {
namespace {

std::vector<std::vector<std::string>> Vectors(const std::string& kind) {
  std::ifstream in("testdata/wire_golden.txt");
  EXPECT_TRUE(in.good()) << "testdata/wire_golden.txt not found";
  std::vector<std::vector<std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields[0] == kind) out.push_back(fields);
  }
  return out;
}

std::string Hex(const std::string& s) { return absl::BytesToHexString(s); }
std::string Bytes(const std::string& hex) {
  return hex == "-" ? "" : absl::HexStringToBytes(hex);
}

TEST(WireGoldenTest, IdHash) {
  const auto vectors = Vectors("mix_id");
  ASSERT_GE(vectors.size(), 10u);
  for (const auto& v : vectors) {
    int64_t id;
    ASSERT_TRUE(absl::SimpleAtoi(v[1], &id)) << v[1];
    uint64_t expected;
    ASSERT_TRUE(absl::SimpleHexAtoi(v[2], &expected)) << v[2];
    EXPECT_EQ(MixId(id), expected) << "id " << id;
  }
}

TEST(WireGoldenTest, Routing) {
  const auto vectors = Vectors("route");
  ASSERT_GE(vectors.size(), 20u);
  for (const auto& v : vectors) {
    int64_t rows, id;
    int shards, expected;
    ASSERT_TRUE(
        absl::SimpleAtoi(v[2], &rows) && absl::SimpleAtoi(v[3], &shards) &&
        absl::SimpleAtoi(v[4], &id) && absl::SimpleAtoi(v[5], &expected));
    VariableSpec spec;
    spec.set_name("v");
    spec.set_kind(v[1] == "HASH" ? HASH_EMBEDDING : EMBEDDING);
    spec.add_shape(rows);
    spec.add_shape(4);
    spec.mutable_partition()->set_num_shards(shards);
    PartitionSpec::Routing routing;
    ASSERT_TRUE(PartitionSpec::Routing_Parse(v[1], &routing));
    spec.mutable_partition()->set_routing(routing);
    ShardMap map(2);
    ASSERT_TRUE(map.Add(spec).ok());
    ASSERT_EQ(map.Find("v")->num_shards(), shards);
    EXPECT_EQ(map.Find("v")->ShardOf(id), expected)
        << v[1] << " routing of id " << id << " over " << shards << " shards";
  }
}

TEST(WireGoldenTest, FrameBytes) {
  const auto vectors = Vectors("frame");
  ASSERT_GE(vectors.size(), 3u);
  for (const auto& v : vectors) {
    PullRequestHeader header;
    ASSERT_TRUE(header.ParseFromString(Bytes(v[1])));
    FrameWriter writer(header);
    if (v[2] != "-") {
      for (absl::string_view hex : absl::StrSplit(v[2], ',')) {
        const std::string payload = absl::HexStringToBytes(hex);
        writer.AddPayload(grpc::Slice(payload.data(), payload.size()));
      }
    }
    grpc::ByteBuffer message = writer.Finish();
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(message.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    EXPECT_EQ(Hex(bytes), v[3]);
  }
}

}  // namespace
}  // namespace psrt
