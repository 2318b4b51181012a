// --compute=none pushes what the real model pushes: gradients of the same
// shapes, for every model with sparse tables.
#include "ps_worker/no_compute_towers.h"

#include <cmath>

#include "gtest/gtest.h"
#include "ps_worker/model/random_step.h"
#include "ps_worker/towers.h"

namespace psrt {
namespace {

TEST(NoComputeTowersTest, GradientsHaveTheRealModelsShapes) {
  for (const char* name : {"lr", "fm", "deepfm", "wide_deep"}) {
    SCOPED_TRACE(name);
    ModelConfig c;
    c.name = name;
    c.fields = 5;
    c.dense_dim = 2;
    c.embedding_dim = 4;
    c.hidden = {16, 8};
    c.embedding_optimizer.set_learning_rate(0.1f);
    c.dense_optimizer.set_learning_rate(0.1f);
    auto model = CreateModel(c);
    ASSERT_TRUE(model.ok()) << model.status();
    RandomStep step = MakeRandomStep(**model, RandomStepOptions());
    const int n = step.batch.size;
    ASSERT_GT(n, 0);

    Gradients real;
    std::vector<float> real_predictions(n);
    Towers towers(model->get(), 1);
    ASSERT_TRUE(
        towers.Run(step.batch, step.params, &real, real_predictions.data())
            .ok());

    NoComputeTowers none;
    Gradients grads;  // empty: Run shapes it
    std::vector<float> predictions(n, -1.0f);
    auto loss = none.Run(step.batch, step.params, &grads, predictions.data());
    ASSERT_TRUE(loss.ok());
    EXPECT_NEAR(*loss, n * std::log(2.0), 1e-9);
    ASSERT_EQ(grads.dense.size(), real.dense.size());
    for (size_t i = 0; i < real.dense.size(); ++i) {
      EXPECT_EQ(grads.dense[i].size(), real.dense[i].size()) << i;
    }
    ASSERT_EQ(grads.tables.size(), real.tables.size());
    ASSERT_FALSE(real.tables.empty());
    for (size_t i = 0; i < real.tables.size(); ++i) {
      ASSERT_EQ(grads.tables[i].size(), real.tables[i].size()) << i;
      ASSERT_FALSE(grads.tables[i].empty()) << i;
      EXPECT_EQ(grads.tables[i].back(), NoComputeTowers::kGradient);
    }
    EXPECT_EQ(predictions[0], 0.5f);
    EXPECT_EQ(predictions[n - 1], 0.5f);
  }
}

}  // namespace
}  // namespace psrt
