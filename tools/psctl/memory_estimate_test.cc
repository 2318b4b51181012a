#include "tools/psctl/memory_estimate.h"

#include <string>

#include "gtest/gtest.h"
#include "partitioner/test_variable_spec.h"

namespace psrt {
namespace {

VariableSpec Spec(const std::string& name, VariableKind kind,
                  std::vector<int64_t> shape, int shards,
                  OptimizerSpec::Kind optimizer) {
  return TestVariableSpec(name, kind, std::move(shape), shards, optimizer,
                          0.1f);
}

TEST(MemoryEstimateTest, ParametersTimesOneplusSlotsPlacedAsTheServersPlace) {
  // Adam (2 slots) dense [1000, 1000] on one shard; Adagrad (1 slot)
  // embedding [2M, 16] on 4 shards over 2 PS.
  auto e = EstimatePsMemory(
      {Spec("d", DENSE, {1000, 1000}, 1, OptimizerSpec::ADAM),
       Spec("e", EMBEDDING, {2000000, 16}, 4, OptimizerSpec::ADAGRAD)},
      2, 0);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->size(), 2u);
  const int64_t dense = 1000 * 1000 * 4 * 3, table = 2000000LL * 16 * 4 * 2;
  EXPECT_EQ((*e)[0].parameter_bytes + (*e)[1].parameter_bytes, dense + table);
  for (const PsMemoryEstimate& ps : *e) {
    EXPECT_EQ(ps.hash_rows, 0);
    EXPECT_EQ(ps.total_bytes, kProcessBaseBytes + ps.parameter_bytes);
    EXPECT_EQ(ps.limit_bytes,
              static_cast<int64_t>(ps.total_bytes * (1 + kLimitHeadroom)));
  }
}

TEST(MemoryEstimateTest, HashRowsFromCapacityMaxRowsOrTheExpectedCount) {
  VariableSpec bounded =
      Spec("b", HASH_EMBEDDING, {400000, 8}, 4, OptimizerSpec::SGD);
  VariableSpec open = Spec("o", HASH_EMBEDDING, {0, 8}, 2, OptimizerSpec::SGD);
  VariableSpec evicting = open;
  evicting.set_name("v");
  evicting.mutable_eviction()->set_max_rows(1000);
  auto e = EstimatePsMemory({bounded, open, evicting}, 1, 3000000);
  ASSERT_TRUE(e.ok()) << e.status();
  const int64_t rows = 400000 + 3000000 + 1000;
  EXPECT_EQ((*e)[0].hash_rows, rows);
  EXPECT_EQ((*e)[0].parameter_bytes, rows * 8 * 4);
  EXPECT_EQ((*e)[0].row_overhead_bytes, rows * kHashRowOverheadBytes);
  // Replicas: every PS holds R copies' worth.
  auto replicated = EstimatePsMemory({bounded}, 3, 0, 2);
  auto single = EstimatePsMemory({bounded}, 3, 0, 1);
  ASSERT_TRUE(replicated.ok() && single.ok());
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ((*replicated)[t].total_bytes - kProcessBaseBytes,
              2 * ((*single)[t].total_bytes - kProcessBaseBytes));
  }
  // The data plane: its base once per PS, and its forwards' endpoint per
  // backup, whatever the tables.
  auto fabric = EstimatePsMemory({bounded}, 3, 0, 2, /*data_plane=*/true);
  ASSERT_TRUE(fabric.ok());
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ((*fabric)[t].total_bytes - (*replicated)[t].total_bytes,
              kDataPlaneBaseBytes + kDataPlanePerBackupBytes);
  }
  auto unreplicated = EstimatePsMemory({bounded}, 3, 0, 1, true);
  ASSERT_TRUE(unreplicated.ok());
  EXPECT_EQ((*unreplicated)[0].total_bytes - (*single)[0].total_bytes,
            kDataPlaneBaseBytes);
}

TEST(MemoryEstimateTest, BadInputIsNamed) {
  VariableSpec bad = Spec("bad", EMBEDDING, {10}, 1, OptimizerSpec::SGD);
  bad.clear_shape();
  EXPECT_FALSE(EstimatePsMemory({bad}, 1, 0).ok());
  auto zero = EstimatePsMemory({}, 0, 0);
  EXPECT_NE(zero.status().message().find("PS count 0"), std::string::npos)
      << zero.status();
  auto replicas = EstimatePsMemory({}, 2, 0, 3);
  EXPECT_NE(replicas.status().message().find("replicas 3"), std::string::npos)
      << replicas.status();
}

}  // namespace
}  // namespace psrt
