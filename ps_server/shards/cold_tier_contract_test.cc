// The ColdTier contract (cold_tier.h), held by both tiers: the file store
// ps_server uses (RowSpillStore, reading with io_uring and with pread) and
// the in-memory tier the shard's policy tests fault (MemoryColdTier). Each
// fault is made the way it happens to that tier: the file store's disk is
// made full by putting /dev/full under its file descriptor (writes fail
// with ENOSPC in the kernel) and its records are changed in the file; the
// memory tier is told.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "ps_server/shards/memory_cold_tier.h"
#include "ps_server/shards/row_spill_store.h"

namespace psrt {
namespace {

constexpr int kFloats = 6;

std::vector<float> RowOf(int64_t id) {
  std::vector<float> row(kFloats);
  for (int k = 0; k < kFloats; ++k) row[k] = static_cast<float>(id) + 0.25f * k;
  return row;
}

// A tier and the faults a test can cause in it.
struct Faulty {
  std::unique_ptr<ColdTier> tier;
  std::function<void(bool)> set_full;
  // The record indexed as `id` holds `stored` from now on (`id` again
  // heals it).
  std::function<void(int64_t id, int64_t stored)> change_record;
};

// The descriptor this process holds open on `path`, or -1.
int OpenDescriptorOf(const std::string& path) {
  DIR* fds = opendir("/proc/self/fd");
  int found = -1;
  for (dirent* entry; fds != nullptr && (entry = readdir(fds)) != nullptr;) {
    char target[PATH_MAX];
    const std::string link = std::string("/proc/self/fd/") + entry->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (path == target) found = std::atoi(entry->d_name);
  }
  if (fds != nullptr) closedir(fds);
  return found;
}

Faulty FileStore(const std::string& name, bool use_io_uring) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/contract_" + name;
  auto opened = RowSpillStore::Open(dir, kFloats, use_io_uring);
  EXPECT_TRUE(opened.ok()) << opened.status();
  Faulty faulty;
  faulty.tier = *std::move(opened);
  char real[PATH_MAX];
  const std::string rows =
      realpath(dir.c_str(), real) != nullptr ? std::string(real) + "/rows" : "";
  // The store's descriptor, and a copy of it kept while /dev/full is
  // under it.
  auto fds = std::make_shared<std::pair<int, int>>(-1, -1);
  faulty.set_full = [rows, fds](bool full) {
    if (full) {
      fds->first = OpenDescriptorOf(rows);
      ASSERT_GE(fds->first, 0) << rows;
      fds->second = dup(fds->first);
      const int dev_full = open("/dev/full", O_RDWR | O_CLOEXEC);
      ASSERT_GE(dev_full, 0);
      ASSERT_EQ(dup2(dev_full, fds->first), fds->first);
      close(dev_full);
    } else {
      ASSERT_EQ(dup2(fds->second, fds->first), fds->first);
      close(fds->second);
    }
  };
  // While full the file is not at `rows`' descriptor; changes go to the
  // file itself.
  // What each changed record holds now (its id until changed).
  auto holds = std::make_shared<std::map<int64_t, int64_t>>();
  faulty.change_record = [rows, holds](int64_t id, int64_t stored) {
    const int64_t now = holds->count(id) > 0 ? (*holds)[id] : id;
    (*holds)[id] = stored;
    constexpr int64_t kRecordBytes = sizeof(int64_t) + kFloats * sizeof(float);
    const int fd = open(rows.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0) << rows;
    struct stat file;
    ASSERT_EQ(fstat(fd, &file), 0);
    int changed = 0;
    for (int64_t at = 0; at + kRecordBytes <= file.st_size;
         at += kRecordBytes) {
      int64_t held;
      ASSERT_EQ(pread(fd, &held, sizeof(held), at), sizeof(held));
      if (held != now) continue;
      ASSERT_EQ(pwrite(fd, &stored, sizeof(stored), at), sizeof(stored));
      ++changed;
    }
    close(fd);
    ASSERT_GE(changed, 1) << "no record holds " << now;
  };
  return faulty;
}

Faulty MemoryTier() {
  auto tier = std::make_unique<MemoryColdTier>(kFloats);
  MemoryColdTier* memory = tier.get();
  Faulty faulty;
  faulty.tier = std::move(tier);
  faulty.set_full = [memory](bool full) { memory->SetFull(full); };
  faulty.change_record = [memory](int64_t id, int64_t stored) {
    ASSERT_TRUE(memory->SetStoredId(id, stored));
  };
  return faulty;
}

enum class Kind { kFileIoUring, kFilePread, kMemory };

class ColdTierContractTest : public testing::TestWithParam<Kind> {
 protected:
  Faulty Make(const std::string& name) {
    switch (GetParam()) {
      case Kind::kFileIoUring:
        return FileStore(name + "_uring", true);
      case Kind::kFilePread:
        return FileStore(name + "_pread", false);
      case Kind::kMemory:
        return MemoryTier();
    }
    return MemoryTier();
  }
};

TEST_P(ColdTierContractTest, SpilledRowsAreTakenOnceAndReadUntilTaken) {
  Faulty made = Make("take");
  ColdTier& tier = *made.tier;
  for (int64_t id : {int64_t{-5}, int64_t{7}, int64_t{1'000'000'000'000}}) {
    tier.Spill(id, RowOf(id).data());
  }
  EXPECT_EQ(tier.staged_rows(), 3);
  ASSERT_TRUE(tier.Commit().ok());
  EXPECT_EQ(tier.rows(), 3);
  const std::vector<int64_t> ids = {7, 8, -5};
  std::vector<float> values(3 * 2, -1.0f);
  bool found[3];
  ASSERT_TRUE(tier.Read(ids, 2, values.data(), found).ok());
  EXPECT_TRUE(found[0]);
  EXPECT_FALSE(found[1]);
  EXPECT_TRUE(found[2]);
  EXPECT_EQ(values[1], 7.25f);
  EXPECT_EQ(values[4], -5.0f);
  std::vector<float> row(kFloats);
  auto taken = tier.Take(7, row.data());
  ASSERT_TRUE(taken.ok());
  EXPECT_TRUE(*taken);
  EXPECT_EQ(row, RowOf(7));
  taken = tier.Take(7, row.data());
  ASSERT_TRUE(taken.ok());
  EXPECT_FALSE(*taken);  // one tier per row: taken means gone
  EXPECT_EQ(tier.rows(), 2);
}

TEST_P(ColdTierContractTest, ExportWhilePinnedReadsThePinnedRows) {
  Faulty made = Make("export");
  ColdTier& tier = *made.tier;
  for (int64_t id = 0; id < 1000; ++id)
    tier.Spill(id * 7, RowOf(id * 7).data());
  ASSERT_TRUE(tier.Commit().ok());
  tier.Pin();
  std::vector<float> row(kFloats);
  ASSERT_TRUE(*tier.Take(0, row.data()));
  tier.Spill(5, RowOf(5).data());
  ASSERT_TRUE(tier.Commit().ok());
  std::vector<int64_t> ids(1000);
  std::vector<float> rows(1000 * kFloats);
  for (int64_t first = 0; first < 1000; first += 300) {
    EXPECT_EQ(tier.Export(first, 300, ids.data() + first,
                          rows.data() + first * kFloats),
              std::min<int64_t>(300, 1000 - first));
  }
  EXPECT_EQ(tier.Export(1000, 10, nullptr, nullptr), 0);
  tier.Unpin();
  for (int64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(ids[i], i * 7);  // in the order spilled, as pinned
    ASSERT_EQ(rows[i * kFloats + 5], static_cast<float>(i * 7) + 1.25f);
  }
  // Unpinned: the tier as it is now (0 taken, 5 added).
  EXPECT_EQ(tier.Export(0, 2000, ids.data(), nullptr), 1000);
  EXPECT_EQ(ids[0], 7);
}

// A full disk loses nothing: the commit fails naming why, every staged row
// comes back to the caller exactly, the rows already there stay readable,
// and once the disk takes writes again commits work.
TEST_P(ColdTierContractTest, AFullDiskHandsEveryStagedRowBack) {
  Faulty made = Make("full");
  ColdTier& tier = *made.tier;
  for (int64_t id = 0; id < 100; ++id) tier.Spill(id, RowOf(id).data());
  ASSERT_TRUE(tier.Commit().ok());
  made.set_full(true);
  for (int64_t id = 100; id < 150; ++id) tier.Spill(id, RowOf(id).data());
  std::vector<int64_t> back;
  const absl::Status failed = tier.Commit([&](int64_t id, const float* row) {
    back.push_back(id);
    EXPECT_EQ(std::vector<float>(row, row + kFloats), RowOf(id)) << id;
  });
  made.set_full(false);
  EXPECT_FALSE(failed.ok());
  EXPECT_TRUE(absl::StrContains(failed.message(), "No space left on device"))
      << failed;
  ASSERT_EQ(back.size(), 50u);
  for (int64_t k = 0; k < 50; ++k) EXPECT_EQ(back[k], 100 + k);
  EXPECT_EQ(tier.staged_rows(), 0);
  EXPECT_EQ(tier.rows(), 100);
  std::vector<float> row(kFloats);
  bool found = false;
  ASSERT_TRUE(tier.Read({120}, kFloats, row.data(), &found).ok());
  EXPECT_FALSE(found);  // none of the failed commit's rows is in the tier
  ASSERT_TRUE(*tier.Take(42, row.data()));
  EXPECT_EQ(row, RowOf(42));
  tier.Spill(120, RowOf(120).data());
  ASSERT_TRUE(tier.Commit().ok());
  ASSERT_TRUE(*tier.Take(120, row.data()));
  EXPECT_EQ(row, RowOf(120));
}

// A record that holds another id than the one it is indexed under is
// DATA_LOSS naming the id, for a read and for a batch take, which then
// takes nothing; the tier is whole again once the record is.
TEST_P(ColdTierContractTest, AChangedRecordIsDataLossAndTakesNothing) {
  Faulty made = Make("changed");
  ColdTier& tier = *made.tier;
  for (int64_t id = 1; id <= 20; ++id) tier.Spill(id, RowOf(id).data());
  ASSERT_TRUE(tier.Commit().ok());
  made.change_record(13, -13);
  const std::vector<int64_t> ids = {2, 13, 99};
  std::vector<float> rows(ids.size() * kFloats);
  bool found[3] = {true, true, true};
  absl::Status s = tier.TakeMany(ids, rows.data(), found);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "id 13")) << s;
  EXPECT_FALSE(found[0] || found[1] || found[2]);
  EXPECT_EQ(tier.rows(), 20);
  s = tier.Read({13}, 1, rows.data(), found);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  made.change_record(13, 13);
  ASSERT_TRUE(tier.TakeMany(ids, rows.data(), found).ok());
  EXPECT_TRUE(found[0] && found[1] && !found[2]);
  EXPECT_EQ(
      std::vector<float>(rows.begin() + kFloats, rows.begin() + 2 * kFloats),
      RowOf(13));
  EXPECT_EQ(tier.rows(), 18);
}

INSTANTIATE_TEST_SUITE_P(Tiers, ColdTierContractTest,
                         testing::Values(Kind::kFileIoUring, Kind::kFilePread,
                                         Kind::kMemory),
                         [](const testing::TestParamInfo<Kind>& info) {
                           switch (info.param) {
                             case Kind::kFileIoUring:
                               return std::string("FileIoUring");
                             case Kind::kFilePread:
                               return std::string("FilePread");
                             case Kind::kMemory:
                               return std::string("Memory");
                           }
                           return std::string("Unknown");
                         });

}  // namespace
}  // namespace psrt
