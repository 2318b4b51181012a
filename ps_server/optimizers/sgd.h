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
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_OPTIMIZERS_SGD_H_
