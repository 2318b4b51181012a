// N towers over a batch of B examples give the gradient (hence the update)
// of one tower over the same B examples.
#include "ps_worker/towers.h"

#include <map>
#include <random>

#include "gtest/gtest.h"

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
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 1);
  Batch batch;
  for (int i = 0; i < 37; ++i) {  // not a multiple of the tower counts
    Example e;
    e.label = static_cast<float>(rng() % 2);
    for (int f = 0; f < 5; ++f) {
      e.ids.push_back(rng() % 40);
      e.values.push_back(1.0f);
    }
    e.dense = {normal(rng), normal(rng)};
    batch.Add(e);
  }
  StepParameters params;
  std::map<int64_t, int32_t> slot;
  for (int64_t id : batch.ids) {
    auto [it, inserted] =
        slot.emplace(id, static_cast<int32_t>(params.unique_ids.size()));
    if (inserted) params.unique_ids.push_back(id);
    params.slots.push_back(it->second);
  }
  StepParameters shaped = (*model)->NewParameters(params.unique_ids.size());
  params.dense = shaped.dense;
  params.tables = shaped.tables;
  for (auto& v : params.dense)
    for (float& x : v) x = 0.3f * normal(rng);
  for (auto& v : params.tables)
    for (float& x : v) x = 0.3f * normal(rng);

  Gradients one;
  std::vector<float> p1(37);
  Towers single(model->get(), 1);
  const double loss1 = single.Run(batch, params, &one, p1.data());
  for (int n : {2, 3, 8}) {
    Towers towers(model->get(), n);
    Gradients g;
    std::vector<float> pn(37);
    // Twice: the second run reuses the towers' buffers.
    for (int run = 0; run < 2; ++run) {
      const double loss = towers.Run(batch, params, &g, pn.data());
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
