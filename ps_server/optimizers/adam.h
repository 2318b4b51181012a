#ifndef PSRT_PS_SERVER_OPTIMIZERS_ADAM_H_
#define PSRT_PS_SERVER_OPTIMIZERS_ADAM_H_

#include "ps_server/optimizers/optimizer.h"

namespace psrt {

// As TF's ApplyAdam. Slot 0 is m, slot 1 is v; t is the shard's update count.
//   m = beta1 * m + (1 - beta1) * grad
//   v = beta2 * v + (1 - beta2) * grad^2
//   param -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon)
// On embeddings only the pushed rows are updated (TF's LazyAdam).
class Adam final : public Optimizer {
 public:
  Adam(float beta1, float beta2, float epsilon)
      : Optimizer(2, 0, 0), beta1_(beta1), beta2_(beta2), epsilon_(epsilon) {}
  // corrected_learning_rate = lr * sqrt(1 - beta2^t) / (1 - beta1^t).
  void Prepare(UpdateContext* context) const override;
  void Apply(float* params, float* const* slots, const float* grad, size_t n,
             const UpdateContext& context) const override;
  bool BoundsAfter(const ValueBounds& before, double max_abs_grad,
                   const UpdateContext& context,
                   ValueBounds* after) const override;
  bool bounds_updates() const override { return true; }

 private:
  float beta1_, beta2_, epsilon_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_OPTIMIZERS_ADAM_H_
