#ifndef PSRT_PS_SERVER_OPTIMIZERS_FTRL_H_
#define PSRT_PS_SERVER_OPTIMIZERS_FTRL_H_

#include "ps_server/optimizers/optimizer.h"

namespace psrt {

// FTRL-Proximal (McMahan et al. 2013, "Ad Click Prediction: a View from the
// Trenches"), as TF's ApplyFtrlV2 with learning_rate_power = -0.5.
// Slot 0 is the accumulator n (starts at initial_accumulator_value), slot 1
// the linear term z. alpha is the learning rate.
//   n' = n + g^2
//   z += g - (sqrt(n') - sqrt(n)) / alpha * w
//   w = |z| <= l1 ? 0 : (sign(z) * l1 - z) / ((beta + sqrt(n')) / alpha + 2 l2)
// (TF's l2 penalizes l2 * w^2, hence 2 l2 where the paper writes lambda2.)
class Ftrl final : public Optimizer {
 public:
  Ftrl(float initial_accumulator_value, float l1, float l2, float beta)
      : Optimizer(2, initial_accumulator_value, 0),
        l1_(l1),
        l2_(l2),
        beta_(beta) {}
  void Apply(float* params, float* const* slots, const float* grad, size_t n,
             const UpdateContext& context) const override;

 private:
  float l1_, l2_, beta_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_OPTIMIZERS_FTRL_H_
