// ps_worker --dense_sync=allreduce with real ps_server processes: two
// workers train DeepFM, the dense layers all-reduced between them (Gloo
// over loopback TCP), the embeddings on the PS. What it shows that the
// in-process tests (ps_worker/dense_allreduce_test.cc) do not: the
// trainer's wiring end to end -- both workers end with the same dense bits,
// the PS holds those bits afterwards (what checkpoints and export read),
// the run computes what the same run through the PS computes, and a run
// restored from a checkpoint starts every worker from the saved bits.
#include <algorithm>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clients/cpp/client.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "tests/tfrecord_split.h"
#include "tests/worker_output.h"
#include "util/crc32c.h"

namespace psrt {
namespace {

const char kVal[] = "testdata/criteo_deepfm_sagemaker/val.tfrecords";
const char kWorker[] = "ps_worker/ps_worker";

// The last "<label>=<crc32c>" a worker printed ("" if none): its dense
// values at the end ("dense values crc32c") or when the ring formed
// ("starting dense crc32c").
std::string DenseDigest(const std::string& output,
                        const std::string& label = "dense values crc32c") {
  const std::regex digest(label + "=([0-9a-f]{8})");
  std::string last;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), digest);
       it != std::sregex_iterator(); ++it) {
    last = (*it)[1].str();
  }
  return last;
}

// The PS's dense variables, in catalog order, as the worker digests its
// own (crc32c over their float32 values).
std::vector<float> PsDenseValues(const LocalCluster& cluster) {
  auto client = Client::Connect(cluster.MakeClientOptions());
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return {};
  EXPECT_TRUE((*client)->RefreshCatalog().ok());
  auto variables = (*client)->ListVariables();
  EXPECT_TRUE(variables.ok()) << variables.status();
  if (!variables.ok()) return {};
  std::vector<float> all;
  for (const VariableInfo& info : (*variables)[0].variables()) {
    const VariableSpec& spec = info.spec();
    if (spec.kind() != DENSE) continue;
    int64_t size = 1;
    for (int64_t d : spec.shape()) size *= d;
    std::vector<float> values(size);
    EXPECT_TRUE((*client)->PullDense(spec.name(), values.data()).ok());
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

std::string Digest(const std::vector<float>& values) {
  return absl::StrFormat("%08x",
                         Crc32c(values.data(), values.size() * sizeof(float)));
}

struct TrainingRun {
  std::vector<LocalCluster::WorkerRun> workers;
  std::vector<float> ps_dense;  // the PS's dense variables after the run
  std::string ps_digest;        // their CRC-32C
};

// DeepFM on 2 PS (with `ps_flags`) and 2 workers, SYNC embeddings,
// record-sharded data in file order: the same examples in the same steps
// every run. `checkpoint`: after the workers, a checkpoint's URI.
TrainingRun TrainTwoWorkers(const std::string& dir,
                            const std::string& dense_sync,
                            std::vector<std::string> ps_flags = {},
                            std::string* checkpoint = nullptr) {
  LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 2;
  o.extra_flags = std::move(ps_flags);
  auto cluster = LocalCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  TrainingRun run;
  run.workers = (*cluster)->RunWorkers(
      kWorker,
      {"--model=deepfm",
       absl::StrCat("--train_files=", dir, "/train.tfrecords"),
       absl::StrCat("--eval_files=", dir, "/eval.tfrecords"), "--vocab=117581",
       "--batch_size=128", "--max_steps=60", "--log_every_steps=20",
       "--shuffle_buffer=0", "--data_sharding=record", "--mode=sync",
       "--eval_on_all_workers", absl::StrCat("--dense_sync=", dense_sync)},
      {0, 1}, absl::Minutes(4));
  for (const auto& w : run.workers) EXPECT_EQ(w.exit_code, 0) << w.output;
  run.ps_dense = PsDenseValues(**cluster);
  run.ps_digest = Digest(run.ps_dense);
  if (checkpoint != nullptr) {
    auto client = Client::Connect((*cluster)->MakeClientOptions());
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return run;
    auto saved = (*client)->Checkpoint();
    EXPECT_TRUE(saved.ok()) << saved.status();
    if (saved.ok()) *checkpoint = saved->uri();
  }
  return run;
}

TEST(HybridTrainingTest, DenseLayersAllReducedMatchThePsRunBitForBitAcross) {
  const std::string dir = FreshTestDir("hybrid");
  ASSERT_TRUE(SplitTfRecords(kVal, 8000, dir + "/train.tfrecords",
                             dir + "/eval.tfrecords")
                  .ok());
  const TrainingRun hybrid = TrainTwoWorkers(dir, "allreduce");
  ASSERT_EQ(hybrid.workers.size(), 2u);
  const std::string digest = DenseDigest(hybrid.workers[0].output);
  ASSERT_FALSE(digest.empty()) << hybrid.workers[0].output;
  // Every worker's dense parameters are the same bits, and worker 0 wrote
  // them into the PS after the last step.
  EXPECT_EQ(DenseDigest(hybrid.workers[1].output), digest)
      << hybrid.workers[1].output;
  EXPECT_EQ(hybrid.ps_digest, digest);
  EXPECT_NE(hybrid.workers[0].output.find("60 updates, 0 dropped"),
            std::string::npos)
      << hybrid.workers[0].output;

  // The same run through the PS (SYNC: the PS averages the two workers'
  // dense gradients and applies the same optimizer) is the same math; only
  // the order of the float sums differs. The final dense parameters (on
  // the PS once every step applied) agree to float rounding. (The workers'
  // own evaluations are printed, not compared: a SYNC worker's final
  // evaluation may read the PS before its last step is applied.)
  const TrainingRun reference = TrainTwoWorkers(dir, "ps");
  ASSERT_EQ(reference.workers.size(), 2u);
  ASSERT_EQ(reference.ps_dense.size(), hybrid.ps_dense.size());
  ASSERT_GT(hybrid.ps_dense.size(), 100000u);
  double worst = 0;
  for (size_t i = 0; i < hybrid.ps_dense.size(); ++i) {
    worst = std::max<double>(
        worst, std::abs(hybrid.ps_dense[i] - reference.ps_dense[i]));
  }
  std::printf("dense parameters: largest difference from the PS run %.3g\n",
              worst);
  // Adam at 0.001 for 60 steps moves a parameter by up to 0.06: a
  // difference in the update itself (another mean, another optimizer
  // step) is of that order; rounding is far below it.
  EXPECT_LT(worst, 1e-4);
  for (int w = 0; w < 2; ++w) {
    const double auc = LastMetric(hybrid.workers[w].output, "eval_auc");
    std::printf("worker %d: held-out AUC %.5f (through the PS %.5f)\n", w, auc,
                LastMetric(reference.workers[w].output, "eval_auc"));
    EXPECT_GT(auc, 0.6);
  }
}

// Checkpoints hold the whole model: worker 0 wrote the trained dense
// values into the PS, the checkpoint saved them, and a hybrid run restored
// from it starts every worker from those very bits.
TEST(HybridTrainingTest,
     ACheckpointHoldsTheDenseLayersAndARestoreStartsFromThem) {
  const std::string dir = FreshTestDir("hybrid_ckpt");
  ASSERT_TRUE(SplitTfRecords(kVal, 8000, dir + "/train.tfrecords",
                             dir + "/eval.tfrecords")
                  .ok());
  std::string uri;
  const TrainingRun trained = TrainTwoWorkers(
      dir, "allreduce",
      {absl::StrCat("--checkpoint_uri=", FreshTestDir("hybrid_ckpt_root"))},
      &uri);
  ASSERT_FALSE(uri.empty());
  const std::string digest = DenseDigest(trained.workers[0].output);
  ASSERT_FALSE(digest.empty());
  EXPECT_EQ(trained.ps_digest, digest);
  const TrainingRun restored =
      TrainTwoWorkers(dir, "allreduce", {absl::StrCat("--restore=", uri)});
  ASSERT_EQ(restored.workers.size(), 2u);
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(DenseDigest(restored.workers[w].output, "starting dense crc32c"),
              digest)
        << restored.workers[w].output;
  }
  // And they trained on from there alike.
  EXPECT_EQ(DenseDigest(restored.workers[0].output),
            DenseDigest(restored.workers[1].output));
  EXPECT_NE(DenseDigest(restored.workers[0].output), digest);
}

}  // namespace
}  // namespace psrt
