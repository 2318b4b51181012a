// Leases, the unreachability vote and failover between real PS services
// in one process (InProcessCluster), on a simulated clock: what
// tests/replication_test.cc proved with processes waiting real seconds,
// here in milliseconds and under ASan. 3 PS, --replicas=2: PS t's shards
// are copied to PS t+1, its first backup, which watches it.
#include <memory>

#include "gtest/gtest.h"
#include "ps_server/rpc/in_process_cluster.h"

namespace psrt {
namespace {

std::unique_ptr<InProcessCluster> StartCluster() {
  auto cluster = InProcessCluster::Start(InProcessCluster::Options());
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return nullptr;
  (*cluster)->Advance(absl::Seconds(1));  // every lease granted
  return std::move(*cluster);
}

// Of PS `owner`'s shards: which PS acknowledge pushes now.
int Primaries(InProcessCluster* cluster, int owner) {
  int serving = 0;
  for (int t = 0; t < cluster->num_ps(); ++t) {
    serving += cluster->Serves(t, owner);
  }
  return serving;
}

TEST(FailoverTest, EveryPsServesItsOwnShardsAndNoOneElses) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  for (int owner = 0; owner < 3; ++owner) {
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(cluster->Serves(t, owner), t == owner)
          << "PS " << t << " for PS " << owner << "'s shards";
    }
  }
}

TEST(FailoverTest, ALeaseEndsExactlyOneTermAfterTheLastGrantWasAsked) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  // Every renewal of this step was sent now and granted; none after.
  const absl::Time last_grant = cluster->clock()->Now();
  cluster->links()->Partition({{0}, {1, 2}});
  const absl::Duration term = Membership::kLeaseTerm;
  cluster->Advance(term - absl::Milliseconds(250));
  cluster->clock()->Advance(absl::Milliseconds(250) - absl::Nanoseconds(1));
  ASSERT_EQ(cluster->clock()->Now(), last_grant + term - absl::Nanoseconds(1));
  EXPECT_TRUE(cluster->ps(0)->lease()->Check().ok())
      << "one nanosecond before the term ends";
  EXPECT_TRUE(cluster->Serves(0, 0));
  cluster->clock()->Advance(absl::Nanoseconds(1));
  const absl::Status at_end = cluster->ps(0)->lease()->Check();
  EXPECT_EQ(at_end.code(), absl::StatusCode::kUnavailable) << at_end;
  EXPECT_NE(at_end.message().find("1 of 3 PS (itself included)"),
            std::string::npos)
      << at_end;
  EXPECT_FALSE(cluster->Serves(0, 0));
  cluster->Advance(absl::Seconds(1));
  EXPECT_EQ(cluster->ps(0)->lease()->lapses(), 1);
}

TEST(FailoverTest, APartitionAndItsHealingNeverGiveTwoPrimaries) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  const absl::Time cut_at = cluster->clock()->Now();
  cluster->links()->Partition({{0}, {1, 2}});
  absl::Time took_over_at = absl::InfiniteFuture();
  auto never_two = [&] {
    ASSERT_LE(Primaries(cluster.get(), 0), 1)
        << "two PS acknowledge PS 0's shards at "
        << absl::FormatDuration(cluster->clock()->Now() - cut_at)
        << " after the partition";
    if (cluster->Serves(1, 0) && took_over_at == absl::InfiniteFuture()) {
      took_over_at = cluster->clock()->Now();
    }
  };
  cluster->Advance(absl::Seconds(8), never_two);
  ASSERT_NE(took_over_at, absl::InfiniteFuture())
      << "PS 1 never took over PS 0's shards";
  // Not before the silence it waits for, and after PS 0's lease ended.
  EXPECT_GE(took_over_at - cut_at, FailoverMonitor::Options().failover_after);
  EXPECT_LE(took_over_at - cut_at, absl::Seconds(5));
  EXPECT_TRUE(cluster->ps(1)->membership()->IsFailed(0));
  // PS 2, on PS 1's side, learned it; PS 0 cannot have.
  EXPECT_TRUE(cluster->AdvanceUntil(
      [&] { return cluster->ps(2)->membership()->IsFailed(0); },
      absl::Seconds(1)));
  EXPECT_FALSE(cluster->ps(0)->membership()->IsFailed(0));

  // Healed: PS 0 learns it was replaced and serves nothing of its own.
  cluster->links()->HealAll();
  cluster->Advance(absl::Seconds(2), never_two);
  EXPECT_TRUE(cluster->ps(0)->replicator()->replaced());
  EXPECT_FALSE(cluster->Serves(0, 0));
  EXPECT_TRUE(cluster->Serves(1, 0));
  // The other shards never moved.
  EXPECT_TRUE(cluster->Serves(1, 1));
  EXPECT_TRUE(cluster->Serves(2, 2));
}

TEST(FailoverTest, ABackupCutOffAloneFromItsPrimaryDoesNotTakeOver) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  // PS 1 cannot reach PS 0 (nor PS 0 it), but PS 2 reaches both: PS 1's
  // suspicion is no majority.
  cluster->links()->Partition({{0}, {1}});
  cluster->Advance(absl::Seconds(10), [&] {
    ASSERT_TRUE(cluster->Serves(0, 0));
    ASSERT_FALSE(cluster->Serves(1, 0));
  });
  EXPECT_FALSE(cluster->ps(1)->membership()->IsFailed(0));
  EXPECT_GT(cluster->links()->calls(1, 2), 0) << "PS 1 asked PS 2";
}

TEST(FailoverTest, AKilledPrimaryIsTakenOverOnceItsLeaseCannotHold) {
  auto cluster = StartCluster();
  ASSERT_NE(cluster, nullptr);
  const absl::Time killed_at = cluster->clock()->Now();
  cluster->Kill(0);
  ASSERT_TRUE(cluster->AdvanceUntil([&] { return cluster->Serves(1, 0); },
                                    absl::Seconds(10)));
  const absl::Duration after = cluster->clock()->Now() - killed_at;
  EXPECT_GE(after, FailoverMonitor::Options().failover_after);
  EXPECT_GE(after, Membership::kLeaseTerm);
  EXPECT_LE(after, absl::Seconds(5));
  EXPECT_EQ(Primaries(cluster.get(), 0), 1);
}

}  // namespace
}  // namespace psrt
