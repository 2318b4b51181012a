#include "ps_server/optimizers/sgd.h"

#include "Eigen/Core"

namespace psrt {

void Sgd::Apply(float* params, float* const*, const float* grad, size_t n,
                const UpdateContext& context) const {
  Eigen::Map<Eigen::ArrayXf> p(params, n);
  Eigen::Map<const Eigen::ArrayXf> g(grad, n);
  p -= context.learning_rate * g;
}

}  // namespace psrt
