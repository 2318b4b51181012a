#include "ps_server/optimizers/adam.h"

#include <algorithm>
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

// m' and v' are convex combinations: |m'| <= max(M, G), v' <= max(V, G^2),
// and v' stays >= 0 from v >= 0 while 1 - beta2 <= 0.999 leaves the
// rounding of v + (1 - beta2) (g^2 - v) no way below 0. The step is
// lr_t * m' / (sqrt(v') + eps) <= lr_t * |m'| / min(eps, 1), lr_t * m'
// computed first.
bool Adam::BoundsAfter(const ValueBounds& before, double max_abs_grad,
                       const UpdateContext& context, ValueBounds* after) const {
  if (!(before.min[2] >= 0) || !(beta2_ >= 1e-3)) return false;
  *after = before;
  const double m =
      std::max(before.max_abs[1], max_abs_grad) * ValueBounds::kRounding;
  after->max_abs[1] = m;
  after->min[1] = -m;
  after->max_abs[2] = std::max(before.max_abs[2], max_abs_grad * max_abs_grad) *
                      ValueBounds::kRounding;
  after->min[2] = 0;
  const double step =
      std::fabs(static_cast<double>(context.corrected_learning_rate)) * m /
      std::min<double>(epsilon_, 1.0);
  after->max_abs[0] = (before.max_abs[0] + step) * ValueBounds::kRounding;
  after->min[0] = -after->max_abs[0];
  // g - m and g^2 are formed before the convex combinations.
  if (!(max_abs_grad + before.max_abs[1] < ValueBounds::kLimit)) return false;
  return true;
}

}  // namespace psrt
