#include "ps_worker/model/loss.h"

#include <algorithm>
#include <cmath>

namespace psrt {

double LogisticLoss(const float* z, const float* labels, int n, float scale,
                    float* dz, float* p) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const double zi = z[i];
    // log(1 + exp(-|z|)) + max(z, 0) - z * y, stable for any z.
    total += std::log1p(std::exp(-std::fabs(zi))) + std::max(zi, 0.0) -
             zi * labels[i];
    const float prob = static_cast<float>(1 / (1 + std::exp(-zi)));
    p[i] = prob;
    if (dz != nullptr) dz[i] = scale * (prob - labels[i]);
  }
  return total;
}

double SoftmaxCrossEntropy(const float* z, const float* labels, int n,
                           int classes, float scale, float* dz,
                           float* predicted) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const float* row = z + static_cast<size_t>(i) * classes;
    const int best =
        static_cast<int>(std::max_element(row, row + classes) - row);
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(row[c] - row[best]);
    const int y = static_cast<int>(labels[i]);
    total += std::log(sum) - (row[y] - row[best]);
    predicted[i] = static_cast<float>(best);
    if (dz != nullptr) {
      float* d = dz + static_cast<size_t>(i) * classes;
      for (int c = 0; c < classes; ++c) {
        d[c] = scale * static_cast<float>(std::exp(row[c] - row[best]) / sum -
                                          (c == y ? 1.0 : 0.0));
      }
    }
  }
  return total;
}

}  // namespace psrt
