#include "ps_server/shards/row_spill_store.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace psrt {
namespace {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

std::vector<float> RowOf(int64_t id, int floats) {
  std::vector<float> row(floats);
  for (int k = 0; k < floats; ++k) row[k] = static_cast<float>(id) + 0.25f * k;
  return row;
}

TEST(RowSpillStoreTest, SpilledRowsAreTakenOnceAndReadUntilTaken) {
  auto store = RowSpillStore::Open(TestDir("take"), 6);
  ASSERT_TRUE(store.ok()) << store.status();
  for (int64_t id : {int64_t{-5}, int64_t{7}, int64_t{1'000'000'000'000}}) {
    (*store)->Spill(id, RowOf(id, 6).data());
  }
  ASSERT_TRUE((*store)->Commit().ok());
  // Read gives the values (the first 2 floats), found flags per id.
  const std::vector<int64_t> ids = {7, 8, -5};
  std::vector<float> values(3 * 2, -1.0f);
  bool found[3];
  ASSERT_TRUE((*store)->Read(ids, 2, values.data(), found).ok());
  EXPECT_TRUE(found[0]);
  EXPECT_FALSE(found[1]);
  EXPECT_TRUE(found[2]);
  EXPECT_EQ(values[0], 7.0f);
  EXPECT_EQ(values[1], 7.25f);
  EXPECT_EQ(values[4], -5.0f);
  std::vector<float> row(6);
  auto taken = (*store)->Take(7, row.data());
  ASSERT_TRUE(taken.ok());
  EXPECT_TRUE(*taken);
  EXPECT_EQ(row, RowOf(7, 6));
  taken = (*store)->Take(7, row.data());
  ASSERT_TRUE(taken.ok());
  EXPECT_FALSE(*taken);  // a row lives in one tier: taken means gone
}

TEST(RowSpillStoreTest, OpeningEmptiesTheDirectory) {
  const std::string dir = TestDir("reopen");
  {
    auto store = RowSpillStore::Open(dir, 4);
    ASSERT_TRUE(store.ok());
    (*store)->Spill(1, RowOf(1, 4).data());
    ASSERT_TRUE((*store)->Commit().ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir));  // removed with the store
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/stale") << "x"; }
  auto store = RowSpillStore::Open(dir, 4);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_FALSE(std::filesystem::exists(dir + "/stale"));
  EXPECT_EQ((*store)->Export(0, 10, nullptr, nullptr), 0);
}

TEST(RowSpillStoreTest, ExportWhilePinnedReadsThePinnedRows) {
  auto store = RowSpillStore::Open(TestDir("export"), 3);
  ASSERT_TRUE(store.ok());
  for (int64_t id = 0; id < 1000; ++id) {
    (*store)->Spill(id * 7 - 3000, RowOf(id * 7 - 3000, 3).data());
  }
  ASSERT_TRUE((*store)->Commit().ok());
  (*store)->Pin();
  // Rows taken and spilled after the pin do not change what is exported.
  std::vector<float> row(3);
  ASSERT_TRUE(*(*store)->Take(-3000, row.data()));
  (*store)->Spill(5, RowOf(5, 3).data());
  ASSERT_TRUE((*store)->Commit().ok());
  std::vector<int64_t> ids(1000);
  std::vector<float> rows(1000 * 3);
  int64_t got = 0;
  for (int64_t first = 0; first < 1000;) {
    const int64_t n = (*store)->Export(first, 300, ids.data() + first, nullptr);
    ASSERT_GT(n, 0);
    first += n;
    got += n;
  }
  EXPECT_EQ((*store)->Export(1000, 10, nullptr, nullptr), 0);
  // Rows pass by position again, from the start.
  for (int64_t first = 0; first < 1000; first += 250) {
    ASSERT_EQ((*store)->Export(first, 250, nullptr, rows.data() + first * 3),
              250);
  }
  (*store)->Unpin();
  EXPECT_EQ(got, 1000);
  for (int64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(ids[i], i * 7 - 3000);  // in id order, negatives first
    ASSERT_EQ(rows[i * 3 + 2], static_cast<float>(ids[i]) + 0.5f);
  }
  // Unpinned: the store as it is now (-3000 gone, 5 added).
  EXPECT_EQ((*store)->Export(0, 2000, ids.data(), nullptr), 1000);
  EXPECT_EQ(ids[0], -2993);
}

}  // namespace
}  // namespace psrt
