// Training quality on real and planted data, 2 hosts (2 ps_server + 2
// ps_worker processes): the figures users choose a system by.
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/ci.h"
#include "tests/local_cluster.h"
#include "tests/planted_data.h"
#include "tests/worker_output.h"

namespace psrt {
namespace {

const char kWorker[] = "ps_worker/ps_worker";

std::vector<LocalCluster::WorkerRun> TrainOnTwoHosts(
    const std::vector<std::string>& args, absl::Duration timeout) {
  LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 2;
  auto cluster = LocalCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  auto runs = (*cluster)->RunWorkers(kWorker, args, {0, 1}, timeout);
  for (const auto& r : runs) EXPECT_EQ(r.exit_code, 0) << r.output;
  return runs;
}

TEST(TrainQualityTest, DeepFmReachesThePlantedModelsAucOnAMillionExamples) {
  const std::string dir = kPlanted1mDir;  // made once, by the build
  const PlantedData data = ReadPlantedData(dir);
  const double planted_auc = data.planted_auc;
  EXPECT_GE(PlantedNumber(data, "train_examples"), 1e6);
  EXPECT_GE(PlantedNumber(data, "distinct_train_ids"), 1e6) << data.summary;
  ASSERT_GT(planted_auc, 0.75);

  auto runs = TrainOnTwoHosts(
      {"--model=deepfm", absl::StrCat("--train_files=", dir, "/train-*"),
       absl::StrCat("--eval_files=", dir, "/test.tfrecords"), "--epochs=2",
       "--batch_size=1024", "--log_every_steps=200"},
      absl::Minutes(10));
  ASSERT_EQ(runs.size(), 2u);
  const double auc = LastMetric(runs[0].output, "eval_auc");
  std::cout << "DeepFM test AUC " << auc << ", planted model " << planted_auc
            << "\n";
  EXPECT_GE(auc, planted_auc - 0.01) << runs[0].output;
  // Each worker read its half of both epochs.
  EXPECT_EQ(LastMetric(runs[0].output, "examples") +
                LastMetric(runs[1].output, "examples"),
            2e6);
}

TEST(TrainQualityTest, WideAndDeepOnUciAdult) {
  auto runs =
      TrainOnTwoHosts({"--model=wide_deep", "--format=csv",
                       "--train_files=testdata/adult/adult.data",
                       "--eval_files=testdata/adult/adult.test",
                       "--hidden=64,32", "--epochs=10", "--batch_size=128",
                       "--dense_learning_rate=0.003", "--log_every_steps=500"},
                      absl::Minutes(10));
  ASSERT_EQ(runs.size(), 2u);
  const double accuracy = LastMetric(runs[0].output, "eval_accuracy");
  std::cout << "Wide & Deep test accuracy on adult.test: " << accuracy << "\n";
  EXPECT_GE(accuracy, 0.85) << runs[0].output;
}

TEST(TrainQualityTest, MlpOnFashionMnist) {
  const std::string train =
      "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  if (!std::ifstream(train)) {
    PSRT_SKIP_UNLESS_CI(train << " missing: install dataset-fashion-mnist");
  }
  auto runs = TrainOnTwoHosts(
      {"--model=mlp", "--classes=10", "--format=idx", "--train_files=" + train,
       "--eval_files=/usr/share/datasets/fashion-mnist/"
       "t10k-images-idx3-ubyte.gz",
       "--hidden=256,128", "--epochs=12", "--batch_size=64",
       "--learning_rate_decay=0.8", "--log_every_steps=1000"},
      absl::Minutes(10));
  ASSERT_EQ(runs.size(), 2u);
  const double accuracy = LastMetric(runs[0].output, "eval_accuracy");
  std::cout << "MLP test accuracy on Fashion-MNIST: " << accuracy << "\n";
  EXPECT_GE(accuracy, 0.88) << runs[0].output;
}

}  // namespace
}  // namespace psrt
