// Every model's analytic gradients against central finite differences of
// its loss, for every parameter coordinate touched by a small batch.
#include "ps_worker/model/model.h"

#include <cmath>
#include <map>
#include <random>

#include "gtest/gtest.h"

namespace psrt {
namespace {

struct Fixture {
  std::unique_ptr<Model> model;
  Batch batch;
  StepParameters params;
};

Fixture Make(const std::string& name, int dense_dim, int classes) {
  ModelConfig c;
  c.name = name;
  c.fields = 4;
  c.dense_dim = dense_dim;
  c.classes = classes;
  c.embedding_dim = 3;
  c.hidden = {5, 4};
  c.embedding_optimizer.set_learning_rate(0.1f);
  c.dense_optimizer.set_learning_rate(0.1f);
  Fixture s;
  auto model = CreateModel(c);
  EXPECT_TRUE(model.ok()) << model.status();
  s.model = std::move(*model);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 1);
  // 6 examples, 4 fields each, ids from a small pool so that rows repeat.
  std::map<int64_t, int32_t> slot_of;
  for (int i = 0; i < 6; ++i) {
    Example e;
    e.label = classes == 2 ? static_cast<float>(rng() % 2)
                           : static_cast<float>(rng() % classes);
    for (int f = 0; f < 4; ++f) {
      e.ids.push_back(100 + rng() % 7);
      e.values.push_back(f == 0 ? 1.0f : 0.5f + 0.5f * (rng() % 3));
    }
    for (int d = 0; d < dense_dim; ++d) e.dense.push_back(normal(rng));
    s.batch.Add(e);
  }
  for (int64_t id : s.batch.ids) {
    auto [it, inserted] =
        slot_of.emplace(id, static_cast<int32_t>(s.params.unique_ids.size()));
    if (inserted) s.params.unique_ids.push_back(id);
    s.params.slots.push_back(it->second);
  }
  StepParameters shaped = s.model->NewParameters(s.params.unique_ids.size());
  s.params.dense = shaped.dense;
  s.params.tables = shaped.tables;
  for (auto& v : s.params.dense) {
    for (float& x : v) x = 0.4f * normal(rng);
  }
  for (auto& v : s.params.tables) {
    for (float& x : v) x = 0.4f * normal(rng);
  }
  return s;
}

double Loss(const Fixture& s, const StepParameters& p) {
  std::vector<float> predictions(s.batch.size);
  return s.model->Compute(s.batch, 0, s.batch.size, 1.0f, p, nullptr,
                          predictions.data());
}

class GradientTest
    : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

TEST_P(GradientTest, MatchesFiniteDifferences) {
  const auto [param_name, dense_dim, classes] = GetParam();
  const std::string name = param_name;  // (a lambda cannot capture a binding)
  Fixture s = Make(name, dense_dim, classes);
  ASSERT_TRUE(s.model->Check(s.batch).ok()) << s.model->Check(s.batch);
  Gradients g = s.model->NewGradients(s.params.unique_ids.size());
  std::vector<float> predictions(s.batch.size);
  s.model->Compute(s.batch, 0, s.batch.size, 1.0f, s.params, &g,
                   predictions.data());
  int checked = 0, kinks = 0;
  // Central difference; *one_sided_gap is how much the forward and backward
  // differences disagree (large when a ReLU switches right here).
  auto numeric_gradient = [&](std::vector<float>& value, size_t i, float eps,
                              double* one_sided_gap = nullptr) {
    const float saved = value[i];
    const double here = Loss(s, s.params);
    value[i] = saved + eps;
    const double up = Loss(s, s.params);
    value[i] = saved - eps;
    const double down = Loss(s, s.params);
    value[i] = saved;
    if (one_sided_gap)
      *one_sided_gap = std::fabs((up - here) - (here - down)) / eps;
    return (up - down) / (2 * eps);
  };
  auto check = [&](std::vector<float>& value, const std::vector<float>& grad,
                   const std::string& what) {
    for (size_t i = 0; i < value.size(); ++i) {
      double gap;
      const double numeric = numeric_gradient(value, i, 2e-3f, &gap);
      // A ReLU switching inside [x - eps, x + eps] makes the central
      // difference a blend of two slopes: the one-sided differences then
      // disagree, and the estimate moves with eps.
      if (gap > 3e-3 + 3e-2 * std::fabs(numeric) ||
          std::fabs(numeric_gradient(value, i, 5e-4f) - numeric) >
              3e-3 + 3e-2 * std::fabs(numeric)) {
        ++kinks;
        continue;
      }
      ASSERT_NEAR(grad[i], numeric, 3e-3 + 3e-2 * std::fabs(numeric))
          << name << " " << what << "[" << i << "]";
      ++checked;
    }
  };
  for (size_t v = 0; v < s.params.dense.size(); ++v) {
    check(s.params.dense[v], g.dense[v], s.model->dense_variables()[v].name);
  }
  for (size_t t = 0; t < s.params.tables.size(); ++t) {
    check(s.params.tables[t], g.tables[t], s.model->tables()[t].name);
  }
  EXPECT_GE(checked, 7);
  EXPECT_LE(kinks, checked / 20);

  // Two towers over halves of the batch add up to the whole batch.
  Gradients halves = s.model->NewGradients(s.params.unique_ids.size());
  s.model->Compute(s.batch, 0, 3, 1.0f, s.params, &halves, predictions.data());
  Gradients second = s.model->NewGradients(s.params.unique_ids.size());
  s.model->Compute(s.batch, 3, 6, 1.0f, s.params, &second, predictions.data());
  halves.Add(second);
  for (size_t v = 0; v < g.dense.size(); ++v) {
    for (size_t i = 0; i < g.dense[v].size(); ++i) {
      ASSERT_NEAR(halves.dense[v][i], g.dense[v][i], 1e-5);
    }
  }
  for (size_t t = 0; t < g.tables.size(); ++t) {
    for (size_t i = 0; i < g.tables[t].size(); ++i) {
      ASSERT_NEAR(halves.tables[t][i], g.tables[t][i], 1e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllModels, GradientTest,
                         ::testing::Values(std::make_tuple("lr", 0, 2),
                                           std::make_tuple("lr", 2, 2),
                                           std::make_tuple("fm", 0, 2),
                                           std::make_tuple("fm", 2, 2),
                                           std::make_tuple("deepfm", 0, 2),
                                           std::make_tuple("deepfm", 2, 2),
                                           std::make_tuple("wide_deep", 3, 2),
                                           std::make_tuple("mlp", 5, 2),
                                           std::make_tuple("mlp", 5, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_dense" +
                                  std::to_string(std::get<1>(info.param)) +
                                  "_classes" +
                                  std::to_string(std::get<2>(info.param));
                         });

TEST(ModelTest, ChecksTheDataFitsTheModel) {
  Fixture s = Make("deepfm", 0, 2);
  Example odd;
  odd.ids = {1, 2};
  odd.values = {1, 1};
  s.batch.Add(odd);
  absl::Status st = s.model->Check(s.batch);
  EXPECT_NE(st.message().find("needs exactly 4 sparse features"),
            std::string::npos)
      << st;
  ModelConfig c;
  c.name = "transformer";
  EXPECT_NE(
      CreateModel(c).status().message().find("unknown model 'transformer'"),
      std::string::npos);
  c.name = "fm";
  c.classes = 10;
  EXPECT_NE(
      CreateModel(c).status().message().find("only mlp takes classes > 2"),
      std::string::npos);
  Fixture m = Make("mlp", 5, 4);
  m.batch.labels[0] = 7;
  EXPECT_NE(m.model->Check(m.batch).message().find("label 7 is not a class"),
            std::string::npos);
}

}  // namespace
}  // namespace psrt
