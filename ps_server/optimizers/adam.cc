#include "ps_server/optimizers/adam.h"

#include <cmath>

#include "Eigen/Core"

namespace psrt {

void Adam::Prepare(UpdateContext* context) const {
  const double t = static_cast<double>(context->step);
  context->corrected_learning_rate = static_cast<float>(
      context->learning_rate * std::sqrt(1.0 - std::pow(beta2_, t)) /
      (1.0 - std::pow(beta1_, t)));
}

void Adam::Apply(float* params, float* const* slots, const float* grad,
                 size_t n, const UpdateContext& context) const {
  Eigen::Map<Eigen::ArrayXf> p(params, n), m(slots[0], n), v(slots[1], n);
  Eigen::Map<const Eigen::ArrayXf> g(grad, n);
  const float lr_t = context.corrected_learning_rate;
  m += (1 - beta1_) * (g - m);
  v += (1 - beta2_) * (g.square() - v);
  p -= lr_t * m / (v.sqrt() + epsilon_);
}

}  // namespace psrt
