#include "ps_server/shard_store.h"

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace psrt
