// Feature admission (AdmissionSpec) and eviction (EvictionSpec) on real
// ps_server processes: ids get rows on their min_count-th push, idle rows
// are dropped by the servers' sweep, the counts are reported by
// ListVariables, /metrics, /statusz and psctl, and DeepFM trained with
// admission on planted data keeps its held-out AUC with fewer rows.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "clients/cpp/client.h"
#include "gtest/gtest.h"
#include "partitioner/cluster_spec.h"
#include "ps_server/shards/initializer.h"
#include "tests/local_cluster.h"
#include "tests/planted_data.h"
#include "tests/process_rss.h"
#include "tests/worker_output.h"
#include "tools/psctl/replicas_report.h"

namespace psrt {
namespace {

VariableSpec AdmissionSpecFor(const std::string& name, int min_count,
                              int64_t ttl_steps = 0) {
  VariableSpec s;
  s.set_name(name);
  s.set_kind(HASH_EMBEDDING);
  s.add_shape(0);
  s.add_shape(4);
  s.mutable_partition()->set_num_shards(2);
  s.mutable_initializer()->set_kind(InitializerSpec::NORMAL);
  s.mutable_initializer()->set_stddev(0.5f);
  s.mutable_initializer()->set_seed(5);
  s.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  s.mutable_optimizer()->set_learning_rate(1.0f);
  if (min_count > 0) s.mutable_admission()->set_min_count(min_count);
  if (ttl_steps > 0) s.mutable_eviction()->set_ttl_steps(ttl_steps);
  return s;
}

struct RowTotals {
  int64_t rows = 0, admitted = 0, unadmitted = 0, evicted = 0;
};

// Over the shards the PS serve of `variable` ("": every hash embedding).
RowTotals Totals(Client* client, const std::string& variable) {
  RowTotals t;
  auto lists = client->ListVariables();
  EXPECT_TRUE(lists.ok()) << lists.status();
  if (!lists.ok()) return t;
  for (const auto& ps : *lists) {
    for (const auto& v : ps.variables()) {
      if (variable.empty() ? v.spec().kind() != HASH_EMBEDDING
                           : v.spec().name() != variable) {
        continue;
      }
      for (const auto& shard : v.shards()) {
        if (shard.backup()) continue;
        t.rows += shard.num_rows();
        t.admitted += shard.admitted_rows();
        t.unadmitted += shard.unadmitted_gradients();
        t.evicted += shard.evicted_rows();
      }
    }
  }
  return t;
}

TEST(AdmissionTest, IdsGetRowsOnTheirThirdPushAndEveryReportSaysSo) {
  LocalCluster::Options o;
  o.num_ps = 2;
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  const VariableSpec spec = AdmissionSpecFor("ids", 3);
  ASSERT_EQ((*client)->CreateVariables({spec}), absl::OkStatus());
  Initializer init(spec.initializer());

  std::vector<int64_t> ids(1000);
  std::iota(ids.begin(), ids.end(), int64_t{77} << 32);
  std::vector<float> ones(ids.size() * 4, 1.0f);
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE((*client)->PushRows("ids", ids, ones.data()).ok());
  }
  RowTotals t = Totals(client->get(), "ids");
  EXPECT_EQ(t.rows, 0);
  EXPECT_EQ(t.unadmitted, 2000);
  // The first 500 a third time (gradient 0.5): admitted, and only that
  // gradient applied.
  const std::vector<int64_t> head(ids.begin(), ids.begin() + 500);
  std::vector<float> halves(head.size() * 4, 0.5f);
  ASSERT_TRUE((*client)->PushRows("ids", head, halves.data()).ok());
  std::vector<float> values(ids.size() * 4);
  ASSERT_TRUE((*client)->PullRows("ids", ids, values.data()).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    const float expected = init.Value(ids[i], 3) - (i < 500 ? 0.5f : 0.0f);
    ASSERT_FLOAT_EQ(values[i * 4 + 3], expected) << i;
  }
  t = Totals(client->get(), "ids");
  EXPECT_EQ(t.rows, 500);
  EXPECT_EQ(t.admitted, 500);
  EXPECT_EQ(t.unadmitted, 2000);

  // /metrics on each PS: the two PS's series add up to the same counts.
  double admitted = 0, unadmitted = 0, rows = 0;
  for (int ps = 0; ps < 2; ++ps) {
    auto text = FetchMetrics((*cluster)->metrics_port(ps));
    ASSERT_TRUE(text.ok()) << text.status();
    admitted +=
        MetricValue(*text, "psrt_admitted_rows_total{variable=\"ids\"}");
    unadmitted +=
        MetricValue(*text, "psrt_unadmitted_gradients_total{variable=\"ids\"}");
    rows += MetricValue(*text, "psrt_variable_rows{variable=\"ids\"}");
  }
  EXPECT_EQ(admitted, 500);
  EXPECT_EQ(unadmitted, 2000);
  EXPECT_EQ(rows, 500);
  // The status page of each PS: its shards' counts, adding up the same.
  int64_t page_admitted = 0;
  for (int ps = 0; ps < 2; ++ps) {
    auto page = FetchMetrics((*cluster)->metrics_port(ps), "/statusz");
    ASSERT_TRUE(page.ok()) << page.status();
    const std::string cell = "id=\"var-0-admitted\">";
    const size_t at = page->find(cell);
    ASSERT_NE(at, std::string::npos) << *page;
    page_admitted += std::atoll(page->c_str() + at + cell.size());
  }
  EXPECT_EQ(page_admitted, 500);

  // psctl variables: the spec says admission, each shard its counts.
  auto run = RunPrograms(
      "tools/psctl/psctl",
      {absl::StrCat("--cluster=", ClusterSpecToJson((*cluster)->spec())),
       "variables"},
      {""}, absl::Seconds(60))[0];
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("admission(min_count=3)"), std::string::npos)
      << run.output;
  int64_t listed_admitted = 0;
  for (size_t at = run.output.find("admitted "); at != std::string::npos;
       at = run.output.find("admitted ", at + 1)) {
    listed_admitted += std::atoll(run.output.c_str() + at + 9);
  }
  EXPECT_EQ(listed_admitted, 500) << run.output;
}

// Real ps_server processes with --replicas=2 sweeping every 100 ms: a
// table with admission and TTL eviction is served, the sweeps evict on
// each primary and its backup follows, and psctl's replicas check finds
// every copy equal (replicated_push_test proves the protocol in process;
// this, the flags and the report of the shipped binaries).
TEST(AdmissionTest, WithReplicasAdmissionAndEvictionKeepTheCopiesEqual) {
  LocalCluster::Options o;
  o.num_ps = 2;
  o.one_host_per_ps = true;
  o.extra_flags = {"--replicas=2", "--eviction_interval_secs=0.1"};
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_EQ(
      (*client)->CreateVariables({AdmissionSpecFor("ids", 2, /*ttl_steps=*/5)}),
      absl::OkStatus());
  // 1,000 ids pushed twice (admitted) at steps 0 and 1, then 10 others
  // at steps 2..20: the first 1,000 go idle and are evicted.
  std::vector<int64_t> idle(1000), busy(10);
  std::iota(idle.begin(), idle.end(), int64_t{7} << 40);
  std::iota(busy.begin(), busy.end(), 1);
  auto push = [&](const std::vector<int64_t>& ids, int64_t step) {
    std::vector<float> grads(ids.size() * 4, 0.5f);
    StepOptions at;
    at.step = step;
    return (*client)->Push({PushOp::Rows("ids", ids, grads.data())}, at);
  };
  ASSERT_EQ(push(idle, 0), absl::OkStatus());
  ASSERT_EQ(push(idle, 1), absl::OkStatus());
  for (int64_t step = 2; step <= 20; ++step) {
    ASSERT_EQ(push(busy, step), absl::OkStatus());
    ASSERT_EQ(push(busy, step), absl::OkStatus());
  }
  RowTotals t;
  int report = 1;
  std::string said;
  for (absl::Time end = absl::Now() + absl::Seconds(30); absl::Now() < end;
       absl::SleepFor(absl::Milliseconds(100))) {
    t = Totals(client->get(), "ids");
    std::ostringstream out;
    report = ReplicasReport((*cluster)->MakeClientOptions(), out);
    said = out.str();
    if (t.rows == 10 && report == 0) break;
  }
  EXPECT_EQ(t.rows, 10);
  EXPECT_EQ(t.admitted, 1010);
  EXPECT_EQ(t.evicted, 1000);
  EXPECT_EQ(report, 0) << said;
}

// 2 PS that sweep for eviction every 100 ms, and a client of them (both
// null, the test failed, if either cannot start).
struct SweptCluster {
  std::unique_ptr<LocalCluster> cluster;
  std::unique_ptr<Client> client;
};
SweptCluster StartSweptCluster() {
  LocalCluster::Options o;
  o.num_ps = 2;
  o.extra_flags = {"--eviction_interval_secs=0.1"};
  auto cluster = LocalCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return {};
  return {std::move(*cluster), std::move(*client)};
}

TEST(EvictionTest, TheServersSweepDropsIdleRowsAndReturningIdsStartFresh) {
  SweptCluster swept = StartSweptCluster();
  ASSERT_NE(swept.client, nullptr);
  LocalCluster* cluster = swept.cluster.get();
  Client* client = swept.client.get();
  const VariableSpec spec = AdmissionSpecFor("ids", 0, /*ttl_steps=*/10);
  ASSERT_EQ(client->CreateVariables({spec}), absl::OkStatus());
  Initializer init(spec.initializer());
  auto push = [&](const std::vector<int64_t>& ids, float g, int64_t step) {
    std::vector<float> grads(ids.size() * 4, g);
    StepOptions at;
    at.step = step;
    return client->Push({PushOp::Rows("ids", ids, grads.data())}, at);
  };
  // 1,000 ids pushed at step 0, then 10 others at steps 1..20: the PS's
  // global step reaches 21 and the first 1,000 are idle for more than 10.
  std::vector<int64_t> idle(1000), busy(10);
  std::iota(idle.begin(), idle.end(), int64_t{5} << 40);
  std::iota(busy.begin(), busy.end(), 1);
  ASSERT_TRUE(push(idle, 1.0f, 0).ok());
  for (int64_t step = 1; step <= 20; ++step) {
    ASSERT_TRUE(push(busy, 0.5f, step).ok());
  }
  RowTotals t;
  for (absl::Time end = absl::Now() + absl::Seconds(30); absl::Now() < end;
       absl::SleepFor(absl::Milliseconds(50))) {
    t = Totals(client, "ids");
    if (t.rows == 10) break;
  }
  EXPECT_EQ(t.rows, 10);
  EXPECT_EQ(t.evicted, 1000);
  std::vector<float> values(idle.size() * 4);
  ASSERT_TRUE(client->PullRows("ids", idle, values.data()).ok());
  for (size_t i = 0; i < idle.size(); ++i) {
    ASSERT_EQ(values[i * 4 + 2], init.Value(idle[i], 2)) << i;
  }
  ASSERT_TRUE(client->PullRows("ids", busy, values.data()).ok());
  for (size_t i = 0; i < busy.size(); ++i) {
    ASSERT_FLOAT_EQ(values[i * 4 + 2], init.Value(busy[i], 2) - 10.0f) << i;
  }
  double evicted = 0;
  for (int ps = 0; ps < 2; ++ps) {
    auto text = FetchMetrics(cluster->metrics_port(ps));
    ASSERT_TRUE(text.ok()) << text.status();
    evicted += MetricValue(*text, "psrt_evicted_rows_total{variable=\"ids\"}");
  }
  EXPECT_EQ(evicted, 1000);
  // An evicted id pushed again gets a fresh row: initial value - g.
  ASSERT_TRUE(push({idle[0]}, 0.25f, 21).ok());
  ASSERT_TRUE(client->PullRows("ids", {idle[0]}, values.data()).ok());
  EXPECT_FLOAT_EQ(values[2], init.Value(idle[0], 2) - 0.25f);
}

// max_rows 2,000 over 2 PS (1,000 rows per shard): 20,000 fresh ids, 200
// a step, with 100 hot ids pushed every step. No push fails, the servers
// never hold more than the budget, the hot rows keep every update, and the
// reports count every row that went.
TEST(EvictionTest, MaxRowsKeepsTheTableWithinBudgetAndTheHotRows) {
  SweptCluster swept = StartSweptCluster();
  ASSERT_NE(swept.client, nullptr);
  LocalCluster* cluster = swept.cluster.get();
  Client* client = swept.client.get();
  VariableSpec spec = AdmissionSpecFor("ids", 0);
  spec.mutable_eviction()->set_max_rows(2000);
  ASSERT_EQ(client->CreateVariables({spec}), absl::OkStatus());
  Initializer init(spec.initializer());
  std::vector<int64_t> hot(100);
  std::iota(hot.begin(), hot.end(), int64_t{7} << 40);
  int64_t most_rows = 0;
  for (int64_t step = 0; step < 100; ++step) {
    std::vector<int64_t> ids(200);
    std::iota(ids.begin(), ids.end(), step * 200);
    ids.insert(ids.end(), hot.begin(), hot.end());
    std::vector<float> grads(ids.size() * 4, 0.25f);
    StepOptions at;
    at.step = step;
    ASSERT_EQ(client->Push({PushOp::Rows("ids", ids, grads.data())}, at),
              absl::OkStatus())
        << "step " << step;
    if (step % 10 == 9) {
      most_rows = std::max(most_rows, Totals(client, "ids").rows);
    }
  }
  std::printf("max_rows 2000: most rows held %lld\n",
              static_cast<long long>(most_rows));
  EXPECT_LE(most_rows, 2000);
  const RowTotals t = Totals(client, "ids");
  EXPECT_LE(t.rows, 2000);
  EXPECT_GE(t.rows, 1000);  // the sweep leaves 90% of each share, or more
  EXPECT_EQ(t.evicted, 20000 + 100 - t.rows);
  std::vector<float> values(hot.size() * 4);
  ASSERT_TRUE(client->PullRows("ids", hot, values.data()).ok());
  for (size_t i = 0; i < hot.size(); ++i) {
    ASSERT_FLOAT_EQ(values[i * 4 + 1], init.Value(hot[i], 1) - 25.0f) << i;
  }
  // The first step's ids went: pulls read their initial values.
  std::vector<int64_t> first(200);
  std::iota(first.begin(), first.end(), 0);
  values.resize(first.size() * 4);
  ASSERT_TRUE(client->PullRows("ids", first, values.data()).ok());
  for (size_t i = 0; i < first.size(); ++i) {
    ASSERT_EQ(values[i * 4], init.Value(first[i], 0)) << i;
  }
  // /metrics counts what the shards report: read between two reports that
  // agree (the servers' sweep may evict more meanwhile).
  double evicted = -1;
  int64_t reported = -2;
  for (int tries = 0; tries < 50 && evicted != reported; ++tries) {
    const int64_t before = Totals(client, "ids").evicted;
    evicted = 0;
    for (int ps = 0; ps < 2; ++ps) {
      auto text = FetchMetrics(cluster->metrics_port(ps));
      ASSERT_TRUE(text.ok()) << text.status();
      evicted +=
          MetricValue(*text, "psrt_evicted_rows_total{variable=\"ids\"}");
    }
    reported = Totals(client, "ids").evicted;
    if (reported != before) reported = -2;  // the sweep ran meanwhile
  }
  EXPECT_EQ(evicted, static_cast<double>(reported));
  EXPECT_GE(reported, t.evicted);
}

// --memory_budget_mb=256 on one PS, a table with no eviction of its own
// (dim 16, Adagrad: 192 bytes a row with its index), 3.3M fresh ids 30,000
// a push with 1,000 hot ids in every push: no push fails, the hash rows
// stop growing at the budget, the hot rows keep every update, and the
// PS's resident memory grows by at most the budget + 15% (the pushes'
// own buffers included).
TEST(EvictionTest, AMemoryBudgetEvictsInsteadOfRefusing) {
  constexpr int64_t kBudgetMb = 256;
  LocalCluster::Options o;
  o.num_ps = 1;
  o.extra_flags = {absl::StrCat("--memory_budget_mb=", kBudgetMb)};
  auto cluster = LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  VariableSpec spec = AdmissionSpecFor("ids", 0);
  spec.set_shape(1, 16);
  spec.mutable_partition()->set_num_shards(1);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  spec.mutable_optimizer()->set_learning_rate(0.5f);
  ASSERT_EQ((*client)->CreateVariables({spec}), absl::OkStatus());
  const int64_t rss_before = RssBytes((*cluster)->pid(0));
  ASSERT_GT(rss_before, 0);
  std::vector<int64_t> hot(1000);
  std::iota(hot.begin(), hot.end(), int64_t{9} << 40);
  int64_t rss_most = rss_before;
  constexpr int kPushes = 110, kFresh = 30000;
  for (int64_t step = 0; step < kPushes; ++step) {
    std::vector<int64_t> ids(kFresh);
    std::iota(ids.begin(), ids.end(), step * kFresh);
    ids.insert(ids.end(), hot.begin(), hot.end());
    std::vector<float> grads(ids.size() * 16, 0.25f);
    StepOptions at;
    at.step = step;
    ASSERT_EQ((*client)->Push({PushOp::Rows("ids", ids, grads.data())}, at),
              absl::OkStatus())
        << "push " << step;
    rss_most = std::max(rss_most, RssBytes((*cluster)->pid(0)));
  }
  const RowTotals t = Totals(client->get(), "ids");
  std::printf(
      "--memory_budget_mb=%lld: %lld rows held, %lld evicted; PS RSS grew "
      "by at most %.1f MiB\n",
      static_cast<long long>(kBudgetMb), static_cast<long long>(t.rows),
      static_cast<long long>(t.evicted),
      static_cast<double>(rss_most - rss_before) / (1 << 20));
  EXPECT_EQ(t.rows + t.evicted, kPushes * kFresh + 1000);
  EXPECT_GT(t.evicted, 0);
  // 192 bytes a row: the budget holds 1,398,101 rows at most.
  EXPECT_LE(t.rows, (kBudgetMb << 20) / 192);
  EXPECT_GE(t.rows, (kBudgetMb << 20) / 192 * 9 / 10);
  EXPECT_LE(rss_most - rss_before, static_cast<int64_t>(kBudgetMb * 1.15)
                                       << 20);
  // Hot rows: 40 Adagrad updates of 0.25 each, as the optimizer computes
  // them (accumulator 0.1 + k/16, step 0.5 * 0.25 / sqrt(acc)).
  Initializer init(spec.initializer());
  std::vector<float> values(hot.size() * 16);
  ASSERT_TRUE((*client)->PullRows("ids", hot, values.data()).ok());
  float moved = 0, acc = 0.1f;
  for (int k = 0; k < kPushes; ++k) {
    acc += 0.0625f;
    moved += 0.5f * 0.25f / std::sqrt(acc);
  }
  for (size_t i = 0; i < hot.size(); ++i) {
    ASSERT_NEAR(values[i * 16 + 3], init.Value(hot[i], 3) - moved, 1e-4) << i;
  }
  // The first push's fresh ids went: their initial values again.
  values.resize(1000 * 16);
  std::vector<int64_t> first(1000);
  std::iota(first.begin(), first.end(), 0);
  ASSERT_TRUE((*client)->PullRows("ids", first, values.data()).ok());
  for (size_t i = 0; i < first.size(); ++i) {
    ASSERT_EQ(values[i * 16], init.Value(first[i], 0)) << i;
  }
}

// --memory_budget_mb=32 on one PS, full, while a checkpoint throttled to
// 4 MB/s reads the shard for seconds: no row may move then, so none is
// evicted, yet every push of fresh ids succeeds (they were refused
// RESOURCE_EXHAUSTED once the shard's spare room was gone: a checkpoint
// failed training). The fresh ids that found no room are counted as
// unadmitted and get rows after the checkpoint; the checkpoint completes
// and a PS killed and restarted restores it exactly.
TEST(EvictionTest, PushesAtTheMemoryBudgetGoOnWhileACheckpointRuns) {
  constexpr int64_t kBudgetMb = 32, kDim = 16;
  LocalCluster::Options o;
  o.num_ps = 1;
  const std::string checkpoints = FreshTestDir("budget_ckpt");
  o.extra_flags = {absl::StrCat("--memory_budget_mb=", kBudgetMb),
                   absl::StrCat("--checkpoint_uri=", checkpoints),
                   "--checkpoint_max_mb_per_sec=4", "--restore=auto",
                   "--checkpoint_on_shutdown=false"};
  auto started = LocalCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  auto connected = Client::Connect(cluster.MakeClientOptions());
  ASSERT_TRUE(connected.ok()) << connected.status();
  Client* client = connected->get();
  VariableSpec spec = AdmissionSpecFor("ids", 0);
  spec.set_shape(1, kDim);
  spec.mutable_partition()->set_num_shards(1);
  ASSERT_EQ(client->CreateVariables({spec}), absl::OkStatus());
  const Initializer init(spec.initializer());
  constexpr int kFresh = 10000;
  std::vector<int64_t> hot(1000);
  std::iota(hot.begin(), hot.end(), int64_t{5} << 40);
  int64_t step = 0;
  auto push = [&](bool with_hot) {
    std::vector<int64_t> ids(kFresh);
    std::iota(ids.begin(), ids.end(), step * kFresh);
    if (with_hot) ids.insert(ids.end(), hot.begin(), hot.end());
    std::vector<float> grads(ids.size() * kDim, 0.25f);
    StepOptions at;
    at.step = step++;
    return client->Push({PushOp::Rows("ids", ids, grads.data())}, at);
  };
  // SGD, 128 bytes a row: the budget holds at most 262,144 rows.
  constexpr int kFill = 30;
  for (int k = 0; k < kFill; ++k) {
    ASSERT_EQ(push(/*with_hot=*/true), absl::OkStatus()) << k;
  }
  ASSERT_GT(Totals(client, "ids").evicted, 0);

  std::atomic<bool> done{false};
  absl::StatusOr<CheckpointResponse> saved = absl::UnknownError("not run");
  std::thread checkpoint([&] {
    saved = client->Checkpoint();
    done = true;
  });
  int during = 0;
  absl::Status pushed;
  while (!done && pushed.ok() && during < 5000) {
    pushed = push(/*with_hot=*/false);
    ++during;
  }
  checkpoint.join();
  ASSERT_EQ(pushed, absl::OkStatus()) << "push " << during << " of the "
                                      << "pushes during the checkpoint";
  ASSERT_TRUE(saved.ok()) << saved.status();
  const RowTotals after = Totals(client, "ids");
  std::printf(
      "%d pushes of %d fresh ids during a %.1f s checkpoint of %lld "
      "bytes: %lld gradients without a row, %lld rows held\n",
      during, kFresh, saved->seconds(), static_cast<long long>(saved->bytes()),
      static_cast<long long>(after.unadmitted),
      static_cast<long long>(after.rows));
  // It ran past the shard's spare room (1% of its rows: one push's ids).
  EXPECT_GE(during, 3);
  EXPECT_GE(after.unadmitted, kFresh);
  EXPECT_LE(after.rows, (kBudgetMb << 20) / 128);

  // After it, fresh ids get rows again.
  ASSERT_EQ(push(/*with_hot=*/false), absl::OkStatus());
  std::vector<int64_t> fresh(kFresh);
  std::iota(fresh.begin(), fresh.end(), (step - 1) * kFresh);
  std::vector<float> values(fresh.size() * kDim);
  ASSERT_TRUE(client->PullRows("ids", fresh, values.data()).ok());
  for (size_t i = 0; i < fresh.size(); ++i) {
    ASSERT_FLOAT_EQ(values[i * kDim], init.Value(fresh[i], 0) - 0.25f) << i;
  }
  EXPECT_EQ(Totals(client, "ids").unadmitted, after.unadmitted);

  // The checkpoint restores: the hot rows as they were (not pushed since).
  cluster.Kill(0, SIGKILL);
  ASSERT_EQ(cluster.Restart(0), absl::OkStatus());
  ASSERT_EQ(client->CreateVariables({spec}), absl::OkStatus());
  values.resize(hot.size() * kDim);
  ASSERT_TRUE(client->PullRows("ids", hot, values.data()).ok());
  for (size_t i = 0; i < hot.size(); ++i) {
    ASSERT_FLOAT_EQ(values[i * kDim + 7], init.Value(hot[i], 7) - 0.25f * kFill)
        << i;
  }
  EXPECT_LE(Totals(client, "ids").rows, (kBudgetMb << 20) / 128);
}

TEST(EvictionTest, AMemoryBudgetWithALimitIsRefusedAtStart) {
  LocalCluster::Options o;
  o.num_ps = 1;
  o.extra_flags = {"--memory_budget_mb=64", "--memory_limit_bytes=1000000"};
  auto both = LocalCluster::Start(o);
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(absl::StrContains(both.status().message(),
                                "set --memory_budget_mb or "
                                "--memory_limit_bytes, not both"))
      << both.status();
}

// What a DeepFM run through 2 PS ended with: the first worker's held-out
// AUC, the hash rows over the PS, and the rows of the largest table.
struct DeepFmRun {
  double auc = 0;
  RowTotals rows;
  int64_t most_rows_per_table = 0;
};

// ps_worker --model=deepfm on `dir`'s planted data, `num_workers` workers,
// `flags` added.
DeepFmRun TrainDeepFm(const std::string& dir, int num_workers,
                      std::vector<std::string> flags) {
  DeepFmRun r;
  LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = num_workers;
  auto cluster = LocalCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return r;
  flags.insert(
      flags.begin(),
      {"--model=deepfm", absl::StrCat("--train_files=", dir, "/train-*"),
       absl::StrCat("--eval_files=", dir, "/test.tfrecords"),
       "--batch_size=1024", "--log_every_steps=200"});
  std::vector<int> workers(num_workers);
  std::iota(workers.begin(), workers.end(), 0);
  auto runs = (*cluster)->RunWorkers("ps_worker/ps_worker", flags, workers,
                                     absl::Minutes(10));
  for (const auto& run : runs) EXPECT_EQ(run.exit_code, 0) << run.output;
  if (runs.size() != workers.size()) return r;
  r.auc = LastMetric(runs[0].output, "eval_auc");
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return r;
  r.rows = Totals(client->get(), "");
  auto catalog = (*client)->ListVariables();
  EXPECT_TRUE(catalog.ok()) << catalog.status();
  if (!catalog.ok() || catalog->empty()) return r;
  for (const auto& v : (*catalog)[0].variables()) {
    if (v.spec().kind() != HASH_EMBEDDING) continue;
    r.most_rows_per_table = std::max(
        r.most_rows_per_table, Totals(client->get(), v.spec().name()).rows);
  }
  return r;
}

// DeepFM on the planted 1M set, 2 epochs, through 2 PS, with every id and
// with admission (min_count 3). One worker: two async workers move the AUC
// by about 0.01 from run to run, more than the bound.
TEST(AdmissionTest, DeepFmWithMinCount3KeepsItsAucWithFewerRows) {
  const std::string dir = kPlanted1mDir;  // made once, by the build
  const double planted_auc = ReadPlantedData(dir).planted_auc;
  ASSERT_GT(planted_auc, 0.75);

  auto train = [&](int min_count) {
    return TrainDeepFm(
        dir, 1,
        {"--epochs=2", absl::StrCat("--admission_min_count=", min_count)});
  };
  const DeepFmRun all = train(0);
  const DeepFmRun admitted = train(3);
  std::cout << "DeepFM held-out AUC: every id " << all.auc << " ("
            << all.rows.rows << " rows), min_count 3 " << admitted.auc << " ("
            << admitted.rows.rows << " rows, "
            << 100.0 * admitted.rows.rows / std::max<int64_t>(all.rows.rows, 1)
            << "%; " << admitted.rows.unadmitted
            << " gradient rows dropped); planted model " << planted_auc << "\n";
  EXPECT_GT(all.auc, planted_auc - 0.01);
  EXPECT_NEAR(admitted.auc, all.auc, 0.003);
  EXPECT_EQ(all.rows.unadmitted, 0);
  EXPECT_GT(admitted.rows.unadmitted, 0);
  EXPECT_LT(admitted.rows.rows, all.rows.rows / 2);  // measured: 32%
}

// A drifting id stream (ctr_datagen --drift_fraction: new ids keep
// arriving, popularity moves from old ids to new ones; the test set is the
// stream's last generation) trained by DeepFM in one pass, in stream order
// (--shuffle_files=false: the second file is the stream's second half),
// through 2 PS (one
// worker: two async workers move the AUC by 0.01 from run to run), once
// with unbounded tables, once with each table held to a tenth of the rows
// its unbounded run ended with (--eviction_max_rows), and once more with
// admission (min_count 3) too. Training never fails, the bounded tables
// stay within their budget, and the held-out AUC on recent data stays
// within 0.005 of the unbounded run's. (Measured in stream order: 0.7981
// unbounded, 0.7987 bounded, 0.7982 with admission; with the files'
// order shuffled, 0.7991 / 0.7994 / 0.7990. Which rows go is asserted in
// hash_embedding_rows_test: evicting in position order instead of by age
// still gave 0.7972 here, within the bound, but churned 35% more rows.
// At bench size the order decides: tools/bench/stream_budget_bench.py.)
TEST(EvictionTest, DeepFmOnADriftingStreamKeepsItsAucInATenthOfTheRows) {
  const std::string dir = FreshTestDir("drift_ctr");
  const PlantedData data = WritePlantedData(
      dir, 1000000, 100000, "--drift_fraction=0.02 --drift_examples=50000");
  ASSERT_GT(data.planted_auc, 0.7) << data.summary;
  auto train = [&](int64_t max_rows, int min_count) {
    return TrainDeepFm(dir, 1,
                       {"--epochs=1", "--shuffle_files=false",
                        absl::StrCat("--eviction_max_rows=", max_rows),
                        absl::StrCat("--admission_min_count=", min_count)});
  };
  const DeepFmRun unbounded = train(0, 0);
  ASSERT_GT(unbounded.most_rows_per_table, 0);
  const int64_t budget = unbounded.most_rows_per_table / 10;
  const DeepFmRun bounded = train(budget, 0);
  const DeepFmRun admitted = train(budget, 3);
  std::cout << "with admission_min_count 3: " << admitted.auc << " ("
            << admitted.rows.rows << " rows, " << admitted.rows.evicted
            << " evicted)\n";
  std::cout << "drifting stream (" << data.summary << "): DeepFM AUC on the "
            << "last generation: unbounded " << unbounded.auc << " ("
            << unbounded.rows.rows << " rows, largest table "
            << unbounded.most_rows_per_table << "); max_rows " << budget
            << " per table " << bounded.auc << " (" << bounded.rows.rows
            << " rows, largest table " << bounded.most_rows_per_table << ", "
            << bounded.rows.evicted << " evicted); planted model "
            << data.planted_auc << "\n";
  EXPECT_LE(bounded.most_rows_per_table, budget);
  EXPECT_GT(bounded.rows.evicted, 0);
  EXPECT_NEAR(bounded.auc, unbounded.auc, 0.005);
  // Admission on the same budget: the one-off tail ids take no rows, so far
  // fewer rows churn.
  EXPECT_LE(admitted.most_rows_per_table, budget);
  EXPECT_LT(admitted.rows.evicted, bounded.rows.evicted / 4);
  EXPECT_NEAR(admitted.auc, unbounded.auc, 0.005);
}

}  // namespace
}  // namespace psrt
