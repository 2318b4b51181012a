// DeepFM trained by real ps_worker processes (and an in-process Trainer)
// against real ps_server processes, on the 10,000 DeepFM-on-SageMaker
// validation records: the loss falls, bad input is reported, sync training
// equals an in-process reference, and a missing sync worker is named.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "clients/cpp/id_index.h"
#include "gtest/gtest.h"
#include "partitioner/variable_spec.h"
#include "proto/tf_example.pb.h"
#include "ps_server/optimizers/optimizer.h"
#include "ps_server/shards/initializer.h"
#include "ps_worker/data/tfrecord_writer.h"
#include "ps_worker/trainer.h"
#include "tests/local_cluster.h"
#include "tests/tfrecord_split.h"
#include "tests/worker_output.h"

namespace psrt {
namespace {

const char kVal[] = "testdata/criteo_deepfm_sagemaker/val.tfrecords";
const char kWorker[] = "ps_worker/ps_worker";

std::unique_ptr<LocalCluster> StartCluster(int num_ps, int num_workers) {
  LocalCluster::Options o;
  o.num_ps = num_ps;
  o.num_workers = num_workers;
  auto c = LocalCluster::Start(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// A fresh directory `name` holding 8,000 of the SageMaker records
// (train.tfrecords) and the other 2,000 (eval.tfrecords).
std::string SplitHeldOut(const std::string& name) {
  const std::string dir = FreshTestDir(name);
  EXPECT_TRUE(SplitTfRecords(kVal, 8000, dir + "/train.tfrecords",
                             dir + "/eval.tfrecords")
                  .ok());
  return dir;
}

// ps_worker's flags for DeepFM for 4 epochs on SplitHeldOut's `dir`, then
// `flags` (later flags override earlier ones).
std::vector<std::string> HeldOutArgs(const std::string& dir,
                                     const std::vector<std::string>& flags) {
  std::vector<std::string> args = {
      "--model=deepfm",
      absl::StrCat("--train_files=", dir, "/train.tfrecords"),
      absl::StrCat("--eval_files=", dir, "/eval.tfrecords"),
      "--vocab=117581",
      "--epochs=4",
      "--batch_size=256",
      "--log_every_steps=20",
      "--shuffle_buffer=0"};
  args.insert(args.end(), flags.begin(), flags.end());
  return args;
}

// DeepFM by one ps_worker for 4 epochs on 8,000 of the SageMaker records,
// the other 2,000 held out for evaluation; `flags` are added.
std::vector<LocalCluster::WorkerRun> TrainHeldOut(
    LocalCluster* cluster, const std::string& name,
    const std::vector<std::string>& flags) {
  return cluster->RunWorkers(kWorker, HeldOutArgs(SplitHeldOut(name), flags),
                             {0}, absl::Minutes(5));
}

// ps_worker given `flag` (with an LR model on the SageMaker records) exits
// with 2 and says `message`.
void ExpectFlagRefused(LocalCluster* cluster, const std::string& flag,
                       const std::string& message) {
  auto bad = cluster->RunWorkers(
      kWorker, {"--model=lr", absl::StrCat("--train_files=", kVal), flag}, {0},
      absl::Minutes(1));
  EXPECT_EQ(bad[0].exit_code, 2) << flag;
  EXPECT_NE(bad[0].output.find(message), std::string::npos) << bad[0].output;
}

// --eval_every_steps: worker 0 evaluates every N steps and at the end.
TEST(TrainDeepFmTest, EvaluatesEveryNSteps) {
  auto cluster = StartCluster(1, 1);
  ASSERT_NE(cluster, nullptr);
  auto runs = cluster->RunWorkers(
      kWorker,
      {"--model=lr", absl::StrCat("--train_files=", kVal),
       absl::StrCat("--eval_files=", kVal), "--vocab=117581", "--batch_size=64",
       "--max_steps=30", "--eval_every_steps=10", "--log_every_steps=10"},
      {0}, absl::Minutes(3));
  ASSERT_EQ(runs[0].exit_code, 0) << runs[0].output;
  const std::regex eval_line(R"(eval examples=(\d+) auc=)");
  int evals = 0;
  const std::string& out = runs[0].output;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), eval_line);
       it != std::sregex_iterator(); ++it) {
    ++evals;
    EXPECT_EQ((*it)[1], "10000");  // the whole eval file each time
  }
  // After steps 10 and 20, and at the end (step 30).
  EXPECT_EQ(evals, 3) << out;
}

// TF_CONFIG task.type "evaluator": the process trains nothing and
// evaluates the latest parameters while worker 0 trains, until the last
// step, as TF's evaluator does with each checkpoint.
TEST(TrainDeepFmTest, TheEvaluatorTaskEvaluatesWhileTheWorkerTrains) {
  auto cluster = StartCluster(1, 1);
  ASSERT_NE(cluster, nullptr);
  const std::string dir = FreshTestDir("evaluator");
  ASSERT_TRUE(SplitTfRecords(kVal, 8000, dir + "/train.tfrecords",
                             dir + "/eval.tfrecords")
                  .ok());
  ClusterSpec worker = cluster->spec(), evaluator = cluster->spec();
  worker.has_task = evaluator.has_task = true;
  worker.task = {"worker", 0};
  evaluator.task = {"evaluator", 0};
  auto runs =
      RunPrograms(kWorker,
                  {"--model=deepfm",
                   absl::StrCat("--train_files=", dir, "/train.tfrecords"),
                   absl::StrCat("--eval_files=", dir, "/eval.tfrecords"),
                   "--vocab=117581", "--batch_size=64", "--max_steps=400",
                   "--log_every_steps=100", "--eval_interval_secs=0.2"},
                  {ClusterSpecToJson(worker), ClusterSpecToJson(evaluator)},
                  absl::Minutes(5));
  ASSERT_EQ(runs[0].exit_code, 0) << runs[0].output;
  ASSERT_EQ(runs[1].exit_code, 0) << runs[1].output;
  const std::string& out = runs[1].output;
  EXPECT_EQ(out.find("[worker"), std::string::npos) << out;  // trains nothing
  const std::regex line(R"(\[evaluator\] evaluation \d+ at global step (\d+): )"
                        R"(examples=(\d+) auc=([0-9.]+))");
  std::vector<int64_t> steps;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line);
       it != std::sregex_iterator(); ++it) {
    steps.push_back(std::stoll((*it)[1]));
    EXPECT_EQ((*it)[2], "2000");  // the whole held-out file each time
  }
  // Several evaluations during training, at rising steps, the last at the
  // last step.
  ASSERT_GE(steps.size(), 3u) << out;
  EXPECT_TRUE(std::is_sorted(steps.begin(), steps.end())) << out;
  EXPECT_LT(steps.front(), 400) << out;
  EXPECT_EQ(steps.back(), 400) << out;
  // Its last evaluation saw the worker's final parameters: the same AUC
  // as the worker's own final evaluation of the same file.
  EXPECT_GT(LastMetric(out, "eval_auc"), 0.65) << out;  // 0.5 untrained
  EXPECT_NEAR(LastMetric(out, "eval_auc"),
              LastMetric(runs[0].output, "eval_auc"), 1e-9)
      << out << runs[0].output;
  // Every push the PS applied came from the worker.
  auto client = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(client.ok());
  auto stats = (*client)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ((*stats)[0].push_requests(), 400);
}

// --data_sharding over two workers and two files of 8,000 and 2,000
// records, one epoch: each record is trained exactly once, by whole files
// (file; auto too, since 2 files divide evenly over 2 workers), interleaved
// (record), or by each worker from its own input (none, as under
// SageMaker's ShardedByS3Key).
TEST(TrainDeepFmTest, DataShardingTrainsEveryRecordOncePerEpoch) {
  auto cluster = StartCluster(1, 2);
  ASSERT_NE(cluster, nullptr);
  const std::string dir = FreshTestDir("sharding");
  const std::string big = dir + "/a.tfrecords", small = dir + "/b.tfrecords";
  ASSERT_TRUE(SplitTfRecords(kVal, 8000, big, small).ok());
  struct Case {
    std::string sharding;
    std::vector<std::string> files;  // per worker, or one list for both
    int64_t examples[2];
  } cases[] = {
      {"file", {big + "," + small}, {8000, 2000}},
      {"auto", {big + "," + small}, {8000, 2000}},  // 2 files, 2 workers
      {"record", {big + "," + small}, {5000, 5000}},
      {"none", {big, small}, {8000, 2000}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.sharding);
    std::vector<std::string> configs;
    for (int w = 0; w < 2; ++w) {
      ClusterSpec spec = cluster->spec();
      spec.has_task = true;
      spec.task = {"worker", w};
      configs.push_back(ClusterSpecToJson(spec));
    }
    // Both workers at once, each with its own --train_files where the case
    // has two lists (RunPrograms passes one argv: run them one by one).
    std::vector<LocalCluster::WorkerRun> runs;
    if (c.files.size() == 1) {
      runs = RunPrograms(
          kWorker,
          {"--model=lr", "--vocab=117581", "--batch_size=500", "--epochs=1",
           "--mode=async", absl::StrCat("--data_sharding=", c.sharding),
           absl::StrCat("--train_files=", c.files[0])},
          configs, absl::Minutes(3));
    } else {
      for (int w = 0; w < 2; ++w) {
        auto one = RunPrograms(
            kWorker,
            {"--model=lr", "--vocab=117581", "--batch_size=500", "--epochs=1",
             absl::StrCat("--data_sharding=", c.sharding),
             absl::StrCat("--train_files=", c.files[w])},
            {configs[w]}, absl::Minutes(3));
        runs.push_back(one[0]);
      }
    }
    for (int w = 0; w < 2; ++w) {
      ASSERT_EQ(runs[w].exit_code, 0) << runs[w].output;
      EXPECT_EQ(LastMetric(runs[w].output, "examples"), c.examples[w])
          << runs[w].output;
      EXPECT_NE(
          runs[w].output.find(absl::StrCat(
              "data sharding: ", c.sharding == "auto" ? "file" : c.sharding)),
          std::string::npos)
          << runs[w].output;
    }
  }
}

// TFRecords with one feature per column, as Criteo pipelines for
// TensorFlow write them (C1..C8 int64 categorical, I1..I2 float), planted
// with a logistic signal: DeepFM reads them through --tfrecord_features
// and learns it (held-out AUC).
TEST(TrainDeepFmTest, TrainsOnPerColumnTfRecords) {
  auto cluster = StartCluster(1, 1);
  ASSERT_NE(cluster, nullptr);
  const std::string dir = FreshTestDir("per_column");
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> weight(8, std::vector<float>(40));
  for (auto& column : weight) {
    for (float& w : column) w = normal(rng);
  }
  auto write = [&](const std::string& path, int rows) {
    auto writer = TfRecordWriter::Open(path, /*gzip=*/false);
    ASSERT_TRUE(writer.ok());
    std::uniform_int_distribution<int> value(0, 39);
    std::uniform_real_distribution<float> u(0, 1);
    for (int r = 0; r < rows; ++r) {
      tf::Example example;
      auto& f = *example.mutable_features()->mutable_feature();
      float z = 0;
      for (int c = 0; c < 8; ++c) {
        const int v = value(rng);
        z += 0.6f * weight[c][v];
        // Values repeat across columns: only the column tells them apart.
        f[absl::StrCat("C", c + 1)].mutable_int64_list()->add_value(v);
      }
      const float i1 = normal(rng), i2 = normal(rng);
      z += 0.8f * i1;
      f["I1"].mutable_float_list()->add_value(i1);
      f["I2"].mutable_float_list()->add_value(i2);
      f["label"].mutable_int64_list()->add_value(u(rng) <
                                                 1 / (1 + std::exp(-z)));
      ASSERT_TRUE((*writer)->WriteRecord(example.SerializeAsString()).ok());
    }
    ASSERT_TRUE((*writer)->Close().ok());
  };
  write(dir + "/train.tfrecords", 12000);
  write(dir + "/eval.tfrecords", 3000);
  auto runs = cluster->RunWorkers(
      kWorker,
      {"--model=deepfm", "--format=tfrecord",
       "--tfrecord_features=categorical:C1..C8,dense:I1..I2",
       absl::StrCat("--train_files=", dir, "/train.tfrecords"),
       absl::StrCat("--eval_files=", dir, "/eval.tfrecords"), "--epochs=3",
       "--batch_size=128", "--log_every_steps=100"},
      {0}, absl::Minutes(3));
  ASSERT_EQ(runs[0].exit_code, 0) << runs[0].output;
  const std::string& out = runs[0].output;
  EXPECT_NE(out.find("deepfm (8 fields, 2 dense features"), std::string::npos)
      << out;
  EXPECT_EQ(LastMetric(out, "examples"), 36000) << out;
  EXPECT_GT(LastMetric(out, "eval_auc"), 0.75) << out;  // 0.5: no signal
}

// --summary_dir: TensorBoard event files, read back by an independent
// reader (tests/summary/read_events.py: TFRecord framing with CRC checks,
// Event protos decoded by hand), hold every progress line's loss and
// examples/s at its step, and the evaluations.
TEST(TrainDeepFmTest, SummariesHoldTheProgressLinesFigures) {
  auto cluster = StartCluster(1, 1);
  ASSERT_NE(cluster, nullptr);
  const std::string dir = FreshTestDir("summaries");
  auto runs = cluster->RunWorkers(
      kWorker,
      {"--model=lr", absl::StrCat("--train_files=", kVal),
       absl::StrCat("--eval_files=", kVal), "--vocab=117581", "--batch_size=64",
       "--max_steps=60", "--log_every_steps=20", "--eval_every_steps=30",
       absl::StrCat("--summary_dir=", dir)},
      {0}, absl::Minutes(3));
  ASSERT_EQ(runs[0].exit_code, 0) << runs[0].output;
  const std::string& out = runs[0].output;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files.push_back(entry.path().string());
  }
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("/events.out.tfevents."), std::string::npos);
  auto read = RunPrograms("/usr/bin/python3",
                          {"tests/summary/read_events.py", files[0]}, {""},
                          absl::Seconds(60))[0];
  ASSERT_EQ(read.exit_code, 0) << read.output;
  EXPECT_EQ(read.output.rfind("file_version brain.Event:2", 0), 0u)
      << read.output;
  // "step tag value" lines, by tag.
  std::map<std::string, std::vector<std::pair<int64_t, double>>> scalars;
  std::istringstream lines(read.output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    int64_t step;
    std::string tag;
    double value;
    if (words >> step >> tag >> value) scalars[tag].push_back({step, value});
  }
  // One loss per progress line (steps 20, 40, 60), equal to the logged one.
  const std::vector<double> logged = MetricValues(out, "loss");
  ASSERT_EQ(logged.size(), 3u) << out;
  ASSERT_EQ(scalars["loss"].size(), 3u) << read.output;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(scalars["loss"][i].first, static_cast<int64_t>(20 * (i + 1)));
    EXPECT_NEAR(scalars["loss"][i].second, logged[i], 1e-5);
  }
  for (const char* tag : {"auc", "examples_per_sec", "time/data_ms",
                          "time/pull_ms", "time/compute_ms", "time/push_ms"}) {
    EXPECT_EQ(scalars[tag].size(), 3u) << tag;
  }
  EXPECT_GT(scalars["examples_per_sec"][0].second, 0);
  // Evaluations at step 30 and at the end, the last as the log says.
  ASSERT_EQ(scalars["eval/auc"].size(), 2u) << read.output;
  EXPECT_EQ(scalars["eval/auc"][0].first, 30);
  EXPECT_EQ(scalars["eval/auc"][1].first, 60);
  EXPECT_NEAR(scalars["eval/auc"][1].second, LastMetric(out, "eval_auc"), 1e-5);
}

// --metrics_port: a training ps_worker serves Prometheus text whose
// figures are the ones it logs: steps and examples done, one phase sample
// per step, the last progress line's loss and AUC, the process series.
TEST(TrainDeepFmTest, WorkerServesItsMetricsWhileTraining) {
  auto cluster = StartCluster(1, 1);
  ASSERT_NE(cluster, nullptr);
  const std::string dir = FreshTestDir("worker_metrics");
  const int port = PickUnusedPort();
  // Trains until killed (--epochs=0); the test scrapes, then stops it.
  std::vector<LocalCluster::WorkerRun> runs;
  std::thread worker([&] {
    runs = cluster->RunWorkers(
        kWorker,
        {"--model=lr", absl::StrCat("--train_files=", kVal), "--vocab=117581",
         "--batch_size=64", "--epochs=0", "--log_every_steps=10",
         absl::StrCat("--metrics_port=", port),
         "--metrics_bind_address=127.0.0.1",
         absl::StrCat("--summary_dir=", dir)},  // marks this process
        {0}, absl::Minutes(3));
  });
  // A scrape is not atomic: the worker goes on training while it is
  // rendered. So a second scrape right after bounds what the first saw.
  std::string scraped, later;
  const absl::Time give_up = absl::Now() + absl::Minutes(2);
  while (absl::Now() < give_up) {
    auto m = FetchMetrics(port);
    if (m.ok() && MetricValue(*m, "psrt_worker_loss{worker=\"0\"}") > 0 &&
        MetricValue(*m, "psrt_worker_steps_total{worker=\"0\"}") >= 30) {
      scraped = *m;
      later = FetchMetrics(port).value_or("");
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  // ("[-]": the pattern does not match the shell running pkill.)
  // (The worker trains until stopped, so pkill finds it: exit status 0.)
  EXPECT_EQ(
      std::system(absl::StrCat("pkill -TERM -f -- '[-]-summary_dir=", dir, "'")
                      .c_str()),
      0);
  worker.join();
  ASSERT_FALSE(scraped.empty())
      << "no metrics with 30 steps on port " << port << "; worker output:\n"
      << (runs.empty() ? "" : runs[0].output);
  const std::string& out = runs[0].output;
  auto value = [&](const std::string& sample) {
    return MetricValue(scraped, sample);
  };
  const double steps = value("psrt_worker_steps_total{worker=\"0\"}");
  const double steps_after =
      MetricValue(later, "psrt_worker_steps_total{worker=\"0\"}");
  ASSERT_GE(steps_after, steps) << later;
  // 10,000 records in batches of 64: each epoch is 156 full batches and one
  // of 16, so after s steps the worker trained on f(s) examples.
  auto examples_after = [](double s) {
    return 64 * s - 48 * std::floor(s / 157);
  };
  // (A scrape reads the step count before the examples, in the order
  // WorkerMetrics registers them; a step adds its examples first.)
  const double examples = value("psrt_worker_examples_total{worker=\"0\"}");
  EXPECT_GE(examples, examples_after(steps)) << scraped;
  EXPECT_LE(examples, examples_after(steps_after)) << later;
  // Each phase is observed before its step counts as done (a step ahead at
  // most), between this scrape's step count and the next one's.
  for (const char* phase : {"data", "pull", "compute", "push"}) {
    const double n = value(
        absl::StrCat("psrt_worker_step_phase_duration_seconds_count{phase=\"",
                     phase, "\",worker=\"0\"}"));
    EXPECT_GE(n, steps) << phase << "\n" << scraped;
    EXPECT_LE(n, steps_after + 1) << phase;
  }
  // The gauges hold one of the progress lines' figures (the last one
  // printed before the scrape).
  const double loss = value("psrt_worker_loss{worker=\"0\"}");
  const double auc = value("psrt_worker_auc{worker=\"0\"}");
  const std::vector<double> losses = MetricValues(out, "loss");
  const std::vector<double> aucs = MetricValues(out, "auc");
  ASSERT_EQ(losses.size(), aucs.size());
  bool logged = false;
  for (size_t i = 0; i < losses.size(); ++i) {
    logged |=
        std::fabs(losses[i] - loss) < 1e-5 && std::fabs(aucs[i] - auc) < 1e-5;
  }
  EXPECT_TRUE(logged) << "loss " << loss << " auc " << auc
                      << " are no progress line's:\n"
                      << out;
  EXPECT_EQ(value("psrt_worker_ps_recoveries_total{worker=\"0\"}"), 0);
  EXPECT_EQ(value("psrt_worker_lost_pushes_total{worker=\"0\"}"), 0);
  // (The start time is whole boot seconds plus clock ticks: +1 s of slack.)
  const double now = absl::ToUnixMicros(absl::Now()) / 1e6 + 1;
  EXPECT_LE(value("process_start_time_seconds"), now);
  EXPECT_GT(value("process_start_time_seconds"), now - 300);
  EXPECT_NE(scraped.find("psrt_build_info{component=\"ps_worker\","),
            std::string::npos)
      << scraped;
}

TEST(TrainDeepFmTest, QualityLossFallsOnTheSageMakerRecords) {
  auto cluster = StartCluster(1, 1);
  ASSERT_NE(cluster, nullptr);
  auto runs = TrainHeldOut(cluster.get(), "deepfm_split", {});
  ASSERT_EQ(runs[0].exit_code, 0) << runs[0].output;
  const std::string& out = runs[0].output;
  // Every record of every epoch was read (CRCs checked by the reader).
  EXPECT_EQ(LastMetric(out, "examples"), 32000) << out;
  EXPECT_EQ(LastMetric(out, "bad_records"), 0);
  const std::vector<double> loss = MetricValues(out, "loss");
  ASSERT_GE(loss.size(), 4u) << out;
  EXPECT_LT(loss.back(), loss.front() - 0.05) << out;
  EXPECT_GT(LastMetric(out, "eval_auc"), 0.68)
      << out;  // held out: 0.714-0.717 in 3 runs

  // The SageMaker metric_definitions regexes of docs/operations.md find
  // the same numbers (the first capture group of each matching line).
  auto captures = [&](const std::string& pattern) {
    std::vector<double> values;
    const std::regex re(pattern);
    for (auto it = std::sregex_iterator(out.begin(), out.end(), re);
         it != std::sregex_iterator(); ++it) {
      values.push_back(std::stod((*it)[1]));
    }
    return values;
  };
  EXPECT_EQ(captures(R"( loss=([0-9.eE+-]+))"), loss);
  EXPECT_EQ(captures(R"(step=\d+ .* auc=([0-9.]+))").size(), loss.size());
  EXPECT_EQ(captures(R"(step=\d+ .* examples/s=([0-9.]+))").size(),
            loss.size());
  const std::vector<double> eval_auc =
      captures(R"(eval examples=\d+ auc=([0-9.]+))");
  ASSERT_EQ(eval_auc.size(), 1u) << out;
  EXPECT_NEAR(eval_auc[0], LastMetric(out, "eval_auc"), 1e-5);
  EXPECT_EQ(captures(R"(eval examples=.* logloss=([0-9.]+))").size(), 1u);
}

// --pushes_in_flight=4: the worker sends step k's gradients before step
// k - 1's push was acknowledged, and --prefetch_steps=3 sends the pulls of
// steps k + 1 .. k + 3 before step k computes; every push still lands
// (none lost, every example trained, none twice) and the held-out AUC
// meets the one-at-a-time bound.
TEST(TrainDeepFmTest, PushesInFlightTrainAsWellAndLoseNothing) {
  auto cluster = StartCluster(2, 1);
  ASSERT_NE(cluster, nullptr);
  auto runs = TrainHeldOut(cluster.get(), "deepfm_in_flight",
                           {"--pushes_in_flight=4", "--prefetch_steps=3"});
  ASSERT_EQ(runs[0].exit_code, 0) << runs[0].output;
  const std::string& out = runs[0].output;
  EXPECT_EQ(LastMetric(out, "examples"), 32000) << out;
  EXPECT_EQ(LastMetric(out, "steps"), 128) << out;  // 4 x ceil(8000 / 256)
  EXPECT_EQ(LastMetric(out, "lost_pushes"), 0) << out;
  EXPECT_GT(LastMetric(out, "eval_auc"), 0.68) << out;
  // Every step's push reached both PS once, the last one included.
  auto client = Client::Connect(cluster->MakeClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  auto stats = (*client)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const StatsResponse& s : *stats) {
    EXPECT_EQ(s.push_requests(), 128) << s.ShortDebugString();
    EXPECT_EQ(s.global_step(), 128) << s.ShortDebugString();
    EXPECT_EQ(s.rejected_pushes(), 0);
  }

  ExpectFlagRefused(cluster.get(), "--pushes_in_flight=0",
                    "--pushes_in_flight=0: must be in [1, 16]");
  ExpectFlagRefused(cluster.get(), "--prefetch_steps=17",
                    "--prefetch_steps=17: must be in [1, 16]");
}

// --cache=DIR: the first run's first epoch writes the worker's parsed
// examples there and its later epochs read them back; a second run over the
// same files parses nothing. Both train every example of every epoch to the
// held-out bound.
TEST(TrainDeepFmTest, DiskCacheServesLaterEpochsAndLaterRuns) {
  auto cluster = StartCluster(1, 1);
  ASSERT_NE(cluster, nullptr);
  const std::string dir = SplitHeldOut("disk_cache_runs");
  const std::vector<std::string> args =
      HeldOutArgs(dir, {"--epochs=3", "--shuffle_buffer=10000",
                        absl::StrCat("--cache=", dir, "/cache")});
  std::vector<double> aucs;
  for (int run = 0; run < 2; ++run) {
    auto runs = cluster->RunWorkers(kWorker, args, {0}, absl::Minutes(5));
    ASSERT_EQ(runs[0].exit_code, 0) << runs[0].output;
    const std::string& out = runs[0].output;
    EXPECT_EQ(LastMetric(out, "examples"), 24000) << out;
    EXPECT_NE(out.find(run == 0 ? "dataset: cached 8000 examples in " + dir
                                : "dataset: reading 8000 examples from " + dir),
              std::string::npos)
        << out;
    aucs.push_back(LastMetric(out, "eval_auc"));
    EXPECT_GT(aucs.back(), 0.68) << out;
  }
  std::cout << "held-out AUC: run 1 (cache written) " << aucs[0]
            << ", run 2 (cache read) " << aucs[1] << "\n";

  ExpectFlagRefused(cluster.get(), "--cache=",
                    "--cache is empty: none, memory or a directory");
}

TEST(TrainDeepFmTest, BadInputIsReportedWithFileAndRecord) {
  auto cluster = StartCluster(1, 1);
  ASSERT_NE(cluster, nullptr);
  const std::string dir = ::testing::TempDir();
  // A LibSVM file with one malformed line among good ones.
  const std::string libsvm = dir + "/bad.libsvm";
  {
    std::ofstream out(libsvm);
    for (int i = 0; i < 50; ++i) {
      out << (i % 2) << " 1:1 " << 2 + i % 7 << ":1\n";
      if (i == 20) out << "1 3:oops\n";
    }
  }
  auto runs = cluster->RunWorkers(
      kWorker,
      {"--model=lr", "--format=libsvm", "--train_files=" + libsvm,
       "--vocab=100", "--batch_size=8"},
      {0}, absl::Minutes(2));
  EXPECT_NE(runs[0].exit_code, 0);
  EXPECT_NE(runs[0].output.find(libsvm + ":22: bad feature '3:oops'"),
            std::string::npos)
      << runs[0].output;
  runs = cluster->RunWorkers(
      kWorker,
      {"--model=lr", "--format=libsvm", "--train_files=" + libsvm,
       "--vocab=100", "--batch_size=8", "--skip_bad_records"},
      {0}, absl::Minutes(2));
  EXPECT_EQ(runs[0].exit_code, 0) << runs[0].output;
  EXPECT_EQ(LastMetric(runs[0].output, "bad_records"), 1) << runs[0].output;
  EXPECT_EQ(LastMetric(runs[0].output, "examples"), 50);

  // A truncated TFRecord file: the damaged record is named.
  std::ifstream in(kVal, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string truncated = dir + "/truncated.tfrecords";
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, 313 * 10 + 100);
  runs = cluster->RunWorkers(
      kWorker,
      {"--model=deepfm", "--train_files=" + truncated, "--vocab=117581",
       "--batch_size=4", "--skip_bad_records"},
      {0}, absl::Minutes(2));
  EXPECT_NE(runs[0].exit_code, 0);
  EXPECT_NE(runs[0].output.find(truncated + ": record 11: truncated"),
            std::string::npos)
      << runs[0].output;

  // Records with the wrong number of fields for the model.
  runs = cluster->RunWorkers(
      kWorker,
      {"--model=deepfm", absl::StrCat("--train_files=", kVal), "--fields=26",
       "--vocab=117581"},
      {0}, absl::Minutes(2));
  EXPECT_NE(runs[0].exit_code, 0);
  EXPECT_NE(runs[0].output.find(
                "deepfm needs exactly 26 sparse features (fields) per example; "
                "this batch has 39"),
            std::string::npos)
      << runs[0].output;
}

TEST(TrainDeepFmTest, MissingSyncWorkerIsNamedNotAwaitedForever) {
  auto cluster = StartCluster(1, 2);
  ASSERT_NE(cluster, nullptr);
  const absl::Time start = absl::Now();
  auto runs = cluster->RunWorkers(
      kWorker,
      {"--model=deepfm", absl::StrCat("--train_files=", kVal), "--vocab=117581",
       "--mode=sync", "--max_steps=20", "--sync_timeout_secs=3"},
      {0}, absl::Minutes(2));  // worker 1 never starts
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_NE(runs[0].exit_code, 0);
  EXPECT_NE(runs[0].output.find("DEADLINE_EXCEEDED"), std::string::npos);
  EXPECT_NE(runs[0].output.find("has pushes from 1 of 2 workers; still "
                                "missing: worker 1"),
            std::string::npos)
      << runs[0].output;
}

// SSP, staleness 2, worker 1 never starting: the servers answer worker 0's
// pull of step t only while t - 2 <= 0 (worker 1's clock), so worker 0
// pushes steps 0, 1 and 2 and no more, then names worker 1 -- the same with
// the pulls of 4 steps sent ahead as with 1: pulling early changes when a
// pull is sent, not what the bound lets it read.
TEST(TrainDeepFmTest, PullsSentAheadKeepTheSspBound) {
  for (const int prefetch_steps : {1, 4}) {
    SCOPED_TRACE(absl::StrCat("--prefetch_steps=", prefetch_steps));
    auto cluster = StartCluster(1, 2);
    ASSERT_NE(cluster, nullptr);
    auto runs = cluster->RunWorkers(
        kWorker,
        {"--model=deepfm", absl::StrCat("--train_files=", kVal),
         "--vocab=117581", "--mode=ssp", "--staleness=2",
         "--sync_timeout_secs=3",
         absl::StrCat("--prefetch_steps=", prefetch_steps)},
        {0}, absl::Minutes(2));
    EXPECT_NE(runs[0].exit_code, 0);
    EXPECT_NE(runs[0].output.find("DEADLINE_EXCEEDED"), std::string::npos)
        << runs[0].output;
    EXPECT_NE(runs[0].output.find("worker 1"), std::string::npos)
        << runs[0].output;
    auto client = Client::Connect(cluster->MakeClientOptions());
    ASSERT_TRUE(client.ok()) << client.status();
    auto stats = (*client)->Stats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ((*stats)[0].push_requests(), 3) << (*stats)[0].ShortDebugString();
  }
}

// One worker, one tower, sync mode: each step reads the parameters the
// previous step wrote, so the result must equal a plain in-process loop
// that applies the same updates with the same optimizer code -- also with
// the pulls of `prefetch_steps` steps sent ahead (the servers hold each
// until the step before it was applied).
void ExpectSyncTrainingEqualsAnInProcessReference(int prefetch_steps) {
  auto cluster = StartCluster(2, 1);
  ASSERT_NE(cluster, nullptr);
  TrainerOptions o;
  o.client = cluster->MakeClientOptions();
  o.model.name = "deepfm";
  o.model.vocab = 117581;
  o.model.embedding_dim = 4;
  o.model.hidden = {16, 8};
  o.model.embedding_optimizer.set_kind(OptimizerSpec::ADAGRAD);
  o.model.embedding_optimizer.set_learning_rate(0.05f);
  o.model.dense_optimizer.set_kind(OptimizerSpec::ADAM);
  o.model.dense_optimizer.set_learning_rate(0.002f);
  o.train.patterns = {kVal};
  o.train.reader.format = "tfrecord";
  o.train.batch_size = 64;
  o.consistency.set_mode(Consistency::SYNC);
  o.consistency.set_workers(1);
  o.consistency.set_timeout_seconds(30);
  o.max_steps = 30;
  o.log_every_steps = 10;
  o.prefetch_steps = prefetch_steps;
  Trainer trainer(o);
  auto result = trainer.Run();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->steps, 30);
  const Model& model = *trainer.model();

  // The reference: every variable in process memory, same initial values.
  struct Variable {
    std::vector<float> values, slot0, slot1;
    std::unique_ptr<Optimizer> optimizer;
    int width = 1;
    int64_t updates = 0;
  };
  std::map<std::string, Variable> vars;
  for (VariableSpec spec : model.variables()) {
    ASSERT_TRUE(NormalizeVariableSpec(&spec).ok());
    Variable& v = vars[spec.name()];
    const int64_t rows = spec.shape_size() == 0 ? 1 : spec.shape(0);
    v.width = RowWidth(spec);
    v.values.resize(rows * v.width);
    Initializer(spec.initializer()).FillRows(0, rows, v.width, v.values.data());
    v.optimizer = CreateOptimizer(spec.optimizer());
    v.slot0.assign(v.values.size(), v.optimizer->num_slots() > 0
                                        ? v.optimizer->initial_slot_value(0)
                                        : 0);
    v.slot1.assign(v.values.size(), 0.0f);
  }
  DatasetOptions data = o.train;
  data.epochs = 0;
  auto dataset = Dataset::Create(data);
  ASSERT_TRUE(dataset.ok());
  for (int step = 0; step < 30; ++step) {
    Batch batch;
    ASSERT_TRUE(*(*dataset)->Next(&batch));
    IdIndex index(batch.ids.size());
    StepParameters p;
    for (int64_t id : batch.ids) {
      bool inserted;
      p.slots.push_back(index.Insert(id, &inserted));
    }
    p.unique_ids = index.TakeIds();
    for (const auto& t : model.tables()) {
      const Variable& v = vars[t.name];
      std::vector<float> rows;
      for (int64_t id : p.unique_ids) {
        rows.insert(rows.end(), v.values.begin() + id * t.dim,
                    v.values.begin() + (id + 1) * t.dim);
      }
      p.tables.push_back(rows);
    }
    for (const auto& d : model.dense_variables())
      p.dense.push_back(vars[d.name].values);
    Gradients g = model.NewGradients(p.unique_ids.size());
    std::vector<float> predictions(batch.size);
    model.Compute(batch, 0, batch.size, 1.0f / batch.size, p, &g,
                  predictions.data());
    for (size_t t = 0; t < model.tables().size(); ++t) {
      Variable& v = vars[model.tables()[t].name];
      const int dim = model.tables()[t].dim;
      const UpdateContext ctx = MakeUpdateContext(
          *v.optimizer, o.model.embedding_optimizer.learning_rate(), 1);
      for (size_t u = 0; u < p.unique_ids.size(); ++u) {
        const int64_t at = p.unique_ids[u] * dim;
        float* slots[] = {v.slot0.data() + at, v.slot1.data() + at};
        v.optimizer->Apply(v.values.data() + at, slots,
                           g.tables[t].data() + u * dim, dim, ctx);
      }
    }
    for (size_t d = 0; d < model.dense_variables().size(); ++d) {
      Variable& v = vars[model.dense_variables()[d].name];
      // Adam's t: every dense shard gets one update per step.
      const UpdateContext ctx = MakeUpdateContext(
          *v.optimizer, o.model.dense_optimizer.learning_rate(), ++v.updates);
      float* slots[] = {v.slot0.data(), v.slot1.data()};
      v.optimizer->Apply(v.values.data(), slots, g.dense[d].data(),
                         v.values.size(), ctx);
    }
  }

  // Compare every dense variable and the rows of the first 2000 ids.
  double max_error = 0;
  for (const auto& d : model.dense_variables()) {
    std::vector<float> got(d.size);
    ASSERT_TRUE(trainer.client()->PullDense(d.name, got.data()).ok());
    for (int64_t i = 0; i < d.size; ++i) {
      max_error = std::max<double>(max_error,
                                   std::fabs(got[i] - vars[d.name].values[i]));
    }
  }
  std::vector<int64_t> ids(2000);
  std::iota(ids.begin(), ids.end(), 0);
  for (const auto& t : model.tables()) {
    std::vector<float> got(ids.size() * t.dim);
    ASSERT_TRUE(trainer.client()->PullRows(t.name, ids, got.data()).ok());
    for (size_t i = 0; i < got.size(); ++i) {
      max_error = std::max<double>(max_error,
                                   std::fabs(got[i] - vars[t.name].values[i]));
    }
  }
  std::cout << "max |cluster - reference| after 30 sync steps, "
            << prefetch_steps << " step(s) pulled ahead: " << max_error << "\n";
  EXPECT_LE(max_error, 1e-5);
}

TEST(TrainDeepFmTest, SyncTrainingEqualsAnInProcessReference) {
  ExpectSyncTrainingEqualsAnInProcessReference(1);
}

TEST(TrainDeepFmTest, SyncTrainingWithPullsAheadEqualsTheReference) {
  ExpectSyncTrainingEqualsAnInProcessReference(3);
}

}  // namespace
}  // namespace psrt
