#include "security/cluster_members.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(ClusterMembersTest, PeerIpOfGrpcPeerStrings) {
  EXPECT_EQ(ClusterMembers::PeerIp("ipv4:10.1.2.3:5555"), "10.1.2.3");
  EXPECT_EQ(ClusterMembers::PeerIp("ipv6:[::1]:5555"), "::1");
  EXPECT_EQ(ClusterMembers::PeerIp("ipv6:[::ffff:127.0.0.1]:5555"),
            "127.0.0.1");
  EXPECT_EQ(ClusterMembers::PeerIp("unix:/tmp/sock"), "");
  EXPECT_EQ(ClusterMembers::PeerIp("ipv6:[broken"), "");
  EXPECT_EQ(ClusterMembers::PeerIp(""), "");
}

TEST(ClusterMembersTest, AdmitsOnlyResolvedHosts) {
  ClusterMembers members({"127.0.0.1:2223", "[::1]:2224", "127.0.0.2:2222"});
  EXPECT_TRUE(members.Check("ipv4:127.0.0.1:40000", "SaveShards").ok());
  EXPECT_TRUE(members.Check("ipv4:127.0.0.2:40000", "SaveShards").ok());
  EXPECT_TRUE(members.Check("ipv6:[::1]:40000", "SaveShards").ok());
  EXPECT_TRUE(
      members.Check("ipv6:[::ffff:127.0.0.1]:40000", "SaveShards").ok());
  absl::Status s = members.Check("ipv4:127.0.0.3:40000", "CommitCheckpoint");
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "CommitCheckpoint")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "127.0.0.3")) << s;
  EXPECT_TRUE(absl::IsPermissionDenied(members.Check("unix:/x", "Checkpoint")));
}

TEST(ClusterMembersTest, NamesResolve) {
  ClusterMembers members({"localhost:2223"});
  EXPECT_TRUE(members.Check("ipv4:127.0.0.1:1", "Checkpoint").ok());
  ClusterMembers unresolvable({"no-such-host.invalid:2223"});
  EXPECT_FALSE(unresolvable.Check("ipv4:127.0.0.1:1", "Checkpoint").ok());
}

}  // namespace
}  // namespace psrt
