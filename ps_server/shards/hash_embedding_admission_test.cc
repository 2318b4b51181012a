// Feature admission on a hash embedding shard (AdmissionSpec): an id gets
// a row on the push that brings its sketch count to min_count; gradients
// before that are dropped and counted; pulls of such ids store nothing.
#include <cmath>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "partitioner/variable_spec.h"
#include "ps_server/shards/hash_embedding_shard.h"

namespace psrt {
namespace {

struct AdmissionShard {
  explicit AdmissionShard(
      int min_count, int64_t capacity = 0,
      AdmissionSpec::Unadmitted unadmitted = AdmissionSpec::INITIAL_VALUE,
      int64_t sketch_width = 0)
      : map(1) {
    VariableSpec spec;
    spec.set_name("ids");
    spec.set_kind(HASH_EMBEDDING);
    spec.add_shape(capacity);
    spec.add_shape(2);
    spec.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
    spec.mutable_optimizer()->set_learning_rate(1.0f);
    spec.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
    spec.mutable_initializer()->set_min(-1);
    spec.mutable_initializer()->set_max(1);
    spec.mutable_admission()->set_min_count(min_count);
    spec.mutable_admission()->set_unadmitted_value(unadmitted);
    spec.mutable_admission()->set_sketch_width(sketch_width);
    EXPECT_TRUE(NormalizeVariableSpec(&spec).ok());
    EXPECT_TRUE(map.Add(spec).ok());
    layout = map.Find("ids");
    optimizer = CreateOptimizer(layout->spec.optimizer());
    init = std::make_unique<Initializer>(layout->spec.initializer());
    shard = std::make_unique<HashEmbeddingShard>(*layout, 0, optimizer.get(),
                                                 *init);
  }

  // One push through the protocol the push handler uses: Prepare, lock,
  // ApplyLocked with undo space (undone if refused). Gradient g for every
  // id, both columns.
  absl::Status Push(std::vector<int64_t> ids, float g) {
    ShardUpdate update;
    update.learning_rate = 1.0f;
    update.ids = std::move(ids);
    std::vector<float> grads(update.ids.size() * 2, g);
    update.grads = {
        PayloadView::Contiguous(grads.data(), grads.size() * sizeof(float))};
    if (absl::Status s = shard->Prepare(&update, 1.0f); !s.ok()) return s;
    absl::MutexLock lock(shard->mutex());
    if (absl::Status s = shard->CheckLocked(update); !s.ok()) return s;
    std::vector<float> undo(shard->UndoFloats(update));
    absl::Status s = shard->ApplyLocked(update, undo.data());
    if (!s.ok()) shard->UndoLocked(update, undo.data());
    return s;
  }

  float Value(int64_t id, int column = 0) {
    float out[2];
    shard->Gather({id}, out);
    return out[column];
  }

  ShardMap map;
  const VariableLayout* layout;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Initializer> init;
  std::unique_ptr<HashEmbeddingShard> shard;
};

TEST(HashEmbeddingAdmissionTest, AnIdGetsItsRowOnItsMinCountthPush) {
  AdmissionShard a(/*min_count=*/3);
  // Two pushes of 1, 2 and 3: no rows, 6 gradient rows dropped, pulls
  // return the initial value.
  ASSERT_TRUE(a.Push({1, 2, 3}, 1.0f).ok());
  ASSERT_TRUE(a.Push({1, 2, 3}, 1.0f).ok());
  EXPECT_EQ(a.shard->num_rows(), 0);
  EXPECT_EQ(a.shard->reserved_bytes(), 0);
  EXPECT_EQ(a.shard->admission_counts().unadmitted_gradients, 6);
  EXPECT_EQ(a.Value(1), a.init->Value(1, 0));
  // A repeat inside one push is one sighting: 4 three times in a push
  // stays out.
  ASSERT_TRUE(a.Push({4, 4, 4}, 1.0f).ok());
  EXPECT_EQ(a.shard->num_rows(), 0);
  // The third push of 1 and 2 admits them and applies only its own
  // gradient (sums of repeats included: 1 twice = 2 x 0.5).
  ASSERT_TRUE(a.Push({1, 2, 1}, 0.5f).ok());
  EXPECT_EQ(a.shard->num_rows(), 2);
  EXPECT_FLOAT_EQ(a.Value(1), a.init->Value(1, 0) - 1.0f);
  EXPECT_FLOAT_EQ(a.Value(2, 1), a.init->Value(2, 1) - 0.5f);
  EXPECT_EQ(a.Value(3), a.init->Value(3, 0));
  const AdmissionCounts counts = a.shard->admission_counts();
  EXPECT_EQ(counts.admitted_rows, 2);
  EXPECT_EQ(counts.unadmitted_gradients, 7);
  // Admitted rows train on every push from then on.
  ASSERT_TRUE(a.Push({1}, 1.0f).ok());
  EXPECT_FLOAT_EQ(a.Value(1), a.init->Value(1, 0) - 2.0f);
}

TEST(HashEmbeddingAdmissionTest, IdsBelowTheCountNeverAllocateARow) {
  // 20,000 distinct ids pushed twice each, min_count 3, the default sketch
  // (2^20 counters a row): no row, no block, only the sketch's memory.
  AdmissionShard a(/*min_count=*/3);
  std::vector<int64_t> ids(20000);
  std::iota(ids.begin(), ids.end(), int64_t{1} << 40);
  for (int round = 0; round < 2; ++round) {
    for (size_t b = 0; b < ids.size(); b += 1000) {
      ASSERT_TRUE(
          a.Push(std::vector<int64_t>(ids.begin() + b, ids.begin() + b + 1000),
                 1.0f)
              .ok());
    }
  }
  EXPECT_EQ(a.shard->num_rows(), 0);
  EXPECT_EQ(a.shard->reserved_bytes(), 0);
  EXPECT_EQ(a.shard->admission_counts().unadmitted_gradients, 40000);
  EXPECT_LT(a.shard->bytes(), 4 * (1 << 20) + 4096);
  // A third sighting admits every one of them (a sketch never counts low).
  for (size_t b = 0; b < ids.size(); b += 1000) {
    ASSERT_TRUE(
        a.Push(std::vector<int64_t>(ids.begin() + b, ids.begin() + b + 1000),
               1.0f)
            .ok());
  }
  EXPECT_EQ(a.shard->num_rows(), 20000);
  EXPECT_EQ(a.shard->admission_counts().admitted_rows, 20000);
}

TEST(HashEmbeddingAdmissionTest, UnadmittedIdsCanPullZeros) {
  AdmissionShard a(/*min_count=*/2, 0, AdmissionSpec::ZEROS);
  EXPECT_EQ(a.Value(9), 0.0f);
  ASSERT_TRUE(a.Push({9}, 1.0f).ok());
  EXPECT_EQ(a.Value(9, 1), 0.0f);
  ASSERT_TRUE(a.Push({9}, 1.0f).ok());  // admitted: initial value - 1
  EXPECT_FLOAT_EQ(a.Value(9, 1), a.init->Value(9, 1) - 1.0f);
}

TEST(HashEmbeddingAdmissionTest, CapacityCountsOnlyIdsAPushCanAdmit) {
  AdmissionShard a(/*min_count=*/2, /*capacity=*/10);
  std::vector<int64_t> ids(100);
  std::iota(ids.begin(), ids.end(), 500);
  // 100 new ids in a table of 10: none can be admitted by this push.
  ASSERT_TRUE(a.Push(ids, 1.0f).ok());
  EXPECT_EQ(a.shard->num_rows(), 0);
  // 11 of them again would pass the capacity: refused, nothing created
  // or counted.
  absl::Status s =
      a.Push(std::vector<int64_t>(ids.begin(), ids.begin() + 11), 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("11 this push may admit"), std::string::npos) << s;
  EXPECT_EQ(a.shard->num_rows(), 0);
  EXPECT_EQ(a.shard->admission_counts().unadmitted_gradients, 100);
  ASSERT_TRUE(
      a.Push(std::vector<int64_t>(ids.begin(), ids.begin() + 10), 1.0f).ok());
  EXPECT_EQ(a.shard->num_rows(), 10);
}

TEST(HashEmbeddingAdmissionTest, ARefusedPushLeavesAdmittedRowsAsTheyWere) {
  AdmissionShard a(/*min_count=*/2);
  ASSERT_TRUE(a.Push({1, 2}, 1.0f).ok());
  ASSERT_TRUE(a.Push({1}, 1.0f).ok());  // 1 admitted
  const float before = a.Value(1);
  // 3e38 once is finite: 2 is admitted, 3 (first sighting) is not.
  absl::Status s = a.Push({3, 1, 2}, 3e38f);
  ASSERT_TRUE(s.ok()) << s;
  // Twice overflows row 1: refused and undone, 3 (admitted by this push)
  // left at its initial value.
  s = a.Push({3, 1, 2}, 3e38f);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_FLOAT_EQ(a.Value(1), before - 3e38f);
  EXPECT_FLOAT_EQ(a.Value(3), a.init->Value(3, 0));
}

TEST(HashEmbeddingAdmissionTest, RestoredRowsNeedNoSightings) {
  // A checkpoint (or a primary's snapshot) holds admitted rows: importing
  // them creates them at once.
  AdmissionShard a(/*min_count=*/5);
  const std::vector<int64_t> ids = {11, 12};
  std::vector<float> rows(2 * a.shard->row_stride(), 0.25f);
  ASSERT_TRUE(a.shard->ImportRows(ids, rows.data()).ok());
  EXPECT_EQ(a.shard->num_rows(), 2);
  ASSERT_TRUE(a.Push({11}, 1.0f).ok());
  EXPECT_FLOAT_EQ(a.Value(11), -0.75f);
}

}  // namespace
}  // namespace psrt
