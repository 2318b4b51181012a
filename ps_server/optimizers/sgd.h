#ifndef PSRT_PS_SERVER_OPTIMIZERS_SGD_H_
#define PSRT_PS_SERVER_OPTIMIZERS_SGD_H_

#include "ps_server/optimizers/optimizer.h"

namespace psrt {

// param -= lr * grad
class Sgd final : public Optimizer {
 public:
  Sgd() : Optimizer(0, 0, 0) {}
  void Apply(float* params, float* const* slots, const float* grad, size_t n,
             const UpdateContext& context) const override;
  bool BoundsAfter(const ValueBounds& before, double max_abs_grad,
                   const UpdateContext& context,
                   ValueBounds* after) const override;
  bool bounds_updates() const override { return true; }
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_OPTIMIZERS_SGD_H_
