#include "ps_server/optimizers/adagrad.h"

#include <algorithm>
#include <cmath>

#include "Eigen/Core"

namespace psrt {

void Adagrad::Apply(float* params, float* const* slots, const float* grad,
                    size_t n, const UpdateContext& context) const {
  Eigen::Map<Eigen::ArrayXf> p(params, n), accum(slots[0], n);
  Eigen::Map<const Eigen::ArrayXf> g(grad, n);
  accum += g.square();
  p -= context.learning_rate * g / accum.sqrt();
}

// accum' = accum + g^2 never falls below its lower bound L (> 0 needed:
// 0 / sqrt(0) is NaN), and |g| / sqrt(accum') <= 1 (up to rounding) while
// g^2 is a normal float, i.e. |g| >= 1.1e-19; below that the ratio is at
// most 1.1e-19 / sqrt(L). lr * g is computed first, so it must stay finite
// too.
bool Adagrad::BoundsAfter(const ValueBounds& before, double max_abs_grad,
                          const UpdateContext& context,
                          ValueBounds* after) const {
  const double lr = context.learning_rate;
  if (!(before.min[1] > 0) || !(lr * max_abs_grad < ValueBounds::kLimit)) {
    return false;
  }
  *after = before;
  after->max_abs[1] = (before.max_abs[1] + max_abs_grad * max_abs_grad) *
                      ValueBounds::kRounding;
  const double ratio = std::max(1.0, 1.1e-19 / std::sqrt(before.min[1]));
  after->max_abs[0] = (before.max_abs[0] + lr * ratio) * ValueBounds::kRounding;
  after->min[0] = -after->max_abs[0];
  return true;
}

}  // namespace psrt
