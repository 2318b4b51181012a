#include "ps_worker/evaluation.h"

#include <random>

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(EvaluationTest, AucMatchesPairCounting) {
  std::mt19937 rng(5);
  std::vector<float> scores(300), labels(300);
  for (int i = 0; i < 300; ++i) {
    labels[i] = rng() % 3 == 0;
    // Coarse scores: many ties.
    scores[i] = static_cast<float>((rng() % 20) + 5 * labels[i]);
  }
  double pairs = 0, wins = 0;
  for (int i = 0; i < 300; ++i) {
    for (int j = 0; j < 300; ++j) {
      if (labels[i] == 1 && labels[j] == 0) {
        pairs += 1;
        wins += scores[i] > scores[j] ? 1 : scores[i] == scores[j] ? 0.5 : 0;
      }
    }
  }
  EXPECT_NEAR(RocAuc(scores, labels), wins / pairs, 1e-12);
  EXPECT_EQ(RocAuc({1, 2}, {1, 1}), 0.5);
  EXPECT_EQ(RocAuc({0.1f, 0.9f}, {0, 1}), 1.0);
}

TEST(EvaluationTest, LogLossAndAccuracy) {
  EXPECT_NEAR(LogLoss({0.5f, 0.5f}, {0, 1}), std::log(2.0), 1e-9);
  EXPECT_NEAR(LogLoss({0.9f}, {1}), -std::log(0.9), 1e-6);
  Evaluator e;
  const int predicted[] = {1, 2, 3, 3};
  const float labels[] = {1, 2, 0, 3};
  e.AddClasses(predicted, labels, 4);
  EXPECT_DOUBLE_EQ(e.accuracy(), 0.75);
}

}  // namespace
}  // namespace psrt
