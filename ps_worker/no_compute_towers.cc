#include "ps_worker/no_compute_towers.h"

#include <algorithm>
#include <cmath>

namespace psrt {
namespace {

// Resizes `to` to `from`'s shape and fills it with `value`.
void FillShaped(const std::vector<std::vector<float>>& from, float value,
                std::vector<std::vector<float>>* to) {
  to->resize(from.size());
  for (size_t i = 0; i < from.size(); ++i) {
    (*to)[i].assign(from[i].size(), value);
  }
}

}  // namespace

absl::StatusOr<double> NoComputeTowers::Run(const Batch& batch,
                                            const StepParameters& params,
                                            Gradients* grads,
                                            float* predictions) {
  FillShaped(params.dense, kGradient, &grads->dense);
  FillShaped(params.tables, kGradient, &grads->tables);
  std::fill(predictions, predictions + batch.size, 0.5f);
  return batch.size * std::log(2.0);
}

}  // namespace psrt
