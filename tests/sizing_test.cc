// The sizing rule (tools/psctl/memory_estimate.h, what `psctl size`
// prints) against a real ps_server's resident memory, on two table
// configurations: fixed tables created whole (Adam dense + Adagrad
// embedding; also on a PS serving the data plane, with its base), and a
// hash embedding (Adam) filled to 1M rows by pushes.
// The bound is the one docs/operations.md promises: within 15%. What this
// proves that no other test does: the memory a Kubernetes limit is set
// from is the memory the process takes. (Optimized build only: ASan's
// shadow memory is not the PS's.)
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "clients/cpp/client.h"
#include "gtest/gtest.h"
#include "partitioner/test_variable_spec.h"
#include "tests/local_cluster.h"
#include "tests/process_rss.h"
#include "tools/psctl/memory_estimate.h"

namespace psrt {
namespace {

VariableSpec Spec(const std::string& name, VariableKind kind,
                  std::vector<int64_t> shape, int shards,
                  OptimizerSpec::Kind optimizer) {
  return TestVariableSpec(name, kind, std::move(shape), shards, optimizer,
                          0.01f);
}

// Starts one PS (`data_plane`: with --data_plane=fabric), lets `fill`
// create and fill variables, and compares its resident memory with the
// rule's estimate for `specs`.
void ExpectWithinRule(const std::vector<VariableSpec>& specs, int64_t hash_rows,
                      const std::function<void(Client*)>& fill,
                      bool data_plane = false) {
  LocalCluster::Options options;
  options.num_ps = 1;
  // Said either way: the rule differs, whatever the default.
  options.extra_flags = {data_plane ? "--data_plane=fabric"
                                    : "--data_plane=grpc"};
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ClientOptions client_options = (*cluster)->MakeClientOptions();
  client_options.data_plane = data_plane ? "fabric" : "grpc";
  auto client = Client::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  const int64_t idle = RssBytes((*cluster)->pid(0));
  fill(client->get());
  const int64_t rss = RssBytes((*cluster)->pid(0));
  auto estimate = EstimatePsMemory(specs, 1, hash_rows, 1, data_plane);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  const double base = PsBaseBytes(1, data_plane);
  const double predicted = static_cast<double>((*estimate)[0].total_bytes);
  const double error = (rss - predicted) / predicted;
  std::printf(
      "idle %.1f MiB (rule's base %.1f), resident %.1f MiB, rule %.1f MiB "
      "(parameters %.1f, hash row overhead %.1f): %+.1f%%\n",
      idle / 1048576.0, base / 1048576.0, rss / 1048576.0,
      predicted / 1048576.0, (*estimate)[0].parameter_bytes / 1048576.0,
      (*estimate)[0].row_overhead_bytes / 1048576.0, 100 * error);
  EXPECT_LT(std::abs(error), 0.15);
  // The idle process itself, where the base alone is the rule: within
  // 20% of it (24 MiB without the data plane, 34 with: either base
  // would fail the other process, whose idle is 28-42% off it).
  EXPECT_LT(std::abs(idle - base) / base, 0.2);
}

TEST(SizingTest, FixedTablesMatchTheRule) {
  const std::vector<VariableSpec> specs = {
      Spec("d", DENSE, {1000, 1000}, 1, OptimizerSpec::ADAM),
      Spec("e", EMBEDDING, {2000000, 16}, 4, OptimizerSpec::ADAGRAD)};
  ExpectWithinRule(specs, 0, [&](Client* client) {
    ASSERT_TRUE(client->CreateVariables(specs).ok());
  });
}

// A PS serving the data plane, pushed and pulled over it: the rule with
// the data plane's base (what a Kubernetes limit for --data_plane=fabric
// is set from).
TEST(SizingTest, FixedTablesOverTheDataPlaneMatchTheRule) {
  const std::vector<VariableSpec> specs = {
      Spec("d", DENSE, {1000, 1000}, 1, OptimizerSpec::ADAM),
      Spec("e", EMBEDDING, {2000000, 16}, 4, OptimizerSpec::ADAGRAD)};
  ExpectWithinRule(
      specs, 0,
      [&](Client* client) {
        ASSERT_TRUE(client->CreateVariables(specs).ok());
        std::vector<float> grad(1000 * 1000, 0.01f), values(1000 * 1000);
        for (int i = 0; i < 3; ++i) {
          ASSERT_TRUE(client->PushDense("d", grad.data()).ok());
          ASSERT_TRUE(client->PullDense("d", values.data()).ok());
        }
      },
      /*data_plane=*/true);
}

TEST(SizingTest, AHashTableFilledByPushesMatchesTheRule) {
  constexpr int64_t kRows = 1000000, kBatch = 100000, kDim = 32;
  const std::vector<VariableSpec> specs = {
      Spec("h", HASH_EMBEDDING, {0, kDim}, 4, OptimizerSpec::ADAM)};
  ExpectWithinRule(specs, kRows, [&](Client* client) {
    ASSERT_TRUE(client->CreateVariables(specs).ok());
    std::mt19937_64 rng(7);
    std::vector<int64_t> ids(kBatch);
    std::vector<float> grads(kBatch * kDim, 0.01f);
    for (int64_t done = 0; done < kRows; done += kBatch) {
      for (int64_t& id : ids) id = static_cast<int64_t>(rng() >> 2);
      ASSERT_TRUE(client->PushRows("h", ids, grads.data()).ok());
    }
  });
}

}  // namespace
}  // namespace psrt
