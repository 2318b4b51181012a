#include "ps_server/optimizers/sgd.h"

#include "Eigen/Core"

namespace psrt {

void Sgd::Apply(float* params, float* const*, const float* grad, size_t n,
                const UpdateContext& context) const {
  Eigen::Map<Eigen::ArrayXf> p(params, n);
  Eigen::Map<const Eigen::ArrayXf> g(grad, n);
  p -= context.learning_rate * g;
}

// p -= lr * g: |p'| <= P + lr * G.
bool Sgd::BoundsAfter(const ValueBounds& before, double max_abs_grad,
                      const UpdateContext& context, ValueBounds* after) const {
  *after = before;
  after->max_abs[0] =
      (before.max_abs[0] + context.learning_rate * max_abs_grad) *
      ValueBounds::kRounding;
  after->min[0] = -after->max_abs[0];
  return true;
}

}  // namespace psrt
