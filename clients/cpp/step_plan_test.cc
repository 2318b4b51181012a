#include "clients/cpp/step_plan.h"

#include <map>
#include <numeric>
#include <set>

#include "gtest/gtest.h"
#include "partitioner/variable_spec.h"

namespace psrt {
namespace {

ShardMap Catalog() {
  ShardMap map(2);
  VariableSpec e;
  e.set_name("e");
  e.set_kind(EMBEDDING);
  e.add_shape(10);
  e.add_shape(2);
  e.mutable_partition()->set_num_shards(2);
  e.mutable_partition()->set_routing(PartitionSpec::MOD);
  e.mutable_optimizer()->set_learning_rate(1);
  EXPECT_TRUE(NormalizeVariableSpec(&e).ok());
  EXPECT_TRUE(map.Add(e).ok());
  VariableSpec w;
  w.set_name("w");
  w.set_kind(DENSE);
  w.add_shape(5);
  w.add_shape(2);
  w.mutable_partition()->set_num_shards(2);
  w.mutable_optimizer()->set_learning_rate(1);
  EXPECT_TRUE(NormalizeVariableSpec(&w).ok());
  EXPECT_TRUE(map.Add(w).ok());
  return map;
}

TEST(StepPlanTest, PullDeduplicatesRoutesAndCopiesRepeats) {
  ShardMap catalog = Catalog();
  std::vector<int64_t> ids = {4, 3, 4, 8};
  std::vector<float> out(8), w(10);
  auto plan = PlanPull(catalog, {PullOp::Rows("e", ids, out.data()),
                                 PullOp::Dense("w", w.data())});
  ASSERT_TRUE(plan.ok()) << plan.status();
  // e: shard 0 (even ids) on PS 0, shard 1 on PS 1; w: shards on PS 0, 1.
  ASSERT_EQ(plan->items_by_ps[0].size(), 2u);
  const PlannedItem& even = plan->items_by_ps[0][0];
  EXPECT_EQ(even.ids, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(even.out_rows, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(plan->items_by_ps[1][0].ids, std::vector<int64_t>{3});
  const PlannedItem& w1 = plan->items_by_ps[1][1];
  EXPECT_EQ(w1.count, 4);  // rows 3..4 of [5, 2]
  EXPECT_EQ(w1.dense_out, w.data() + 6);
  ASSERT_EQ(plan->repeated_rows.size(), 1u);
  EXPECT_EQ(plan->repeated_rows[0].dst, out.data() + 4);
  EXPECT_EQ(plan->repeated_rows[0].src, out.data());
}

TEST(StepPlanTest, PushSumsRepeatsAndGathersRowsPerShard) {
  ShardMap catalog = Catalog();
  std::vector<int64_t> ids = {3, 4, 3, 6};
  std::vector<float> grads = {1, 1, 2, 2, 10, 10, 3, 3};
  auto plan = PlanPush(catalog, {PushOp::Rows("e", ids, grads.data())});
  ASSERT_TRUE(plan.ok());
  const PlannedItem& even = plan->items_by_ps[0][0];
  EXPECT_EQ(even.ids, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(std::vector<float>(even.grad_rows(), even.grad_rows() + 4),
            (std::vector<float>{2, 2, 3, 3}));
  const PlannedItem& odd = plan->items_by_ps[1][0];
  EXPECT_EQ(odd.ids, std::vector<int64_t>{3});
  EXPECT_EQ(std::vector<float>(odd.grad_rows(), odd.grad_rows() + 2),
            (std::vector<float>{11, 11}));
}

// Ops over the same ids are routed once per routing: tables with the same
// shard count share it, one with another count or routing gets its own.
TEST(StepPlanTest, OpsOverTheSameIdsRouteByTheirOwnLayout) {
  ShardMap catalog(3);
  auto add = [&](const std::string& name, VariableKind kind, int shards,
                 PartitionSpec::Routing routing) {
    VariableSpec v;
    v.set_name(name);
    v.set_kind(kind);
    v.add_shape(1000);
    v.add_shape(1);
    v.mutable_partition()->set_num_shards(shards);
    v.mutable_partition()->set_routing(routing);
    v.mutable_optimizer()->set_learning_rate(1);
    ASSERT_TRUE(NormalizeVariableSpec(&v).ok()) << name;
    ASSERT_TRUE(catalog.Add(v).ok()) << name;
  };
  add("h4a", HASH_EMBEDDING, 4, PartitionSpec::HASH);
  add("h4b", HASH_EMBEDDING, 4, PartitionSpec::HASH);
  add("h3", HASH_EMBEDDING, 3, PartitionSpec::HASH);
  add("m4", EMBEDDING, 4, PartitionSpec::MOD);
  add("d4", EMBEDDING, 4, PartitionSpec::DIV);
  std::vector<int64_t> ids(200);
  std::iota(ids.begin(), ids.end(), 400);
  std::vector<std::vector<float>> out(5, std::vector<float>(ids.size()));
  const std::vector<std::string> names = {"h4a", "h4b", "h3", "m4", "d4"};
  for (bool pull : {true, false}) {
    absl::StatusOr<StepPlan> plan;
    if (pull) {
      std::vector<PullOp> ops;
      for (size_t t = 0; t < names.size(); ++t) {
        ops.push_back(PullOp::Rows(names[t], ids, out[t].data()));
        ops.back().ids_unique = true;
      }
      plan = PlanPull(catalog, ops);
    } else {
      std::vector<PushOp> ops;
      for (size_t t = 0; t < names.size(); ++t) {
        ops.push_back(PushOp::Rows(names[t], ids, out[t].data()));
        ops.back().ids_unique = true;
      }
      plan = PlanPush(catalog, ops);
    }
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::map<std::string, int64_t> routed;
    std::set<int> shards_of_h3;
    for (const auto& items : plan->items_by_ps) {
      for (const PlannedItem& item : items) {
        for (int64_t id : item.ids) {
          EXPECT_EQ(item.layout->ShardOf(id), item.shard)
              << item.layout->spec.name() << " id " << id;
        }
        routed[item.layout->spec.name()] += item.ids.size();
        if (item.layout->spec.name() == "h3") shards_of_h3.insert(item.shard);
      }
    }
    for (const std::string& name : names) {
      EXPECT_EQ(routed[name], 200) << name << (pull ? " pull" : " push");
    }
    EXPECT_EQ(shards_of_h3, (std::set<int>{0, 1, 2}));
  }
}

TEST(StepPlanTest, BadOpsAreCaughtBeforeSending) {
  ShardMap catalog = Catalog();
  std::vector<float> out(100);
  std::vector<int64_t> bad = {10};
  EXPECT_EQ(
      PlanPull(catalog, {PullOp::Rows("e", bad, out.data())}).status().code(),
      absl::StatusCode::kOutOfRange);
  EXPECT_EQ(
      PlanPull(catalog, {PullOp::Dense("zzz", out.data())}).status().code(),
      absl::StatusCode::kNotFound);
  std::vector<int64_t> ok = {1};
  EXPECT_EQ(
      PlanPull(catalog, {PullOp::Rows("w", ok, out.data())}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanPush(catalog, {PushOp::Dense("w", nullptr)}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StepPlanTest, AssignedValuesGoToEveryShardOfADenseVariableOnly) {
  ShardMap catalog = Catalog();
  std::vector<float> values(10, 2.5f);
  auto plan = PlanPush(catalog, {PushOp::AssignDense("w", values.data())});
  ASSERT_TRUE(plan.ok()) << plan.status();
  int items = 0;
  for (const auto& list : plan->items_by_ps) {
    for (const PlannedItem& item : list) {
      EXPECT_TRUE(item.assign);
      ++items;
    }
  }
  EXPECT_EQ(items, 2);
  EXPECT_EQ(PlanPush(catalog, {PushOp::AssignDense("e", values.data())})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int64_t> ids = {1};
  PushOp rows = PushOp::Rows("e", ids, values.data());
  rows.assign = true;
  absl::Status refused = PlanPush(catalog, {rows}).status();
  EXPECT_NE(refused.message().find("values can be assigned to dense "
                                   "variables only; it is EMBEDDING"),
            std::string::npos)
      << refused;
}

}  // namespace
}  // namespace psrt
