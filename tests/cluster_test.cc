// A 2-PS cluster of real ps_server processes driven by several concurrent
// clients: results equal to a reference computation.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <numeric>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "partitioner/test_variable_spec.h"
#include "partitioner/variable_spec.h"
#include "ps_server/optimizers/optimizer_reference.h"
#include "ps_server/shards/initializer.h"
#include "tests/local_cluster.h"
#include "tests/process_rss.h"

namespace psrt {
namespace {

VariableSpec Spec(const std::string& name, VariableKind kind,
                  std::vector<int64_t> shape, int shards,
                  OptimizerSpec::Kind optimizer, float lr,
                  PartitionSpec::Routing routing = PartitionSpec::DIV) {
  return TestVariableSpec(name, kind, std::move(shape), shards, optimizer, lr,
                          routing);
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = LocalCluster::Start({});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
  }
  std::unique_ptr<Client> NewClient() {
    auto client = Client::Connect(cluster_->MakeClientOptions());
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }
  std::unique_ptr<LocalCluster> cluster_;
};

// 4 clients x 500 SGD pushes of small-integer gradients with a power-of-two
// learning rate: every partial sum is exact in float, so the result must
// equal the reference exactly whatever order the pushes land in. Rows get
// the same gradient in every column, so a pull that saw a row half-updated
// (a torn row) would see unequal columns.
TEST_F(ClusterTest, ConcurrentSgdPushesSumExactlyAndRowsNeverTear) {
  constexpr float kLr = 0.0625f;
  constexpr int kClients = 4, kSteps = 500, kIdsPerStep = 64;
  auto setup = NewClient();
  ASSERT_TRUE(setup
                  ->CreateVariables(
                      {Spec("w", DENSE, {1000, 8}, 3, OptimizerSpec::SGD, kLr),
                       Spec("e", EMBEDDING, {5000, 4}, 4, OptimizerSpec::SGD,
                            kLr, PartitionSpec::MOD)})
                  .ok());

  auto dense_grad = [](int client, int step, int row) {
    return static_cast<float>((client * 7 + step * 3 + row) % 9 - 4);
  };
  auto step_ids = [](int client, int step) {
    std::vector<int64_t> ids(kIdsPerStep);
    for (int i = 0; i < kIdsPerStep; ++i) {
      // Repeats within a step on purpose: the client must sum them.
      ids[i] = (client * 977 + step * 131 + (i % 48) * 101) % 5000;
    }
    return ids;
  };
  auto row_grad = [](int client, int step, int i) {
    return static_cast<float>((client + step + i) % 5 - 2);
  };

  std::atomic<int> torn{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto client = NewClient();
      ASSERT_TRUE(client->RefreshCatalog().ok());
      std::vector<float> w_grad(8000), w(8000), rows(kIdsPerStep * 4);
      for (int step = 0; step < kSteps; ++step) {
        for (int r = 0; r < 1000; ++r) {
          std::fill_n(w_grad.begin() + r * 8, 8, dense_grad(c, step, r));
        }
        const std::vector<int64_t> ids = step_ids(c, step);
        std::vector<float> e_grad(kIdsPerStep * 4);
        for (int i = 0; i < kIdsPerStep; ++i) {
          std::fill_n(e_grad.begin() + i * 4, 4, row_grad(c, step, i));
        }
        ASSERT_TRUE(client
                        ->Push({PushOp::Dense("w", w_grad.data()),
                                PushOp::Rows("e", ids, e_grad.data())})
                        .ok());
        if (step % 10 == 0) {
          ASSERT_TRUE(client
                          ->Pull({PullOp::Dense("w", w.data()),
                                  PullOp::Rows("e", ids, rows.data())})
                          .ok());
          for (int r = 0; r < 1000; ++r) {
            for (int k = 1; k < 8; ++k) torn += w[r * 8 + k] != w[r * 8];
          }
          for (int i = 0; i < kIdsPerStep; ++i) {
            for (int k = 1; k < 4; ++k) torn += rows[i * 4 + k] != rows[i * 4];
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(torn.load(), 0);

  std::vector<double> w_sum(1000, 0), e_sum(5000, 0);
  for (int c = 0; c < kClients; ++c) {
    for (int step = 0; step < kSteps; ++step) {
      for (int r = 0; r < 1000; ++r) w_sum[r] += dense_grad(c, step, r);
      const std::vector<int64_t> ids = step_ids(c, step);
      for (int i = 0; i < kIdsPerStep; ++i)
        e_sum[ids[i]] += row_grad(c, step, i);
    }
  }
  std::vector<float> w(8000);
  std::vector<int64_t> all_ids(5000);
  std::iota(all_ids.begin(), all_ids.end(), 0);
  std::vector<float> e(5000 * 4);
  ASSERT_TRUE(setup->PullDense("w", w.data()).ok());
  ASSERT_TRUE(setup->PullRows("e", all_ids, e.data()).ok());
  int nonzero = 0;
  for (int r = 0; r < 1000; ++r) {
    for (int k = 0; k < 8; ++k) {
      ASSERT_EQ(w[r * 8 + k], static_cast<float>(-kLr * w_sum[r])) << r;
    }
    nonzero += w_sum[r] != 0;
  }
  for (int id = 0; id < 5000; ++id) {
    for (int k = 0; k < 4; ++k) {
      ASSERT_EQ(e[id * 4 + k], static_cast<float>(-kLr * e_sum[id])) << id;
    }
  }
  EXPECT_GT(nonzero, 500);

  // Every shard counted its updates: each push touches all 3 dense shards.
  auto lists = setup->ListVariables();
  ASSERT_TRUE(lists.ok());
  int64_t w_versions = 0;
  for (const auto& ps : *lists) {
    for (const auto& v : ps.variables()) {
      if (v.spec().name() != "w") continue;
      for (const auto& shard : v.shards()) w_versions += shard.version();
    }
  }
  EXPECT_EQ(w_versions, 3 * kClients * kSteps);
}

// Adagrad, Adam and FTRL embeddings over 4 DIV shards; client c owns shard
// c (ids [250c, 250c + 250)), so each row's update sequence is known and
// the cluster must match the scalar reference to 1e-6.
TEST_F(ClusterTest, StatefulOptimizersMatchTheReference) {
  constexpr int kClients = 4, kSteps = 200, kRows = 1000, kDim = 8;
  struct Case {
    std::string name;
    OptimizerSpec::Kind kind;
    float lr;
  };
  const std::vector<Case> cases = {{"adagrad", OptimizerSpec::ADAGRAD, 0.1f},
                                   {"adam", OptimizerSpec::ADAM, 0.01f},
                                   {"ftrl", OptimizerSpec::FTRL, 0.05f}};
  std::vector<VariableSpec> specs;
  for (const Case& c : cases) {
    VariableSpec s = Spec(c.name, EMBEDDING, {kRows, kDim}, 4, c.kind, c.lr);
    s.mutable_initializer()->set_kind(InitializerSpec::UNIFORM);
    s.mutable_initializer()->set_min(-0.1f);
    s.mutable_initializer()->set_max(0.1f);
    s.mutable_initializer()->set_seed(5);
    if (c.kind == OptimizerSpec::FTRL) {
      s.mutable_optimizer()->set_l1(0.01f);
      s.mutable_optimizer()->set_l2(0.001f);
    }
    ASSERT_TRUE(NormalizeVariableSpec(&s).ok());
    specs.push_back(s);
  }
  auto setup = NewClient();
  ASSERT_EQ(setup->CreateVariables(specs), absl::OkStatus());

  // What gradient client c pushes at each step: ids drawn from its own
  // shard (with repeats) and normal gradients. Drawn once: the reference
  // below replays them for every row.
  struct Step {
    std::vector<int64_t> ids;
    std::vector<float> grads;
  };
  std::vector<std::vector<Step>> steps(kClients, std::vector<Step>(kSteps));
  for (int c = 0; c < kClients; ++c) {
    for (int step = 0; step < kSteps; ++step) {
      std::mt19937 rng(c * 100003 + step);
      std::uniform_int_distribution<int> pick(0, 249);
      std::normal_distribution<float> normal(0, 1);
      Step& s = steps[c][step];
      s.ids.resize(40);
      for (auto& id : s.ids) id = c * 250 + pick(rng);
      s.grads.resize(40 * kDim);
      for (auto& g : s.grads) g = normal(rng);
    }
  }

  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto client = NewClient();
      ASSERT_TRUE(client->RefreshCatalog().ok());
      for (const Step& s : steps[c]) {
        std::vector<PushOp> ops;
        for (const Case& k : cases)
          ops.push_back(PushOp::Rows(k.name, s.ids, s.grads.data()));
        ASSERT_TRUE(client->Push(ops).ok());
      }
    });
  }
  for (auto& t : threads) t.join();

  std::vector<int64_t> all(kRows);
  std::iota(all.begin(), all.end(), 0);
  for (size_t k = 0; k < cases.size(); ++k) {
    std::vector<float> got(kRows * kDim);
    ASSERT_TRUE(setup->PullRows(cases[k].name, all, got.data()).ok());
    const OptimizerSpec& opt = specs[k].optimizer();
    Initializer init(specs[k].initializer());
    double max_error = 0;
    for (int row = 0; row < kRows; ++row) {
      const int c = row / 250;
      std::vector<float> initial(kDim);
      init.FillRow(row, kDim, initial.data());
      ReferenceState ref = ReferenceState::Start(opt, initial);
      for (int step = 0; step < kSteps; ++step) {
        const Step& s = steps[c][step];
        std::vector<float> sum(kDim, 0);
        bool touched = false;
        for (size_t i = 0; i < s.ids.size(); ++i) {
          if (s.ids[i] != row) continue;
          touched = true;
          for (int d = 0; d < kDim; ++d) sum[d] += s.grads[i * kDim + d];
        }
        // The shard's update count is the client's step count.
        if (touched) ReferenceUpdate(opt, step + 1, sum.data(), &ref);
      }
      for (int d = 0; d < kDim; ++d) {
        max_error = std::max<double>(
            max_error, std::fabs(got[row * kDim + d] - ref.params[d]));
      }
    }
    EXPECT_LE(max_error, 1e-6) << cases[k].name;
    std::cout << cases[k].name << ": max |cluster - reference| = " << max_error
              << "\n";
  }
}

TEST_F(ClusterTest, HashEmbeddingCreatesRowsOnPushAndEnforcesCapacity) {
  VariableSpec s =
      Spec("h", HASH_EMBEDDING, {64, 4}, 2, OptimizerSpec::SGD, 1.0f);
  s.mutable_initializer()->set_kind(InitializerSpec::NORMAL);
  s.mutable_initializer()->set_stddev(0.5f);
  s.mutable_initializer()->set_seed(11);
  auto client = NewClient();
  ASSERT_EQ(client->CreateVariables({s}), absl::OkStatus());
  Initializer init(s.initializer());

  // Unseen ids (any int64) pull their deterministic initial values.
  const std::vector<int64_t> ids = {-5, 123456789012345LL, 7};
  std::vector<float> rows(12);
  ASSERT_TRUE(client->PullRows("h", ids, rows.data()).ok());
  for (int i = 0; i < 3; ++i) {
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(rows[i * 4 + d], init.Value(ids[i], d));
    }
  }
  auto stats_rows = [&] {
    int64_t n = 0;
    auto lists = client->ListVariables();
    EXPECT_TRUE(lists.ok()) << lists.status();
    for (const auto& ps : *lists) {
      for (const auto& v : ps.variables()) {
        for (const auto& shard : v.shards()) n += shard.num_rows();
      }
    }
    return n;
  };
  EXPECT_EQ(stats_rows(), 0);  // pulls store nothing

  std::vector<float> grads(12, 1.0f);
  ASSERT_TRUE(client->PushRows("h", ids, grads.data()).ok());
  ASSERT_TRUE(client->PullRows("h", ids, rows.data()).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_FLOAT_EQ(rows[i * 4], init.Value(ids[i], 0) - 1.0f);
  }
  EXPECT_EQ(stats_rows(), 3);

  // Capacity 64 over 2 shards: 32 rows per shard. 200 new ids overflow.
  std::vector<int64_t> many(200);
  std::iota(many.begin(), many.end(), 1000);
  std::vector<float> many_grads(800, 1.0f);
  absl::Status full = client->PushRows("h", many, many_grads.data());
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_NE(full.message().find("is full"), std::string::npos) << full;
  EXPECT_NE(full.message().find("capacity of 32 rows"), std::string::npos)
      << full;
  // The three rows pushed before kept their values.
  ASSERT_TRUE(client->PullRows("h", ids, rows.data()).ok());
  EXPECT_FLOAT_EQ(rows[0], init.Value(ids[0], 0) - 1.0f);
}

// A push spanning both PS is checked whole by the client before anything is
// sent: a NaN in the dense part leaves the rows on the other PS untouched.
// Where a PS still refuses or breaks off, the error says which PS applied.
TEST_F(ClusterTest, PushIsAllOrNothingAcrossPsAndFailuresNameWhatApplied) {
  auto client = NewClient();
  VariableSpec d = Spec("d", DENSE, {8}, 1, OptimizerSpec::SGD, 1.0f);
  VariableSpec e = Spec("e", EMBEDDING, {100, 4}, 2, OptimizerSpec::SGD, 1.0f);
  VariableSpec h = Spec("h", HASH_EMBEDDING, {4, 4}, 2, OptimizerSpec::SGD,
                        1.0f, PartitionSpec::HASH);
  ASSERT_EQ(client->CreateVariables({d, e, h}), absl::OkStatus());
  const int dense_ps = client->Find("d")->shards[0].ps_task;
  const int other_ps = 1 - dense_ps;
  ASSERT_NE(client->Find("e")->shards[0].ps_task,
            client->Find("e")->shards[1].ps_task);

  std::vector<int64_t> ids = {1, 99};  // one per shard, so one per PS
  std::vector<float> rows(8, 1.0f), dense(8, 1.0f), out(8, -1.0f);
  dense[3] = NAN;
  absl::Status s = client->Push(
      {PushOp::Rows("e", ids, rows.data()), PushOp::Dense("d", dense.data())});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("push of 'd': gradient element 3 is nan; "
                             "nothing was sent to any PS"),
            std::string::npos)
      << s;
  ASSERT_TRUE(client->PullRows("e", ids, out.data()).ok());
  EXPECT_EQ(out, std::vector<float>(8, 0.0f)) << "rows changed on some PS";
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ((*stats)[0].push_requests() + (*stats)[1].push_requests(), 0);

  // A push the client cannot know is bad: the hash table's shard on the
  // other PS is full. The dense part is applied on its PS, and the error
  // says so.
  dense[3] = 1.0f;
  std::vector<int64_t> many(64);
  std::iota(many.begin(), many.end(), 1000);
  std::vector<float> many_grads(64 * 4, 1.0f);
  std::vector<PushOp> ops = {PushOp::Dense("d", dense.data())};
  std::vector<int64_t> other_ids;
  for (int64_t id : many) {
    if (client->Find("h")->shards[client->Find("h")->ShardOf(id)].ps_task ==
        other_ps) {
      other_ids.push_back(id);
    }
  }
  ops.push_back(PushOp::Rows("h", other_ids, many_grads.data()));
  s = client->Push(ops);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(absl::StrCat("applied on PS ", dense_ps, " (")),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find(absl::StrCat("not applied on PS ", other_ps)),
            std::string::npos)
      << s;
  ASSERT_TRUE(client->PullDense("d", out.data()).ok());
  EXPECT_EQ(out, std::vector<float>(8, -1.0f));

  // The other PS dies: its part's fate is unknown, and the error says so.
  ClientOptions o = cluster_->MakeClientOptions();
  o.max_attempts = 1;
  o.call_timeout = absl::Seconds(5);
  auto short_client = Client::Connect(o);
  ASSERT_TRUE(short_client.ok());
  ASSERT_TRUE((*short_client)->RefreshCatalog().ok());
  cluster_->Kill(other_ps, SIGKILL);
  s = (*short_client)
          ->Push({PushOp::Rows("e", ids, rows.data()),
                  PushOp::Dense("d", dense.data())});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(absl::StrCat("applied on PS ", dense_ps, " (")),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find(absl::StrCat("unknown on PS ", other_ps)),
            std::string::npos)
      << s;
}

// SYNC with two workers: a step is applied once both have pushed it, as
// the mean of their gradients (TF's SyncReplicasOptimizer), one update.
// Power-of-two values keep every sum exact, so the check is equality.
TEST_F(ClusterTest, SyncStepAppliesTheMeanOfEveryWorkersGradient) {
  // The cluster spec must list the workers (requests declaring more are
  // refused).
  cluster_.reset();
  cluster_ = std::move(*LocalCluster::Start({.num_ps = 2, .num_workers = 2}));
  VariableSpec d = Spec("d", DENSE, {8}, 2, OptimizerSpec::SGD, 0.5f);
  auto setup = NewClient();
  ASSERT_EQ(setup->CreateVariables({d}), absl::OkStatus());
  std::unique_ptr<Client> workers[2];
  for (int w = 0; w < 2; ++w) {
    ClientOptions o = cluster_->MakeClientOptions();
    o.worker_index = w;
    workers[w] = std::move(*Client::Connect(o));
    ASSERT_TRUE(workers[w]->RefreshCatalog().ok());
  }
  StepOptions step;
  step.consistency.set_mode(Consistency::SYNC);
  step.consistency.set_workers(2);
  step.consistency.set_timeout_seconds(20);
  std::vector<float> g0 = {4, 8, 2, 0, -4, 1, 16, 2};
  std::vector<float> g1 = {0, 8, 6, 2, 4, 3, -16, 2};
  std::vector<float> out(8);
  for (int64_t k = 0; k < 3; ++k) {
    step.step = k;
    // Worker 0 alone: held, nothing applied yet.
    ASSERT_TRUE(workers[0]->Push({PushOp::Dense("d", g0.data())}, step).ok());
    ASSERT_TRUE(setup->PullDense("d", out.data()).ok());
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(out[i], -0.5f * k * (g0[i] + g1[i]) / 2) << "step " << k;
    }
    ASSERT_TRUE(workers[1]->Push({PushOp::Dense("d", g1.data())}, step).ok());
    ASSERT_TRUE(setup->PullDense("d", out.data()).ok());
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(out[i], -0.5f * (k + 1) * (g0[i] + g1[i]) / 2)
          << "step " << k << " element " << i;
    }
  }
  // One version step per shard per applied step, not one per push.
  auto lists = setup->ListVariables();
  ASSERT_TRUE(lists.ok());
  for (const auto& ps : *lists) {
    for (const auto& shard : ps.variables(0).shards()) {
      EXPECT_EQ(shard.version(), 3);
    }
  }
}

// Every series docs/operations.md lists, from a live server, with values
// that follow from what the test did.
TEST_F(ClusterTest, MetricsEndpointServesEveryDocumentedSeries) {
  // Over gRPC: its standard series count the calls too (over the data
  // plane the psrt_* series are the same: data_plane_cluster_test).
  ClientOptions over_grpc = cluster_->MakeClientOptions();
  over_grpc.data_plane = "grpc";
  auto connected = Client::Connect(over_grpc);
  ASSERT_TRUE(connected.ok()) << connected.status();
  std::unique_ptr<Client> client = *std::move(connected);
  VariableSpec d = Spec("d", DENSE, {1000}, 1, OptimizerSpec::SGD, 1.0f);
  VariableSpec e = Spec("e", EMBEDDING, {100, 4}, 1, OptimizerSpec::SGD, 1.0f);
  ASSERT_EQ(client->CreateVariables({d, e}), absl::OkStatus());
  const int ps = client->Find("d")->shards[0].ps_task;
  ASSERT_EQ(client->Find("e")->shards[0].ps_task, 1 - ps);
  std::vector<float> dense(1000, 1.0f), rows(12, 1.0f);
  std::vector<int64_t> ids = {1, 2, 3};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client->PushDense("d", dense.data()).ok());
    ASSERT_TRUE(client->PullDense("d", dense.data()).ok());
  }
  ASSERT_TRUE(client->PushRows("e", ids, rows.data()).ok());
  // A call's latency is observed when gRPC is done with it (OnDone), which
  // may come after the client has its answer: scraped until the third
  // push's is in (a few ms; 10 s at most).
  const double cpu_before = CpuSeconds(cluster_->pid(ps));
  auto metrics = FetchMetrics(cluster_->metrics_port(ps));
  for (const absl::Time end = absl::Now() + absl::Seconds(10);
       metrics.ok() && absl::Now() < end &&
       MetricValue(*metrics,
                   "psrt_request_duration_seconds_count{method=\"Push\"}") < 3;
       absl::SleepFor(absl::Milliseconds(20))) {
    metrics = FetchMetrics(cluster_->metrics_port(ps));
  }
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::string& m = *metrics;
  auto value = [&](const std::string& sample) {
    return MetricValue(m, sample);
  };
  EXPECT_EQ(value("psrt_requests_total{method=\"Push\"}"), 3) << m;
  EXPECT_EQ(value("psrt_requests_total{method=\"Pull\"}"), 3) << m;
  EXPECT_GE(value("psrt_requests_total{method=\"CreateVariables\"}"), 1) << m;
  EXPECT_GE(value("psrt_received_bytes_total{method=\"Push\"}"), 3 * 4000) << m;
  EXPECT_EQ(value("psrt_sent_bytes_total{method=\"Pull\"}"), 3 * 4000) << m;
  EXPECT_EQ(value("psrt_rows_total{method=\"Push\"}"), 3) << m;
  EXPECT_EQ(value("psrt_request_duration_seconds_count{method=\"Push\"}"), 3)
      << m;
  EXPECT_GT(value("psrt_request_duration_seconds_sum{method=\"Push\"}"), 0)
      << m;
  EXPECT_EQ(value("psrt_push_apply_duration_seconds_count"), 3) << m;
  // gRPC's standard server series, as its Prometheus interceptors name
  // them (every call, by type, service, method and code).
  const std::string push_labels =
      "grpc_method=\"Push\",grpc_service=\"psrt.ParameterServer\","
      "grpc_type=\"client_stream\"";
  const std::string pull_labels =
      "grpc_method=\"Pull\",grpc_service=\"psrt.ParameterServer\","
      "grpc_type=\"server_stream\"";
  EXPECT_EQ(value(absl::StrCat("grpc_server_started_total{", push_labels, "}")),
            3)
      << m;
  EXPECT_EQ(value(absl::StrCat("grpc_server_handled_total{grpc_code=\"OK\",",
                               push_labels, "}")),
            3)
      << m;
  EXPECT_EQ(value(absl::StrCat("grpc_server_handled_total{grpc_code=\"OK\",",
                               pull_labels, "}")),
            3)
      << m;
  EXPECT_EQ(value(absl::StrCat("grpc_server_handling_seconds_count{",
                               push_labels, "}")),
            3)
      << m;
  EXPECT_GT(value(absl::StrCat("grpc_server_handling_seconds_sum{", push_labels,
                               "}")),
            0)
      << m;
  EXPECT_EQ(value("psrt_rejected_nonfinite_pushes_total"), 0) << m;
  EXPECT_EQ(value(absl::StrCat("psrt_parameter_bytes{ps_task=\"", ps, "\"}")),
            4000)
      << m;
  EXPECT_EQ(value(absl::StrCat("psrt_local_shards{ps_task=\"", ps, "\"}")), 1)
      << m;
  EXPECT_GT(value("psrt_uptime_seconds"), 0) << m;
  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(value("psrt_global_step"), (*stats)[ps].global_step()) << m;
  // Prometheus' standard process series, of the ps_server process: started
  // with this cluster (after the test binary), not in the future.
  // (The start time is whole boot seconds plus clock ticks: +1 s of slack.)
  const double now = absl::ToUnixMicros(absl::Now()) / 1e6 + 1;
  EXPECT_LE(value("process_start_time_seconds"), now) << m;
  EXPECT_GT(value("process_start_time_seconds"), now - 600) << m;
  EXPECT_GT(value("process_resident_memory_bytes"), 4000) << m;
  EXPECT_GT(value("process_open_fds"), 3) << m;
  // The server's own CPU time, as the kernel counts it around the scrape
  // (a tick of slack each side), not just a series that exists.
  const double cpu_after = CpuSeconds(cluster_->pid(ps));
  ASSERT_GT(cpu_before, 0);
  const double tick = 1.0 / sysconf(_SC_CLK_TCK);
  EXPECT_GE(value("process_cpu_seconds_total"), cpu_before - tick) << m;
  EXPECT_LE(value("process_cpu_seconds_total"), cpu_after + tick) << m;
  EXPECT_NE(m.find("psrt_build_info{component=\"ps_server\","),
            std::string::npos)
      << m;
  // Cluster checkpoint series are PS 0's alone; this cluster has no
  // checkpoint location, but every PS still reports its own saves.
  EXPECT_EQ(value("psrt_checkpoint_saved_bytes_total"), 0) << m;
  // The embedding push went to the other PS: its three rows count there.
  // (psrt_errors_total by code: bad_input_test.)
  metrics = FetchMetrics(cluster_->metrics_port(1 - ps));
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ(MetricValue(*metrics, "psrt_rows_total{method=\"Push\"}"), 3)
      << *metrics;
}

// A 64 MiB dense variable moves through 1 MiB messages both ways. The
// server runs with --max_message_bytes=1 MiB: gRPC refuses any request
// over 2 MiB (the limit plus a header's room, server.cc), and pull
// answers are cut to 1 MiB, so a push or pull that did not split the
// tensor fails here.
TEST(ClusterMessageTest, LargeTensorsTravelInBoundedMessages) {
  LocalCluster::Options options;
  options.num_ps = 1;
  options.extra_flags = {"--max_message_bytes=1048576"};
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  constexpr int64_t kFloats = 16 << 20;  // 64 MiB
  VariableSpec s = Spec("big", DENSE, {kFloats}, 1, OptimizerSpec::SGD, 0.5f);
  s.mutable_initializer()->set_kind(InitializerSpec::CONSTANT);
  s.mutable_initializer()->set_value(3.0f);
  ASSERT_EQ((*client)->CreateVariables({s}), absl::OkStatus());
  std::vector<float> grad(kFloats), values(kFloats);
  for (int64_t i = 0; i < kFloats; ++i) grad[i] = static_cast<float>(i % 1024);
  ASSERT_EQ((*client)->PushDense("big", grad.data()), absl::OkStatus());
  ASSERT_EQ((*client)->PullDense("big", values.data()), absl::OkStatus());
  for (int64_t i = 0; i < kFloats; i += 4099) {
    ASSERT_EQ(values[i], 3.0f - 0.5f * static_cast<float>(i % 1024)) << i;
  }
  ASSERT_EQ(values[kFloats - 1], 3.0f - 0.5f * 1023);
  auto stats = (*client)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GT((*stats)[0].bytes_in(), kFloats * 4);

  // The bound is real: a client whose messages are 4 MiB is refused
  // (gRPC's per-message bound; the data plane bounds a call's whole body
  // by --max_push_bytes instead).
  ClientOptions big_messages = (*cluster)->MakeClientOptions();
  big_messages.data_plane = "grpc";
  big_messages.message_bytes = 4 << 20;
  big_messages.max_attempts = 1;
  auto unsplit = Client::Connect(big_messages);
  ASSERT_TRUE(unsplit.ok()) << unsplit.status();
  ASSERT_EQ((*unsplit)->RefreshCatalog(), absl::OkStatus());
  const absl::Status refused = (*unsplit)->PushDense("big", grad.data());
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
}

// The harness itself: a PS that dies while starting is reported at once,
// with the end of its log, not after the whole start timeout.
TEST(LocalClusterTest, APsThatCannotStartIsReportedAtOnceWithItsLog) {
  LocalCluster::Options options;
  options.num_ps = 2;
  options.extra_flags = {"--no_such_flag_for_ps_server=1"};
  const absl::Time start = absl::Now();
  auto cluster = LocalCluster::Start(options);
  ASSERT_FALSE(cluster.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  const std::string message(cluster.status().message());
  EXPECT_NE(message.find("exited during start with code"), std::string::npos)
      << message;
  EXPECT_NE(message.find("no_such_flag_for_ps_server"), std::string::npos)
      << message;
}

// One port, one PS: a second ps_server started on a running PS's port
// (a restart while the old process still runs) must fail to start, not
// bind the port beside it (gRPC's default SO_REUSEPORT) and take half of
// the connections with none of the shards.
TEST(LocalClusterTest, ASecondPsOnAPortInUseFailsToStart) {
  auto cluster = LocalCluster::Start({.num_ps = 1});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_EQ((*client)->CreateVariables(
                {Spec("w", DENSE, {4}, 1, OptimizerSpec::SGD, 0.5f)}),
            absl::OkStatus());

  const std::vector<LocalCluster::WorkerRun> second = RunPrograms(
      "ps_server/ps_server",
      {absl::StrCat("--cluster=", ClusterSpecToJson((*cluster)->spec())),
       "--task_index=0", "--metrics_port=0"},
      {""}, absl::Seconds(30));
  EXPECT_NE(second[0].exit_code, 0) << second[0].output;
  EXPECT_NE(second[0].exit_code, -1) << "still serving after 30 s";
  EXPECT_NE(second[0].output.find("cannot listen on"), std::string::npos)
      << second[0].output;

  // Every new connection still reaches the first PS, which holds "w".
  for (int i = 0; i < 8; ++i) {
    auto fresh = Client::Connect((*cluster)->MakeClientOptions());
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    auto lists = (*fresh)->ListVariables();
    ASSERT_TRUE(lists.ok()) << lists.status();
    ASSERT_EQ(lists->size(), 1u);
    ASSERT_EQ((*lists)[0].variables_size(), 1) << "connection " << i;
  }
}

}  // namespace
}  // namespace psrt
