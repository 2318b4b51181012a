#include "ps_worker/evaluation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace psrt {

double RocAuc(const std::vector<float>& scores,
              const std::vector<float>& labels) {
  const size_t n = scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  // Sum of (average) ranks of the positives.
  double rank_sum = 0;
  double positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double average_rank = (i + 1 + j) / 2.0;  // ranks i+1 .. j
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += average_rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = n - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

double LogLoss(const std::vector<float>& p, const std::vector<float>& labels) {
  if (p.empty()) return 0;
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double q = std::clamp<double>(p[i], 1e-7, 1 - 1e-7);
    total -= labels[i] > 0.5f ? std::log(q) : std::log(1 - q);
  }
  return total / p.size();
}

void Evaluator::AddBinary(const float* probabilities, const float* labels,
                          int n) {
  scores_.insert(scores_.end(), probabilities, probabilities + n);
  labels_.insert(labels_.end(), labels, labels + n);
}

double Evaluator::accuracy() const {
  if (total_ > 0) return static_cast<double>(correct_) / total_;
  if (labels_.empty()) return 0;
  long right = 0;
  for (size_t i = 0; i < labels_.size(); ++i) {
    right += (scores_[i] >= 0.5f) == (labels_[i] > 0.5f);
  }
  return static_cast<double>(right) / labels_.size();
}

void Evaluator::AddClasses(const int* predicted, const float* labels, int n) {
  for (int i = 0; i < n; ++i)
    correct_ += predicted[i] == static_cast<int>(labels[i]);
  total_ += n;
}

}  // namespace psrt
