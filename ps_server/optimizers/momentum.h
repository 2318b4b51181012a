#ifndef PSRT_PS_SERVER_OPTIMIZERS_MOMENTUM_H_
#define PSRT_PS_SERVER_OPTIMIZERS_MOMENTUM_H_

#include "ps_server/optimizers/optimizer.h"

namespace psrt {

// As TF's ApplyMomentum. Slot 0 is the accumulator.
//   accum = momentum * accum + grad
//   param -= lr * accum                          (classic)
//   param -= lr * (grad + momentum * accum)      (Nesterov)
class Momentum final : public Optimizer {
 public:
  Momentum(float momentum, bool nesterov)
      : Optimizer(1, 0, 0), momentum_(momentum), nesterov_(nesterov) {}
  void Apply(float* params, float* const* slots, const float* grad, size_t n,
             const UpdateContext& context) const override;
  bool BoundsAfter(const ValueBounds& before, double max_abs_grad,
                   const UpdateContext& context,
                   ValueBounds* after) const override;
  bool bounds_updates() const override { return true; }

 private:
  float momentum_;
  bool nesterov_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_OPTIMIZERS_MOMENTUM_H_
