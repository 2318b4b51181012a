// The rules that make failover votes and leases exclusive (membership.h,
// lease_holder.h), on one PS whose peers are addresses nobody listens on.
#include "ps_server/replication/membership.h"

#include <memory>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ps_server/replication/lease_holder.h"
#include "ps_server/replication/replication_log.h"
#include "ps_server/replication/unreachable_peers.h"

namespace psrt {
namespace {

TEST(MembershipTest, AGrantedLeaseMakesThePsReachableInAVote) {
  auto peers = UnreachablePeers();
  Membership membership(peers.get(), 2);
  EXPECT_FALSE(membership.HoldsLeaseFromHere(1));
  ASSERT_EQ(membership.Grant(1), absl::OkStatus());
  EXPECT_TRUE(membership.HoldsLeaseFromHere(1));
  // However its pings fare, a PS holding a lease from here is reachable:
  // this PS would not vote for its failover.
  EXPECT_TRUE(membership.VoteReachable(1, /*pinged_ok=*/false));
  EXPECT_FALSE(membership.HoldsLeaseFromHere(2));
}

TEST(MembershipTest, AVoteAgainstAPsWithholdsItsLease) {
  auto peers = UnreachablePeers();
  Membership membership(peers.get(), 2);
  EXPECT_FALSE(membership.VoteReachable(2, /*pinged_ok=*/false));
  absl::Status refused = membership.Grant(2);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "voted PS 2 unreachable"))
      << refused;
  EXPECT_FALSE(membership.HoldsLeaseFromHere(2));
  // Others are not affected.
  EXPECT_EQ(membership.Grant(1), absl::OkStatus());
}

TEST(MembershipTest, AFailedOverPsIsToldItWasReplaced) {
  auto peers = UnreachablePeers();
  Membership membership(peers.get(), 2);
  EXPECT_EQ(membership.MarkFailed(1), 1);
  EXPECT_EQ(membership.MarkFailed(1), 1);  // known already: same epoch
  absl::Status refused = membership.Grant(1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), kReplacedMarker)) << refused;
  EXPECT_EQ(membership.failed(), std::vector<int>{1});
}

TEST(MembershipTest, AHandbackEndsTheFailoverAndTheVoteForIt) {
  auto peers = UnreachablePeers();
  Membership membership(peers.get(), 2);
  EXPECT_FALSE(membership.VoteReachable(1, /*pinged_ok=*/false));
  EXPECT_EQ(membership.MarkFailed(1), 1);
  EXPECT_EQ(membership.term(1), 1);
  EXPECT_EQ(membership.MarkReturned(1), 2);
  EXPECT_EQ(membership.MarkReturned(1), 2);  // known already
  EXPECT_FALSE(membership.IsFailed(1));
  EXPECT_EQ(membership.failed(), std::vector<int>{});
  EXPECT_EQ(membership.epoch(), 2);
  // The vote was for the failover just undone: PS 1 gets its lease at once
  // (not kVoteHold later), and a later failover is a new term.
  EXPECT_EQ(membership.Grant(1, 2), absl::OkStatus());
  EXPECT_EQ(membership.MarkFailed(1), 3);
  EXPECT_EQ(membership.term(1), 3);
}

TEST(MembershipTest, TheHigherTermWinsWhateverOrderViewsArriveIn) {
  auto peers = UnreachablePeers();
  Membership membership(peers.get(), 2);
  EXPECT_TRUE(membership.Learn(2, 2));   // failed over and handed back
  EXPECT_FALSE(membership.Learn(2, 1));  // a stale view: ignored
  EXPECT_FALSE(membership.IsFailed(2));
  EXPECT_TRUE(membership.Learn(2, 3));  // failed over again
  EXPECT_TRUE(membership.IsFailed(2));
  EXPECT_FALSE(membership.Learn(7, 9));  // no such PS
  EXPECT_FALSE(membership.Learn(-1, 1));
  EXPECT_EQ(membership.terms().size(), 1u);
  EXPECT_EQ(membership.terms().at(2), 3);
  // A PS asking for a lease with a newer term than this PS knows teaches
  // it: a PS that took its shards back is granted one by a PS that had not
  // heard of the handback yet.
  EXPECT_EQ(membership.MarkFailed(1), 3);  // the epoch: 3 changes so far
  EXPECT_EQ(membership.term(1), 1);
  absl::Status stale = membership.Grant(1, 0);
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
  EXPECT_EQ(membership.Grant(1, 2), absl::OkStatus());
  EXPECT_FALSE(membership.IsFailed(1));
  EXPECT_EQ(membership.Grant(5, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MembershipTest, NoLeaseWithoutAMajority) {
  auto peers = UnreachablePeers();
  Membership membership(peers.get(), 2);
  LeaseHolder::Options options;
  options.renew_every = absl::Milliseconds(20);
  LeaseHolder lease(peers.get(), &membership, nullptr, options);
  absl::SleepFor(absl::Milliseconds(200));  // renewals fail: nobody listens
  absl::Status refused = lease.Check();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "holds no lease (--replicas): 1 of 3 PS"))
      << refused;
  EXPECT_EQ(lease.lapses(), 0);  // never held one
}

}  // namespace
}  // namespace psrt
