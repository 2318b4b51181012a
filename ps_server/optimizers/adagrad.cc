#include "ps_server/optimizers/adagrad.h"

#include "Eigen/Core"

namespace psrt {

void Adagrad::Apply(float* params, float* const* slots, const float* grad,
                    size_t n, const UpdateContext& context) const {
  Eigen::Map<Eigen::ArrayXf> p(params, n), accum(slots[0], n);
  Eigen::Map<const Eigen::ArrayXf> g(grad, n);
  accum += g.square();
  p -= context.learning_rate * g / accum.sqrt();
}

}  // namespace psrt
