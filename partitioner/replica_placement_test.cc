#include "partitioner/replica_placement.h"

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::ElementsAre;

TEST(ReplicaPlacementTest, BackupsAreTheNextTasksInTheRing) {
  auto p = ReplicaPlacement::Create({"h0:1", "h1:1", "h2:1"}, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->BackupsOf(0), ElementsAre(1));
  EXPECT_THAT(p->BackupsOf(1), ElementsAre(2));
  EXPECT_THAT(p->BackupsOf(2), ElementsAre(0));
  EXPECT_THAT(p->BackedUpBy(0), ElementsAre(2));
  EXPECT_TRUE(p->IsBackupOf(1, 0));
  EXPECT_FALSE(p->IsBackupOf(2, 0));
  EXPECT_FALSE(p->IsBackupOf(0, 0));
  EXPECT_FALSE(p->IsBackupOf(0, 7));
  auto three = ReplicaPlacement::Create({"h0:1", "h1:1", "h2:1"}, 3);
  ASSERT_TRUE(three.ok());
  EXPECT_THAT(three->BackupsOf(1), ElementsAre(2, 0));
}

TEST(ReplicaPlacementTest, NeverOnThePrimarysHost) {
  // Two PS per host: the ring skips the primary's neighbour on its host.
  auto p = ReplicaPlacement::Create({"a:1", "a:2", "b:1", "b:2"}, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->BackupsOf(0), ElementsAre(2));
  EXPECT_THAT(p->BackupsOf(1), ElementsAre(2));
  EXPECT_THAT(p->BackupsOf(2), ElementsAre(0));
  EXPECT_THAT(p->BackupsOf(3), ElementsAre(0));
  // Loopback addresses count as hosts as written.
  EXPECT_TRUE(ReplicaPlacement::Create({"127.0.0.1:5", "127.0.0.2:5"}, 2).ok());
}

TEST(ReplicaPlacementTest, TooFewHostsIsAnErrorNamingThem) {
  auto p = ReplicaPlacement::Create({"a:1", "a:2", "b:1"}, 3);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(p.status().message(), "on 2: a, b"))
      << p.status();
  EXPECT_FALSE(ReplicaPlacement::Create({"a:1"}, 0).ok());
  EXPECT_FALSE(ReplicaPlacement::Create({"nonsense"}, 1).ok());
}

TEST(ReplicaPlacementTest, OneReplicaHasNoBackups) {
  auto p = ReplicaPlacement::Create({"a:1", "a:2"}, 1);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->BackupsOf(0).empty());
  EXPECT_TRUE(ReplicaPlacement::Unreplicated(3).BackedUpBy(2).empty());
}

}  // namespace
}  // namespace psrt
