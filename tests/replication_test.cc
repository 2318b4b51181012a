// --replicas=2 with real ps_server processes, each PS on its own loopback
// address (a host of its own): every push reaches the backup copies before
// it is acknowledged, so after concurrent training every backup holds the
// same bits as its primary; checkpoints hold each shard once; a cluster on
// too few hosts refuses to start; a backup killed with -9 does not stop
// training; a primary killed fails over losing nothing; one paused past its
// lease serves nothing when it resumes.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "partitioner/test_variable_spec.h"
#include "proto/ps.pb.h"
#include "tests/local_cluster.h"
#include "tests/raw_rpc.h"
#include "util/sanitizers.h"

namespace psrt {
namespace {

VariableSpec Spec(const std::string& name, VariableKind kind,
                  std::vector<int64_t> shape, int shards,
                  OptimizerSpec::Kind optimizer) {
  return TestVariableSpec(name, kind, std::move(shape), shards, optimizer);
}

std::vector<VariableSpec> Model() {
  return {Spec("dense", DENSE, {1000, 4}, 3, OptimizerSpec::ADAM),
          Spec("emb", EMBEDDING, {5000, 8}, 3, OptimizerSpec::ADAGRAD),
          Spec("hash", HASH_EMBEDDING, {0, 8}, 3, OptimizerSpec::ADAM)};
}

// `more_flags` go after the others (a later flag wins).
std::unique_ptr<LocalCluster> StartReplicated(
    int replicas, std::vector<std::string> more_flags = {}) {
  LocalCluster::Options o;
  o.num_ps = 3;
  o.num_workers = 4;
  o.one_host_per_ps = true;
  const char* tmp = std::getenv("TEST_TMPDIR");
  o.extra_flags = {absl::StrCat("--replicas=", replicas),
                   absl::StrCat("--checkpoint_uri=", tmp ? tmp : "/tmp",
                                "/replicated_ckpt_", replicas),
                   "--checkpoint_on_shutdown=false"};
  for (std::string& flag : more_flags) o.extra_flags.push_back(std::move(flag));
  auto cluster = LocalCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? std::move(*cluster) : nullptr;
}

// `clients` threads push random gradients to every variable for `steps`
// steps each (async, no coordination), every push acknowledged; with
// `until`, as many steps as they can until it turns true.
// When each push ended and how long it took.
struct PushTimes {
  absl::Mutex mu;
  std::vector<std::pair<absl::Time, absl::Duration>> ended ABSL_GUARDED_BY(mu);
  // The longest push that ended after `since` and started at most
  // `lead` before it (pushes held up by earlier events, a failover just
  // before, are left out), and the median of those that ended before it.
  std::pair<absl::Duration, absl::Duration> SlowestAfterAndMedianBefore(
      absl::Time since, absl::Duration lead) {
    absl::MutexLock lock(&mu);
    absl::Duration slowest;
    std::vector<absl::Duration> before;
    for (const auto& [end, took] : ended) {
      if (end > since) {
        if (end - took >= since - lead) slowest = std::max(slowest, took);
      } else {
        before.push_back(took);
      }
    }
    if (before.empty()) return {slowest, absl::ZeroDuration()};
    std::nth_element(before.begin(), before.begin() + before.size() / 2,
                     before.end());
    return {slowest, before[before.size() / 2]};
  }
  // The longest push in flight at some moment of [from, to], and how many
  // pushes were.
  // Only pushes started at `started_from` or later count (default: all).
  std::pair<absl::Duration, int> SlowestAcross(
      absl::Time from, absl::Time to,
      absl::Time started_from = absl::InfinitePast()) {
    absl::MutexLock lock(&mu);
    absl::Duration slowest;
    int count = 0;
    for (const auto& [end, took] : ended) {
      if (end >= from && end - took <= to && end - took >= started_from) {
        slowest = std::max(slowest, took);
        ++count;
      }
    }
    return {slowest, count};
  }
  // The longest push that started and ended within [from, to].
  absl::Duration SlowestWithin(absl::Time from, absl::Time to) {
    absl::MutexLock lock(&mu);
    absl::Duration slowest;
    for (const auto& [end, took] : ended) {
      if (end <= to && end - took >= from) slowest = std::max(slowest, took);
    }
    return slowest;
  }
};

// When the glog line matched by `pattern` (after its "IYYYYMMDD
// HH:MM:SS.uuuuuu thread file:line] " prefix) was logged, and the line.
std::optional<std::pair<absl::Time, std::string>> LoggedAt(
    const std::string& log, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(
          log, m,
          std::regex("[IWE](\\d{8} \\d{2}:\\d{2}:\\d{2}\\.\\d{6}) +\\d+ "
                     "[^\\]]+\\] (" +
                     pattern + ")"))) {
    return std::nullopt;
  }
  absl::Time t;
  std::string error;
  const std::string stamp = m[1].str();  // YYYYMMDD HH:MM:SS.uuuuuu
  if (!absl::ParseTime("%Y-%m-%d %H:%M:%E*S",
                       absl::StrCat(stamp.substr(0, 4), "-", stamp.substr(4, 2),
                                    "-", stamp.substr(6)),
                       absl::LocalTimeZone(), &t, &error)) {
    return std::nullopt;
  }
  return std::make_pair(t, m[2].str());
}

// With `times`, every push's end and duration.
void Train(const LocalCluster& cluster, int clients, int steps,
           std::atomic<int>* failures, uint32_t seed,
           const std::atomic<bool>* until = nullptr,
           PushTimes* times = nullptr) {
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto client = Client::Connect(cluster.MakeClientOptions());
      if (!client.ok() || !(*client)->CreateVariables(Model()).ok()) {
        ++*failures;
        return;
      }
      std::mt19937 random(seed + c);
      std::normal_distribution<float> grad(0, 1);
      std::uniform_int_distribution<int64_t> row(0, 4999);
      std::uniform_int_distribution<int64_t> hashed(-1000000, 1000000);
      std::vector<float> dense(4000);
      std::vector<int64_t> ids(64), hash_ids(64);
      std::vector<float> rows(64 * 8);
      for (int step = 0; until != nullptr ? !until->load() : step < steps;
           ++step) {
        for (float& g : dense) g = grad(random);
        for (int64_t& id : ids) id = row(random);
        for (int64_t& id : hash_ids) id = hashed(random) % 500;
        for (float& g : rows) g = grad(random);
        const absl::Time sent = absl::Now();
        absl::Status s =
            (*client)->Push({PushOp::Dense("dense", dense.data()),
                             PushOp::Rows("emb", ids, rows.data()),
                             PushOp::Rows("hash", hash_ids, rows.data())});
        if (times != nullptr) {
          const absl::Time end = absl::Now();
          absl::MutexLock lock(&times->mu);
          times->ended.emplace_back(end, end - sent);
        }
        if (!s.ok()) {
          ++*failures;
          ADD_FAILURE() << s;
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

int CountOf(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

std::string LogOf(const LocalCluster& cluster, int ps) {
  std::ifstream in(cluster.log_path(ps));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Tail(const std::string& text) {
  return text.substr(text.size() > 4000 ? text.size() - 4000 : 0);
}

// `psctl replicas` against the cluster; its exit code must be
// `expected_exit` (0: every shard's copies agree).
std::string Psctl(const LocalCluster& cluster, int expected_exit = 0) {
  auto runs = RunPrograms(
      "tools/psctl/psctl",
      {absl::StrCat("--cluster=", ClusterSpecToJson(cluster.spec())),
       "--timeout_secs=3", "replicas"},
      {""}, absl::Seconds(60));
  EXPECT_EQ(runs[0].exit_code, expected_exit) << runs[0].output;
  return runs[0].output;
}

// `psctl replicas` once every shard's `copies` agree ("in sync" that many
// times, exit 0), or its last report after `patience`: a backup rejoined
// while pushes ran may still be catching up on the stream when they stop
// (seen under ASan: 37 updates behind just after training ended).
std::string PsctlOnceInSync(const LocalCluster& cluster, int copies,
                            absl::Duration patience = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + patience;
  while (true) {
    auto runs = RunPrograms(
        "tools/psctl/psctl",
        {absl::StrCat("--cluster=", ClusterSpecToJson(cluster.spec())),
         "--timeout_secs=3", "replicas"},
        {""}, absl::Seconds(60));
    const bool in_sync =
        runs[0].exit_code == 0 && CountOf(runs[0].output, "in sync") == copies;
    if (in_sync || absl::Now() > deadline) {
      EXPECT_EQ(runs[0].exit_code, 0) << runs[0].output;
      return runs[0].output;
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
}

struct Copy {
  int ps = 0;
  bool backup = false;
  int64_t version = 0;
  int64_t rows = 0;
  uint64_t digest = 0;
};

// (variable, shard) -> every copy the cluster holds.
absl::flat_hash_map<std::string, std::vector<Copy>> Copies(Client* client) {
  ListVariablesRequest request;
  request.set_with_digests(true);
  auto lists = client->ListVariables(request);
  EXPECT_TRUE(lists.ok()) << lists.status();
  absl::flat_hash_map<std::string, std::vector<Copy>> copies;
  if (!lists.ok()) return copies;
  for (size_t ps = 0; ps < lists->size(); ++ps) {
    for (const VariableInfo& v : (*lists)[ps].variables()) {
      for (const ShardInfo& s : v.shards()) {
        copies[absl::StrCat(v.spec().name(), "/", s.shard())].push_back(
            {static_cast<int>(ps), s.backup(), s.version(), s.num_rows(),
             s.digest()});
      }
    }
  }
  return copies;
}

TEST(ReplicationTest, EveryBackupHoldsThePrimarysBitsAfterConcurrentPushes) {
  auto cluster = StartReplicated(2);
  ASSERT_NE(cluster, nullptr);
  auto client = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_EQ((*client)->CreateVariables(Model()), absl::OkStatus());
  const auto before = Copies(client->get());
  std::atomic<int> failures{0};
  Train(*cluster, 4, 60, &failures, 7);
  ASSERT_EQ(failures.load(), 0);
  const auto after = Copies(client->get());
  ASSERT_EQ(after.size(), 9u);  // 3 variables x 3 shards
  for (const auto& [name, copies] : after) {
    ASSERT_EQ(copies.size(), 2u) << name;
    const Copy& a = copies[0];
    const Copy& b = copies[1];
    EXPECT_NE(a.backup, b.backup) << name << ": one primary, one backup";
    const Copy& primary = a.backup ? b : a;
    const Copy& backup = a.backup ? a : b;
    // The ring: the backup is the next PS.
    EXPECT_EQ(backup.ps, (primary.ps + 1) % 3) << name;
    EXPECT_EQ(backup.version, primary.version) << name;
    EXPECT_EQ(backup.rows, primary.rows) << name;
    EXPECT_EQ(backup.digest, primary.digest) << name;
    // Training changed every shard (so equal digests are not vacuous).
    EXPECT_EQ(primary.version, 4 * 60) << name << " rows " << primary.rows;
    EXPECT_NE(before.at(name)[0].digest, primary.digest) << name;
  }
  // PS 0's metrics: its 240 pushes forwarded and acknowledged, in batches,
  // its backup in sync.
  auto metrics = FetchMetrics(cluster->metrics_port(0));
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      *metrics, m, std::regex(R"(\npsrt_replication_updates_total (\S+))")))
      << *metrics;
  EXPECT_EQ(std::stod(m[1]), 4 * 60);
  ASSERT_TRUE(std::regex_search(
      *metrics, m, std::regex(R"(\npsrt_replication_calls_total (\S+))")));
  EXPECT_GE(std::stod(m[1]), 1);
  EXPECT_LE(std::stod(m[1]), 4 * 60);
  EXPECT_TRUE(
      absl::StrContains(*metrics, "psrt_replication_in_sync{backup=\"1\"} 1"))
      << *metrics;
  // psctl agrees: every shard has 2 copies, in sync.
  const std::string psctl = Psctl(*cluster);
  EXPECT_EQ(CountOf(psctl, "in sync"), 9) << psctl;
  // A checkpoint holds each shard once (from its primary).
  auto saved = (*client)->Checkpoint();
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->files(), 9) << saved->DebugString();
}

TEST(ReplicationTest, BackupsCatchEveryPushAndTheDigestSeesOneMissing) {
  // The digest can tell copies apart: the same training on R=1 and one push
  // more on one shard changes that shard's digest.
  auto cluster = StartReplicated(1);
  ASSERT_NE(cluster, nullptr);
  auto client = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_EQ((*client)->CreateVariables(Model()), absl::OkStatus());
  const auto before = Copies(client->get());
  for (const auto& [name, copies] : before) {
    ASSERT_EQ(copies.size(), 1u) << name << ": --replicas=1 keeps no backup";
  }
  std::vector<int64_t> id = {3};
  std::vector<float> grad(8, 1e-3f);
  ASSERT_EQ((*client)->PushRows("emb", id, grad.data()), absl::OkStatus());
  const auto after = Copies(client->get());
  int changed = 0;
  for (const auto& [name, copies] : after) {
    changed += copies[0].digest != before.at(name)[0].digest;
  }
  EXPECT_EQ(changed, 1);
}

TEST(ReplicationTest, TooFewHostsIsRefusedAtStartNamingThem) {
  LocalCluster::Options o;
  o.num_ps = 2;
  o.extra_flags = {"--replicas=2"};  // both PS on 127.0.0.1
  auto cluster = LocalCluster::Start(o);
  ASSERT_FALSE(cluster.ok());
  EXPECT_TRUE(absl::StrContains(cluster.status().message(),
                                "needs PS on at least 2 different hosts"))
      << cluster.status();
  EXPECT_TRUE(absl::StrContains(cluster.status().message(), "127.0.0.1"))
      << cluster.status();
}

TEST(ReplicationTest, ABackupKilledDoesNotStopTraining) {
  auto cluster = StartReplicated(2);
  ASSERT_NE(cluster, nullptr);
  auto client = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_EQ((*client)->CreateVariables(Model()), absl::OkStatus());
  std::atomic<int> failures{0};
  Train(*cluster, 2, 10, &failures, 11);
  ASSERT_EQ(failures.load(), 0);
  // PS 1 keeps PS 0's backups. Only PS 0's shards are pushed from now on.
  cluster->Kill(1, SIGKILL);
  const VariableLayout* emb = (*client)->Find("emb");
  ASSERT_NE(emb, nullptr);
  int pushed = 0;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 5; ++i) {
    // A dense push touches every shard, PS 1's too: push rows of PS 0's
    // shards of the embedding instead (DIV: shard 0 holds rows 0..1666).
    std::vector<int64_t> ids = {1, 2, 3};
    std::vector<float> rows(3 * 8, 0.25f);
    ASSERT_EQ(emb->shards[0].ps_task, 0);
    absl::Status s = (*client)->PushRows("emb", ids, rows.data());
    ASSERT_TRUE(s.ok()) << s;
    ++pushed;
  }
  EXPECT_EQ(pushed, 5);
  // The first push waits for the primary to give the backup up (10 s of
  // retries), the rest go straight through.
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  std::ifstream log(cluster->log_path(0));
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_TRUE(absl::StrContains(text.str(), "replication to PS 1"))
      << text.str().substr(0, 4000);
}

// Kill -9 a PS while 4 clients push: its backup takes over within seconds,
// every push is acknowledged, and every acknowledged push is in the final
// values exactly once. SGD with a learning rate of 1/16 and small integer
// gradients makes every partial sum exact in float, so the expected values
// do not depend on the order pushes landed in: one push lost or applied
// twice shows.
TEST(ReplicationTest, KilledPrimaryFailsOverLosingNoPush) {
  LocalCluster::Options o;
  o.num_ps = 3;
  o.num_workers = 4;
  o.one_host_per_ps = true;
  o.extra_flags = {"--replicas=2"};
  auto started = LocalCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  constexpr int64_t kRows = 3000, kDim = 4;
  constexpr float kLr = 0.0625f;
  std::vector<VariableSpec> model = {
      Spec("w", EMBEDDING, {kRows, kDim}, 3, OptimizerSpec::SGD),
      Spec("b", DENSE, {300}, 3, OptimizerSpec::SGD)};
  for (VariableSpec& spec : model) {
    spec.mutable_optimizer()->set_learning_rate(kLr);
  }
  auto setup = Client::Connect(cluster.MakeClientOptions());
  ASSERT_TRUE(setup.ok());
  ASSERT_EQ((*setup)->CreateVariables(model), absl::OkStatus());
  std::vector<int64_t> all(kRows);
  for (int64_t i = 0; i < kRows; ++i) all[i] = i;
  std::vector<float> w0(kRows * kDim), b0(300);
  ASSERT_EQ((*setup)->Pull({PullOp::Rows("w", all, w0.data()),
                            PullOp::Dense("b", b0.data())}),
            absl::OkStatus());

  constexpr int kClients = 4, kSteps = 150;
  std::vector<std::vector<double>> w_sum(kClients,
                                         std::vector<double>(kRows * kDim));
  std::vector<std::vector<double>> b_sum(kClients, std::vector<double>(300));
  std::atomic<int> pushed{0};
  std::atomic<int> failed{0};
  std::atomic<int64_t> first_after_kill_ms{-1};
  std::atomic<bool> killed{false};
  absl::Time kill_time;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto client = Client::Connect(cluster.MakeClientOptions());
      ASSERT_TRUE(client.ok());
      ASSERT_EQ((*client)->RefreshCatalog(), absl::OkStatus());
      std::mt19937 random(100 + c);
      std::uniform_int_distribution<int64_t> row(0, kRows - 1);
      std::uniform_int_distribution<int> small(-3, 3);
      std::vector<int64_t> ids(32);
      std::vector<float> rows(32 * kDim), dense(300);
      for (int step = 0; step < kSteps; ++step) {
        const bool after_kill = killed.load();
        for (int64_t& id : ids) id = row(random);
        for (float& g : rows) g = static_cast<float>(small(random));
        for (float& g : dense) g = static_cast<float>(small(random));
        absl::Status s = (*client)->Push({PushOp::Rows("w", ids, rows.data()),
                                          PushOp::Dense("b", dense.data())});
        if (!s.ok()) {
          ++failed;
          ADD_FAILURE() << "client " << c << " step " << step << ": " << s;
          continue;
        }
        for (size_t i = 0; i < ids.size(); ++i) {
          for (int64_t d = 0; d < kDim; ++d) {
            w_sum[c][ids[i] * kDim + d] += rows[i * kDim + d];
          }
        }
        for (int i = 0; i < 300; ++i) b_sum[c][i] += dense[i];
        ++pushed;
        if (after_kill && first_after_kill_ms.load() < 0) {
          int64_t expected = -1;
          first_after_kill_ms.compare_exchange_strong(
              expected, absl::ToInt64Milliseconds(absl::Now() - kill_time));
        }
      }
    });
  }
  while (pushed.load() < kClients * kSteps / 3)
    absl::SleepFor(absl::Milliseconds(5));
  kill_time = absl::Now();
  cluster.Kill(1, SIGKILL);
  killed = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(pushed.load(), kClients * kSteps);
  // Every push touches PS 1's shards (the dense variable has one there), so
  // the first one started after the kill and acknowledged measures the
  // failover.
  std::printf(
      "failover: first push started after kill -9 acknowledged "
      "%lld ms after it\n",
      static_cast<long long>(first_after_kill_ms.load()));
  EXPECT_GE(first_after_kill_ms.load(), 0);
  EXPECT_LT(first_after_kill_ms.load(), 15000);

  // psctl, with PS 1 down: PS 1's shards served by PS 2 on one copy, PS
  // 2's still on two.
  const std::string report = Psctl(cluster, 1);
  EXPECT_TRUE(absl::StrContains(report, "does not answer")) << report;
  EXPECT_TRUE(absl::StrContains(report, "failovers it knows of: 1")) << report;
  EXPECT_TRUE(
      std::regex_search(report, std::regex(R"(w/1 +1 +2 .*1 of 2 copies)")))
      << report;
  EXPECT_TRUE(std::regex_search(report, std::regex(R"(b/2 +2 +2 .*in sync)")))
      << report;
  // PS 1 comes back (restarted empty, as a supervisor would): its backup
  // refuses its stream, so it serves nothing, and a client that knows of
  // no failover (a fresh one) is redirected to PS 2 by its answer.
  ASSERT_EQ(cluster.Restart(1), absl::OkStatus());
  auto fresh = Client::Connect(cluster.MakeClientOptions());
  ASSERT_TRUE(fresh.ok());
  ASSERT_EQ((*fresh)->RefreshCatalog(), absl::OkStatus());
  std::vector<float> w(kRows * kDim), b(300);
  ASSERT_EQ((*fresh)->Pull({PullOp::Rows("w", all, w.data()),
                            PullOp::Dense("b", b.data())}),
            absl::OkStatus());
  int wrong = 0;
  for (int64_t i = 0; i < kRows * kDim; ++i) {
    double sum = 0;
    for (int c = 0; c < kClients; ++c) sum += w_sum[c][i];
    const float expected = w0[i] - kLr * static_cast<float>(sum);
    if (w[i] != expected && ++wrong <= 5) {
      ADD_FAILURE() << "w[" << i << "] = " << w[i] << ", expected " << expected;
    }
  }
  for (int i = 0; i < 300; ++i) {
    double sum = 0;
    for (int c = 0; c < kClients; ++c) sum += b_sum[c][i];
    const float expected = b0[i] - kLr * static_cast<float>(sum);
    if (b[i] != expected && ++wrong <= 10) {
      ADD_FAILURE() << "b[" << i << "] = " << b[i] << ", expected " << expected;
    }
  }
  EXPECT_EQ(wrong, 0);
  std::ifstream log(cluster.log_path(1));
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_TRUE(absl::StrContains(text.str(), "was replaced by its backup"))
      << text.str().substr(text.str().size() > 3000 ? text.str().size() - 3000
                                                    : 0);
  // PS 2 (PS 1's backup) took over and says so: in its log (by now the
  // restarted PS 1 may have rejoined and taken its shards back, which
  // empties PS 2's list of failed PS: a loaded machine's run saw that).
  const std::string ps2_log = cluster.log(2);
  EXPECT_TRUE(std::regex_search(
      ps2_log, std::regex(R"(PS 2 took over \d+ shard\(s\) of PS 1)")))
      << Tail(ps2_log);
}

// A Frame asking for (pull) or pushing `grad` to (push) floats
// [0, count) of shard `shard` of DENSE `variable`.
std::string DenseFrame(const std::string& variable, int shard, int64_t count,
                       const std::vector<float>* grad) {
  TensorItem item;
  item.set_variable(variable);
  item.set_shard(shard);
  item.set_count(count);
  Frame frame;
  if (grad == nullptr) {
    PullRequestHeader header;
    *header.add_items() = item;
    frame.set_header(header.SerializeAsString());
  } else {
    PushRequestHeader header;
    header.set_last(true);
    item.set_grad_payload(0);
    *header.add_items() = item;
    frame.add_payload(std::string(reinterpret_cast<const char*>(grad->data()),
                                  grad->size() * sizeof(float)));
    frame.set_header(header.SerializeAsString());
  }
  return frame.SerializeAsString();
}

// The failovers PS `ps` knows of (empty if it does not answer).
std::vector<int> FailedAccordingTo(const LocalCluster& cluster, int ps) {
  ClientOptions only = cluster.MakeClientOptions();
  only.ps_addresses = {cluster.ps_addresses()[ps]};
  only.call_timeout = absl::Seconds(2);
  auto client = Client::Connect(only);
  if (!client.ok()) return {};
  auto stats = (*client)->Stats();
  if (!stats.ok() || stats->empty()) return {};
  return {(*stats)[0].failed_ps().begin(), (*stats)[0].failed_ps().end()};
}

// PS `task`'s membership term as PS `ps` knows it (-1: no answer).
int64_t TermAccordingTo(const LocalCluster& cluster, int ps, int task) {
  ClientOptions only = cluster.MakeClientOptions();
  only.ps_addresses = {cluster.ps_addresses()[ps]};
  only.call_timeout = absl::Seconds(2);
  auto client = Client::Connect(only);
  if (!client.ok()) return -1;
  auto stats = (*client)->Stats();
  if (!stats.ok() || stats->empty()) return -1;
  auto it = (*stats)[0].ps_terms().find(task);
  return it == (*stats)[0].ps_terms().end() ? 0 : it->second;
}

// A primary that stops (SIGSTOP: a long pause, a stalled VM) is replaced
// by its backup while it cannot answer. When it resumes, its process still
// holds its shards and, until it learns otherwise, believes it serves
// them: without a lease it would answer pulls with values the cluster has
// moved past. It must refuse every pull and push until it has rejoined and
// taken its shards back (handback), and a client that still routes to it
// must end up with the new primary's values.
TEST(ReplicationTest, APausedPrimaryServesNothingStaleWhenItResumes) {
  auto cluster = StartReplicated(2);
  ASSERT_NE(cluster, nullptr);
  auto client = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_EQ((*client)->CreateVariables(Model()), absl::OkStatus());
  std::vector<float> before(4000);
  ASSERT_EQ((*client)->Pull({PullOp::Dense("dense", before.data())}),
            absl::OkStatus());

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const std::string& address : cluster->ps_addresses()) {
    channels.push_back(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }
  // The dense shard PS 1 is primary for: the one it answers pulls of.
  int shard = -1;
  for (int s = 0; s < 3; ++s) {
    if (RawPull(channels[1].get(), DenseFrame("dense", s, 4, nullptr)).ok()) {
      shard = s;
    }
  }
  ASSERT_GE(shard, 0) << "PS 1 serves no shard of 'dense'";

  ASSERT_EQ(::kill(cluster->pid(1), SIGSTOP), 0);
  const absl::Time paused = absl::Now();
  // PS 2 takes PS 1's shards over; PS 0 learns it from PS 2 (the lease
  // renewals carry failovers).
  while ((FailedAccordingTo(*cluster, 2) != std::vector<int>{1} ||
          FailedAccordingTo(*cluster, 0) != std::vector<int>{1}) &&
         absl::Now() - paused < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::printf(
      "PS 1 paused; PS 2 serves its shards and PS 0 knows after %lld "
      "ms\n",
      static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - paused)));
  ASSERT_EQ(FailedAccordingTo(*cluster, 2), std::vector<int>{1});
  ASSERT_EQ(FailedAccordingTo(*cluster, 0), std::vector<int>{1});
  // PS 2's status page shows the takeover.
  auto status = FetchMetrics(cluster->metrics_port(2), "/statusz");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(absl::StrContains(*status, "id=\"failed-ps\">1<")) << *status;
  EXPECT_TRUE(absl::StrContains(*status, "id=\"lease\">held<")) << *status;
  // Training goes on at the new primary: PS 1's shard moves on.
  const std::vector<float> grad(4, 1.0f);
  ASSERT_TRUE(
      RawPush(channels[2].get(), {DenseFrame("dense", shard, 4, &grad)}).ok());

  ASSERT_EQ(::kill(cluster->pid(1), SIGCONT), 0);
  // From the first moment it runs again, PS 1 answers no pull and takes no
  // push: its lease ran out while it was stopped, and the PS it asks for a
  // new one know it failed over. It serves again only once it has rejoined
  // and PS 2 handed its shards back (with every update PS 2 applied).
  const absl::Time resumed = absl::Now();
  int refused = 0;
  bool served_again = false;
  auto handed_back = [&] {
    return absl::StrContains(LogOf(*cluster, 2), "shard(s) back to PS 1");
  };
  while (!served_again && absl::Now() - resumed < absl::Seconds(20)) {
    grpc::Status pulled =
        RawPull(channels[1].get(), DenseFrame("dense", shard, 4, nullptr));
    grpc::Status pushed;
    if (!pulled.ok()) {
      pushed =
          RawPush(channels[1].get(), {DenseFrame("dense", shard, 4, &grad)});
    }
    if (pulled.ok() || pushed.ok()) {
      EXPECT_TRUE(handed_back())
          << "PS 1 served before PS 2 handed its shards back";
      served_again = true;
      break;
    }
    for (const grpc::Status& s : {pulled, pushed}) {
      ASSERT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
          << "call " << refused << " after the resume: " << s.error_message();
      EXPECT_TRUE(
          absl::StrContains(s.error_message(), "holds no lease") ||
          absl::StrContains(s.error_message(), "replaced by its backup") ||
          absl::StrContains(s.error_message(), "waiting for its backups") ||
          absl::StrContains(s.error_message(), "keeps only a backup copy"))
          << s.error_message();
    }
    ++refused;
  }
  std::printf(
      "%d pulls and pushes to the resumed PS 1 refused, then it "
      "served again after %lld ms (handback)\n",
      refused,
      static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - resumed)));
  EXPECT_GT(refused, 0);
  EXPECT_TRUE(served_again);
  status = FetchMetrics(cluster->metrics_port(1), "/statusz");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_FALSE(absl::StrContains(*status, "id=\"replaced\"")) << *status;
  EXPECT_FALSE(absl::StrContains(*status, "id=\"primary-shards\">0<"))
      << *status;
  // The client that routed to PS 1 before the pause is refused there,
  // learns the failover and reads the new primary's values: PS 1's shard
  // moved, the others did not.
  std::vector<float> after(4000);
  ASSERT_EQ((*client)->Pull({PullOp::Dense("dense", after.data())}),
            absl::OkStatus());
  int moved = 0;
  for (int i = 0; i < 4000; ++i) moved += after[i] != before[i];
  EXPECT_EQ(moved, 4) << "only the 4 floats pushed should differ";
  const std::string log = LogOf(*cluster, 1);
  EXPECT_TRUE(absl::StrContains(log, "lost its lease")) << Tail(log);
  EXPECT_TRUE(absl::StrContains(log, "learned it was replaced")) << Tail(log);
}

// A primary that stops answering without closing its connections (paused,
// hung, cut off) leaves a call to it waiting out its deadline while its
// backup takes its shards over. The call then goes where those shards are
// served now: the push is applied exactly once and the pull returns, where
// the client used to return DEADLINE_EXCEEDED (a 2-host worker counted a
// recovery for it in CI).
TEST(ReplicationTest, ACallThatTimedOutAtAPausedPrimaryGoesToItsBackup) {
  auto cluster = StartReplicated(2);
  ASSERT_NE(cluster, nullptr);
  ClientOptions options = cluster->MakeClientOptions();
  // Well past the 3 s after which a backup takes over.
  constexpr absl::Duration kDeadline = absl::Seconds(8);
  options.call_timeout = kDeadline;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  constexpr int kFloats = 300;
  VariableSpec spec = Spec("sgd", DENSE, {kFloats}, 3, OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(0.5f);
  ASSERT_EQ((*client)->CreateVariables({spec}), absl::OkStatus());
  std::vector<float> before(kFloats), after(kFloats);
  ASSERT_EQ((*client)->Pull({PullOp::Dense("sgd", before.data())}),
            absl::OkStatus());

  ASSERT_EQ(::kill(cluster->pid(1), SIGSTOP), 0);
  absl::Cleanup resume = [&] { ::kill(cluster->pid(1), SIGCONT); };
  const absl::Time paused = absl::Now();
  const std::vector<float> ones(kFloats, 1.0f);
  ASSERT_EQ((*client)->Push({PushOp::Dense("sgd", ones.data())}),
            absl::OkStatus());
  const absl::Duration push_took = absl::Now() - paused;
  ASSERT_EQ((*client)->Pull({PullOp::Dense("sgd", after.data())}),
            absl::OkStatus());
  std::printf(
      "push with PS 1 paused acknowledged after %lld ms (deadline %lld ms)\n",
      static_cast<long long>(absl::ToInt64Milliseconds(push_took)),
      static_cast<long long>(absl::ToInt64Milliseconds(kDeadline)));
  // It waited out its deadline at PS 1, then went to PS 2.
  EXPECT_GE(push_took, kDeadline);
  EXPECT_EQ(FailedAccordingTo(*cluster, 2), std::vector<int>{1});
  int wrong = 0;
  for (int i = 0; i < kFloats; ++i) wrong += after[i] != before[i] - 0.5f;
  EXPECT_EQ(wrong, 0) << "of " << kFloats
                      << " floats (each pushed once, lr 0.5)";
}

// A PS killed with -9 fails over; restarted, it rejoins as a backup while
// clients keep pushing: it gets copies of its own shards from the PS that
// took them over and of the shards it backs up from their primary, each
// taken under the shard's lock while pushes go on, then follows their
// streams. Then it takes its primary role back (handback): PS 2 stops
// serving PS 1's shards once PS 1 applied their last updates, and PS 1
// serves them again. Afterwards every shard of all three kinds is on 2
// copies with the same bits (psctl replicas compares versions and
// digests), each served by the PS it was placed on, and no PS knows of a
// failover. The longest push during the handback is printed beside the
// median one.
// `wait_for_failover`: PS 1 is restarted after PS 2 took its shards over;
// else at once, before any failover (PS 2 then takes them over when the
// new process says hello, since the old one is gone).
void KillRestartAndRejoin(bool wait_for_failover) {
  auto cluster = StartReplicated(2);
  ASSERT_NE(cluster, nullptr);
  // First in the catalog, so first in each snapshot: while its 40 MiB
  // shards are copied and sent, pushes go on, and the shards copied after
  // it hold updates the rejoiner's stream carries again (which it must
  // skip for them).
  auto setup = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(setup.ok());
  ASSERT_EQ((*setup)->CreateVariables({Spec("big", EMBEDDING, {1 << 20, 16}, 3,
                                            OptimizerSpec::ADAGRAD)}),
            absl::OkStatus());
  std::atomic<int> failures{0};
  std::atomic<bool> stop{false};
  PushTimes push_times;
  std::thread training(
      [&] { Train(*cluster, 3, 0, &failures, 7, &stop, &push_times); });
  absl::Cleanup join_training = [&] {
    stop = true;
    if (training.joinable()) training.join();
  };
  absl::SleepFor(absl::Seconds(2));
  cluster->Kill(1, SIGKILL);
  const absl::Time killed = absl::Now();
  while (wait_for_failover &&
         FailedAccordingTo(*cluster, 2) != std::vector<int>{1} &&
         absl::Now() - killed < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  if (wait_for_failover) {
    ASSERT_EQ(FailedAccordingTo(*cluster, 2), std::vector<int>{1});
  }
  ASSERT_EQ(cluster->Restart(1), absl::OkStatus());
  const absl::Time restarted = absl::Now();
  while (!absl::StrContains(LogOf(*cluster, 1), "rejoined as a backup") &&
         absl::Now() - restarted < absl::Seconds(60)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  // (The handback starts right after: the pushes it holds up end after
  // this and started at most a push before it.)
  const absl::Time rejoined_at = absl::Now() - absl::Milliseconds(5);
  const std::string rejoined = LogOf(*cluster, 1);
  ASSERT_TRUE(absl::StrContains(rejoined, "rejoined as a backup"))
      << Tail(rejoined);
  std::printf("PS 1 restarted; rejoined after %lld ms\n",
              static_cast<long long>(
                  absl::ToInt64Milliseconds(absl::Now() - restarted)));
  std::smatch line;
  if (std::regex_search(rejoined, line,
                        std::regex("rejoined as a backup: [^\n]*"))) {
    std::printf("PS 1 %s\n", line.str().c_str());
  }
  // The handback: the slowest push that ended after the rejoin is its
  // pause as clients see it, beside the median push before the kill.
  while (!absl::StrContains(LogOf(*cluster, 1), "shard(s) again") &&
         absl::Now() - restarted < absl::Seconds(90)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const std::string handed_back = LogOf(*cluster, 1);
  ASSERT_TRUE(absl::StrContains(handed_back, "shard(s) again"))
      << Tail(handed_back);
  if (std::regex_search(handed_back, line,
                        std::regex("serves its [^\n]*again[^\n]*"))) {
    std::printf("PS 1 %s\n", line.str().c_str());
  }
  absl::SleepFor(absl::Seconds(2));  // pushes go on to PS 1 again
  const std::string serving_log = LogOf(*cluster, 2);
  if (std::regex_search(serving_log, line, std::regex("handed [^\n]*"))) {
    std::printf("PS 2 %s\n", line.str().c_str());
  }
  const auto [slowest, median] = push_times.SlowestAfterAndMedianBefore(
      rejoined_at, absl::Milliseconds(100));
  std::printf(
      "handback pause: slowest push %.1f ms (of those started from 100 ms "
      "before the rejoin on); median push before it %.1f ms\n",
      absl::ToDoubleMilliseconds(slowest), absl::ToDoubleMilliseconds(median));
  // The pause itself: pushes in flight while PS 2 did not serve PS 1's
  // shards or held their refusals (from its demote, "unserved here for
  // D" before its "handed" line, to its "settled" line), beside the
  // slowest push of the 1.5 s before the kill (the same clients, no
  // failover, no rejoin).
  const auto handed =
      LoggedAt(serving_log, "PS 2 handed [^\n]*unserved here for [^ ]+");
  // Settled by PS 1's first call, not by the cap on holding refusals
  // (the refusals held wait on no gRPC thread, so that call finds one).
  // Under ASan PS 1 may take longer than the 100 ms it is waited for: the
  // refusals are then let go at the cap ("settled late"), and the bounds
  // on that time below are checked in the optimized build only.
#if defined(PSRT_ADDRESS_SANITIZER)
  constexpr bool kTimed = false;
  const auto settled = LoggedAt(serving_log, "handback to PS 1 settled");
#else
  constexpr bool kTimed = true;
  const auto settled = LoggedAt(serving_log, "handback to PS 1 settled: ");
#endif
  ASSERT_TRUE(handed.has_value() && settled.has_value()) << Tail(serving_log);
  std::smatch unserved;
  absl::Duration demoted_for;
  ASSERT_TRUE(std::regex_search(handed->second, unserved,
                                std::regex("unserved here for ([^ ]+)$")) &&
              absl::ParseDuration(unserved[1].str(), &demoted_for))
      << handed->second;
  // Of the pushes started from 100 ms before the rejoin on: one begun
  // while PS 1 was down may still be in its retry backoff (seconds) when
  // a quick rejoin hands back, and measures the failover, not this.
  const auto [across, in_flight] =
      push_times.SlowestAcross(handed->first - demoted_for, settled->first,
                               rejoined_at - absl::Milliseconds(100));
  const absl::Duration usual =
      push_times.SlowestWithin(killed - absl::Milliseconds(1500), killed);
  std::printf(
      "handback window %.2f ms (demote to settle): slowest of the %d pushes "
      "in flight across it %.1f ms; slowest push of the 1.5 s before the "
      "kill %.1f ms\n",
      absl::ToDoubleMilliseconds(settled->first - handed->first + demoted_for),
      in_flight, absl::ToDoubleMilliseconds(across),
      absl::ToDoubleMilliseconds(usual));
  // The pause a client sees is bounded: refusals are held at most 500 ms
  // (kMaxHandbackHold, shard_transfer.cc) while the handback settles,
  // so the window and the slowest push across it stay within that of the
  // usual slowest push (measured: 2.6-15.4 ms, and 19.3 against 13.8 ms).
  if (kTimed) {
    EXPECT_LT(settled->first - handed->first + demoted_for,
              absl::Milliseconds(500));
    EXPECT_LT(across, usual + absl::Milliseconds(500))
        << in_flight << " pushes in flight across the handback";
  }
  stop = true;
  training.join();
  EXPECT_EQ(failures.load(), 0);
  // Every shard of the three variables: 2 copies, the same version and
  // digest. PS 1's own shards are served by PS 1 again, backed up by PS 2.
  const std::string report = PsctlOnceInSync(*cluster, 12);
  EXPECT_EQ(CountOf(report, "in sync"), 12) << report;
  EXPECT_TRUE(std::regex_search(
      report, std::regex(R"(dense/1 +1 +1 +.*2 backup .*in sync)")))
      << report;
  EXPECT_EQ(CountOf(report,
                    "failovers it knows of: none; handed back "
                    "since: 1 (term 2)"),
            3)
      << report;
  std::printf("%s", report.c_str());
  // Every PS counts the failover and the handback, and none failed over now.
  for (int ps = 0; ps < 3; ++ps) {
    auto metrics = FetchMetrics(cluster->metrics_port(ps));
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    EXPECT_TRUE(absl::StrContains(*metrics, "\npsrt_failovers_total 1\n"))
        << *metrics;
    EXPECT_TRUE(absl::StrContains(*metrics, "\npsrt_handbacks_total 1\n"))
        << *metrics;
    EXPECT_TRUE(absl::StrContains(*metrics, "\npsrt_failed_over_ps 0\n"))
        << *metrics;
  }
  // Failed over (term 1), then handed back (2), as every PS knows.
  for (int ps = 0; ps < 3; ++ps) {
    EXPECT_EQ(TermAccordingTo(*cluster, ps, 1), 2) << "PS " << ps;
    EXPECT_EQ(FailedAccordingTo(*cluster, ps), std::vector<int>{})
        << "PS " << ps;
  }
}

TEST(ReplicationTest, ARestartedPsRejoinsAsABackupWhilePushesContinue) {
  KillRestartAndRejoin(/*wait_for_failover=*/true);
}

TEST(ReplicationTest, APsRestartedBeforeItsFailoverIsReplacedAndRejoins) {
  KillRestartAndRejoin(/*wait_for_failover=*/false);
}

// Two PS of three killed at once with R=2 (PS 0 and PS 1). PS 0's shards
// had their copies on PS 0 and PS 1: both gone, so they come back from the
// checkpoint, and PS 0's log says so. PS 1's shards had a live copy on PS
// 2, which takes them over with every acknowledged push (bit for bit the
// values before the kill). PS 2's own shards never stopped. Both restarted
// PS then rejoin as backups -- PS 0 of PS 2's shards, whose stream it
// missed -- and every shard is on 2 copies again.
TEST(ReplicationTest, TwoOfThreeKilledLoseOnlyTheShardsWithNoLiveCopy) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  auto cluster =
      StartReplicated(2, {absl::StrCat("--checkpoint_uri=", tmp ? tmp : "/tmp",
                                       "/two_of_three_ckpt_", getpid())});
  ASSERT_NE(cluster, nullptr);
  auto client = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  ASSERT_EQ((*client)->CreateVariables(Model()), absl::OkStatus());
  std::atomic<int> failures{0};
  Train(*cluster, 3, 20, &failures, 11);
  ASSERT_TRUE((*client)->Checkpoint().ok());
  const auto at_checkpoint = Copies(client->get());
  Train(*cluster, 3, 20, &failures, 12);
  ASSERT_EQ(failures.load(), 0);
  const auto at_kill = Copies(client->get());
  // Where each shard was served, and its primary's digest then.
  absl::flat_hash_map<std::string, int> placed;
  auto primary_digest = [](const std::vector<Copy>& copies) {
    for (const Copy& c : copies) {
      if (!c.backup) return c.digest;
    }
    return uint64_t{0};
  };
  for (const auto& [name, copies] : at_kill) {
    ASSERT_EQ(copies.size(), 2u) << name;
    for (const Copy& c : copies) {
      if (!c.backup) placed[name] = c.ps;
    }
    // Every shard moved since the checkpoint.
    ASSERT_NE(primary_digest(copies), primary_digest(at_checkpoint.at(name)))
        << name;
  }
  client->reset();
  cluster->Kill(0, SIGKILL);
  cluster->Kill(1, SIGKILL);
  ASSERT_EQ(cluster->Restart(0, {"--restore=auto"}), absl::OkStatus());
  ASSERT_EQ(cluster->Restart(1, {"--restore=auto"}), absl::OkStatus());
  const absl::Time restarted = absl::Now();
  // A worker's client creates the catalog again (PS 0 held it); each
  // variable is filled from the checkpoint as it is created.
  client = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  absl::Status created;
  do {
    created = (*client)->CreateVariables(Model());
  } while (!created.ok() && absl::Now() - restarted < absl::Seconds(60) &&
           (absl::SleepFor(absl::Milliseconds(200)), true));
  ASSERT_EQ(created, absl::OkStatus());
  std::vector<int> failed;
  while ((failed = FailedAccordingTo(*cluster, 2)) != std::vector<int>{1} &&
         absl::Now() - restarted < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(failed, std::vector<int>{1});
  // Before any push: each shard served as the kill or the checkpoint left
  // it, by the PS that serves it now.
  const auto after = Copies(client->get());
  int from_checkpoint = 0, kept = 0;
  for (const auto& [name, copies] : after) {
    const int was = placed.at(name);
    bool served = false;
    for (const Copy& c : copies) {
      if (c.backup) continue;
      served = true;
      if (was == 0) {
        EXPECT_EQ(c.ps, 0) << name;
        EXPECT_EQ(c.digest, primary_digest(at_checkpoint.at(name))) << name;
        from_checkpoint += c.digest == primary_digest(at_checkpoint.at(name));
      } else {
        EXPECT_EQ(c.ps, 2) << name << " (PS 1's shards move to PS 2)";
        EXPECT_EQ(c.digest, primary_digest(at_kill.at(name))) << name;
        kept += c.digest == primary_digest(at_kill.at(name));
      }
    }
    EXPECT_TRUE(served) << name << " is served by no PS";
  }
  EXPECT_EQ(from_checkpoint, 3);  // dense/0, emb/0, hash/0
  EXPECT_EQ(kept, 6);
  // Training goes on; PS 2's next update tells PS 0 it missed PS 2's
  // stream, and it rejoins; PS 1 rejoins as the backup of PS 0's shards
  // and of its own (now PS 2's).
  std::atomic<bool> stop{false};
  std::thread training([&] { Train(*cluster, 3, 0, &failures, 13, &stop); });
  absl::Cleanup join_training = [&] {
    stop = true;
    if (training.joinable()) training.join();
  };
  auto rejoined = [&](int ps) {
    return absl::StrContains(LogOf(*cluster, ps), "rejoined as a backup");
  };
  while (!(rejoined(0) && rejoined(1)) &&
         absl::Now() - restarted < absl::Seconds(90)) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(rejoined(0)) << Tail(LogOf(*cluster, 0));
  EXPECT_TRUE(rejoined(1)) << Tail(LogOf(*cluster, 1));
  absl::SleepFor(absl::Seconds(2));
  stop = true;
  training.join();
  EXPECT_EQ(failures.load(), 0);
  // The log says which shards came from the checkpoint.
  const std::string log0 = LogOf(*cluster, 0);
  EXPECT_TRUE(absl::StrContains(log0, "PS 0 serves its shards as restored"))
      << Tail(log0);
  EXPECT_FALSE(absl::StrContains(LogOf(*cluster, 1), "serves its shards as"));
  // PS 1 took its shards back from PS 2 once it had rejoined.
  EXPECT_TRUE(absl::StrContains(LogOf(*cluster, 1), "shard(s) again"))
      << Tail(LogOf(*cluster, 1));
  EXPECT_TRUE(
      absl::StrContains(LogOf(*cluster, 2), "took over 3 shard(s) of PS 1"));
  std::printf("both rejoined %lld ms after the restarts\n",
              static_cast<long long>(
                  absl::ToInt64Milliseconds(absl::Now() - restarted)));
  const std::string report = PsctlOnceInSync(*cluster, 9);
  EXPECT_EQ(CountOf(report, "in sync"), 9) << report;
  std::printf("%s", report.c_str());
}

// SYNC through a failover, deterministically: worker 0's push of step 0 is
// held by every PS (worker 1 has not pushed yet) and acknowledged; PS 1 is
// killed; worker 1's push of step 0 for PS 1's shard goes to PS 2, which
// took that shard and its step barrier over. The barrier there must still
// hold worker 0's push -- PS 1 acknowledged it only once PS 2 had it -- so
// step 0 applies the mean of both on every shard and worker 0's pull of
// step 1 returns it exactly.
TEST(ReplicationTest, ASyncStepHeldByAKilledPrimaryCompletesOnItsBackup) {
  auto cluster = StartReplicated(2);
  ASSERT_NE(cluster, nullptr);
  VariableSpec spec = Spec("w", DENSE, {999, 4}, 3, OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  std::vector<std::unique_ptr<Client>> workers;
  for (int w = 0; w < 2; ++w) {
    ClientOptions options = cluster->MakeClientOptions();
    options.worker_index = w;
    auto client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_EQ((*client)->CreateVariables({spec}), absl::OkStatus());
    workers.push_back(std::move(*client));
  }
  StepOptions step;
  step.consistency.set_mode(Consistency::SYNC);
  step.consistency.set_workers(2);
  step.consistency.set_timeout_seconds(20);
  std::vector<float> values(999 * 4);
  ASSERT_EQ(workers[0]->Pull({PullOp::Dense("w", values.data())}, step),
            absl::OkStatus());
  // Small integers: their mean is exact in float.
  std::vector<float> grad0(values.size()), grad1(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    grad0[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
    grad1[i] = static_cast<float>(static_cast<int>(i % 5) * 2 - 4);
  }
  ASSERT_EQ(workers[0]->Push({PushOp::Dense("w", grad0.data())}, step),
            absl::OkStatus());
  cluster->Kill(1, SIGKILL);
  const absl::Time killed = absl::Now();
  while (FailedAccordingTo(*cluster, 2) != std::vector<int>{1} &&
         absl::Now() - killed < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(FailedAccordingTo(*cluster, 2), std::vector<int>{1});
  ASSERT_EQ(workers[1]->Push({PushOp::Dense("w", grad1.data())}, step),
            absl::OkStatus());
  step.step = 1;
  ASSERT_EQ(workers[0]->Pull({PullOp::Dense("w", values.data())}, step),
            absl::OkStatus());
  int wrong = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    wrong += values[i] != -(grad0[i] + grad1[i]) / 2;
  }
  EXPECT_EQ(wrong, 0) << "of " << values.size() << " floats";
  const std::string log2 = LogOf(*cluster, 2);
  EXPECT_TRUE(absl::StrContains(
      log2, "sync barrier of PS 1's shards resumed here at step 0 with 1"))
      << Tail(log2);
}

}  // namespace
}  // namespace psrt
