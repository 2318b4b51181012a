#include "ps_server/shards/shard_store.h"

#include <atomic>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ps_server/shards/hash_embedding_shard.h"
#include "util/simulated_clock.h"

namespace psrt {
namespace {

VariableSpec Spec(const std::string& name, int64_t rows, int shards = 2) {
  VariableSpec s;
  s.set_name(name);
  s.set_kind(DENSE);
  s.add_shape(rows);
  s.mutable_partition()->set_num_shards(shards);
  s.mutable_optimizer()->set_learning_rate(0.1f);
  return s;
}

TEST(ShardStoreTest, HoldsOnlyItsOwnShards) {
  ShardStore ps0(0, 2), ps1(1, 2);
  for (ShardStore* s : {&ps0, &ps1}) {
    ASSERT_TRUE(s->CreateVariables(0, {Spec("a", 10, 3)}, 2).ok());
  }
  const LocalVariable* a0 = ps0.Find("a");
  const LocalVariable* a1 = ps1.Find("a");
  ASSERT_NE(a0, nullptr);
  // Round robin: shards 0 and 2 on PS 0, shard 1 on PS 1.
  EXPECT_TRUE(a0->Holds(0));
  EXPECT_FALSE(a0->Holds(1));
  EXPECT_TRUE(a0->Holds(2));
  EXPECT_TRUE(a1->Holds(1));
  EXPECT_EQ(ps0.num_local_shards(), 2);
  EXPECT_EQ(ps0.parameter_bytes() + ps1.parameter_bytes(), 40);
}

// --replicas=2 over 3 PS: PS 2 keeps copies of PS 1's shards. After it
// took them over, the shards PS 1 is placed for in variables created
// later are served by PS 2 too (else nobody would serve them).
TEST(ShardStoreTest, VariablesCreatedAfterATakeoverAreServedByTheNewPrimary) {
  auto placement = ReplicaPlacement::Create({"a:1", "b:1", "c:1"}, 2);
  ASSERT_TRUE(placement.ok());
  ShardStore ps2(2, 3, 0, *placement), control(2, 3, 0, *placement);
  for (ShardStore* s : {&ps2, &control}) {
    ASSERT_TRUE(s->CreateVariables(0, {Spec("before", 9, 3)}, 3).ok());
  }
  // Round robin: shard 1 of each variable is placed on PS 1.
  EXPECT_TRUE(ps2.Find("before")->IsBackup(1));
  EXPECT_EQ(ps2.Promote(1), 1);
  EXPECT_TRUE(ps2.Find("before")->IsPrimary(1));
  for (ShardStore* s : {&ps2, &control}) {
    ASSERT_TRUE(s->CreateVariables(1, {Spec("after", 9, 3)}, 3).ok());
  }
  EXPECT_TRUE(ps2.Find("after")->IsPrimary(1));
  EXPECT_TRUE(control.Find("after")->IsBackup(1));
  EXPECT_TRUE(ps2.Find("after")->IsPrimary(2));  // its own, as before
}

TEST(ShardStoreTest, CatalogPositionsAreCheckedAndIdempotent) {
  ShardStore store(0, 1);
  ASSERT_EQ(*store.CreateVariables(0, {Spec("a", 4), Spec("b", 4)}, 1), 2);
  // The same specs at the same positions: accepted, nothing new.
  EXPECT_EQ(*store.CreateVariables(0, {Spec("a", 4), Spec("b", 4)}, 1), 2);
  EXPECT_EQ(*store.CreateVariables(1, {Spec("b", 4), Spec("c", 4)}, 1), 3);

  auto changed = store.CreateVariables(0, {Spec("a", 8)}, 1);
  EXPECT_EQ(changed.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(changed.status().message().find("existing {a: DENSE [4]"),
            std::string::npos)
      << changed.status();
  EXPECT_NE(changed.status().message().find("requested {a: DENSE [8]"),
            std::string::npos);

  auto wrong_place = store.CreateVariables(0, {Spec("x", 4)}, 1);
  EXPECT_EQ(wrong_place.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong_place.status().message().find("position 0 holds 'a'"),
            std::string::npos)
      << wrong_place.status();

  auto gap = store.CreateVariables(7, {Spec("x", 4)}, 1);
  EXPECT_EQ(gap.status().code(), absl::StatusCode::kFailedPrecondition);

  auto wrong_cluster = store.CreateVariables(3, {Spec("x", 4)}, 2);
  EXPECT_EQ(wrong_cluster.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Variables().size(), 3u);
}

TEST(ShardStoreTest, RefusesVariablesBeyondTheMemoryLimit) {
  ShardStore store(0, 1, /*memory_limit_bytes=*/1 << 20);
  auto too_big = store.CreateVariables(0, {Spec("huge", 1 << 20, 1)}, 1);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("needs 4194304 bytes"),
            std::string::npos)
      << too_big.status();
  EXPECT_TRUE(store.Variables().empty());
  EXPECT_TRUE(store.CreateVariables(0, {Spec("fits", 1000, 1)}, 1).ok());
}

// An unbounded hash table grows on push: its blocks count against
// --memory_limit_bytes like the other shards, and a push that would pass
// the limit creates nothing.
TEST(ShardStoreTest, HashEmbeddingGrowthCountsAgainstTheMemoryLimit) {
  VariableSpec h;
  h.set_name("h");
  h.set_kind(HASH_EMBEDDING);
  h.add_shape(0);  // unbounded
  h.add_shape(16);
  h.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  h.mutable_optimizer()->set_learning_rate(0.1f);
  // 1 MiB of dense parameters, then room for a few blocks of rows.
  ShardStore store(0, 1, int64_t{4} << 20);
  ASSERT_TRUE(store.CreateVariables(0, {Spec("d", 1 << 18, 1), h}, 1).ok());
  auto& shard = static_cast<HashEmbeddingShard&>(store.Find("h")->shard(0));
  const int64_t block = shard.block_bytes();  // ~640 KiB
  ASSERT_GT(block, 600 << 10);
  int64_t next_id = 0;
  absl::Status s;
  int64_t rows = 0;
  while (s.ok() && next_id < 1000000) {
    std::vector<int64_t> ids(1000);
    for (int64_t& id : ids) id = next_id++ * 7919;
    s = shard.EnsureRows(ids);
    if (s.ok()) rows += 1000;
  }
  ASSERT_FALSE(s.ok()) << "the table grew past the limit";
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("hash embedding 'h' shard 0 cannot grow"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("--memory_limit_bytes=4194304"), std::string::npos)
      << s;
  // Everything accepted fits: the dense MiB plus whole blocks within 4 MiB.
  EXPECT_EQ(shard.num_rows(), rows);
  EXPECT_LE((1 << 20) + (rows + 4095) / 4096 * block, 4 << 20);
  // ... and the refused 1,000 rows would not have.
  EXPECT_GT((1 << 20) + (rows + 1000 + 4095) / 4096 * block, 4 << 20);
  // And nothing more can be created either.
  EXPECT_TRUE(absl::IsResourceExhausted(
      store.CreateVariables(2, {Spec("more", 1 << 18, 1)}, 1).status()));
}

// At --memory_budget_mb a hash shard makes room in the blocks it holds.
// Each takes its first block when created, so a table whose ids come late
// still gets rows after another filled the budget; a table that cannot
// get its first block is refused when created, naming the bytes.
TEST(ShardStoreTest, AtTheBudgetEveryHashShardHoldsABlockToWorkIn) {
  auto hash = [](const std::string& name) {
    VariableSpec h;
    h.set_name(name);
    h.set_kind(HASH_EMBEDDING);
    h.add_shape(0);
    h.add_shape(16);
    h.mutable_partition()->set_num_shards(1);
    h.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
    h.mutable_optimizer()->set_learning_rate(0.1f);
    return h;
  };
  const int64_t block = HashEmbeddingShard::BlockBytes(32);  // 16 + a slot
  ShardStore store(0, 1, 4 * block);
  store.set_evict_at_memory_limit(true);
  ASSERT_TRUE(store.CreateVariables(0, {hash("early"), hash("late")}, 1).ok());
  auto& early = static_cast<HashEmbeddingShard&>(store.Find("early")->shard(0));
  auto& late = static_cast<HashEmbeddingShard&>(store.Find("late")->shard(0));
  EXPECT_EQ(early.reserved_bytes(), block);
  EXPECT_EQ(late.reserved_bytes(), block);
  // "early" takes every block left, then evicts in them.
  int64_t next_id = 1;
  for (int i = 0; i < 20; ++i) {
    std::vector<int64_t> ids(1000);
    for (int64_t& id : ids) id = next_id++ * 7919;
    ASSERT_EQ(early.EnsureRows(ids), absl::OkStatus()) << "batch " << i;
  }
  EXPECT_EQ(early.reserved_bytes(), 3 * block);
  EXPECT_GT(early.row_counts().evicted_rows, 0);
  std::vector<int64_t> late_ids(1000);
  for (int64_t& id : late_ids) id = next_id++ * 7919;
  ASSERT_EQ(late.EnsureRows(late_ids), absl::OkStatus());
  EXPECT_EQ(late.num_rows(), 1000);
  auto refused = store.CreateVariables(2, {hash("after")}, 1);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                absl::StrCat("needs ", block, " bytes")))
      << refused.status();
}

// A creation prepared but never committed (its coordinator died) holds
// the store for kPreparedTtl on the store's clock, then is discarded with
// its memory, so the next creation goes on; before then it is refused.
TEST(ShardStoreTest, APreparedCreationIsDiscardedExactlyAfterItsTtl) {
  SimulatedClock clock;
  // 640 KiB each: under a 1 MiB limit the second fits only once the
  // first one's memory is given back.
  ShardStore store(0, 1, /*memory_limit_bytes=*/1 << 20,
                   ReplicaPlacement::Unreplicated(1), &clock);
  constexpr int64_t kRows = 160 << 10;
  ASSERT_TRUE(store.PrepareVariables(11, 0, {Spec("a", kRows, 1)}, 1).ok());
  clock.Advance(ShardStore::kPreparedTtl);
  const auto refused = store.PrepareVariables(12, 0, {Spec("b", kRows, 1)}, 1);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "(11)"))
      << refused.status();
  clock.Advance(absl::Nanoseconds(1));
  const auto prepared = store.PrepareVariables(12, 0, {Spec("b", kRows, 1)}, 1);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_FALSE(store.CommitVariables(11).ok());  // gone
  ASSERT_TRUE(store.CommitVariables(12).ok());
  EXPECT_EQ(store.Find("a"), nullptr);
  EXPECT_NE(store.Find("b"), nullptr);
}

// A creation's hold on the store is its TTL from its PREPARE, whoever
// calls: a retried PREPARE of it (the same id, as its creator retries)
// does not renew it, and neither do other creations' attempts.
TEST(ShardStoreTest, APreparedCreationCannotBeRenewed) {
  SimulatedClock clock;
  ShardStore store(0, 1, /*memory_limit_bytes=*/0,
                   ReplicaPlacement::Unreplicated(1), &clock);
  ASSERT_TRUE(store.PrepareVariables(11, 0, {Spec("a", 16, 1)}, 1).ok());
  for (int i = 0; i < 5; ++i) {
    clock.Advance(ShardStore::kPreparedTtl / 5);
    ASSERT_TRUE(store.PrepareVariables(11, 0, {Spec("a", 16, 1)}, 1).ok());
    EXPECT_FALSE(store.PrepareVariables(12, 0, {Spec("b", 16, 1)}, 1).ok());
    EXPECT_TRUE(store.AwaitPrepared(11, absl::ZeroDuration()).ok());
  }
  clock.Advance(absl::Nanoseconds(1));
  ASSERT_TRUE(store.PrepareVariables(12, 0, {Spec("b", 16, 1)}, 1).ok())
      << "the TTL counted from the first PREPARE";
  EXPECT_FALSE(store.CommitVariables(11).ok());
  EXPECT_TRUE(store.CommitVariables(12).ok());
}

// PREPARE with the fill in the background: it returns before the fill
// ends; Commit refuses while it runs; Await reports it; another creation
// is "in progress" meanwhile; a failed fill is the Await's and the
// Commit's error; Abort cancels a running fill and frees everything.
TEST(ShardStoreTest, BackgroundFillIsAwaitedCommittedOrCancelled) {
  ShardStore store(0, 1);
  absl::Notification release;
  std::atomic<int> fills{0};
  std::atomic<bool> saw_cancel{false};
  absl::Status fill_result;  // set before `release`
  store.set_fill_hook(
      [&](const LocalVariable& v, const std::atomic<bool>& cancelled) {
        ++fills;
        while (!release.HasBeenNotified()) {
          if (cancelled) {
            saw_cancel = true;
            return absl::CancelledError("cancelled");
          }
          absl::SleepFor(absl::Milliseconds(1));
        }
        return fill_result;
      });

  // 1: succeeds after the release.
  const absl::Time start = absl::Now();
  ASSERT_TRUE(store
                  .PrepareVariables(11, 0, {Spec("a", 4)}, 1,
                                    /*fill_in_background=*/true)
                  .ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));  // did not wait
  auto waited = store.AwaitPrepared(11, absl::Milliseconds(50));
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_FALSE(*waited);  // still filling
  EXPECT_EQ(store.CommitVariables(11).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      store.PrepareVariables(12, 0, {Spec("a", 4)}, 1, true).status().code(),
      absl::StatusCode::kFailedPrecondition);  // one at a time
  EXPECT_EQ(store.Find("a"), nullptr);
  release.Notify();
  waited = store.AwaitPrepared(11, absl::Seconds(10));
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_TRUE(*waited);
  ASSERT_TRUE(store.CommitVariables(11).ok());
  EXPECT_NE(store.Find("a"), nullptr);
  EXPECT_TRUE(*store.AwaitPrepared(11, absl::ZeroDuration()));  // committed
  EXPECT_EQ(fills.load(), 1);

  // 2: the fill fails: Await and Commit say why; Abort frees it.
  fill_result = absl::DataLossError("file x is corrupt");
  ASSERT_TRUE(store.PrepareVariables(21, 1, {Spec("b", 4)}, 1, true).ok());
  waited = store.AwaitPrepared(21, absl::Seconds(10));
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(store.CommitVariables(21).status().code(),
            absl::StatusCode::kDataLoss);
  ASSERT_TRUE(store.AbortVariables(21).ok());
  EXPECT_EQ(store.AwaitPrepared(21, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // 3: Abort while the fill runs cancels it, then the same position is
  // free for a new creation.
  absl::Notification entered;
  store.set_fill_hook(
      [&](const LocalVariable&, const std::atomic<bool>& cancelled) {
        entered.Notify();
        while (!cancelled) absl::SleepFor(absl::Milliseconds(1));
        saw_cancel = true;
        return absl::CancelledError("cancelled");
      });
  ASSERT_TRUE(store.PrepareVariables(31, 1, {Spec("c", 4)}, 1, true).ok());
  entered.WaitForNotification();
  ASSERT_TRUE(store.AbortVariables(31).ok());
  EXPECT_TRUE(saw_cancel.load());
  store.set_fill_hook(nullptr);
  ASSERT_TRUE(store.PrepareVariables(32, 1, {Spec("d", 4)}, 1, true).ok());
  EXPECT_TRUE(*store.AwaitPrepared(32, absl::Seconds(10)));
  EXPECT_EQ(*store.CommitVariables(32), 2);
  EXPECT_EQ(store.Find("c"), nullptr);
  EXPECT_NE(store.Find("d"), nullptr);
}

}  // namespace
}  // namespace psrt
