// Which step barrier a pull or push finds as shards move between PS: its
// own PS's, one taken over by a failover (resumed where the stream left
// it), none once handed back; a barrier is kept while requests may hold it.
#include "ps_server/rpc/step_barriers.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

PullRequestHeader ForPs(int ps) {
  PullRequestHeader header;
  header.set_for_ps(ps);
  return header;
}

class StepBarriersTest : public ::testing::Test {
 protected:
  ShardStore store_{/*ps_task=*/0, /*num_ps=*/3};
  DedupScopes dedup_{3};
  StepBarriers barriers_{&store_,           &dedup_,
                         size_t{1} << 20,
                         /*max_workers=*/2, /*replicator=*/nullptr,
                         Clock::Real()};
};

TEST_F(StepBarriersTest, RequestsFindTheirPsBarrierOrANamedRefusal) {
  EXPECT_EQ(*barriers_.For(PullRequestHeader()), barriers_.own());
  EXPECT_EQ(*barriers_.For(ForPs(0)), barriers_.own());
  for (int bad : {-1, 3, 1 << 30}) {
    auto found = barriers_.For(ForPs(bad));
    EXPECT_TRUE(absl::IsInvalidArgument(found.status())) << bad;
    EXPECT_TRUE(absl::StrContains(found.status().message(), "3-PS cluster"))
        << found.status();
  }
  auto unserved = barriers_.For(ForPs(1));
  EXPECT_TRUE(absl::IsUnavailable(unserved.status()));
  EXPECT_TRUE(absl::StrContains(unserved.status().message(),
                                "PS 0 does not serve PS 1's shards"))
      << unserved.status();
  EXPECT_EQ(barriers_.count(), 1);
}

TEST_F(StepBarriersTest, TakenOverBarriersResumeAndAreRetiredNotFreed) {
  // PS 1 had taken PS 2's shards over; this PS takes over both.
  absl::flat_hash_map<int, ReplicaApplier::SyncBarrier> from_stream;
  from_stream[2].next_step = 7;
  from_stream[2].clocks = {5, 6};
  // A held push that does not parse is dropped, not resumed.
  from_stream[2].held.push_back({grpc::ByteBuffer()});
  barriers_.ResumeTakenOver(1, from_stream);
  ASSERT_TRUE(barriers_.For(ForPs(1)).ok());
  ASSERT_TRUE(barriers_.For(ForPs(2)).ok());
  StepCoordinator* of_ps1 = *barriers_.For(ForPs(1));
  StepCoordinator* of_ps2 = *barriers_.For(ForPs(2));
  EXPECT_NE(of_ps1, of_ps2);
  EXPECT_NE(of_ps1, barriers_.own());
  EXPECT_EQ(of_ps1->sync_step(), 0);  // no step seen: where it started
  EXPECT_EQ(of_ps2->sync_step(), 7);
  EXPECT_EQ(barriers_.count(), 3);

  // A handback that fails closes and reopens PS 2's barrier in place.
  auto handover = barriers_.CloseTakenOver(2, "handed back");
  ASSERT_TRUE(handover.has_value());
  EXPECT_EQ(handover->next_step, 7);
  EXPECT_EQ(handover->clocks, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(handover->held, 0);
  barriers_.ReopenTakenOver(2);
  EXPECT_EQ(*barriers_.For(ForPs(2)), of_ps2);

  // One that succeeds retires it: not found, still alive for requests
  // that hold it.
  ASSERT_TRUE(barriers_.CloseTakenOver(2, "handed back").has_value());
  barriers_.RetireTakenOver(2);
  EXPECT_TRUE(absl::IsUnavailable(barriers_.For(ForPs(2)).status()));
  EXPECT_EQ(barriers_.count(), 3);
  EXPECT_EQ(of_ps2->sync_step(), 7);
  EXPECT_FALSE(barriers_.CloseTakenOver(2, "again").has_value());
  EXPECT_FALSE(barriers_.CloseTakenOver(0, "own").has_value());
}

TEST_F(StepBarriersTest, AReclaimResumesTheOwnBarrierWhereTheServerLeftIt) {
  ReplicaApplier::SyncBarrier left;
  left.next_step = 12;
  barriers_.ResumeOwn(/*serving=*/1, left);
  EXPECT_EQ(barriers_.own()->sync_step(), 12);
  EXPECT_EQ(barriers_.count(), 1);
}

}  // namespace
}  // namespace psrt
