#include "ps_server/optimizers/momentum.h"

#include "Eigen/Core"

namespace psrt {

void Momentum::Apply(float* params, float* const* slots, const float* grad,
                     size_t n, const UpdateContext& context) const {
  Eigen::Map<Eigen::ArrayXf> p(params, n), accum(slots[0], n);
  Eigen::Map<const Eigen::ArrayXf> g(grad, n);
  accum = momentum_ * accum + g;
  if (nesterov_) {
    p -= context.learning_rate * (g + momentum_ * accum);
  } else {
    p -= context.learning_rate * accum;
  }
}

}  // namespace psrt
