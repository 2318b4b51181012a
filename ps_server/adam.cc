#include "ps_server/adam.h"

#include <cmath>

#include "Eigen/Core"

namespace psrt {

void Adam::Apply(float* params, float* const* slots, const float* grad,
                 size_t n, const UpdateContext& context) const {
  Eigen::Map<Eigen::ArrayXf> p(params, n), m(slots[0], n), v(slots[1], n);
  Eigen::Map<const Eigen::ArrayXf> g(grad, n);
  const double t = static_cast<double>(context.step);
  const float lr_t = static_cast<float>(context.learning_rate *
                                        std::sqrt(1.0 - std::pow(beta2_, t)) /
                                        (1.0 - std::pow(beta1_, t)));
  m += (1 - beta1_) * (g - m);
  v += (1 - beta2_) * (g.square() - v);
  p -= lr_t * m / (v.sqrt() + epsilon_);
}

}  // namespace psrt
