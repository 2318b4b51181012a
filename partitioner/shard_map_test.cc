#include "partitioner/shard_map.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"
#include "partitioner/variable_spec.h"

namespace psrt {
namespace {

VariableSpec Spec(
    const std::string& name, VariableKind kind, std::vector<int64_t> shape,
    int num_shards, PartitionSpec::Routing routing = PartitionSpec::DIV,
    PartitionSpec::Placement placement = PartitionSpec::ROUND_ROBIN) {
  VariableSpec s;
  s.set_name(name);
  s.set_kind(kind);
  for (int64_t d : shape) s.add_shape(d);
  s.mutable_partition()->set_num_shards(num_shards);
  s.mutable_partition()->set_routing(routing);
  s.mutable_partition()->set_placement(placement);
  s.mutable_optimizer()->set_learning_rate(0.1f);
  EXPECT_TRUE(NormalizeVariableSpec(&s).ok()) << name;
  return s;
}

TEST(ShardMapTest, FixedSizeSplitsRowsLikeTensorFlow) {
  ShardMap map(2);
  ASSERT_TRUE(map.Add(Spec("w", DENSE, {10, 3}, 4)).ok());
  const VariableLayout* w = map.Find("w");
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->num_shards(), 4);
  // 10 rows over 4 shards: 3, 3, 2, 2 (first rows % n shards one larger).
  std::vector<int64_t> rows, begins, ps;
  for (const auto& s : w->shards) {
    rows.push_back(s.num_rows);
    begins.push_back(s.row_begin);
    ps.push_back(s.ps_task);
    EXPECT_EQ(s.bytes, s.num_rows * 3 * 4);
  }
  EXPECT_EQ(rows, (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(begins, (std::vector<int64_t>{0, 3, 6, 8}));
  EXPECT_EQ(ps, (std::vector<int64_t>{0, 1, 0, 1}));
  // More shards than rows: one shard per row.
  ASSERT_TRUE(map.Add(Spec("tiny", DENSE, {2}, 8)).ok());
  EXPECT_EQ(map.Find("tiny")->num_shards(), 2);
  // Round robin continues across variables.
  EXPECT_EQ(map.Find("tiny")->shards[0].ps_task, 0);
}

TEST(ShardMapTest, PopBackUndoesPlacement) {
  for (auto placement :
       {PartitionSpec::ROUND_ROBIN, PartitionSpec::GREEDY_BYTES}) {
    ShardMap map(3), reference(3);
    const VariableSpec a =
        Spec("a", DENSE, {10, 3}, 2, PartitionSpec::DIV, placement);
    const VariableSpec b =
        Spec("b", EMBEDDING, {100, 4}, 5, PartitionSpec::MOD, placement);
    ASSERT_TRUE(map.Add(a).ok());
    ASSERT_TRUE(reference.Add(a).ok());
    const VariableLayout* a_layout = map.Find("a");
    ASSERT_TRUE(map.Add(b).ok());
    map.PopBack();
    EXPECT_EQ(map.Find("b"), nullptr);
    EXPECT_EQ(map.Find("a"), a_layout);
    EXPECT_EQ(map.bytes_per_ps(), reference.bytes_per_ps());
    // Adding again places exactly as if the first attempt never happened.
    ASSERT_TRUE(map.Add(b).ok());
    ASSERT_TRUE(reference.Add(b).ok());
    for (int s = 0; s < 5; ++s) {
      EXPECT_EQ(map.Find("b")->shards[s].ps_task,
                reference.Find("b")->shards[s].ps_task);
    }
  }
}

TEST(ShardMapTest, MaxShardBytesBoundsEveryShard) {
  VariableSpec s = Spec("e", EMBEDDING, {1000, 16}, 0);
  s.mutable_partition()->set_max_shard_bytes(10000);
  ShardMap map(3);
  ASSERT_TRUE(map.Add(s).ok());
  const VariableLayout* e = map.Find("e");
  EXPECT_EQ(e->num_shards(), 7);  // ceil(64000 / 10000)
  int64_t total = 0;
  for (const auto& shard : e->shards) {
    EXPECT_LE(shard.num_rows * 16 * 4, 10000);
    total += shard.num_rows;
  }
  EXPECT_EQ(total, 1000);
}

TEST(ShardMapTest, EveryIdRoutesToExactlyOneLocalRow) {
  for (auto routing : {PartitionSpec::DIV, PartitionSpec::MOD}) {
    for (int64_t vocab : {1, 7, 100, 1001}) {
      for (int n : {1, 3, 8}) {
        ShardMap map(2);
        ASSERT_TRUE(map.Add(Spec("e", EMBEDDING, {vocab, 4}, n, routing)).ok());
        const VariableLayout* e = map.Find("e");
        std::vector<std::set<int64_t>> seen(e->num_shards());
        for (int64_t id = 0; id < vocab; ++id) {
          const int s = e->ShardOf(id);
          ASSERT_GE(s, 0);
          ASSERT_LT(s, e->num_shards());
          const int64_t local = e->LocalRow(s, id);
          ASSERT_GE(local, 0);
          ASSERT_LT(local, e->shards[s].num_rows) << vocab << " " << n;
          ASSERT_TRUE(seen[s].insert(local).second);
        }
        for (int s = 0; s < e->num_shards(); ++s) {
          EXPECT_EQ(static_cast<int64_t>(seen[s].size()),
                    e->shards[s].num_rows);
        }
      }
    }
  }
}

TEST(ShardMapTest, HashRoutingSpreadsIdsEvenly) {
  ShardMap map(4);
  ASSERT_TRUE(map.Add(Spec("h", HASH_EMBEDDING, {0, 8}, 8)).ok());
  const VariableLayout* h = map.Find("h");
  std::vector<int> counts(8);
  // Sequential ids, the worst case for a weak hash.
  for (int64_t id = 0; id < 80000; ++id) ++counts[h->ShardOf(id)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
  // Negative and huge ids route too.
  EXPECT_GE(h->ShardOf(-1), 0);
  EXPECT_GE(h->ShardOf(INT64_MIN), 0);
  // The hash is part of the protocol; pin it.
  EXPECT_EQ(MixId(1), 0xb456bcfc34c2cb2cULL);
}

TEST(ShardMapTest, GreedyPlacementBalancesAHugeTableAndDenseVariables) {
  // A 100M x 16 table (Adagrad: parameters + accumulator) plus 20 dense
  // variables of assorted sizes, over 4 PS. Only the plan is computed.
  ShardMap map(4);
  for (int i = 0; i < 20; ++i) {
    VariableSpec d =
        Spec("dense_" + std::to_string(i), DENSE, {(i + 1) * 37 * 1024, 64}, 0,
             PartitionSpec::DIV, PartitionSpec::GREEDY_BYTES);
    d.mutable_partition()->set_max_shard_bytes(64 << 20);
    ASSERT_TRUE(map.Add(d).ok());
  }
  VariableSpec table = Spec("table", EMBEDDING, {100'000'000, 16}, 0,
                            PartitionSpec::DIV, PartitionSpec::GREEDY_BYTES);
  table.mutable_partition()->set_max_shard_bytes(64 << 20);
  table.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  ASSERT_TRUE(NormalizeVariableSpec(&table).ok());
  ASSERT_TRUE(map.Add(table).ok());
  const auto& bytes = map.bytes_per_ps();
  const int64_t max = *std::max_element(bytes.begin(), bytes.end());
  const int64_t min = *std::min_element(bytes.begin(), bytes.end());
  const double ratio = static_cast<double>(max) / min;
  EXPECT_LE(ratio, 1.02) << "max " << max << " min " << min;
  int64_t total = 0;
  for (int64_t b : bytes) total += b;
  EXPECT_GT(total, int64_t{12'800'000'000});  // 6.4 GB values + 6.4 GB slots
  // The same specs always give the same map.
  ShardMap again(4);
  for (const auto& v : map.variables()) ASSERT_TRUE(again.Add(v.spec).ok());
  EXPECT_EQ(again.bytes_per_ps(), bytes);
}

TEST(ShardMapTest, RoundRobinImbalanceIsWhatGreedyFixes) {
  // One big and three small variables over 2 PS: round robin puts the big
  // one and a small one together; greedy puts all small ones on the other.
  auto build = [](PartitionSpec::Placement placement) {
    ShardMap map(2);
    const int64_t sizes[] = {1000, 10, 10, 10};
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(map.Add(Spec("v" + std::to_string(i), DENSE, {sizes[i]}, 1,
                               PartitionSpec::DIV, placement))
                      .ok());
    }
    return map.bytes_per_ps();
  };
  EXPECT_EQ(build(PartitionSpec::ROUND_ROBIN),
            (std::vector<int64_t>{4040, 80}));
  EXPECT_EQ(build(PartitionSpec::GREEDY_BYTES),
            (std::vector<int64_t>{4000, 120}));
}

TEST(ShardMapTest, DuplicateNamesAreRejected) {
  ShardMap map(1);
  ASSERT_TRUE(map.Add(Spec("w", DENSE, {4}, 1)).ok());
  EXPECT_EQ(map.Add(Spec("w", DENSE, {4}, 1)).code(),
            absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace psrt
