// The GPU towers against the CPU's Model::Compute: the same gradients,
// losses and predictions within float rounding for every model with GPU
// kernels, and the same loss curve over SGD steps. Skips, saying why, where
// no GPU is usable (CI); tools/gpu/run_on_device.sh runs it on a GPU host.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "gtest/gtest.h"
#include "ps_worker/gpu/gpu_towers.h"
#include "ps_worker/model/random_step.h"
#include "ps_worker/towers.h"

namespace psrt {
namespace {

#define SKIP_WITHOUT_GPU()                                                  \
  if (absl::StatusOr<GpuInfo> gpus = ProbeGpus(); !gpus.ok()) {             \
    GTEST_SKIP() << "no usable GPU, parity not checked: " << gpus.status(); \
  }

std::unique_ptr<Model> MakeModel(const std::string& name) {
  ModelConfig c;
  c.name = name;
  c.fields = 6;
  c.dense_dim = 3;
  c.embedding_dim = 8;
  c.embedding_optimizer.set_learning_rate(0.1f);
  c.dense_optimizer.set_learning_rate(0.1f);
  c.hidden = {32, 16};
  auto model = CreateModel(c);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

// |a - b| within float rounding of values of b's magnitude.
void ExpectClose(const std::vector<float>& a, const std::vector<float>& b,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float scale = 0;
  for (float x : b) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 2e-5f * scale + 1e-8f) << what << " [" << i << "]";
  }
}

struct Result {
  double loss = 0;
  Gradients grads;
  std::vector<float> predictions;
};

Result RunOn(TowerRunner* runner, const RandomStep& step) {
  Result r;
  r.predictions.resize(step.batch.size);
  absl::StatusOr<double> loss =
      runner->Run(step.batch, step.params, &r.grads, r.predictions.data());
  EXPECT_TRUE(loss.ok()) << loss.status();
  r.loss = loss.ok() ? *loss : 0;
  return r;
}

TEST(GpuParityTest, GradientsLossAndPredictionsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"lr", "fm", "deepfm", "wide_deep"}) {
    auto model = MakeModel(name);
    Towers cpu(model.get(), 1);
    for (int towers : {1, 3}) {
      auto gpu = NewGpuTowers(model.get(), towers);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      // Sizes that grow the buffers, shrink again, and leave towers empty.
      for (int examples : {257, 1500, 64, 2}) {
        RandomStepOptions o;
        o.examples = examples;
        o.id_pool = 60;
        o.varied_values = true;
        o.seed = examples;
        const RandomStep step = MakeRandomStep(*model, o);
        const Result want = RunOn(&cpu, step);
        const Result got = RunOn(gpu->get(), step);
        const std::string what = absl::StrCat(
            name, ", ", towers, " GPU tower(s), ", examples, " examples");
        EXPECT_NEAR(got.loss, want.loss, 1e-5 * want.loss) << what;
        ExpectClose(got.predictions, want.predictions, what + ": predictions");
        for (size_t t = 0; t < want.grads.tables.size(); ++t) {
          ExpectClose(got.grads.tables[t], want.grads.tables[t],
                      what + ": " + model->tables()[t].name);
        }
        for (size_t d = 0; d < want.grads.dense.size(); ++d) {
          ExpectClose(got.grads.dense[d], want.grads.dense[d],
                      what + ": " + model->dense_variables()[d].name);
        }
      }
    }
  }
}

// A model held locally (every row of a small id pool) and trained by plain
// SGD, as the PS would with one worker.
struct LocalModel {
  std::vector<std::vector<float>> tables;  // [pool, dim]
  std::vector<std::vector<float>> dense;

  void Gather(RandomStep* step) const {
    for (size_t t = 0; t < tables.size(); ++t) {
      const size_t dim = tables[t].size() / kPool;
      std::vector<float>& rows = step->params.tables[t];
      for (size_t u = 0; u < step->params.unique_ids.size(); ++u) {
        std::copy_n(tables[t].begin() + step->params.unique_ids[u] * dim, dim,
                    rows.begin() + u * dim);
      }
    }
    step->params.dense = dense;
  }
  void Apply(const RandomStep& step, const Gradients& g, float row_rate,
             float dense_rate) {
    for (size_t t = 0; t < tables.size(); ++t) {
      const size_t dim = tables[t].size() / kPool;
      for (size_t u = 0; u < step.params.unique_ids.size(); ++u) {
        for (size_t c = 0; c < dim; ++c) {
          tables[t][step.params.unique_ids[u] * dim + c] -=
              row_rate * g.tables[t][u * dim + c];
        }
      }
    }
    for (size_t d = 0; d < dense.size(); ++d) {
      for (size_t i = 0; i < dense[d].size(); ++i)
        dense[d][i] -= dense_rate * g.dense[d][i];
    }
  }
  static constexpr int kPool = 500;
};

TEST(GpuParityTest, LossCurveOverSgdStepsMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  auto model = MakeModel("deepfm");
  // Initial values: every row of the pool, and the dense variables.
  RandomStepOptions init;
  init.examples = LocalModel::kPool;
  init.id_pool = LocalModel::kPool;
  init.stddev = 0.1f;
  const RandomStep all = MakeRandomStep(*model, init);
  LocalModel start;
  start.dense = all.params.dense;
  for (const Model::Table& t : model->tables()) {
    start.tables.emplace_back(LocalModel::kPool * t.dim, 0.0f);
  }
  for (size_t t = 0; t < start.tables.size(); ++t) {
    const int dim = model->tables()[t].dim;
    for (size_t u = 0; u < all.params.unique_ids.size(); ++u) {
      std::copy_n(all.params.tables[t].begin() + u * dim, dim,
                  start.tables[t].begin() + all.params.unique_ids[u] * dim);
    }
  }
  LocalModel on_cpu = start, on_gpu = start;
  Towers cpu(model.get(), 1);
  auto gpu = NewGpuTowers(model.get(), 2);
  ASSERT_TRUE(gpu.ok()) << gpu.status();

  constexpr int kSteps = 60, kBatch = 512;
  double worst = 0, first = 0, last = 0;
  for (int s = 0; s < kSteps; ++s) {
    RandomStepOptions o;
    o.examples = kBatch;
    o.id_pool = LocalModel::kPool;
    o.varied_values = true;
    o.seed = 1000 + s;
    RandomStep step = MakeRandomStep(*model, o);
    // A learnable label: whether most of the example's ids are even.
    for (int i = 0; i < kBatch; ++i) {
      int even = 0;
      for (int j = step.batch.offsets[i]; j < step.batch.offsets[i + 1]; ++j)
        even += step.batch.ids[j] % 2 == 0;
      step.batch.labels[i] =
          2 * even > step.batch.offsets[i + 1] - step.batch.offsets[i];
    }
    RandomStep gpu_step = step;
    on_cpu.Gather(&step);
    on_gpu.Gather(&gpu_step);
    const Result c = RunOn(&cpu, step);
    const Result g = RunOn(gpu->get(), gpu_step);
    const double cpu_loss = c.loss / kBatch, gpu_loss = g.loss / kBatch;
    worst = std::max(worst, std::fabs(gpu_loss - cpu_loss) / cpu_loss);
    if (s == 0) first = cpu_loss;
    last = cpu_loss;
    ASSERT_NEAR(gpu_loss, cpu_loss, 1e-4 * cpu_loss) << "step " << s;
    // Rows see a few examples of the mean loss per step: a large rate.
    on_cpu.Apply(step, c.grads, 20.0f, 0.2f);
    on_gpu.Apply(gpu_step, g.grads, 20.0f, 0.2f);
  }
  std::printf(
      "deepfm, %d SGD steps of %d: CPU loss %.5f -> %.5f; largest relative "
      "GPU-CPU loss difference %.2e\n",
      kSteps, kBatch, first, last, worst);
  EXPECT_LT(last, 0.8 * first);  // it learned: the curve is not flat
}

}  // namespace
}  // namespace psrt
