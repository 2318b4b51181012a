#include "ps_server/shards/count_min_sketch.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "partitioner/id_hash.h"

namespace psrt {
namespace {

TEST(CountMinSketchTest, CountsExactlyWhenIdsDoNotShareCounters) {
  CountMinSketch sketch(1 << 16);
  for (int k = 1; k <= 5; ++k) EXPECT_EQ(sketch.Increment(42), k);
  EXPECT_EQ(sketch.Estimate(42), 5);
  EXPECT_EQ(sketch.Estimate(43), 0);
  EXPECT_EQ(sketch.bytes(), 4 << 16);
}

TEST(CountMinSketchTest, NeverUnderestimatesAndRarelyOverestimates) {
  // 20,000 ids counted 1..3 times in a 2^16-wide sketch: every estimate at
  // least the true count; the ids overestimated are few (about
  // (20000 / 65536)^4 of them with all 4 counters shared: < 1%).
  CountMinSketch sketch(1 << 16);
  constexpr int64_t kIds = 20000;
  for (int round = 0; round < 3; ++round) {
    for (int64_t id = 0; id < kIds; ++id) {
      if (id % 3 >= round) sketch.Increment(id * 7919 + 11);
    }
  }
  int64_t over = 0;
  for (int64_t id = 0; id < kIds; ++id) {
    const int truth = static_cast<int>(id % 3) + 1;
    const int estimate = sketch.Estimate(id * 7919 + 11);
    ASSERT_GE(estimate, truth) << id;
    if (estimate > truth) ++over;
  }
  EXPECT_LT(over, kIds / 100) << over;
}

TEST(CountMinSketchTest, IdsOfOneShardUseTheWholeRow) {
  // Ids routed to shard 0 of 64 (MixId(id) % 64 == 0) must not crowd into
  // 1/64 of the counters: 2,000 of them counted once each, then none may
  // estimate above 2.
  CountMinSketch sketch(1 << 12);
  std::vector<int64_t> ids;
  for (int64_t id = 0; ids.size() < 2000; ++id) {
    if (MixId(id) % 64 == 0) ids.push_back(id);
  }
  for (int64_t id : ids) sketch.Increment(id);
  int worst = 0;
  for (int64_t id : ids) worst = std::max(worst, sketch.Estimate(id));
  EXPECT_LE(worst, 2);
}

TEST(CountMinSketchTest, SaturatesAndHalvesSoOldCountsFade) {
  CountMinSketch sketch(64);
  for (int k = 0; k < 300; ++k) sketch.Increment(7);
  EXPECT_EQ(sketch.Estimate(7), CountMinSketch::kMaxCount);
  EXPECT_EQ(sketch.halvings(), 0);
  // 8 x 64 = 512 increments per halving: 212 more bring the first.
  for (int k = 0; k < 211; ++k) sketch.Increment(1000 + k);
  EXPECT_EQ(sketch.halvings(), 0);
  sketch.Increment(5000);
  EXPECT_EQ(sketch.halvings(), 1);
  EXPECT_EQ(sketch.Estimate(7), CountMinSketch::kMaxCount / 2);
}

// A rejoining copy of a shard takes its source's sightings: every estimate
// the same, and the next halving at the same increment. A state of
// another width, or past a halving's period, is refused and changes
// nothing.
TEST(CountMinSketchTest, AssignedStateEstimatesAndHalvesAsTheSource) {
  CountMinSketch source(1024), copy(1024);
  for (int64_t id = 0; id < 3000; ++id) {
    for (int k = 0; k <= id % 4; ++k) source.Increment(id * 7919);
  }
  ASSERT_EQ(copy.Assign(source.counters(), source.increments()),
            absl::OkStatus());
  for (int64_t id = 0; id < 4000; ++id) {
    ASSERT_EQ(copy.Estimate(id * 7919), source.Estimate(id * 7919)) << id;
  }
  const int64_t halvings = source.halvings();
  while (source.halvings() == halvings) {
    source.Increment(1);
    copy.Increment(1);
  }
  EXPECT_EQ(copy.halvings(), halvings + 1);
  EXPECT_EQ(copy.counters(), source.counters());

  CountMinSketch wider(2048);
  const std::vector<uint8_t> before = copy.counters();
  EXPECT_TRUE(absl::IsInvalidArgument(
      copy.Assign(wider.counters(), wider.increments())));
  EXPECT_TRUE(absl::IsInvalidArgument(copy.Assign(
      source.counters(), CountMinSketch::kHalvingPeriodPerCounter * 1024)));
  EXPECT_TRUE(absl::IsInvalidArgument(copy.Assign(source.counters(), -1)));
  EXPECT_EQ(copy.counters(), before);
}

}  // namespace
}  // namespace psrt
