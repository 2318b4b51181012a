#include "ps_server/shards/row_table.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

constexpr int64_t kStride = 3;

// Row r of the table holds {id, id + 0.5, id + 0.25}.
void Fill(RowTable& table, uint32_t r, int64_t id) {
  float* row = table.row(r);
  row[0] = static_cast<float>(id);
  row[1] = static_cast<float>(id) + 0.5f;
  row[2] = static_cast<float>(id) + 0.25f;
}

TEST(RowTableTest, RowsAppendAcrossBlocksWithoutMoving) {
  RowTable table(kStride, /*tracks_steps=*/false);
  EXPECT_EQ(table.size(), 0);
  EXPECT_EQ(table.room(), 0);
  const int64_t n = 2 * RowTable::kRowsPerBlock + 7;
  std::vector<const float*> where;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = 1000 - 3 * i;  // any int64, not in row order
    const uint32_t r = table.Append(id, /*step=*/0);
    ASSERT_EQ(r, static_cast<uint32_t>(i));
    Fill(table, r, id);
    where.push_back(table.row(r));
  }
  EXPECT_EQ(table.size(), n);
  EXPECT_EQ(table.num_blocks(), 3);
  EXPECT_EQ(table.room(), 3 * RowTable::kRowsPerBlock);
  EXPECT_EQ(table.block_memory(),
            3 * RowTable::kRowsPerBlock * kStride * int64_t{sizeof(float)});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = 1000 - 3 * i;
    ASSERT_EQ(table.Find(id), static_cast<uint32_t>(i));
    ASSERT_EQ(table.id(i), id);
    ASSERT_EQ(table.row(static_cast<uint32_t>(i)), where[i]);  // never moved
    ASSERT_EQ(table.row(static_cast<uint32_t>(i))[1], id + 0.5f);
  }
  EXPECT_EQ(table.Find(1001), RowTable::kNoRow);
}

TEST(RowTableTest, RemoveMovesTheLastRowIntoTheHole) {
  RowTable table(kStride, /*tracks_steps=*/true);
  for (int64_t id = 10; id < 15; ++id) {
    Fill(table, table.Append(id, /*step=*/id * 100), id);
  }
  table.Remove(1);  // id 11 goes; 14 (the last) takes row 1
  EXPECT_EQ(table.size(), 4);
  EXPECT_EQ(table.Find(11), RowTable::kNoRow);
  EXPECT_EQ(table.Find(14), 1u);
  EXPECT_EQ(table.id(1), 14);
  EXPECT_EQ(table.last_step(1), 1400);
  EXPECT_EQ(table.row(1)[2], 14.25f);
  EXPECT_EQ(table.last_steps().size(), 4u);
  table.Remove(3);  // the last row itself: nothing moves
  EXPECT_EQ(table.size(), 3);
  EXPECT_EQ(table.Find(13), RowTable::kNoRow);
  EXPECT_EQ(table.Find(12), 2u);
  EXPECT_EQ(table.last_step(2), 1200);
  // A removed id comes back as a new row at the end.
  Fill(table, table.Append(11, 7), 11);
  EXPECT_EQ(table.Find(11), 3u);
  EXPECT_EQ(table.last_step(3), 7);
  EXPECT_EQ(table.row(3)[0], 11.0f);
}

TEST(RowTableTest, FindAllAgreesWithFindAcrossThePool) {
  RowTable table(kStride, /*tracks_steps=*/false);
  for (int64_t id = 0; id < 50000; id += 2) table.Append(id * 7919, 0);
  std::vector<int64_t> ids(40000);
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t& id : ids) id *= 7919;
  std::vector<uint32_t> rows(ids.size());
  table.FindAll(ids, rows.data(), /*prefetch_distance=*/16,
                /*parallel_rows=*/1024);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(rows[i],
              i % 2 == 0 ? static_cast<uint32_t>(i / 2) : RowTable::kNoRow)
        << i;
  }
}

TEST(RowTableTest, KeepBlocksFreesTheBlocksPastTheRows) {
  RowTable table(kStride, /*tracks_steps=*/false);
  for (int b = 0; b < 3; ++b) table.AddBlock();
  for (int64_t id = 0; id < 10; ++id) table.Append(id, 0);
  EXPECT_EQ(table.num_blocks(), 3);
  const int64_t entries_before = table.index_memory();
  EXPECT_GE(entries_before,
            3 * RowTable::kRowsPerBlock * int64_t{sizeof(int64_t)});
  table.KeepBlocks(1);
  EXPECT_EQ(table.num_blocks(), 1);
  EXPECT_EQ(table.room(), RowTable::kRowsPerBlock);
  EXPECT_EQ(table.Find(9), 9u);
  // The next block is allocated when the first is full, not before.
  for (int64_t id = 10; id < RowTable::kRowsPerBlock; ++id) table.Append(id, 0);
  EXPECT_EQ(table.num_blocks(), 1);
  table.Append(-1, 0);
  EXPECT_EQ(table.num_blocks(), 2);
}

}  // namespace
}  // namespace psrt
