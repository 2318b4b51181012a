#ifndef PSRT_PS_SERVER_OPTIMIZERS_ADAGRAD_H_
#define PSRT_PS_SERVER_OPTIMIZERS_ADAGRAD_H_

#include "ps_server/optimizers/optimizer.h"

namespace psrt {

// As TF's ApplyAdagrad. Slot 0 is the accumulator, starting at
// initial_accumulator_value (> 0, so the division is always defined).
//   accum += grad^2
//   param -= lr * grad / sqrt(accum)
class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(float initial_accumulator_value)
      : Optimizer(1, initial_accumulator_value, 0) {}
  void Apply(float* params, float* const* slots, const float* grad, size_t n,
             const UpdateContext& context) const override;
  bool BoundsAfter(const ValueBounds& before, double max_abs_grad,
                   const UpdateContext& context,
                   ValueBounds* after) const override;
  bool bounds_updates() const override { return true; }
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_OPTIMIZERS_ADAGRAD_H_
