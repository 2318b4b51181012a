// A hash embedding with an SSD tier (StorageSpec.tier = SSD) on real
// ps_server processes: a table four times its memory share trains with most
// rows on disk, every row keeps its updates through spills and promotions,
// the counts are reported, and a PS killed with SIGKILL restores both tiers
// from its checkpoint; a row the disk cannot give back fails what needs it
// rather than restart from its initial value.
#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "clients/cpp/client.h"
#include "gtest/gtest.h"
#include "ps_server/shards/initializer.h"
#include "tests/local_cluster.h"

namespace psrt {
namespace {

constexpr int64_t kColdIds = 20000;  // pushed once (then once more)
constexpr int64_t kHotIds = 100;     // pushed every step
constexpr int64_t kMaxRows = 5000;   // a quarter of the table, over 2 PS
constexpr int kDim = 8;

VariableSpec TieredSpec() {
  VariableSpec s;
  s.set_name("ids");
  s.set_kind(HASH_EMBEDDING);
  s.add_shape(0);
  s.add_shape(kDim);
  s.mutable_partition()->set_num_shards(2);
  s.mutable_initializer()->set_kind(InitializerSpec::NORMAL);
  s.mutable_initializer()->set_stddev(0.5f);
  s.mutable_initializer()->set_seed(5);
  s.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  s.mutable_optimizer()->set_learning_rate(1.0f);
  s.mutable_eviction()->set_max_rows(kMaxRows);
  s.mutable_storage()->set_tier(StorageSpec::SSD);
  s.mutable_storage()->set_path("ids-tier");
  return s;
}

struct TierTotals {
  int64_t rows = 0, spilled = 0, promoted = 0, evicted = 0;
};

TierTotals Totals(Client* client) {
  TierTotals t;
  auto lists = client->ListVariables();
  EXPECT_TRUE(lists.ok()) << lists.status();
  if (!lists.ok()) return t;
  for (const auto& ps : *lists) {
    for (const auto& v : ps.variables()) {
      for (const auto& shard : v.shards()) {
        t.rows += shard.num_rows();
        t.spilled += shard.spilled_rows();
        t.promoted += shard.promoted_rows();
        t.evicted += shard.evicted_rows();
      }
    }
  }
  return t;
}

// Pulls `ids`, retrying while a restarted PS comes back.
absl::Status PullWithRetry(Client* client, const std::vector<int64_t>& ids,
                           float* out) {
  absl::Status s;
  for (absl::Time end = absl::Now() + absl::Seconds(60); absl::Now() < end;
       absl::SleepFor(absl::Milliseconds(200))) {
    s = client->PullRows("ids", ids, out);
    if (s.ok()) return s;
  }
  return s;
}

TEST(SsdTierTest, ATableFourTimesItsMemoryTrainsAndSurvivesAKill) {
  LocalCluster::Options o;
  o.num_ps = 2;
  const std::string checkpoints = FreshTestDir("tier_ckpt");
  const std::string tier_dir = FreshTestDir("tier_dir");
  o.extra_flags = {absl::StrCat("--checkpoint_uri=", checkpoints),
                   "--restore=auto", "--checkpoint_on_shutdown=false",
                   absl::StrCat("--ssd_tier_dir=", tier_dir),
                   "--eviction_interval_secs=0.1"};
  auto started = LocalCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  auto connected = Client::Connect(cluster.MakeClientOptions());
  ASSERT_TRUE(connected.ok()) << connected.status();
  Client* client = connected->get();
  const VariableSpec spec = TieredSpec();
  ASSERT_EQ(client->CreateVariables({spec}), absl::OkStatus());
  Initializer init(spec.initializer());

  std::vector<int64_t> hot(kHotIds);
  std::iota(hot.begin(), hot.end(), int64_t{7} << 40);
  // Two passes over the cold ids, 500 new per step with the hot ones: the
  // second pass brings every cold row back from disk. Each push subtracts
  // 0.25 from every value of its rows (SGD, learning rate 1).
  constexpr int64_t kPerStep = 500;
  int64_t step = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t first = 0; first < kColdIds; first += kPerStep, ++step) {
      std::vector<int64_t> ids(kPerStep);
      std::iota(ids.begin(), ids.end(), first);
      ids.insert(ids.end(), hot.begin(), hot.end());
      std::vector<float> grads(ids.size() * kDim, 0.25f);
      StepOptions at;
      at.step = step;
      ASSERT_EQ(client->Push({PushOp::Rows("ids", ids, grads.data())}, at),
                absl::OkStatus())
          << "step " << step;
    }
  }
  const TierTotals t = Totals(client);
  std::printf(
      "SSD tier, max_rows %lld: %lld rows, %lld on disk, %lld promoted, "
      "%lld evicted to disk\n",
      static_cast<long long>(kMaxRows), static_cast<long long>(t.rows),
      static_cast<long long>(t.spilled), static_cast<long long>(t.promoted),
      static_cast<long long>(t.evicted));
  EXPECT_EQ(t.rows, kColdIds + kHotIds);          // nothing dropped
  EXPECT_LE(t.rows - t.spilled, kMaxRows + 100);  // memory holds its share
  EXPECT_GE(t.spilled, kColdIds + kHotIds - kMaxRows - 100);
  EXPECT_GE(t.promoted, kColdIds - kMaxRows);  // the second pass

  // Every row, wherever it lives, holds all its updates.
  std::vector<int64_t> all(kColdIds);
  std::iota(all.begin(), all.end(), 0);
  all.insert(all.end(), hot.begin(), hot.end());
  auto check_rows = [&](const char* when) {
    std::vector<float> values(all.size() * kDim);
    ASSERT_EQ(PullWithRetry(client, all, values.data()), absl::OkStatus());
    int64_t wrong = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const float pushes = i < static_cast<size_t>(kColdIds) ? 2 : step;
      for (int k = 0; k < kDim; ++k) {
        const float want = init.Value(all[i], k) - 0.25f * pushes;
        if (std::abs(values[i * kDim + k] - want) > 1e-4f) ++wrong;
      }
    }
    EXPECT_EQ(wrong, 0) << when;
  };
  check_rows("before the kill");
  for (int ps = 0; ps < 2; ++ps) {
    auto text = FetchMetrics(cluster.metrics_port(ps));
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_GT(MetricValue(*text, "psrt_spilled_rows{variable=\"ids\"}"), 0)
        << "PS " << ps;
    EXPECT_GT(MetricValue(*text, "psrt_spilled_bytes{variable=\"ids\"}"),
              1000.0 * kDim * 2)
        << "PS " << ps;
  }

  // A checkpoint holds both tiers; PS 1 killed and restarted restores them.
  auto saved = client->Checkpoint();
  ASSERT_TRUE(saved.ok()) << saved.status();
  cluster.Kill(1, SIGKILL);
  ASSERT_EQ(cluster.Restart(1), absl::OkStatus());
  // As a worker does when a PS comes back: the restarted PS restores a
  // variable's shards from the checkpoint as the variable is created.
  ASSERT_EQ(client->CreateVariables({spec}), absl::OkStatus());
  check_rows("after PS 1 was killed and restored");
  const TierTotals after = Totals(client);
  EXPECT_EQ(after.rows, kColdIds + kHotIds);
  EXPECT_LE(after.rows - after.spilled, kMaxRows + 100);
  // Training goes on: one more push of every id.
  for (int64_t first = 0; first < static_cast<int64_t>(all.size());
       first += kPerStep) {
    std::vector<int64_t> ids(
        all.begin() + first,
        all.begin() + std::min<int64_t>(all.size(), first + kPerStep));
    std::vector<float> grads(ids.size() * kDim, 0.25f);
    StepOptions at;
    at.step = step;
    ASSERT_EQ(client->Push({PushOp::Rows("ids", ids, grads.data())}, at),
              absl::OkStatus());
  }
  ++step;
  std::vector<float> values(all.size() * kDim);
  ASSERT_EQ(PullWithRetry(client, all, values.data()), absl::OkStatus());
  int64_t wrong = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const float pushes = i < static_cast<size_t>(kColdIds) ? 3 : step;
    if (std::abs(values[i * kDim] - (init.Value(all[i], 0) - 0.25f * pushes)) >
        1e-4f) {
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0);
}

TEST(SsdTierTest, ATierWithoutARuleForWhatLeavesMemoryIsRefused) {
  LocalCluster::Options o;
  o.num_ps = 1;
  auto started = LocalCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  auto client = Client::Connect((*started)->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  VariableSpec spec = TieredSpec();
  spec.clear_eviction();
  absl::Status s = (*client)->CreateVariables({spec});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "eviction.max_rows")) << s;
  // A path that would leave --ssd_tier_dir.
  spec = TieredSpec();
  spec.mutable_storage()->set_path("../../etc");
  s = (*client)->CreateVariables({spec});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "storage.path")) << s;
  // The server serves on.
  ASSERT_EQ((*client)->CreateVariables({TieredSpec()}), absl::OkStatus());
}

// Files of the directories under `root`, by directory name.
std::map<std::string, int64_t> FilesByDirectory(const std::string& root) {
  std::map<std::string, int64_t> files;
  std::error_code error;
  for (const auto& dir : std::filesystem::directory_iterator(root, error)) {
    int64_t n = 0;
    for (const auto& f :
         std::filesystem::recursive_directory_iterator(dir.path(), error)) {
      if (f.is_regular_file()) ++n;
    }
    files[dir.path().filename().string()] = n;
  }
  return files;
}

// With the default --ssd_tier_dir ($TMPDIR/psrt-ssd-tier/ps<task>-<pid>):
// a PS killed with SIGKILL cannot remove its spilled rows; the next PS
// started on the machine does, and a PS stopped cleanly leaves nothing.
TEST(SsdTierTest, TheSpilledRowsOfAKilledPsAreRemovedByTheNextPsStarted) {
  const std::string tmp = FreshTestDir("default_tier_tmp");
  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string restore = old_tmpdir != nullptr ? old_tmpdir : "";
  setenv("TMPDIR", tmp.c_str(), 1);  // the servers started here inherit it
  absl::Cleanup restore_tmpdir = [&] {
    if (old_tmpdir != nullptr) {
      setenv("TMPDIR", restore.c_str(), 1);
    } else {
      unsetenv("TMPDIR");
    }
  };
  const std::string root = tmp + "/psrt-ssd-tier";
  LocalCluster::Options o;
  o.num_ps = 1;
  {
    auto started = LocalCluster::Start(o);
    ASSERT_TRUE(started.ok()) << started.status();
    LocalCluster& cluster = **started;
    const std::string first = absl::StrCat("ps0-", cluster.pid(0));
    {
      auto client = Client::Connect(cluster.MakeClientOptions());
      ASSERT_TRUE(client.ok()) << client.status();
      ASSERT_EQ((*client)->CreateVariables({TieredSpec()}), absl::OkStatus());
      for (int64_t first_id = 0; first_id < 3 * kMaxRows; first_id += 1000) {
        std::vector<int64_t> ids(1000);
        std::iota(ids.begin(), ids.end(), first_id);
        std::vector<float> grads(ids.size() * kDim, 0.25f);
        ASSERT_EQ((*client)->Push({PushOp::Rows("ids", ids, grads.data())}),
                  absl::OkStatus());
      }
      EXPECT_GE(Totals(client->get()).spilled, 2 * kMaxRows - 100);
    }
    std::map<std::string, int64_t> files = FilesByDirectory(root);
    ASSERT_EQ(files.size(), 1u);
    EXPECT_GE(files[first], 3) << "the store's files and the lock";
    cluster.Kill(0, SIGKILL);
    EXPECT_EQ(FilesByDirectory(root), files) << "left behind by SIGKILL";
    ASSERT_EQ(cluster.Restart(0), absl::OkStatus());
    files = FilesByDirectory(root);
    EXPECT_EQ(files.count(first), 0u) << "removed by the next PS started";
    EXPECT_EQ(files.size(), 1u);
    EXPECT_EQ(files.count(absl::StrCat("ps0-", cluster.pid(0))), 1u);
  }  // SIGTERM: the PS removes its own
  EXPECT_TRUE(FilesByDirectory(root).empty());
}

// Changes the id field of every record in the SSD tier's row files under
// `tier_dir` that holds `from` to `to` (a disk giving back wrong bytes:
// the store checks each record's id as it reads); returns how many.
int RewriteRecordIds(const std::string& tier_dir, int64_t from, int64_t to) {
  constexpr int64_t kRecordBytes = sizeof(int64_t) + kDim * sizeof(float);
  int changed = 0;
  std::error_code error;
  for (const auto& f :
       std::filesystem::recursive_directory_iterator(tier_dir, error)) {
    if (!f.is_regular_file() || f.path().filename() != "rows") continue;
    const int fd = open(f.path().c_str(), O_RDWR);
    EXPECT_GE(fd, 0) << f.path();
    const int64_t size = static_cast<int64_t>(f.file_size());
    for (int64_t at = 0; at + kRecordBytes <= size; at += kRecordBytes) {
      int64_t id = 0;
      EXPECT_EQ(pread(fd, &id, sizeof(id), at), sizeof(id));
      if (id != from) continue;
      EXPECT_EQ(pwrite(fd, &to, sizeof(to), at), sizeof(to));
      ++changed;
    }
    close(fd);
  }
  return changed;
}

// A spilled row the disk cannot give back fails the pulls and pushes that
// need it -- a pull halfway through its stream included -- naming why and
// changing nothing; it is not answered or restarted with its initial
// value. The PS serves every other row on, and once the record reads
// right again the row is there as trained.
TEST(SsdTierTest, ARowTheDiskCannotGiveBackIsRefusedNotReplaced) {
  LocalCluster::Options o;
  o.num_ps = 1;
  const std::string tier_dir = FreshTestDir("unreadable_tier");
  o.extra_flags = {absl::StrCat("--ssd_tier_dir=", tier_dir)};
  auto started = LocalCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  ClientOptions small_messages = (*started)->MakeClientOptions();
  small_messages.message_bytes = 16 << 10;  // a pull of 1,000 rows: 2+
  auto connected = Client::Connect(small_messages);
  ASSERT_TRUE(connected.ok()) << connected.status();
  Client* client = connected->get();
  const VariableSpec spec = TieredSpec();
  ASSERT_EQ(client->CreateVariables({spec}), absl::OkStatus());
  Initializer init(spec.initializer());
  // 3 x max_rows ids pushed once each (SGD: value - 0.25): the first
  // pushed are on disk.
  auto push = [&](const std::vector<int64_t>& ids) {
    std::vector<float> grads(ids.size() * kDim, 0.25f);
    return client->Push({PushOp::Rows("ids", ids, grads.data())});
  };
  for (int64_t first_id = 0; first_id < 3 * kMaxRows; first_id += 1000) {
    std::vector<int64_t> ids(1000);
    std::iota(ids.begin(), ids.end(), first_id);
    ASSERT_EQ(push(ids), absl::OkStatus());
  }
  ASSERT_GE(Totals(client).spilled, 2 * kMaxRows - 100);
  ASSERT_EQ(RewriteRecordIds(tier_dir, 0, ~int64_t{0}), 1);

  // 999 rows in memory, then id 0: the first messages go out, then the
  // pull fails.
  std::vector<int64_t> ids(999);
  std::iota(ids.begin(), ids.end(), 3 * kMaxRows - 999);
  ids.push_back(0);
  std::vector<float> values(ids.size() * kDim);
  absl::Status pulled = client->PullRows("ids", ids, values.data());
  EXPECT_EQ(pulled.code(), absl::StatusCode::kDataLoss) << pulled;
  EXPECT_TRUE(absl::StrContains(pulled.message(), "record of id 0")) << pulled;
  EXPECT_TRUE(absl::StrContains(pulled.message(), "this pull")) << pulled;
  absl::Status pushed = push({0, 1, 3 * kMaxRows - 1});
  EXPECT_EQ(pushed.code(), absl::StatusCode::kDataLoss) << pushed;
  EXPECT_TRUE(absl::StrContains(pushed.message(), "nothing applied")) << pushed;
  // Every other row, on disk or in memory, serves and trains on.
  ids.pop_back();
  ids.push_back(1);
  ASSERT_EQ(push(ids), absl::OkStatus());
  ASSERT_EQ(client->PullRows("ids", ids, values.data()), absl::OkStatus());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_NEAR(values[i * kDim], init.Value(ids[i], 0) - 0.5f, 1e-5f)
        << "id " << ids[i];
  }

  // The record reads right again: id 0 holds its one push, and trains.
  ASSERT_EQ(RewriteRecordIds(tier_dir, ~int64_t{0}, 0), 1);
  float row[kDim];
  ASSERT_EQ(client->PullRows("ids", {0}, row), absl::OkStatus());
  EXPECT_NEAR(row[0], init.Value(0, 0) - 0.25f, 1e-5f);
  ASSERT_EQ(push({0}), absl::OkStatus());
  ASSERT_EQ(client->PullRows("ids", {0}, row), absl::OkStatus());
  EXPECT_NEAR(row[0], init.Value(0, 0) - 0.5f, 1e-5f);
  EXPECT_EQ(Totals(client).rows, 3 * kMaxRows);
}

}  // namespace
}  // namespace psrt
