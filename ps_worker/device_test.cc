// --device and --towers: what a worker computes on, and auto's fallback.
#include "ps_worker/device.h"

#include "gtest/gtest.h"
#include "ps_worker/gpu/gpu_towers.h"

namespace psrt {
namespace {

std::unique_ptr<Model> MakeModel(const std::string& name) {
  ModelConfig c;
  c.name = name;
  c.fields = 3;
  c.dense_dim = name == "mlp" ? 4 : 0;
  c.classes = name == "mlp" ? 3 : 2;
  c.embedding_optimizer.set_learning_rate(0.1f);
  c.dense_optimizer.set_learning_rate(0.1f);
  c.hidden = {8};
  auto model = CreateModel(c);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

TEST(DeviceTest, CpuTowersAreThreads) {
  auto model = MakeModel("deepfm");
  std::string choice;
  auto runner = CreateTowerRunner(model.get(), "cpu", 0, &choice);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->device(), "cpu");
  EXPECT_EQ((*runner)->size(), 1);  // the CPU default
  EXPECT_EQ(choice, "computing on cpu with 1 tower(s)");
  runner = CreateTowerRunner(model.get(), "cpu", 3, &choice);
  ASSERT_TRUE(runner.ok());
  EXPECT_EQ((*runner)->size(), 3);
}

TEST(DeviceTest, BadValuesAreNamed) {
  auto model = MakeModel("deepfm");
  std::string choice;
  auto runner = CreateTowerRunner(model.get(), "tpu", 0, &choice);
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runner.status().message(),
            "--device=tpu: expected cpu, gpu or auto");
  runner = CreateTowerRunner(model.get(), "cpu", -2, &choice);
  EXPECT_EQ(runner.status().message(),
            "--towers=-2: must be >= 0 (0: default)");
}

TEST(DeviceTest, ModelWithoutGpuKernels) {
  auto model = MakeModel("mlp");
  std::string choice;
  auto runner = CreateTowerRunner(model.get(), "gpu", 0, &choice);
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(runner.status().message(),
            "--device=gpu: model mlp has no GPU kernels (lr, fm, deepfm and "
            "wide_deep do)");
  runner = CreateTowerRunner(model.get(), "auto", 0, &choice);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->device(), "cpu");
  EXPECT_EQ(choice,
            "--device=auto: model mlp has no GPU kernels (lr, fm, deepfm and "
            "wide_deep do); training on the CPU with 1 tower(s)");
}

TEST(DeviceTest, AutoFallsBackToTheCpuWithoutAGpu) {
  const absl::StatusOr<GpuInfo> gpus = ProbeGpus();
  if (gpus.ok()) {
    GTEST_SKIP() << "a GPU is usable here (" << gpus->names
                 << "); the fallback is tested where none is";
  }
  auto model = MakeModel("deepfm");
  std::string choice;
  auto runner = CreateTowerRunner(model.get(), "auto", 2, &choice);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->device(), "cpu");
  EXPECT_EQ((*runner)->size(), 2);
  EXPECT_EQ(choice, "--device=auto: " + std::string(gpus.status().message()) +
                        "; training on the CPU with 2 tower(s)");
  // Asked for the GPU explicitly: the same reason, as an error.
  runner = CreateTowerRunner(model.get(), "gpu", 0, &choice);
  EXPECT_EQ(runner.status().code(), gpus.status().code());
  EXPECT_EQ(runner.status().message(),
            "--device=gpu: " + std::string(gpus.status().message()));
}

TEST(DeviceTest, AutoPicksTheGpusWhereThereAreAny) {
  const absl::StatusOr<GpuInfo> gpus = ProbeGpus();
  if (!gpus.ok()) GTEST_SKIP() << "no GPU here: " << gpus.status();
  auto model = MakeModel("wide_deep");
  std::string choice;
  auto runner = CreateTowerRunner(model.get(), "auto", 0, &choice);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_NE((*runner)->device(), "cpu");
  EXPECT_EQ((*runner)->size(), gpus->count);
  EXPECT_EQ(choice.rfind("computing on " + gpus->names, 0), 0u) << choice;
}

}  // namespace
}  // namespace psrt
