// Checkpoints on local disk with real ps_server processes: saved during
// training and restored bit-identically, re-cut onto other PS counts,
// refused when corrupt or incomplete (naming the file), surviving a PS
// killed mid-save, and the shutdown checkpoint a worker continues from.
#include <dirent.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "ps_server/checkpoint/shard_file.h"
#include "storage/file_storage.h"
#include "tests/checkpoint_test_util.h"
#include "tests/local_cluster.h"
#include "tests/worker_output.h"

namespace psrt {
namespace {

std::unique_ptr<LocalCluster> StartCluster(int num_ps,
                                           std::vector<std::string> flags,
                                           int num_workers = 1) {
  LocalCluster::Options o;
  o.num_ps = num_ps;
  o.num_workers = num_workers;
  o.extra_flags = std::move(flags);
  auto c = LocalCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

std::unique_ptr<Client> Connect(const LocalCluster& cluster) {
  auto client = Client::Connect(cluster.MakeClientOptions());
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

void CopyTree(const std::string& from, const std::string& to) {
  ASSERT_EQ(std::system(absl::StrCat("rm -rf '", to, "' && cp -r '", from,
                                     "' '", to, "'")
                            .c_str()),
            0);
}

// A checkpoint taken while two workers push, restored into fresh clusters
// of 2, 3 and 1 PS. Shared by the tests below (built once).
class CheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(FreshTestDir("ckpt_root"));
    // (No shutdown checkpoint: the two taken below are the only ones.)
    auto cluster = StartCluster(2,
                                {absl::StrCat("--checkpoint_uri=", *root_),
                                 "--checkpoint_on_shutdown=false"},
                                2);
    ASSERT_NE(cluster, nullptr);
    auto client = Connect(*cluster);
    ASSERT_EQ(client->CreateVariables(CheckpointTestSpecs(2)),
              absl::OkStatus());
    std::atomic<bool> stop{false};
    std::atomic<int64_t> pushed{0};
    std::thread training([&] {
      TrainUntil(cluster->MakeClientOptions(), 2, stop, 40, &pushed);
    });
    // By pushes made, not time: a transport slower to open its
    // connections (the data plane) pushes less in the first 300 ms.
    const auto wait_for_pushes = [&pushed](int64_t n) {
      const absl::Time give_up = absl::Now() + absl::Seconds(60);
      while (pushed.load() < n && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(10));
      }
    };
    wait_for_pushes(10);
    auto first = client->Checkpoint();  // while the workers push
    ASSERT_TRUE(first.ok()) << first.status();
    wait_for_pushes(pushed.load() + 10);
    auto second = client->Checkpoint();  // the one tests restore
    stop = true;
    training.join();
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_GT(second->global_step(), 0);
    uri_ = new std::string(second->uri());
    previous_uri_ = new std::string(first->uri());
    auto contents = ReadCheckpoint(*uri_);
    ASSERT_TRUE(contents.ok()) << contents.status();
    saved_ = new CheckpointContents(*std::move(contents));
    // Training went on between the two saves.
    auto earlier = ReadCheckpoint(*previous_uri_);
    ASSERT_TRUE(earlier.ok()) << earlier.status();
    EXPECT_NE(CompareRows(*earlier, *saved_), "");
    EXPECT_LT(earlier->manifest.global_step(), saved_->manifest.global_step());
  }

  // Restores uri_ onto `num_ps` PS (variables cut `shards` ways), checks
  // values and step, and returns the re-saved contents.
  static CheckpointContents RestoreAndResave(int num_ps, int shards,
                                             const std::string& uri) {
    const std::string again = FreshTestDir(absl::StrCat("resave_", num_ps));
    auto cluster =
        StartCluster(num_ps, {absl::StrCat("--restore=", uri),
                              absl::StrCat("--checkpoint_uri=", again)});
    if (cluster == nullptr) return {};
    auto client = Connect(*cluster);
    absl::Status created = client->CreateVariables(CheckpointTestSpecs(shards));
    EXPECT_TRUE(created.ok()) << created;
    EXPECT_EQ(ComparePulledValues(client.get(), *saved_), "");
    auto stats = client->Stats();
    EXPECT_TRUE(stats.ok());
    for (const StatsResponse& s : *stats) {
      EXPECT_EQ(s.global_step(), saved_->manifest.global_step());
      EXPECT_EQ(s.restored_from(), uri);
    }
    auto resaved = client->Checkpoint();
    EXPECT_TRUE(resaved.ok()) << resaved.status();
    if (!resaved.ok()) return {};
    auto contents = ReadCheckpoint(resaved->uri());
    EXPECT_TRUE(contents.ok()) << contents.status();
    if (!contents.ok()) return {};
    EXPECT_EQ(contents->manifest.num_ps(), num_ps);
    return *contents;
  }

  static std::string* root_;
  static std::string* uri_;
  static std::string* previous_uri_;
  static CheckpointContents* saved_;
};
std::string* CheckpointTest::root_ = nullptr;
std::string* CheckpointTest::uri_ = nullptr;
std::string* CheckpointTest::previous_uri_ = nullptr;
CheckpointContents* CheckpointTest::saved_ = nullptr;

TEST_F(CheckpointTest, ManifestDescribesEveryShardAndLatestPointsAtIt) {
  ASSERT_NE(saved_, nullptr);
  const CheckpointManifest& m = saved_->manifest;
  EXPECT_EQ(m.num_ps(), 2);
  EXPECT_EQ(m.variables_size(), 6);
  // 3 + 2 dense shards, 2 per table.
  EXPECT_EQ(m.files_size(), 3 + 2 + 2 * 4);
  auto root = OpenStorage(*root_);
  auto latest = ReadLatest(**root);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(JoinUri(*root_, *latest), *uri_);
  auto listing = ListCheckpoints(**root);
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->size(), 2u);
  EXPECT_TRUE((*listing)[0].complete && (*listing)[1].complete);
  // Every row of every array variable, each exactly once.
  EXPECT_EQ(saved_->rows.at("dense/adam").size(), 300u);
  EXPECT_EQ(saved_->rows.at("emb/adagrad_mod").size(), 20000u);
  EXPECT_EQ(saved_->rows.at("emb/ftrl_div").size(), 20000u);
  EXPECT_GT(saved_->rows.at("hash/adagrad").size(), 1000u);
  // Optimizer slots were saved: Adagrad accumulators grew past their
  // initial 0.1 for pushed rows.
  int grown = 0;
  for (const auto& [id, row] : saved_->rows.at("emb/adagrad_mod")) {
    grown += row[8] > 0.1f;
  }
  EXPECT_GT(grown, 1000);
}

TEST_F(CheckpointTest, RestoreIntoFreshClusterIsBitIdentical) {
  ASSERT_NE(saved_, nullptr);
  const CheckpointContents again = RestoreAndResave(2, 2, *uri_);
  EXPECT_EQ(CompareRows(*saved_, again), "");
  // Same cut, same shards: every shard's version (Adam's t) is restored.
  EXPECT_EQ(again.versions, saved_->versions);
}

TEST_F(CheckpointTest, RestoreOntoThreeAndOnePsRecutsShards) {
  ASSERT_NE(saved_, nullptr);
  const CheckpointContents three = RestoreAndResave(3, 3, *uri_);
  EXPECT_EQ(CompareRows(*saved_, three), "");
  EXPECT_EQ(three.manifest.files_size(), 3 + 2 + 3 * 4);
  const CheckpointContents one = RestoreAndResave(1, 1, *uri_);
  EXPECT_EQ(CompareRows(*saved_, one), "");
  EXPECT_EQ(one.manifest.files_size(), 3 + 2 + 1 * 4);
}

// Creating variables on a cluster restoring `uri` fails; returns the error.
std::string RestoreError(const std::string& uri) {
  auto cluster = StartCluster(2, {absl::StrCat("--restore=", uri)});
  if (cluster == nullptr) return "cluster did not start";
  auto client = Connect(*cluster);
  absl::Status s = client->CreateVariables(CheckpointTestSpecs(2));
  EXPECT_FALSE(s.ok());
  // Nothing partial: the failed creation left no variable behind.
  auto lists = client->ListVariables();
  EXPECT_TRUE(lists.ok());
  for (const auto& l : *lists) EXPECT_EQ(l.variables_size(), 0);
  return s.ToString();
}

// Damages one byte of a file in place.
void OverwriteByte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.put('\x5a');
}

std::string FileOf(const CheckpointManifest& m, const std::string& variable) {
  for (const CheckpointFile& f : m.files()) {
    if (f.variable() == variable) return f.path();
  }
  return "";
}

TEST_F(CheckpointTest, CorruptOrMissingDataFilesAreRefusedByName) {
  ASSERT_NE(saved_, nullptr);
  const std::string file = FileOf(saved_->manifest, "emb/ftrl_div");
  {
    const std::string copy = FreshTestDir("corrupt") + "/ckpt";
    CopyTree(*uri_, copy);
    OverwriteByte(copy + "/" + file, 100);
    const std::string error = RestoreError(copy);
    EXPECT_TRUE(absl::StrContains(error, file)) << error;
    EXPECT_TRUE(absl::StrContains(error, "DATA_LOSS")) << error;
  }
  {
    const std::string copy = FreshTestDir("missing") + "/ckpt";
    CopyTree(*uri_, copy);
    ASSERT_EQ(std::remove((copy + "/" + file).c_str()), 0);
    const std::string error = RestoreError(copy);
    EXPECT_TRUE(absl::StrContains(error, file)) << error;
    EXPECT_TRUE(absl::StrContains(error, "NOT_FOUND")) << error;
  }
  // The original is untouched and still restores.
  EXPECT_EQ(CompareRows(*saved_, RestoreAndResave(2, 2, *uri_)), "");
}

// A checkpoint that does not fit the requested variables (another
// optimizer: its slots would mean something else) fails the creation at
// once, saying why, with nothing created on any PS -- not retried as if
// another creator held PS 0.
TEST_F(CheckpointTest, IncompatibleCheckpointFailsAtOnceNamingWhy) {
  ASSERT_NE(uri_, nullptr);
  auto cluster = StartCluster(2, {absl::StrCat("--restore=", *uri_)});
  ASSERT_NE(cluster, nullptr);
  auto client = Connect(*cluster);
  std::vector<VariableSpec> specs = CheckpointTestSpecs(2);
  specs[1].mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  const absl::Time start = absl::Now();
  absl::Status s = client->CreateVariables(specs);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "cannot restore 'dense/momentum'"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "optimizer differs")) << s;
  auto lists = client->ListVariables();
  ASSERT_TRUE(lists.ok());
  for (const auto& l : *lists) EXPECT_EQ(l.variables_size(), 0);
}

// A restore that fails on PS 1 only (its own shard file is corrupt) leaves
// nothing on PS 0 either: creation is prepared on every PS and committed
// only if all succeeded (RestoreError checks both catalogs are empty).
TEST_F(CheckpointTest, RestoreFailingOnOnePsLeavesNothingOnAny) {
  ASSERT_NE(saved_, nullptr);
  std::string file;
  for (const CheckpointFile& f : saved_->manifest.files()) {
    if (f.ps_task() == 1) file = f.path();
  }
  ASSERT_FALSE(file.empty());
  const std::string copy = FreshTestDir("corrupt_on_ps1") + "/ckpt";
  CopyTree(*uri_, copy);
  OverwriteByte(copy + "/" + file, 20);
  const std::string error = RestoreError(copy);
  EXPECT_TRUE(absl::StrContains(error, file)) << error;
  EXPECT_TRUE(absl::StrContains(error, "DATA_LOSS")) << error;
  EXPECT_TRUE(absl::StrContains(error, "PS 1")) << error;
  EXPECT_TRUE(absl::StrContains(error, "nothing was created on any PS"))
      << error;
}

// Runs ps_server with `flags` (one PS) and returns its exit code and output.
LocalCluster::WorkerRun RunServer(const std::vector<std::string>& flags) {
  std::vector<std::string> args = {
      absl::StrCat("--port=", PickUnusedPort()), "--metrics_port=0",
      R"(--cluster={"cluster": {"ps": ["localhost:1"]}})"};
  args.insert(args.end(), flags.begin(), flags.end());
  return RunPrograms("ps_server/ps_server", args, {""}, absl::Seconds(30))[0];
}

TEST_F(CheckpointTest, TruncatedManifestStopsTheServerNamingIt) {
  ASSERT_NE(saved_, nullptr);
  const std::string dir = FreshTestDir("truncated");
  const std::string root = dir + "/root";
  CopyTree(*root_, root);
  const std::string name = saved_->manifest.name();
  ASSERT_EQ(*uri_, JoinUri(*root_, name));
  const std::string manifest = absl::StrCat(root, "/", name, "/MANIFEST.json");
  ASSERT_EQ(truncate(manifest.c_str(), 100), 0);
  // --restore=latest points at the broken one: refuse, naming the file.
  auto run =
      RunServer({absl::StrCat("--checkpoint_uri=", root), "--restore=latest"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, manifest)) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "corrupt")) << run.output;
  // --restore=auto must not silently start empty either.
  run = RunServer({absl::StrCat("--checkpoint_uri=", root), "--restore=auto"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  // The previous checkpoint is intact and restorable by its URI.
  const std::string previous = JoinUri(
      root, std::string(absl::StripPrefix(*previous_uri_, *root_ + "/")));
  auto cluster = StartCluster(2, {absl::StrCat("--restore=", previous)});
  ASSERT_NE(cluster, nullptr);
  auto client = Connect(*cluster);
  EXPECT_EQ(client->CreateVariables(CheckpointTestSpecs(2)), absl::OkStatus());
  auto expected = ReadCheckpoint(*previous_uri_);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(ComparePulledValues(client.get(), *expected), "");
}

// The [start, end] of the restore of `variable` a PS logged: its line at
// the end, "restore: '<variable>' ... (<MB> MB in <seconds> s, ...)",
// stamped by glog with the time of day. {-1, -1} if absent.
std::pair<double, double> RestoreInterval(const std::string& log_path,
                                          const std::string& variable) {
  std::ifstream in(log_path);
  std::string line;
  const std::string needle = absl::StrCat("restore: '", variable, "' ");
  while (std::getline(in, line)) {
    const size_t at = line.find(needle);
    const size_t in_at = line.find(" MB in ", at);
    if (at == std::string::npos || in_at == std::string::npos) continue;
    // "I20261124 14:04:16.804246 ..." (or "I1124 14:04:16.804246 ...")
    int h = 0, m = 0;
    double sec = 0;
    if (std::sscanf(line.c_str() + line.find(' ') + 1, "%d:%d:%lf", &h, &m,
                    &sec) != 3) {
      continue;
    }
    const double end = h * 3600 + m * 60 + sec;
    const double seconds = std::atof(line.c_str() + in_at + 7);
    return {end - seconds, end};
  }
  return {-1, -1};
}

// Every PS restores its share at the same time (the client prepares all,
// then awaits each), not one after another: the restore intervals the two
// PS log overlap, and the values come back exactly.
TEST(CheckpointRestoreTest, EveryPsRestoresAtOnce) {
  const std::string root = FreshTestDir("parallel_root");
  VariableSpec big;
  big.set_name("big");
  big.set_kind(DENSE);
  big.add_shape(int64_t{12} << 20);  // 48 MiB + 48 MiB of momentum
  big.mutable_partition()->set_num_shards(4);
  big.mutable_optimizer()->set_kind(OptimizerSpec::MOMENTUM);
  big.mutable_optimizer()->set_learning_rate(0.1f);
  big.mutable_initializer()->set_kind(InitializerSpec::NORMAL);
  big.mutable_initializer()->set_stddev(1);
  // The values restored are compared with those pulled before, not with
  // the checkpoint's files: reading 12M rows into a map took 50 of the
  // test's 75 s under ASan (CheckpointTest's cases compare files, and
  // pulled values with files).
  const size_t floats = big.shape(0);
  std::vector<float> saved(floats);
  std::string uri;
  {
    auto cluster = StartCluster(2, {absl::StrCat("--checkpoint_uri=", root),
                                    "--checkpoint_on_shutdown=false"});
    ASSERT_NE(cluster, nullptr);
    auto client = Connect(*cluster);
    ASSERT_EQ(client->CreateVariables({big}), absl::OkStatus());
    auto checkpoint = client->Checkpoint();
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    uri = checkpoint->uri();
    ASSERT_EQ(client->PullDense("big", saved.data()), absl::OkStatus());
  }

  auto cluster = StartCluster(2, {absl::StrCat("--restore=", uri)});
  ASSERT_NE(cluster, nullptr);
  auto client = Connect(*cluster);
  ASSERT_EQ(client->CreateVariables({big}), absl::OkStatus());
  std::vector<float> restored(floats);
  ASSERT_EQ(client->PullDense("big", restored.data()), absl::OkStatus());
  const auto [saved_end, restored_end] =
      std::mismatch(saved.begin(), saved.end(), restored.begin());
  EXPECT_TRUE(saved_end == saved.end())
      << "float " << (saved_end - saved.begin()) << ": saved " << *saved_end
      << ", restored " << *restored_end;
  const auto ps0 = RestoreInterval(cluster->log_path(0), "big");
  const auto ps1 = RestoreInterval(cluster->log_path(1), "big");
  ASSERT_GE(ps0.first, 0) << "no restore line in " << cluster->log_path(0);
  ASSERT_GE(ps1.first, 0) << "no restore line in " << cluster->log_path(1);
  std::cout << std::fixed << "restore intervals: PS 0 [" << ps0.first << ", "
            << ps0.second << "], PS 1 [" << ps1.first << ", " << ps1.second
            << "]\n";
  // Overlapping: each began before the other ended.
  EXPECT_LT(ps0.first, ps1.second);
  EXPECT_LT(ps1.first, ps0.second);
}

TEST(CheckpointFaultTest, NoCheckpointToRestoreIsAClearError) {
  const std::string root = FreshTestDir("empty_root");
  auto run =
      RunServer({absl::StrCat("--checkpoint_uri=", root), "--restore=latest"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(run.output, "no checkpoint under"))
      << run.output;
  run = RunServer({"--restore=latest"});
  EXPECT_TRUE(absl::StrContains(run.output, "needs --checkpoint_uri"))
      << run.output;
}

// True once a temporary file (a write in progress) appears under dir.
bool WriteInProgress(const std::string& dir) {
  FILE* p =
      popen(absl::StrCat("find '", dir, "' -name '*.tmp-*'").c_str(), "r");
  char line[512];
  const bool found = fgets(line, sizeof(line), p) != nullptr;
  pclose(p);
  return found;
}

TEST(CheckpointFaultTest, PsKilledDuringSaveLeavesThePreviousLatest) {
  const std::string root = FreshTestDir("killed_root");
  auto cluster = StartCluster(
      2, {absl::StrCat("--checkpoint_uri=", root), "--checkpoint_threads=1"});
  ASSERT_NE(cluster, nullptr);
  auto client = Connect(*cluster);
  // 2 x 24 shards of 4M floats (16 MiB each, SGD): writing them takes a
  // while, so the kill lands mid-save.
  VariableSpec big;
  big.set_name("big");
  big.set_kind(DENSE);
  big.add_shape(48 << 20);
  big.mutable_partition()->set_num_shards(24);
  big.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_EQ(client->CreateVariables({big}), absl::OkStatus());
  auto first = client->Checkpoint();
  ASSERT_TRUE(first.ok()) << first.status();
  const absl::Time first_done = absl::Now();

  absl::StatusOr<CheckpointResponse> second;
  std::thread save([&] { second = client->Checkpoint(); });
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (!WriteInProgress(root) && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  cluster->Kill(1, SIGKILL);
  save.join();
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::StrContains(second.status().message(), "PS 1"))
      << second.status();
  // PS 0's metrics: one success, one failure, and the last success is the
  // first checkpoint (what an alert on checkpoint age reads).
  auto metrics = FetchMetrics(cluster->metrics_port(0));
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  auto value = [&](const std::string& sample) {
    return MetricValue(*metrics, sample);
  };
  EXPECT_EQ(value("psrt_checkpoints_total{result=\"success\"}"), 1) << *metrics;
  EXPECT_EQ(value("psrt_checkpoints_total{result=\"failure\"}"), 1);
  EXPECT_EQ(value("psrt_checkpoint_last_bytes"), first->bytes());
  EXPECT_EQ(value("psrt_checkpoint_last_global_step"), first->global_step());
  EXPECT_NEAR(value("psrt_checkpoint_last_duration_seconds"), first->seconds(),
              0.05);
  const double last_success =
      value("psrt_checkpoint_last_success_timestamp_seconds");
  EXPECT_LE(last_success, absl::ToUnixMicros(first_done) / 1e6 + 0.001);
  EXPECT_GE(last_success,
            absl::ToUnixMicros(first_done) / 1e6 - first->seconds() - 1);
  // PS 0 wrote its 12 of the 24 shards of 16 MiB at least once.
  EXPECT_GE(value("psrt_checkpoint_saved_bytes_total"), 12.0 * (16 << 20));
  EXPECT_GT(value("psrt_checkpoint_last_save_timestamp_seconds"), 0);
  // The failed checkpoint has no manifest; latest still names the first.
  auto storage = OpenStorage(root);
  auto latest = ReadLatest(**storage);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(JoinUri(root, *latest), first->uri());
  // What the failed save had written was deleted (docs/checkpoints.md):
  // the first checkpoint is all that is listed.
  auto listing = ListCheckpoints(**storage);
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->size(), 1u);
  EXPECT_EQ(JoinUri(root, (*listing)[0].name), first->uri());
  EXPECT_TRUE((*listing)[0].complete);
  // The first is whole: every file verifies.
  auto first_dir = OpenStorage(first->uri());
  auto manifest = ReadManifest(**first_dir, "");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_EQ(manifest->files_size(), 24);
  int64_t rows = 0;
  for (const CheckpointFile& f : manifest->files()) {
    auto data = (*first_dir)->Read(f.path());
    ASSERT_TRUE(data.ok()) << data.status();
    auto file = DecodeShardFile(*std::move(data), f.path());
    ASSERT_TRUE(file.ok()) << file.status();
    rows += file->header.num_rows();
  }
  EXPECT_EQ(rows, int64_t{48} << 20);
}

TEST(CheckpointTriggerTest, PeriodicCheckpointsKeepTheNewest) {
  const std::string root = FreshTestDir("periodic_root");
  auto cluster =
      StartCluster(2, {absl::StrCat("--checkpoint_uri=", root),
                       "--checkpoint_every_steps=50", "--keep_checkpoints=2",
                       "--checkpoint_on_shutdown=false"});
  ASSERT_NE(cluster, nullptr);
  auto client = Connect(*cluster);
  ASSERT_EQ(client->CreateVariables(CheckpointTestSpecs(2)), absl::OkStatus());
  std::atomic<bool> stop{false};
  std::thread training(
      [&] { TrainUntil(cluster->MakeClientOptions(), 1, stop, 0); });
  // The trigger looks every second; wait for at least three checkpoints.
  auto storage = OpenStorage(root);
  int taken = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (taken < 3 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(500));
    std::ifstream log(cluster->log_path(0));
    std::string line;
    taken = 0;
    while (std::getline(log, line)) {
      // (The log file is shared with earlier clusters of this process.)
      taken += absl::StrContains(line, "files,") &&
               absl::StrContains(line, "checkpoint " + root + "/");
    }
  }
  stop = true;
  training.join();
  EXPECT_GE(taken, 3);
  // Retention: only the newest two remain, latest is the newest. (A
  // checkpoint the trigger started as training stopped may still be
  // finishing: wait for the listing to settle.)
  absl::StatusOr<std::vector<CheckpointListing>> listing;
  int complete = 0, objects = -1;
  for (int i = 0; i < 40; ++i) {
    absl::SleepFor(absl::Milliseconds(500));
    listing = ListCheckpoints(**storage);
    ASSERT_TRUE(listing.ok());
    complete = 0;
    int n = 0;
    for (const CheckpointListing& l : *listing) {
      complete += l.complete;
      n += l.objects;
    }
    if (complete == 2 && n == objects && listing->size() == 2) break;
    objects = n;
  }
  EXPECT_EQ(complete, 2);
  EXPECT_EQ(listing->size(), 2u);
  auto latest = ReadLatest(**storage);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, listing->back().name);
  auto manifest = ReadManifest(**storage, *latest);
  ASSERT_TRUE(manifest.ok());
  EXPECT_GE(manifest->global_step(), 100);
}

// --checkpoint_every_secs reaches ps_server's schedule: a training
// cluster checkpoints by itself. (What only real processes show: the flag's
// wiring. The schedule itself -- intervals to the tick, one more for the
// last steps, none while idle -- is tested on a simulated clock in
// ps_server/checkpoint:checkpoint_schedule_test.)
TEST(CheckpointTriggerTest, EverySecondsFlagCheckpointsWhileTraining) {
  const std::string root = FreshTestDir("every_secs_root");
  auto cluster = StartCluster(
      2, {absl::StrCat("--checkpoint_uri=", root), "--checkpoint_every_secs=1",
          "--keep_checkpoints=0", "--checkpoint_on_shutdown=false"});
  ASSERT_NE(cluster, nullptr);
  auto client = Connect(*cluster);
  ASSERT_EQ(client->CreateVariables(CheckpointTestSpecs(2)), absl::OkStatus());
  std::atomic<bool> stop{false};
  std::thread training(
      [&] { TrainUntil(cluster->MakeClientOptions(), 1, stop, 0); });
  auto storage = OpenStorage(root);
  ASSERT_TRUE(storage.ok()) << storage.status();
  int complete = 0;
  for (const absl::Time end = absl::Now() + absl::Seconds(30);
       complete < 2 && absl::Now() < end;
       absl::SleepFor(absl::Milliseconds(50))) {
    auto listed = ListCheckpoints(**storage);
    ASSERT_TRUE(listed.ok()) << listed.status();
    complete = 0;
    for (const CheckpointListing& l : *listed) complete += l.complete;
  }
  stop = true;
  training.join();
  EXPECT_GE(complete, 2) << "no periodic checkpoints within 30 s";
}

// --checkpoint_max_mb_per_sec caps how fast each PS writes: 32 MB of
// shards per PS at 8 MB/s take at least ~4 s (and without the cap far
// less, so the cap is what slowed it).
TEST(CheckpointTriggerTest, RateCapSlowsTheWriters) {
  VariableSpec big;
  big.set_name("big");
  big.set_kind(DENSE);
  big.add_shape(16 << 20);  // 64 MB of parameters (SGD), 32 MB per PS
  big.mutable_partition()->set_num_shards(4);
  big.mutable_optimizer()->set_learning_rate(0.1f);
  double seconds[2];
  for (int capped = 0; capped < 2; ++capped) {
    const std::string root = FreshTestDir(absl::StrCat("rate_root", capped));
    std::vector<std::string> flags = {absl::StrCat("--checkpoint_uri=", root),
                                      "--checkpoint_on_shutdown=false"};
    if (capped) flags.push_back("--checkpoint_max_mb_per_sec=8");
    auto cluster = StartCluster(2, flags);
    ASSERT_NE(cluster, nullptr);
    auto client = Connect(*cluster);
    const absl::Status created = client->CreateVariables({big});
    ASSERT_TRUE(created.ok()) << created;
    auto saved = client->Checkpoint();
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_GE(saved->bytes(), 64 << 20);
    seconds[capped] = saved->seconds();
  }
  std::cout << "64 MB over 2 PS: " << seconds[0] << " s uncapped, "
            << seconds[1] << " s at 8 MB/s per PS" << std::endl;
  EXPECT_GE(seconds[1], 32.0 / 8 * 0.8);
  EXPECT_LT(seconds[0], seconds[1] / 2);
}

// ps_worker trains, SIGTERM makes PS 0 take a final checkpoint of both PS,
// and a fresh cluster restored from it lets training continue at its step.
TEST(CheckpointWorkerTest, ShutdownCheckpointAndTrainingContinues) {
  const std::string root = FreshTestDir("worker_root");
  const std::vector<std::string> args = {
      "--model=deepfm",
      "--train_files=testdata/criteo_deepfm_sagemaker/val.tfrecords",
      "--vocab=117581", "--batch_size=128", "--log_every_steps=10"};
  {
    auto cluster = StartCluster(2, {absl::StrCat("--checkpoint_uri=", root)});
    ASSERT_NE(cluster, nullptr);
    std::vector<std::string> a = args;
    a.push_back("--max_steps=20");
    auto runs =
        cluster->RunWorkers("ps_worker/ps_worker", a, {0}, absl::Minutes(3));
    ASSERT_EQ(runs[0].exit_code, 0) << runs[0].output;
    // SIGTERM both, as SageMaker and Kubernetes do: PS 1 waits for PS 0's
    // final checkpoint, then both exit 0.
    std::thread other([&] { EXPECT_EQ(cluster->Kill(1, SIGTERM), 0); });
    EXPECT_EQ(cluster->Kill(0, SIGTERM), 0);
    other.join();
  }
  auto storage = OpenStorage(root);
  auto latest = ReadLatest(**storage);
  ASSERT_TRUE(latest.ok()) << latest.status();
  auto manifest = ReadManifest(**storage, *latest);
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(manifest->global_step(), 20);
  EXPECT_EQ(manifest->num_ps(), 2);

  auto cluster = StartCluster(
      2, {absl::StrCat("--checkpoint_uri=", root), "--restore=latest"});
  ASSERT_NE(cluster, nullptr);
  std::vector<std::string> a = args;
  a.push_back("--max_steps=30");
  auto runs =
      cluster->RunWorkers("ps_worker/ps_worker", a, {0}, absl::Minutes(3));
  ASSERT_EQ(runs[0].exit_code, 0) << runs[0].output;
  EXPECT_TRUE(absl::StrContains(runs[0].output, "restored at global step 20"))
      << runs[0].output;
  // Steps 20..29: ten batches, ending at global step 30.
  EXPECT_EQ(LastMetric(runs[0].output, "steps"), 30) << runs[0].output;
  EXPECT_EQ(LastMetric(runs[0].output, "examples"), 10 * 128) << runs[0].output;
  // The restored model starts where the saved one was: over the same first
  // ten batches, its loss is clearly below that of a model trained from
  // scratch (a restore that restored nothing would match it; a fixed
  // bias-only bound would not tell them apart on this file, whose base-rate
  // entropy is 0.568).
  std::vector<double> loss = MetricValues(runs[0].output, "loss");
  ASSERT_FALSE(loss.empty());
  auto fresh_cluster = StartCluster(2, {});
  ASSERT_NE(fresh_cluster, nullptr);
  a.back() = "--max_steps=10";
  auto fresh = fresh_cluster->RunWorkers("ps_worker/ps_worker", a, {0},
                                         absl::Minutes(3));
  ASSERT_EQ(fresh[0].exit_code, 0) << fresh[0].output;
  std::vector<double> fresh_loss = MetricValues(fresh[0].output, "loss");
  ASSERT_FALSE(fresh_loss.empty());
  std::cout << "first-interval loss: restored " << loss.front()
            << ", from scratch " << fresh_loss.front() << std::endl;
  EXPECT_LT(loss.front(), fresh_loss.front() - 0.02) << runs[0].output;
}

}  // namespace
}  // namespace psrt
