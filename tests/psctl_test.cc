// psctl against a live 2-PS cluster: what each command prints is what the
// servers hold (shards, bytes, requests), a checkpoint it asks for is
// written and then listed with the bytes each PS wrote, and partial or
// corrupt checkpoints are reported as such instead of crashing the listing.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/local_cluster.h"
#include "tests/worker_output.h"

namespace psrt {
namespace {

constexpr int64_t kDenseFloats = 100000;     // 400,000 bytes, 2 shards
constexpr int64_t kVocab = 2000, kDim = 16;  // 128,000 bytes, 2 shards

class PsctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = FreshTestDir("psctl_checkpoints");
    auto cluster = LocalCluster::Start(
        {.num_ps = 2,
         .extra_flags = {absl::StrCat("--checkpoint_uri=", root_),
                         "--checkpoint_on_shutdown=false"}});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto client = Client::Connect(cluster_->MakeClientOptions());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);

    VariableSpec dense;  // plain SGD: parameters only, no slots
    dense.set_name("w");
    dense.set_kind(DENSE);
    dense.add_shape(kDenseFloats);
    dense.mutable_partition()->set_num_shards(2);
    dense.mutable_optimizer()->set_learning_rate(0.5f);
    VariableSpec emb;
    emb.set_name("emb");
    emb.set_kind(EMBEDDING);
    emb.add_shape(kVocab);
    emb.add_shape(kDim);
    emb.mutable_partition()->set_num_shards(2);
    emb.mutable_optimizer()->set_learning_rate(0.5f);
    ASSERT_EQ(client_->CreateVariables({dense, emb}), absl::OkStatus());
  }

  // Runs psctl with the cluster's spec and `args`.
  LocalCluster::WorkerRun Psctl(std::vector<std::string> args) {
    args.insert(
        args.begin(),
        absl::StrCat("--cluster=", ClusterSpecToJson(cluster_->spec())));
    return RunPrograms("tools/psctl/psctl", args, {""}, absl::Seconds(60))[0];
  }

  std::string root_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Client> client_;
};

// The lines of `text` that start with `prefix`.
std::vector<std::string> LinesStartingWith(const std::string& text,
                                           const std::string& prefix) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, prefix)) out.emplace_back(line);
  }
  return out;
}

std::vector<std::string> Words(const std::string& line) {
  return absl::StrSplit(line, ' ', absl::SkipEmpty());
}

TEST_F(PsctlTest, StatusCountsShardsAndRequestsPerPs) {
  std::vector<float> grad(kDenseFloats, 1.0f), out(kDenseFloats);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client_->PushDense("w", grad.data()).ok());
  }
  ASSERT_TRUE(client_->PullDense("w", out.data()).ok());
  ASSERT_EQ(out[0], -1.5f);

  auto run = Psctl({"status"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // Header, then one row per PS: PS address shards parameters(2 words)
  // pulls pushes rejected uptime.
  int shards = 0, pushes = 0, pulls = 0;
  for (int ps = 0; ps < 2; ++ps) {
    auto rows = LinesStartingWith(run.output, absl::StrCat(ps, " "));
    ASSERT_EQ(rows.size(), 1u) << run.output;
    auto w = Words(rows[0]);
    ASSERT_EQ(w.size(), 9u) << rows[0];
    EXPECT_EQ(w[1], cluster_->ps_addresses()[ps]);
    int v = 0;
    ASSERT_TRUE(absl::SimpleAtoi(w[2], &v)) << rows[0];
    shards += v;
    ASSERT_TRUE(absl::SimpleAtoi(w[5], &v)) << rows[0];
    pulls += v;
    ASSERT_TRUE(absl::SimpleAtoi(w[6], &v)) << rows[0];
    pushes += v;
    EXPECT_EQ(w[7], "0") << rows[0];  // nothing rejected
  }
  EXPECT_EQ(shards, 4) << run.output;  // 2 variables x 2 shards
  // Each push and pull of "w" touches both PS (one shard each).
  EXPECT_EQ(pushes, 3 * 2) << run.output;
  EXPECT_EQ(pulls, 1 * 2) << run.output;
}

TEST_F(PsctlTest, BalanceAddsUpToTheCreatedBytes) {
  auto run = Psctl({"balance"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  double percent_sum = 0;
  for (int ps = 0; ps < 2; ++ps) {
    auto rows = LinesStartingWith(run.output, absl::StrCat("PS ", ps, " "));
    ASSERT_EQ(rows.size(), 1u) << run.output;
    auto w = Words(rows[0]);
    ASSERT_EQ(w.size(), 5u) << rows[0];
    double percent = 0;
    ASSERT_TRUE(absl::SimpleAtod(absl::StripSuffix(w[4], "%"), &percent));
    percent_sum += percent;
  }
  EXPECT_NEAR(percent_sum, 100.0, 0.2) << run.output;
  // 400,000 + 128,000 bytes of float32 parameters (SGD keeps no slots).
  const double expected_kib = (kDenseFloats + kVocab * kDim) * 4 / 1024.0;
  auto total = LinesStartingWith(run.output, "total ");
  ASSERT_EQ(total.size(), 1u) << run.output;
  auto w = Words(total[0]);  // total <n> KiB, max/min <r>
  ASSERT_EQ(w.size(), 5u) << total[0];
  double kib = 0, ratio = 0;
  ASSERT_TRUE(absl::SimpleAtod(w[1], &kib)) << total[0];
  EXPECT_EQ(w[2], "KiB,") << total[0];
  EXPECT_NEAR(kib, expected_kib, 0.1) << total[0];
  ASSERT_TRUE(absl::SimpleAtod(w[4], &ratio)) << total[0];
  // Both variables split evenly in 2 shards over 2 PS: equal bytes.
  EXPECT_NEAR(ratio, 1.0, 0.01) << run.output;
}

// psctl checkpoint shows a long save's progress on every PS as it runs:
// here a 4 MB save paced to 1 MB/s (--checkpoint_max_mb_per_sec).
TEST(PsctlProgressTest, CheckpointPrintsEveryPsProgressWhileItRuns) {
  const std::string root = FreshTestDir("psctl_progress");
  auto cluster = LocalCluster::Start(
      {.num_ps = 2,
       .extra_flags = {absl::StrCat("--checkpoint_uri=", root),
                       "--checkpoint_max_mb_per_sec=1",
                       "--checkpoint_on_shutdown=false"}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = Client::Connect((*cluster)->MakeClientOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  VariableSpec dense;  // 1M floats + momentum: 8 MB, 4 MB per PS
  dense.set_name("w");
  dense.set_kind(DENSE);
  dense.add_shape(1 << 20);
  dense.mutable_partition()->set_num_shards(2);
  dense.mutable_optimizer()->set_kind(OptimizerSpec::MOMENTUM);
  dense.mutable_optimizer()->set_learning_rate(0.1f);
  ASSERT_EQ((*client)->CreateVariables({dense}), absl::OkStatus());

  auto run = RunPrograms(
      "tools/psctl/psctl",
      {absl::StrCat("--cluster=", ClusterSpecToJson((*cluster)->spec())),
       "--progress_secs=0.5", "checkpoint"},
      {""}, absl::Seconds(120))[0];
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // "PS 1: checkpoint: PS 1 saving 1.2 of 4.2 MB (28.6%), 1.0 MB/s, about
  // 3 s left"
  for (int ps = 0; ps < 2; ++ps) {
    const auto lines =
        LinesStartingWith(run.output, absl::StrCat("PS ", ps, ": "));
    ASSERT_GE(lines.size(), 2u) << run.output;
    EXPECT_TRUE(absl::StrContains(lines[0], "saving ")) << lines[0];
    EXPECT_TRUE(absl::StrContains(lines[0], " of 4.2 MB (")) << lines[0];
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const auto& l) {
      return absl::StrContains(l, " MB/s, about ");
    })) << run.output;
  }
  EXPECT_EQ(LinesStartingWith(run.output, "checkpoint ").size(), 1u)
      << run.output;
}

TEST_F(PsctlTest, CheckpointThenCheckpointsListsItWithBytesPerPs) {
  std::vector<float> grad(kDenseFloats, 1.0f);
  ASSERT_TRUE(client_->PushDense("w", grad.data()).ok());

  auto run = Psctl({"checkpoint"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // "checkpoint <uri>: step S, F files, <bytes> in T s (R MB/s)"
  auto lines = LinesStartingWith(run.output, "checkpoint ");
  ASSERT_EQ(lines.size(), 1u) << run.output;
  EXPECT_TRUE(absl::StrContains(lines[0], root_)) << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], ", 4 files, ")) << lines[0];

  // A checkpoint is only a checkpoint with its manifest: a directory left
  // by a save that never finished is listed as partial, and one whose
  // manifest is garbage as corrupt, and neither stops the listing.
  const std::string partial = root_ + "/ckpt-99-1";
  ASSERT_EQ(system(("mkdir -p " + partial).c_str()), 0);
  std::ofstream(partial + "/w-shard-0.bin") << "half a file";
  const std::string corrupt = root_ + "/ckpt-98-1";
  ASSERT_EQ(system(("mkdir -p " + corrupt).c_str()), 0);
  std::ofstream(corrupt + "/MANIFEST.json") << "{{{";

  auto list = RunPrograms(
      "tools/psctl/psctl",
      {absl::StrCat("--checkpoint_uri=", root_), "--shards", "checkpoints"},
      {""}, absl::Seconds(60))[0];
  ASSERT_EQ(list.exit_code, 0) << list.output;
  auto latest = LinesStartingWith(list.output, "ckpt-");
  ASSERT_EQ(latest.size(), 3u) << list.output;
  int complete = 0;
  for (const std::string& line : latest) {
    auto w = Words(line);
    if (w[0] == "ckpt-99-1") {
      EXPECT_EQ(w[1], "partial") << line;
    } else if (w[0] == "ckpt-98-1") {
      EXPECT_EQ(w[1], "CORRUPT") << line;
    } else {
      ++complete;
      // name latest step bytes(2 words) files PS per-PS...
      EXPECT_EQ(w[1], "latest") << line;
      EXPECT_EQ(w[2], "1") << line;  // one push: global step 1
      EXPECT_EQ(w[5], "4") << line;  // files
      EXPECT_EQ(w[6], "2") << line;  // PS
      EXPECT_TRUE(absl::StrContains(line, "(1.00)")) << line;  // balanced
    }
  }
  EXPECT_EQ(complete, 1) << list.output;
  // --shards: one line per shard file, with its rows.
  auto files = LinesStartingWith(list.output, "    ");
  ASSERT_EQ(files.size(), 4u) << list.output;
  int64_t rows = 0;
  for (const std::string& line : files) {
    auto w = Words(line);
    int64_t n = 0;
    ASSERT_TRUE(absl::SimpleAtoi(w[w.size() - 2], &n)) << line;
    rows += n;
  }
  EXPECT_EQ(rows, kDenseFloats + kVocab) << list.output;
}

// The float32 data of a .npy file psctl export wrote, and its shape text.
std::vector<float> ReadNpyFloats(const std::string& path, std::string* shape) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_end = bytes.find('\n') + 1;
  EXPECT_EQ(header_end % 64, 0u) << "the data must start 64-byte aligned";
  const size_t at = bytes.find("'shape': (");
  *shape = bytes.substr(at + 10, bytes.find(')', at) - at - 10);
  std::vector<float> out((bytes.size() - header_end) / sizeof(float));
  std::memcpy(out.data(), bytes.data() + header_end, out.size() * 4);
  return out;
}

// psctl export: a checkpoint of a 2-PS cluster as numpy files, every
// shard of each variable in its place.
TEST_F(PsctlTest, ExportWritesEachVariableWholeAsNumpy) {
  std::vector<float> grad(kDenseFloats);
  for (int64_t i = 0; i < kDenseFloats; ++i) grad[i] = 0.001f * (i % 1000);
  ASSERT_TRUE(client_->PushDense("w", grad.data()).ok());
  // A scalar (shape []): it once crashed psctl export.
  VariableSpec bias;
  bias.set_name("bias");
  bias.set_kind(DENSE);
  bias.mutable_optimizer()->set_learning_rate(0.5f);
  ASSERT_EQ(client_->CreateVariables({bias}), absl::OkStatus());
  const float bias_grad = 3.0f;
  ASSERT_TRUE(client_->PushDense("bias", &bias_grad).ok());
  ASSERT_EQ(Psctl({"checkpoint"}).exit_code, 0);
  const std::string out = FreshTestDir("psctl_export");
  auto run = RunPrograms("tools/psctl/psctl",
                         {absl::StrCat("--checkpoint_uri=", root_),
                          absl::StrCat("--out=", out), "export"},
                         {""}, absl::Seconds(60))[0];
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "3 variables")) << run.output;
  std::string shape;
  std::vector<float> b = ReadNpyFloats(out + "/bias.npy", &shape);
  EXPECT_EQ(shape, "");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_FLOAT_EQ(b[0], -1.5f);  // zero, one SGD step of 3 at 0.5
  std::vector<float> w = ReadNpyFloats(out + "/w.npy", &shape);
  EXPECT_EQ(shape, "100000,");
  ASSERT_EQ(w.size(), static_cast<size_t>(kDenseFloats));
  for (int64_t i = 0; i < kDenseFloats; ++i) {
    ASSERT_FLOAT_EQ(w[i], -0.5f * grad[i]) << i;  // zeros, one SGD step
  }
  std::vector<float> emb = ReadNpyFloats(out + "/emb.npy", &shape);
  EXPECT_EQ(shape, "2000, 16");
  EXPECT_EQ(emb.size(), static_cast<size_t>(kVocab * kDim));
  std::ifstream index(out + "/index.json");
  std::string json((std::istreambuf_iterator<char>(index)),
                   std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(json, "\"name\": \"w\", \"kind\": \"DENSE\""))
      << json;

  // A shard file that lost its last byte is named, and nothing is claimed.
  const std::string latest = root_ + "/" + [&] {
    std::ifstream f(root_ + "/latest");
    std::string name;
    std::getline(f, name);
    return name;
  }();
  const std::string victim = latest + "/w.shard-00001-of-00002";
  std::filesystem::resize_file(victim, std::filesystem::file_size(victim) - 1);
  auto broken = RunPrograms("tools/psctl/psctl",
                            {absl::StrCat("--checkpoint_uri=", root_),
                             absl::StrCat("--out=", out + "2"), "export"},
                            {""}, absl::Seconds(60))[0];
  EXPECT_EQ(broken.exit_code, 1) << broken.output;
  EXPECT_TRUE(absl::StrContains(broken.output, "w.shard-00001-of-00002"))
      << broken.output;
}

// The export is the trained model: logistic regression trained by
// ps_worker on a 2-PS cluster, exported, and evaluated again by a pure
// numpy forward pass (tests/export/numpy_lr_auc.py) gives the AUC the
// worker reported.
TEST(PsctlExportTest, NumpyReproducesTheWorkersEvalAuc) {
  const std::string dir = FreshTestDir("export_lr");
  // Planted logistic regression: 2,000 ids, 8 per example.
  std::mt19937 rng(5);
  std::normal_distribution<float> weight(0.0f, 1.0f);
  std::vector<float> truth(2000);
  for (float& t : truth) t = weight(rng);
  auto write = [&](const std::string& path, int examples) {
    std::ofstream out(path);
    std::uniform_int_distribution<int> id(0, 1999);
    std::uniform_real_distribution<float> u(0, 1);
    for (int e = 0; e < examples; ++e) {
      std::vector<int> ids(8);
      float z = -0.3f;
      for (int& i : ids) {
        i = id(rng);
        z += 0.5f * truth[i];
      }
      out << (u(rng) < 1 / (1 + std::exp(-z)) ? 1 : 0);
      for (int i : ids) out << " " << i << ":1";
      out << "\n";
    }
  };
  write(dir + "/train.libsvm", 8000);
  write(dir + "/eval.libsvm", 2000);
  const std::string root = dir + "/checkpoints";
  auto cluster = LocalCluster::Start(
      {.num_ps = 2,
       .extra_flags = {absl::StrCat("--checkpoint_uri=", root),
                       "--checkpoint_on_shutdown=false"}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto worker = (*cluster)->RunWorkers(
      "ps_worker/ps_worker",
      {"--model=lr", "--vocab=0", "--format=libsvm",
       absl::StrCat("--train_files=", dir, "/train.libsvm"),
       absl::StrCat("--eval_files=", dir, "/eval.libsvm"), "--epochs=3",
       "--batch_size=128", "--learning_rate=0.1", "--shuffle_buffer=0"},
      {0}, absl::Minutes(3))[0];
  ASSERT_EQ(worker.exit_code, 0) << worker.output;
  const double worker_auc = LastMetric(worker.output, "eval_auc");
  EXPECT_GT(worker_auc, 0.7) << worker.output;  // 0.5: untrained

  auto checkpoint = RunPrograms(
      "tools/psctl/psctl",
      {absl::StrCat("--cluster=", ClusterSpecToJson((*cluster)->spec())),
       "checkpoint"},
      {""}, absl::Seconds(60))[0];
  ASSERT_EQ(checkpoint.exit_code, 0) << checkpoint.output;
  const std::string out = dir + "/export";
  auto exported = RunPrograms("tools/psctl/psctl",
                              {absl::StrCat("--checkpoint_uri=", root),
                               absl::StrCat("--out=", out), "export"},
                              {""}, absl::Seconds(60))[0];
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  auto numpy = RunPrograms(
      "/usr/bin/python3",
      {"tests/export/numpy_lr_auc.py", absl::StrCat("--export=", out),
       absl::StrCat("--eval=", dir, "/eval.libsvm")},
      {""}, absl::Seconds(120))[0];
  ASSERT_EQ(numpy.exit_code, 0) << numpy.output;
  EXPECT_NEAR(LastMetric(numpy.output, "auc"), worker_auc, 1e-4)
      << numpy.output << worker.output;
  EXPECT_EQ(LastMetric(numpy.output, "examples"), 2000) << numpy.output;
}

TEST_F(PsctlTest, BadCommandsExitWithUsage) {
  auto run = Psctl({"statuz"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "unknown command 'statuz'"))
      << run.output;
  auto list = RunPrograms("tools/psctl/psctl", {"checkpoints"}, {""},
                          absl::Seconds(30))[0];
  EXPECT_EQ(list.exit_code, 2) << list.output;
  EXPECT_TRUE(absl::StrContains(list.output, "--checkpoint_uri is required"))
      << list.output;
}

}  // namespace
}  // namespace psrt
