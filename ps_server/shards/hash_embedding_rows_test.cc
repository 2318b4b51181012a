// The life of a hash embedding shard's rows. Feature admission
// (AdmissionSpec): an id gets a row on the push that brings its sketch
// count to min_count; gradients before that are dropped and counted; pulls
// of such ids store nothing. Eviction (EvictionSpec): rows idle for more
// than ttl_steps global steps are dropped; an id that returns starts
// fresh; updates prepared before a sweep land on their own rows. With
// max_rows, the least recently updated rows make room for new ones.
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "partitioner/variable_spec.h"
#include "ps_server/shards/hash_embedding_shard.h"

namespace psrt {
namespace {

struct AdmissionShard {
  explicit AdmissionShard(
      int min_count, int64_t capacity = 0,
      AdmissionSpec::Unadmitted unadmitted = AdmissionSpec::INITIAL_VALUE,
      int64_t ttl_steps = 0,
      OptimizerSpec::Kind optimizer_kind = OptimizerSpec::SGD,
      int64_t max_rows = 0)
      : map(1) {
    VariableSpec spec;
    spec.set_name("ids");
    spec.set_kind(HASH_EMBEDDING);
    spec.add_shape(capacity);
    spec.add_shape(2);
    spec.mutable_optimizer()->set_kind(optimizer_kind);
    spec.mutable_optimizer()->set_learning_rate(1.0f);
    spec.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
    spec.mutable_initializer()->set_min(-1);
    spec.mutable_initializer()->set_max(1);
    spec.mutable_admission()->set_min_count(min_count);
    spec.mutable_admission()->set_unadmitted_value(unadmitted);
    spec.mutable_eviction()->set_ttl_steps(ttl_steps);
    spec.mutable_eviction()->set_max_rows(max_rows);
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
  absl::Status Push(std::vector<int64_t> ids, float g, int64_t step = 0) {
    ShardUpdate update;
    update.learning_rate = 1.0f;
    update.global_step = step;
    update.ids = std::move(ids);
    std::vector<float> grads(update.ids.size() * 2, g);
    update.grads = {
        PayloadView::Contiguous(grads.data(), grads.size() * sizeof(float))};
    if (absl::Status s = shard->Prepare(&update, 1.0f); !s.ok()) return s;
    absl::MutexLock lock(shard->mutex());
    if (absl::Status s = shard->CheckLocked(&update); !s.ok()) return s;
    std::vector<float> undo(shard->UndoFloats(update));
    absl::Status s = shard->ApplyLocked(update, undo.data());
    if (!s.ok()) shard->UndoLocked(update, undo.data());
    return s;
  }

  float Value(int64_t id, int column = 0) {
    float out[2];
    EXPECT_TRUE(shard->Gather({id}, out).ok());
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
  EXPECT_EQ(a.shard->row_counts().unadmitted_gradients, 6);
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
  const HashRowCounts counts = a.shard->row_counts();
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
  EXPECT_EQ(a.shard->row_counts().unadmitted_gradients, 40000);
  EXPECT_LT(a.shard->bytes(), 4 * (1 << 20) + 4096);
  // A third sighting admits every one of them (a sketch never counts low).
  for (size_t b = 0; b < ids.size(); b += 1000) {
    ASSERT_TRUE(
        a.Push(std::vector<int64_t>(ids.begin() + b, ids.begin() + b + 1000),
               1.0f)
            .ok());
  }
  EXPECT_EQ(a.shard->num_rows(), 20000);
  EXPECT_EQ(a.shard->row_counts().admitted_rows, 20000);
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
  EXPECT_EQ(a.shard->row_counts().unadmitted_gradients, 100);
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

// A push of `grads` (one row) to id 42, learning rate 1.
ShardUpdate UpdateOfId42(const std::vector<float>& grads) {
  ShardUpdate update;
  update.learning_rate = 1.0f;
  update.ids = {42};
  update.grads = {
      PayloadView::Contiguous(grads.data(), grads.size() * sizeof(float))};
  return update;
}

// Admission decides in Prepare, in the order pushes are prepared; the
// apply step applies what was decided. Two pushes of a new id at
// min_count 2, prepared in turn and applied in the other order: the
// second prepared was admitted and lands; the first was not, and its
// gradient is dropped though it is applied after the row exists.
TEST(HashEmbeddingAdmissionTest, AdmissionIsDecidedInPrepare) {
  AdmissionShard a(/*min_count=*/2);
  const std::vector<float> first_grads = {1.0f, 1.0f};
  const std::vector<float> second_grads = {0.25f, 0.25f};
  ShardUpdate first = UpdateOfId42(first_grads);
  ShardUpdate second = UpdateOfId42(second_grads);
  ASSERT_TRUE(a.shard->Prepare(&first, 1.0f).ok());
  EXPECT_EQ(a.shard->num_rows(), 0);  // one sighting: not admitted
  ASSERT_TRUE(a.shard->Prepare(&second, 1.0f).ok());
  EXPECT_EQ(a.shard->num_rows(), 1);  // the second admits it, in Prepare
  EXPECT_EQ(a.shard->row_counts().admitted_rows, 1);
  for (ShardUpdate* update : {&second, &first}) {
    absl::MutexLock lock(a.shard->mutex());
    ASSERT_TRUE(a.shard->CheckLocked(update).ok());
    std::vector<float> undo(a.shard->UndoFloats(*update));
    ASSERT_TRUE(a.shard->ApplyLocked(*update, undo.data()).ok());
  }
  EXPECT_FLOAT_EQ(a.Value(42), a.init->Value(42, 0) - 0.25f);
  EXPECT_EQ(a.shard->row_counts().unadmitted_gradients, 1);
  EXPECT_EQ(a.shard->num_rows(), 1);
}

// The backup of the test above: it receives the primary's pushes in the
// order they were applied there (the second prepared first), each with the
// ids the primary gave no row. The first push's gradient for 42 is dropped
// here too, though 42 has a row by the time it arrives: both copies end
// with the same value and counts.
TEST(HashEmbeddingAdmissionTest, ABackupDropsWhatItsPrimaryDropped) {
  AdmissionShard backup(/*min_count=*/2);
  const std::vector<float> first_grads = {1.0f, 1.0f};
  const std::vector<float> second_grads = {0.25f, 0.25f};
  auto forwarded = [](const std::vector<float>& grads,
                      absl::flat_hash_set<int64_t> dropped) {
    ShardUpdate update = UpdateOfId42(grads);
    update.primary_dropped = std::move(dropped);
    return update;
  };
  ShardUpdate second = forwarded(second_grads, {});
  ShardUpdate first = forwarded(first_grads, {42});
  for (ShardUpdate* update : {&second, &first}) {
    ASSERT_TRUE(backup.shard->Prepare(update, 1.0f).ok());
    absl::MutexLock lock(backup.shard->mutex());
    ASSERT_TRUE(backup.shard->CheckLocked(update).ok());
    std::vector<float> undo(backup.shard->UndoFloats(*update));
    ASSERT_TRUE(backup.shard->ApplyLocked(*update, undo.data()).ok());
  }
  EXPECT_FLOAT_EQ(backup.Value(42), backup.init->Value(42, 0) - 0.25f);
  EXPECT_EQ(backup.shard->row_counts().unadmitted_gradients, 1);
  EXPECT_EQ(backup.shard->row_counts().admitted_rows, 1);
  EXPECT_EQ(backup.shard->num_rows(), 1);
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

// Eviction: ttl 10 steps, momentum (a slot that must start fresh).
TEST(HashEmbeddingEvictionTest, IdleRowsGoAndAReturningIdStartsFresh) {
  AdmissionShard a(0, 0, AdmissionSpec::INITIAL_VALUE, /*ttl_steps=*/10,
                   OptimizerSpec::MOMENTUM);
  ASSERT_TRUE(a.Push({1, 2, 3}, 1.0f, /*step=*/0).ok());
  ASSERT_TRUE(a.Push({1}, 1.0f, /*step=*/5).ok());
  // At global step 15, rows last updated before step 5 are idle for more
  // than 10 steps: 2 and 3 go, 1 stays.
  EXPECT_EQ(a.shard->EvictIdleRows(15), 2);
  EXPECT_EQ(a.shard->num_rows(), 1);
  EXPECT_EQ(a.shard->row_counts().evicted_rows, 2);
  EXPECT_EQ(a.Value(2), a.init->Value(2, 0));  // pulls: the initial value
  EXPECT_EQ(a.shard->EvictIdleRows(15), 0);
  // 2 returns: a fresh row, velocity 0, so exactly init - g (a stale
  // velocity 1 would add 0.9 more).
  ASSERT_TRUE(a.Push({2}, 0.5f, /*step=*/15).ok());
  EXPECT_FLOAT_EQ(a.Value(2), a.init->Value(2, 0) - 0.5f);
  // 1, twice pushed, kept its velocity: 1 + 0.9 * 1 = 1.9 after the second.
  EXPECT_FLOAT_EQ(a.Value(1), a.init->Value(1, 0) - 1.0f - 1.9f);
}

TEST(HashEmbeddingEvictionTest, AnUpdatePreparedBeforeASweepLandsOnItsRows) {
  AdmissionShard a(0, 0, AdmissionSpec::INITIAL_VALUE, /*ttl_steps=*/20);
  std::vector<int64_t> ids(100);
  std::iota(ids.begin(), ids.end(), 1);
  ASSERT_TRUE(a.Push(ids, 1.0f, /*step=*/0).ok());
  ASSERT_TRUE(a.Push({100}, 1.0f, /*step=*/50).ok());  // the last row
  // Prepared (rows found: 100 at the top, 7000 new) ...
  ShardUpdate update;
  update.learning_rate = 1.0f;
  update.global_step = 60;
  update.ids = {100, 7000};
  const std::vector<float> grads = {0.25f, 0.25f, 0.5f, 0.5f};
  update.grads = {
      PayloadView::Contiguous(grads.data(), grads.size() * sizeof(float))};
  ASSERT_TRUE(a.shard->Prepare(&update, 1.0f).ok());
  // ... then a sweep at step 60 drops 1..99 and moves 100 and 7000 down.
  EXPECT_EQ(a.shard->EvictIdleRows(60), 99);
  EXPECT_EQ(a.shard->num_rows(), 2);
  {
    absl::MutexLock lock(a.shard->mutex());
    ASSERT_TRUE(a.shard->CheckLocked(&update).ok());
    std::vector<float> undo(a.shard->UndoFloats(update));
    ASSERT_TRUE(a.shard->ApplyLocked(update, undo.data()).ok());
  }
  EXPECT_FLOAT_EQ(a.Value(100, 1), a.init->Value(100, 1) - 2.0f - 0.25f);
  EXPECT_FLOAT_EQ(a.Value(7000, 1), a.init->Value(7000, 1) - 0.5f);
  EXPECT_EQ(a.Value(50), a.init->Value(50, 0));
  EXPECT_EQ(a.shard->num_rows(), 2);
}

// A sweep between Prepare and apply that evicts a row Prepare found gives
// it back to the update, fresh (its old values gone with the eviction),
// and counts it: evicted once, given back once, not admitted again. (A
// backup that follows this primary sees the eviction before the push;
// replicated_push_test checks its counts against given_back_rows.)
TEST(HashEmbeddingEvictionTest, ARowEvictedFromAPreparedUpdateIsGivenBack) {
  // Admission at the second sighting: 1 and 2 admitted, 7000 sighted.
  AdmissionShard a(2, 0, AdmissionSpec::INITIAL_VALUE, /*ttl_steps=*/20);
  ASSERT_TRUE(a.Push({1, 2, 7000}, 0.0f, /*step=*/0).ok());
  ASSERT_TRUE(a.Push({1, 2}, 1.0f, /*step=*/0).ok());
  ASSERT_TRUE(a.Push({2}, 1.0f, /*step=*/50).ok());
  const HashRowCounts before = a.shard->row_counts();
  ShardUpdate update;
  update.learning_rate = 1.0f;
  update.global_step = 60;
  update.ids = {1, 2, 7000};
  const std::vector<float> grads = {0.25f, 0.25f, 0.5f, 0.5f, 0.75f, 0.75f};
  update.grads = {
      PayloadView::Contiguous(grads.data(), grads.size() * sizeof(float))};
  ASSERT_TRUE(a.shard->Prepare(&update, 1.0f).ok());
  // Idle since step 0: 1 goes (2 was pushed at 50, 7000 is new).
  EXPECT_EQ(a.shard->EvictIdleRows(60), 1);
  {
    absl::MutexLock lock(a.shard->mutex());
    ASSERT_TRUE(a.shard->CheckLocked(&update).ok());
    std::vector<float> undo(a.shard->UndoFloats(update));
    ASSERT_TRUE(a.shard->ApplyLocked(update, undo.data()).ok());
  }
  EXPECT_FLOAT_EQ(a.Value(1, 1), a.init->Value(1, 1) - 0.25f);
  EXPECT_FLOAT_EQ(a.Value(2, 1), a.init->Value(2, 1) - 2.0f - 0.5f);
  EXPECT_FLOAT_EQ(a.Value(7000, 1), a.init->Value(7000, 1) - 0.75f);
  EXPECT_EQ(a.shard->num_rows(), 3);
  const HashRowCounts after = a.shard->row_counts();
  EXPECT_EQ(after.evicted_rows - before.evicted_rows, 1);
  EXPECT_EQ(after.given_back_rows - before.given_back_rows, 1);
  // 7000 at Prepare; 1 is not admitted again.
  EXPECT_EQ(after.admitted_rows - before.admitted_rows, 1);
}

TEST(HashEmbeddingEvictionTest, PinnedRowsStayAndRestoredRowsGetAFullTtl) {
  AdmissionShard a(0, 0, AdmissionSpec::INITIAL_VALUE, /*ttl_steps=*/10);
  ASSERT_TRUE(a.Push({1, 2}, 1.0f, /*step=*/0).ok());
  a.shard->PinRows(true);  // a checkpoint reading rows by position
  EXPECT_EQ(a.shard->EvictIdleRows(100), 0);
  EXPECT_EQ(a.shard->num_rows(), 2);
  a.shard->PinRows(false);
  EXPECT_EQ(a.shard->EvictIdleRows(100), 2);
  // Restored rows (ImportRows) count from the first sweep after, whatever
  // the step: kept at step 1000 and 1010, gone once idle 11 steps.
  std::vector<float> rows(2 * a.shard->row_stride(), 0.5f);
  ASSERT_TRUE(
      a.shard->ImportRows(std::vector<int64_t>{8, 9}, rows.data()).ok());
  EXPECT_EQ(a.shard->EvictIdleRows(1000), 0);
  EXPECT_EQ(a.shard->EvictIdleRows(1010), 0);
  EXPECT_EQ(a.shard->EvictIdleRows(1011), 2);
}

TEST(HashEmbeddingEvictionTest, ASweepOfManyRowsEvictsThemAllAcrossHolds) {
  AdmissionShard a(0, 0, AdmissionSpec::INITIAL_VALUE, /*ttl_steps=*/5);
  // 3 holds' worth of rows and more, every other one pushed again later.
  const int64_t n = 3 * HashEmbeddingShard::kEvictionRowsPerHold + 17;
  std::vector<int64_t> ids(n), recent;
  std::iota(ids.begin(), ids.end(), 0);
  ASSERT_TRUE(a.Push(ids, 1.0f, /*step=*/0).ok());
  for (int64_t id = 0; id < n; id += 2) recent.push_back(id);
  ASSERT_TRUE(a.Push(recent, 1.0f, /*step=*/10).ok());
  EXPECT_EQ(a.shard->EvictIdleRows(10), n / 2);
  EXPECT_EQ(a.shard->num_rows(), static_cast<int64_t>(recent.size()));
  for (int64_t id : recent) {
    ASSERT_FLOAT_EQ(a.Value(id), a.init->Value(id, 0) - 2.0f) << id;
  }
  EXPECT_EQ(a.Value(1), a.init->Value(1, 0));
}

// A shard with a max_rows share, SGD at rate 1 (AdmissionShard::Push).
AdmissionShard MaxRowsShard(int64_t max_rows, int min_count = 0) {
  return AdmissionShard(min_count, 0, AdmissionSpec::INITIAL_VALUE, 0,
                        OptimizerSpec::SGD, max_rows);
}

std::vector<int64_t> Range(int64_t first, int64_t count) {
  std::vector<int64_t> ids(count);
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

// 3,000 ids arrive 100 per step on a 1,000-row budget: the shard never
// holds more, makes room by evicting the least recently updated rows, and
// the most recent ids keep their trained values exactly.
TEST(HashEmbeddingMaxRowsTest, NewIdsEvictTheLeastRecentlyUpdatedRows) {
  AdmissionShard a = MaxRowsShard(1000);
  for (int step = 0; step < 30; ++step) {
    ASSERT_EQ(a.Push(Range(step * 100, 100), 1.0f, step), absl::OkStatus())
        << step;
    ASSERT_LE(a.shard->num_rows(), 1000) << step;
  }
  const int64_t rows = a.shard->num_rows();
  EXPECT_GE(rows, 990);
  EXPECT_EQ(a.shard->row_counts().evicted_rows, 3000 - rows);
  // The 900 newest ids (steps 21..29) are all there: every eviction took
  // rows of older steps first (a room search evicts 100 + 1% per push).
  for (int64_t id = 2100; id < 3000; ++id) {
    ASSERT_FLOAT_EQ(a.Value(id), a.init->Value(id, 0) - 1.0f) << id;
  }
  // The oldest are gone: pulls read their initial values.
  for (int64_t id = 0; id < 1000; ++id) {
    ASSERT_EQ(a.Value(id), a.init->Value(id, 0)) << id;
  }
}

// Each shard's share of max_rows is rounded up without overflowing, even
// at the largest max_rows a spec can hold.
TEST(HashEmbeddingMaxRowsTest, TheLargestMaxRowsSplitsIntoHalvesOnTwoShards) {
  VariableSpec spec;
  spec.set_name("ids");
  spec.set_kind(HASH_EMBEDDING);
  spec.add_shape(0);
  spec.add_shape(2);
  spec.mutable_partition()->set_num_shards(2);
  spec.mutable_optimizer()->set_learning_rate(0.1f);
  spec.mutable_eviction()->set_max_rows(std::numeric_limits<int64_t>::max());
  ASSERT_EQ(NormalizeVariableSpec(&spec), absl::OkStatus());
  ShardMap map(1);
  ASSERT_EQ(map.Add(spec), absl::OkStatus());
  const VariableLayout* layout = map.Find("ids");
  ASSERT_EQ(layout->num_shards(), 2);
  auto optimizer = CreateOptimizer(layout->spec.optimizer());
  Initializer init(layout->spec.initializer());
  HashEmbeddingShard shard(*layout, 0, optimizer.get(), init);
  EXPECT_EQ(shard.max_rows(), int64_t{1} << 62);
}

// A hot set pushed every step survives the churn of fresh ids around it.
TEST(HashEmbeddingMaxRowsTest, RowsPushedEveryStepSurviveTheChurn) {
  AdmissionShard a = MaxRowsShard(500);
  const std::vector<int64_t> hot = Range(1000000, 50);
  for (int step = 0; step < 100; ++step) {
    std::vector<int64_t> ids = Range(step * 100, 100);
    ids.insert(ids.end(), hot.begin(), hot.end());
    ASSERT_EQ(a.Push(ids, 0.5f, step), absl::OkStatus()) << step;
  }
  for (int64_t id : hot) {
    ASSERT_FLOAT_EQ(a.Value(id), a.init->Value(id, 0) - 50.0f) << id;
  }
  EXPECT_LE(a.shard->num_rows(), 500);
}

// A full shard whose rows are all older than the push: the push's own ids
// are never the ones evicted, even when they are the least recent.
TEST(HashEmbeddingMaxRowsTest, APushNeverEvictsTheRowsItCarries) {
  AdmissionShard a = MaxRowsShard(100);
  ASSERT_EQ(a.Push(Range(0, 50), 1.0f, /*step=*/0), absl::OkStatus());
  ASSERT_EQ(a.Push(Range(50, 50), 1.0f, /*step=*/1), absl::OkStatus());
  // Ids 0..49 are the least recent; this push carries 0..29 and 70 new.
  std::vector<int64_t> ids = Range(0, 30);
  const std::vector<int64_t> fresh = Range(500, 70);
  ids.insert(ids.end(), fresh.begin(), fresh.end());
  ASSERT_EQ(a.Push(ids, 1.0f, /*step=*/2), absl::OkStatus());
  EXPECT_LE(a.shard->num_rows(), 100);
  for (int64_t id = 0; id < 30; ++id) {
    ASSERT_FLOAT_EQ(a.Value(id), a.init->Value(id, 0) - 2.0f) << id;
  }
  for (int64_t id : fresh) {
    ASSERT_FLOAT_EQ(a.Value(id), a.init->Value(id, 0) - 1.0f) << id;
  }
  // A push that alone brings more new ids than the share is refused,
  // naming max_rows, and changes nothing.
  const int64_t before = a.shard->num_rows();
  const absl::Status s = a.Push(Range(10000, 101), 1.0f, /*step=*/3);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("eviction.max_rows"), std::string::npos) << s;
  EXPECT_EQ(a.shard->num_rows(), before);
  EXPECT_FLOAT_EQ(a.Value(0), a.init->Value(0, 0) - 2.0f);
}

// The background sweep keeps a shard at 90% of its share, taking the
// least recently updated rows, a bounded number per hold of the lock.
TEST(HashEmbeddingMaxRowsTest, TheSweepTrimsToNinetyPercentOldestFirst) {
  const int64_t share = 2 * HashEmbeddingShard::kEvictionRowsPerHold + 1000;
  AdmissionShard a = MaxRowsShard(share);
  for (int step = 0; step < 10; ++step) {
    ASSERT_EQ(a.Push(Range(step * (share / 10), share / 10), 1.0f, step),
              absl::OkStatus());
  }
  const int64_t full = a.shard->num_rows();
  ASSERT_EQ(full, share / 10 * 10);
  const int64_t evicted = a.shard->EvictIdleRows(/*global_step=*/10);
  EXPECT_EQ(a.shard->num_rows(), full - evicted);
  EXPECT_LE(a.shard->num_rows(), share / 10 * 9);
  // The rows of step 0 went (about a tenth of the share: a sampled cutoff
  // at step 0 or 1); the rows of steps 2..9 all stayed.
  EXPECT_GE(evicted, full - share / 10 * 9);
  EXPECT_LE(evicted, 2 * (share / 10));
  for (int64_t id = 2 * (share / 10); id < full; ++id) {
    ASSERT_FLOAT_EQ(a.Value(id), a.init->Value(id, 0) - 1.0f) << id;
  }
  EXPECT_EQ(a.shard->EvictIdleRows(10), 0);  // at 90%: nothing more
}

// With a checkpoint reading the rows, nothing is evicted: pushes may pass
// the share until the next sweep after it.
TEST(HashEmbeddingMaxRowsTest, PinnedRowsStayAndTheSweepTrimsAfter) {
  AdmissionShard a = MaxRowsShard(100);
  ASSERT_EQ(a.Push(Range(0, 100), 1.0f, 0), absl::OkStatus());
  a.shard->PinRows(true);
  ASSERT_EQ(a.Push(Range(100, 50), 1.0f, 1), absl::OkStatus());
  EXPECT_EQ(a.shard->num_rows(), 150);
  for (int64_t id = 0; id < 150; ++id) {
    ASSERT_FLOAT_EQ(a.Value(id), a.init->Value(id, 0) - 1.0f) << id;
  }
  EXPECT_EQ(a.shard->EvictIdleRows(2), 0);
  a.shard->PinRows(false);
  EXPECT_GE(a.shard->EvictIdleRows(2), 60);
  EXPECT_LE(a.shard->num_rows(), 90);
  for (int64_t id = 100; id < 150; ++id) {  // the newest stayed
    ASSERT_FLOAT_EQ(a.Value(id), a.init->Value(id, 0) - 1.0f) << id;
  }
}

// With admission, an admitted id takes room from the least recent rows.
TEST(HashEmbeddingMaxRowsTest, AdmittedIdsMakeRoomToo) {
  AdmissionShard a = MaxRowsShard(100, /*min_count=*/2);
  ASSERT_EQ(a.Push(Range(0, 100), 1.0f, 0), absl::OkStatus());
  ASSERT_EQ(a.Push(Range(0, 100), 1.0f, 1), absl::OkStatus());  // admitted
  ASSERT_EQ(a.shard->num_rows(), 100);
  ASSERT_EQ(a.Push(Range(0, 50), 1.0f, 2), absl::OkStatus());
  ASSERT_EQ(a.Push(Range(500, 20), 1.0f, 3), absl::OkStatus());  // counted
  ASSERT_EQ(a.Push(Range(500, 20), 1.0f, 4), absl::OkStatus());  // admitted
  EXPECT_LE(a.shard->num_rows(), 100);
  for (int64_t id = 500; id < 520; ++id) {
    ASSERT_FLOAT_EQ(a.Value(id), a.init->Value(id, 0) - 1.0f) << id;
  }
  for (int64_t id = 0; id < 50; ++id) {  // updated at step 2: kept
    ASSERT_FLOAT_EQ(a.Value(id), a.init->Value(id, 0) - 2.0f) << id;
  }
}

}  // namespace
// A shard at ps_server --memory_budget_mb (a reserve of `blocks` blocks of
// rows, evicting at the limit), admission `min_count` (0: none).
struct BudgetShard {
  BudgetShard(int64_t blocks, int min_count)
      : a(min_count),
        limit(blocks * HashEmbeddingShard::kRowsPerBlock *
              (2 * static_cast<int64_t>(sizeof(float)) +
               HashEmbeddingShard::kIndexBytesPerRow)) {
    a.shard = std::make_unique<HashEmbeddingShard>(
        *a.layout, 0, a.optimizer.get(), *a.init,
        [this](int64_t bytes) {
          if (reserved + bytes > limit) {
            return absl::ResourceExhaustedError("over the test's budget");
          }
          reserved += bytes;
          return absl::OkStatus();
        },
        /*evict_at_memory_limit=*/true);
  }
  AdmissionShard a;
  const int64_t limit;
  int64_t reserved = 0;
};

// At the budget while a checkpoint reads the shard by position, no row may
// move, so none is evicted: a push bringing new ids still succeeds (a
// checkpoint must not fail training). Its new ids get rows while the
// shard's blocks have room; the rest are dropped as unadmitted ids are
// (counted; pulls read initial values); its known ids are updated. After
// the checkpoint, new ids make room again.
TEST(HashEmbeddingMemoryBudgetTest,
     NewIdsDuringACheckpointAreDroppedNotRefused) {
  for (const int min_count : {0, 2}) {
    SCOPED_TRACE(min_count);
    BudgetShard b(/*blocks=*/2, min_count);
    AdmissionShard& a = b.a;
    const int64_t held = 2 * HashEmbeddingShard::kRowsPerBlock;
    const int pushes = min_count > 0 ? min_count : 1;
    int step = 0;
    for (int64_t first = 0; first < held; first += 1024, ++step) {
      for (int k = 0; k < pushes; ++k) {
        ASSERT_EQ(a.Push(Range(first, 1024), 1.0f, step), absl::OkStatus());
      }
    }
    ASSERT_EQ(a.shard->num_rows(), held);
    // Full: 1,024 new ids evict 1,024 + 1% of the rows (81 rows to spare).
    for (int k = 0; k < pushes; ++k) {
      ASSERT_EQ(a.Push(Range(100000, 1024), 1.0f, step), absl::OkStatus());
    }
    ++step;
    const int64_t spare = held - a.shard->num_rows();
    ASSERT_EQ(spare, held / 100);
    const int64_t dropped_before = a.shard->row_counts().unadmitted_gradients;

    a.shard->PinRows(true);
    std::vector<int64_t> ids = Range(200000, 1024);  // new
    const std::vector<int64_t> known = Range(100000, 100);
    ids.insert(ids.end(), known.begin(), known.end());
    for (int k = 0; k < pushes; ++k) {
      ASSERT_EQ(a.Push(ids, 1.0f, step), absl::OkStatus()) << k;
    }
    ++step;
    EXPECT_EQ(a.shard->num_rows(), held);
    EXPECT_EQ(a.shard->row_counts().evicted_rows, 1024 + held / 100);
    int placed = 0;
    for (int64_t id = 200000; id < 201024; ++id) {
      const float v = a.Value(id);
      if (v == a.init->Value(id, 0) - 1.0f) {
        ++placed;
      } else {
        ASSERT_EQ(v, a.init->Value(id, 0)) << id;
      }
    }
    EXPECT_EQ(placed, spare);
    // Every gradient of an id without a row counted (with admission, also
    // the sightings before an id's min_count).
    EXPECT_GE(a.shard->row_counts().unadmitted_gradients - dropped_before,
              1024 - spare);
    for (int64_t id : known) {
      // One push before (with admission, the one that admitted it), then
      // every push during the checkpoint.
      ASSERT_FLOAT_EQ(a.Value(id), a.init->Value(id, 0) - 1.0f - pushes) << id;
    }
    a.shard->PinRows(false);

    for (int k = 0; k < pushes; ++k) {
      ASSERT_EQ(a.Push(Range(300000, 1024), 1.0f, step), absl::OkStatus());
    }
    EXPECT_LE(a.shard->num_rows(), held);
    EXPECT_FLOAT_EQ(a.Value(300000), a.init->Value(300000, 0) - 1.0f);
    EXPECT_LE(b.reserved, b.limit);
  }
}

// At the budget, admitted rows (created one at a time) replace evicted
// ones without doubling the index: 13 blocks (53,248 rows) fill 81% of a
// 65,536-slot index, above the 25/32 load below which an insert cleans
// erased slots in place; the erased slots are cleaned by a rebuild at the
// same size instead (the shard's accounted bytes stay as they were).
TEST(HashEmbeddingMemoryBudgetTest, AdmittedRowsAtTheBudgetKeepTheIndexSize) {
  BudgetShard b(/*blocks=*/13, /*min_count=*/2);
  AdmissionShard& a = b.a;
  const int64_t held = 13 * HashEmbeddingShard::kRowsPerBlock;
  int64_t step = 0, next_id = 0;
  auto admit = [&](int64_t count) {
    const std::vector<int64_t> ids = Range(next_id, count);
    next_id += count;
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(a.Push(ids, 1.0f, step), absl::OkStatus()) << step;
    }
    ++step;
  };
  while (a.shard->num_rows() + 1024 <= held) admit(1024);
  admit(held - a.shard->num_rows());
  ASSERT_EQ(a.shard->num_rows(), held);
  const int64_t full_bytes = a.shard->bytes();
  for (int round = 0; round < 200; ++round) admit(1024);
  EXPECT_GT(a.shard->row_counts().evicted_rows, 200 * 1024 - held / 100);
  EXPECT_LE(a.shard->num_rows(), held);
  EXPECT_EQ(a.shard->bytes(), full_bytes);
  EXPECT_LE(b.reserved, b.limit);
}

}  // namespace psrt
