// N towers over a batch of B examples give the gradient (hence the update)
// of one tower over the same B examples.
#include "ps_worker/towers.h"

#include <cmath>

#include "gtest/gtest.h"
#include "ps_worker/model/random_step.h"

namespace psrt {
namespace {

TEST(TowersTest, AnyTowerCountGivesTheOneTowerGradient) {
  ModelConfig c;
  c.name = "deepfm";
  c.fields = 5;
  c.dense_dim = 2;
  c.embedding_dim = 4;
  c.hidden = {16, 8};
  c.embedding_optimizer.set_learning_rate(0.1f);
  c.dense_optimizer.set_learning_rate(0.1f);
  auto model = CreateModel(c);
  ASSERT_TRUE(model.ok());
  RandomStep step = MakeRandomStep(**model, RandomStepOptions());
  const Batch& batch = step.batch;
  const StepParameters& params = step.params;

  Gradients one;
  std::vector<float> p1(37);
  Towers single(model->get(), 1);
  const double loss1 = *single.Run(batch, params, &one, p1.data());
  for (int n : {2, 3, 8}) {
    Towers towers(model->get(), n);
    Gradients g;
    std::vector<float> pn(37);
    // Twice: the second run reuses the towers' buffers.
    for (int run = 0; run < 2; ++run) {
      const double loss = *towers.Run(batch, params, &g, pn.data());
      EXPECT_NEAR(loss, loss1, 1e-4);
      for (int i = 0; i < 37; ++i) ASSERT_NEAR(pn[i], p1[i], 1e-6);
      for (size_t v = 0; v < one.dense.size(); ++v) {
        for (size_t i = 0; i < one.dense[v].size(); ++i) {
          ASSERT_NEAR(g.dense[v][i], one.dense[v][i], 1e-6) << n << " towers";
        }
      }
      for (size_t t = 0; t < one.tables.size(); ++t) {
        for (size_t i = 0; i < one.tables[t].size(); ++i) {
          ASSERT_NEAR(g.tables[t][i], one.tables[t][i], 1e-6) << n << " towers";
        }
      }
    }
  }
  // The gradient is of the mean loss: not trivially zero.
  double norm = 0;
  for (float x : one.dense.back()) norm += std::fabs(x);
  EXPECT_GT(norm, 1e-4);
}

}  // namespace
}  // namespace psrt
