#include "ps_server/ftrl.h"

#include "Eigen/Core"

namespace psrt {

void Ftrl::Apply(float* params, float* const* slots, const float* grad,
                 size_t n, const UpdateContext& context) const {
  Eigen::Map<Eigen::ArrayXf> w(params, n), accum(slots[0], n), z(slots[1], n);
  Eigen::Map<const Eigen::ArrayXf> g(grad, n);
  const float alpha = context.learning_rate;
  // Written as three expressions so Eigen fuses each into one vectorized
  // loop without temporaries (this runs once per embedding row).
  z += g - ((accum + g.square()).sqrt() - accum.sqrt()) / alpha * w;
  accum += g.square();
  w = (z.abs() > l1_)
          .select(
              (z.sign() * l1_ - z) / ((beta_ + accum.sqrt()) / alpha + 2 * l2_),
              0.0f);
}

}  // namespace psrt
