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

// accum' = m * accum + g: |accum'| <= m * A + G; the step is lr * accum'
// (Nesterov: lr * (g + m * accum')).
bool Momentum::BoundsAfter(const ValueBounds& before, double max_abs_grad,
                           const UpdateContext& context,
                           ValueBounds* after) const {
  *after = before;
  const double accum =
      (momentum_ * before.max_abs[1] + max_abs_grad) * ValueBounds::kRounding;
  const double step = nesterov_ ? max_abs_grad + momentum_ * accum : accum;
  after->max_abs[1] = accum;
  after->min[1] = -accum;
  after->max_abs[0] = (before.max_abs[0] + context.learning_rate * step) *
                      ValueBounds::kRounding;
  after->min[0] = -after->max_abs[0];
  return true;
}

}  // namespace psrt
