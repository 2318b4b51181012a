// A PS killed with SIGKILL during asynchronous training: the worker does not
// crash, waits for the PS (saying so in its log), the PS is restarted and
// restores its shards from the latest periodic checkpoint, and training
// completes with a final AUC close to an undisturbed run's.
#include <csignal>
#include <fstream>
#include <regex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "ps_server/storage/storage.h"
#include "tests/local_cluster.h"
#include "tests/worker_output.h"

namespace psrt {
namespace {

const char kVal[] = "testdata/criteo_deepfm_sagemaker/val.tfrecords";

std::vector<std::string> WorkerArgs() {
  return {"--model=deepfm",
          absl::StrCat("--train_files=", kVal),
          absl::StrCat("--eval_files=", kVal),
          "--vocab=117581",
          "--epochs=4",
          "--batch_size=128",
          "--log_every_steps=50",
          "--shuffle_buffer=0"};
}

int64_t GlobalStep(LocalCluster& cluster, int ps) {
  auto client = Client::Connect(cluster.MakeClientOptions());
  if (!client.ok()) return -1;
  auto stats = (*client)->Stats();
  return stats.ok() ? (*stats)[ps].global_step() : -1;
}

TEST(PsFaultTest, KilledPsIsRestartedFromItsCheckpointAndTrainingCompletes) {
  // Undisturbed run.
  double baseline_auc = 0;
  {
    LocalCluster::Options o;
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    auto runs = (*cluster)->RunWorkers("ps_worker/ps_worker", WorkerArgs(), {0},
                                       absl::Minutes(5));
    ASSERT_EQ(runs[0].exit_code, 0) << runs[0].output;
    baseline_auc = LastMetric(runs[0].output, "eval_auc");
  }

  LocalCluster::Options o;
  const std::string root = FreshTestDir("fault_ckpt");
  o.extra_flags = {absl::StrCat("--checkpoint_uri=", root),
                   "--checkpoint_every_steps=20", "--restore=auto",
                   "--checkpoint_on_shutdown=false"};
  auto started = LocalCluster::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  std::vector<LocalCluster::WorkerRun> runs;
  std::thread worker([&] {
    runs = cluster.RunWorkers("ps_worker/ps_worker", WorkerArgs(), {0},
                              absl::Minutes(5));
  });
  // Let training run past a periodic checkpoint, then kill PS 1.
  auto storage = OpenStorage(root);
  ASSERT_TRUE(storage.ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(120);
  int64_t step_at_kill = 0;
  while (absl::Now() < give_up) {
    if (ReadLatest(**storage).ok()) {
      step_at_kill = GlobalStep(cluster, 1);
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GT(step_at_kill, 0) << "no checkpoint was taken";
  cluster.Kill(1, SIGKILL);
  absl::SleepFor(absl::Seconds(2));  // the worker notices and waits
  ASSERT_TRUE(cluster.Restart(1).ok());
  worker.join();
  ASSERT_EQ(runs.size(), 1u);
  const std::string& out = runs[0].output;
  ASSERT_EQ(runs[0].exit_code, 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "PS failure")) << out;
  EXPECT_TRUE(absl::StrContains(out, "servers are back")) << out;
  EXPECT_GE(LastMetric(out, "ps_recoveries"), 1) << out;
  EXPECT_EQ(LastMetric(out, "examples"), 40000) << out;

  // What the restarted PS restored, from its log.
  std::ifstream log(cluster.log_path(1));
  std::string text((std::istreambuf_iterator<char>(log)),
                   std::istreambuf_iterator<char>());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(\(step (\d+), )")))
      << "PS 1 did not restore a checkpoint:\n"
      << text;
  const int64_t restored_step = std::stoll(m[1]);
  const double auc = LastMetric(out, "eval_auc");
  std::cout << "killed PS 1 at global step ~" << step_at_kill
            << ", restored its checkpoint of step " << restored_step
            << " (updates of up to " << step_at_kill - restored_step
            << " steps lost on PS 1's shards), lost pushes "
            << LastMetric(out, "lost_pushes") << "; final AUC " << auc
            << " vs undisturbed " << baseline_auc << std::endl;
  // Lost: at most what happened since the last checkpoint (the interval,
  // plus the steps of the second the trigger sleeps between looks).
  EXPECT_LE(step_at_kill - restored_step, 400);
  EXPECT_GT(auc, baseline_auc - 0.02);
}

}  // namespace
}  // namespace psrt
