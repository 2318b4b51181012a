#include "ps_server/optimizers/ftrl.h"

#include <cmath>

namespace psrt {

// A plain loop in the reference's operation order: GCC vectorizes it (the
// library is built with -O3 -fno-math-errno), where Eigen's sign() and
// select() fall back to scalar code.
void Ftrl::Apply(float* params, float* const* slots, const float* grad,
                 size_t n, const UpdateContext& context) const {
  float* __restrict w = params;
  float* __restrict accum = slots[0];
  float* __restrict z = slots[1];
  const float* __restrict g = grad;
  const float alpha = context.learning_rate;
  const float l1 = l1_, two_l2 = 2 * l2_, beta = beta_;
  for (size_t i = 0; i < n; ++i) {
    const float n_new = accum[i] + g[i] * g[i];
    const float sqrt_new = std::sqrt(n_new);
    const float sigma = (sqrt_new - std::sqrt(accum[i])) / alpha;
    const float zi = z[i] + (g[i] - sigma * w[i]);
    z[i] = zi;
    accum[i] = n_new;
    const float quadratic = (beta + sqrt_new) / alpha + two_l2;
    // Both sides computed, then selected: branch-free, so it vectorizes.
    const float shrunk = (std::copysign(l1, zi) - zi) / quadratic;
    w[i] = std::fabs(zi) <= l1 ? 0.0f : shrunk;
  }
}

}  // namespace psrt
