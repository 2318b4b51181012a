#include "ps_server/shards/row_spill_store.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
    EXPECT_EQ(ids[i], i * 7 - 3000);  // in the order spilled
    ASSERT_EQ(rows[i * 3 + 2], static_cast<float>(ids[i]) + 0.5f);
  }
  // Unpinned: the store as it is now (-3000 gone, 5 added).
  EXPECT_EQ((*store)->Export(0, 2000, ids.data(), nullptr), 1000);
  EXPECT_EQ(ids[0], -2993);
}

// Rows spilled and taken in rounds, as a tiered shard does: each round
// takes most of what is there and spills as many new rows. The file's
// garbage is moved out of the way, so its size follows the live rows, and
// every live row reads back exactly, with io_uring and with pread.
void ChurnKeepsRowsAndBoundsTheFile(bool use_io_uring) {
  constexpr int kFloats = 30;  // 128-byte records: 8,192 per segment
  auto opened = RowSpillStore::Open(
      TestDir(absl::StrCat("churn", use_io_uring)), kFloats, use_io_uring);
  ASSERT_TRUE(opened.ok()) << opened.status();
  RowSpillStore& store = **opened;
  EXPECT_EQ(store.uses_io_uring(), use_io_uring);
  std::mt19937_64 random(7);
  std::vector<int64_t> held;
  int64_t next_id = 0;
  int64_t most_disk = 0;
  std::vector<float> row(kFloats);
  for (int round = 0; round < 40; ++round) {
    // Take a random 80% of what is held (checking each row), then spill
    // 50,000 new rows.
    std::shuffle(held.begin(), held.end(), random);
    const size_t keep = held.size() / 5;
    std::vector<int64_t> taken(held.begin() + keep, held.end());
    held.resize(keep);
    std::unique_ptr<bool[]> found(new bool[taken.size()]);
    std::vector<float> rows(taken.size() * kFloats);
    absl::Status took = store.TakeMany(taken, rows.data(), found.get());
    ASSERT_TRUE(took.ok()) << took;
    for (size_t i = 0; i < taken.size(); ++i) {
      ASSERT_TRUE(found[i]) << taken[i];
      ASSERT_EQ(rows[i * kFloats + kFloats - 1],
                static_cast<float>(taken[i]) + 0.25f * (kFloats - 1));
    }
    for (int k = 0; k < 50'000; ++k, ++next_id) {
      store.Spill(next_id, RowOf(next_id, kFloats).data());
      held.push_back(next_id);
    }
    ASSERT_TRUE(store.Commit().ok());
    ASSERT_EQ(store.rows(), static_cast<int64_t>(held.size()));
    most_disk = std::max(most_disk, store.disk_bytes());
  }
  // Live rows are at most 62,500 (50,000 + a fifth of the rest): 8 MB of
  // records; the file may hold three times that. Without moving garbage
  // it would hold all 2M rows spilled.
  const int64_t live_bytes = store.rows() * 128;
  EXPECT_LE(most_disk, 3 * 62'500 * 128 + 3 * RowSpillStore::kSegmentBytes)
      << "live now " << live_bytes;
  bool found = false;
  for (int64_t id : held) {
    std::vector<float> value(2);
    ASSERT_TRUE(
        store.Read(absl::MakeConstSpan(&id, 1), 2, value.data(), &found).ok());
    ASSERT_TRUE(found) << id;
    ASSERT_EQ(value[1], static_cast<float>(id) + 0.25f);
  }
  // Taken ids are gone; an export reads exactly the held rows.
  std::vector<int64_t> exported(held.size() + 1);
  EXPECT_EQ(store.Export(0, exported.size(), exported.data(), nullptr),
            static_cast<int64_t>(held.size()));
  exported.pop_back();
  std::sort(exported.begin(), exported.end());
  std::sort(held.begin(), held.end());
  EXPECT_EQ(exported, held);
  EXPECT_FALSE(*store.Take(0, row.data()));  // taken in round 2
}

TEST(RowSpillStoreTest, ChurnKeepsRowsAndBoundsTheFileWithIoUring) {
  ChurnKeepsRowsAndBoundsTheFile(true);
}

TEST(RowSpillStoreTest, ChurnKeepsRowsAndBoundsTheFileWithPread) {
  ChurnKeepsRowsAndBoundsTheFile(false);
}

// A checkpoint pins the store and exports for as long as it writes; rows
// taken and spilled meanwhile (enough to move garbage many times over
// unpinned) do not move or overwrite a pinned record.
TEST(RowSpillStoreTest, PinnedRecordsAreNotMovedOrReused) {
  constexpr int kFloats = 14;  // 64-byte records
  auto opened = RowSpillStore::Open(TestDir("pinned_churn"), kFloats);
  ASSERT_TRUE(opened.ok());
  RowSpillStore& store = **opened;
  for (int64_t id = 0; id < 100'000; ++id) {
    store.Spill(id, RowOf(id, kFloats).data());
  }
  ASSERT_TRUE(store.Commit().ok());
  store.Pin();
  std::vector<float> rows(100'000 * kFloats);
  std::unique_ptr<bool[]> found(new bool[100'000]);
  std::vector<int64_t> ids(100'000);
  for (int64_t id = 0; id < 100'000; ++id) ids[id] = id;
  ASSERT_TRUE(store.TakeMany(ids, rows.data(), found.get()).ok());
  for (int64_t id = 0; id < 100'000; ++id) {
    store.Spill(id + 1'000'000, RowOf(id + 1'000'000, kFloats).data());
  }
  ASSERT_TRUE(store.Commit().ok());
  std::vector<int64_t> exported(100'000);
  std::vector<float> exported_rows(100'000 * kFloats);
  ASSERT_EQ(store.Export(0, 100'000, exported.data(), exported_rows.data()),
            100'000);
  EXPECT_EQ(store.Export(100'000, 10, nullptr, nullptr), 0);
  for (int64_t i = 0; i < 100'000; ++i) {
    ASSERT_EQ(exported[i], i);
    ASSERT_EQ(exported_rows[i * kFloats + 13], static_cast<float>(i) + 3.25f);
  }
  store.Unpin();
  // Unpinned, the taken rows' segments are reused: the file stays at
  // about what it held.
  for (int64_t id = 0; id < 100'000; ++id) {
    store.Spill(id + 2'000'000, RowOf(id + 2'000'000, kFloats).data());
  }
  ASSERT_TRUE(store.Commit().ok());
  EXPECT_EQ(store.rows(), 200'000);
  EXPECT_LE(store.disk_bytes(),
            3 * 100'000 * 64 + RowSpillStore::kSegmentBytes);
}

// A record whose bytes on disk were changed under the store (a bad disk,
// another writer) is reported by id, not returned as another id's row.
TEST(RowSpillStoreTest, AChangedRecordIsDataLossNamingTheId) {
  const std::string dir = TestDir("corrupt");
  auto opened = RowSpillStore::Open(dir, 4);
  ASSERT_TRUE(opened.ok());
  RowSpillStore& store = **opened;
  for (int64_t id = 10; id < 20; ++id) store.Spill(id, RowOf(id, 4).data());
  ASSERT_TRUE(store.Commit().ok());
  {
    // The third record (id 12) gets id 99's header.
    std::fstream file(dir + "/rows",
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(2 * 24);
    const int64_t other = 99;
    file.write(reinterpret_cast<const char*>(&other), sizeof(other));
  }
  std::vector<float> row(4);
  auto taken = store.Take(12, row.data());
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(taken.status().message().find("id 12"), std::string::npos)
      << taken.status();
  // Nothing was taken: the id is still indexed, its neighbours read well.
  EXPECT_EQ(store.rows(), 10);
  ASSERT_TRUE(*store.Take(13, row.data()));
  EXPECT_EQ(row, RowOf(13, 4));
}

// Moving a segment's live records to the end checks each against the
// index first: a record whose id was changed on disk to another live id's
// would be indexed as that id's row, which would then read another row's
// values with nothing to tell. The segment stays where it is instead.
TEST(RowSpillStoreTest, AChangedRecordIsNotMovedOverAnotherId) {
  constexpr int kFloats = 30;  // 128-byte records: 8,192 per segment
  const std::string dir = TestDir("corrupt_move");
  auto opened = RowSpillStore::Open(dir, kFloats);
  ASSERT_TRUE(opened.ok());
  RowSpillStore& store = **opened;
  // Three segments; all taken but 100 rows in each (ids 5000..5099 in
  // the first).
  for (int64_t id = 0; id < 3 * 8192; ++id) {
    store.Spill(id, RowOf(id, kFloats).data());
  }
  ASSERT_TRUE(store.Commit().ok());
  std::vector<int64_t> taken;
  for (int64_t id = 0; id < 3 * 8192; ++id) {
    if (id % 8192 < 5000 || id % 8192 >= 5100) taken.push_back(id);
  }
  std::vector<float> rows(taken.size() * kFloats);
  std::unique_ptr<bool[]> found(new bool[taken.size()]);
  ASSERT_TRUE(store.TakeMany(taken, rows.data(), found.get()).ok());
  // Id 5050's record (the first segment's 5,051st) now says 5049.
  {
    std::fstream file(dir + "/rows",
                      std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(5050 * 128);
    const int64_t other = 5049;
    file.write(reinterpret_cast<const char*>(&other), sizeof(other));
  }
  // New rows: the garbage outgrows the live rows enough that the
  // emptiest segment (the first of three equally empty) is moved.
  for (int64_t id = 100'000; id < 101'000; ++id) {
    store.Spill(id, RowOf(id, kFloats).data());
  }
  ASSERT_TRUE(store.Commit().ok());
  EXPECT_EQ(store.rows(), 1300);
  std::vector<float> row(kFloats);
  bool is_there = false;
  for (int64_t id = 5000; id < 5100; ++id) {
    const absl::Status read =
        store.Read(absl::MakeConstSpan(&id, 1), kFloats, row.data(), &is_there);
    if (id == 5050) {
      EXPECT_EQ(read.code(), absl::StatusCode::kDataLoss) << read;
      continue;
    }
    ASSERT_TRUE(read.ok()) << id << ": " << read;
    ASSERT_TRUE(is_there) << id;
    EXPECT_EQ(row, RowOf(id, kFloats)) << id;
  }
}

}  // namespace
}  // namespace psrt
