// Server-side optimizers: update parameters in place from a gradient, with
// their slots (accumulators, moments) stored beside the parameters.
//
// Each optimizer follows TensorFlow's training ops (ApplyGradientDescent,
// ApplyMomentum, ApplyAdagrad, ApplyAdam, ApplyFtrlV2) so that a model moved
// from TF's PS trains the same way. Updates are element-wise, so any span of
// coordinates can be updated on its own: a dense shard in pieces as its
// gradient arrives, an embedding one row at a time.
#ifndef PSRT_PS_SERVER_OPTIMIZERS_OPTIMIZER_H_
#define PSRT_PS_SERVER_OPTIMIZERS_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "proto/ps.pb.h"
#include "ps_server/optimizers/value_bounds.h"

namespace psrt {

struct UpdateContext {
  float learning_rate = 0;
  // 1-based number of updates applied to the shard, this one included
  // (Adam's bias correction).
  int64_t step = 1;
  // The learning rate of this update after the optimizer's step-dependent
  // correction (Adam's bias correction), derived once per update
  // (Optimizer::Prepare) rather than for every row it updates.
  float corrected_learning_rate = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  int num_slots() const { return num_slots_; }
  // The value every slot coordinate starts at.
  float initial_slot_value(int slot) const {
    return initial_slot_values_[slot];
  }

  // Fills context->corrected_learning_rate for one update; call once before the
  // Apply calls that make up the update.
  virtual void Prepare(UpdateContext* context) const {}

  // Updates params[0, n) and slots[k][0, n) with grad[0, n).
  // REQUIRES: Prepare(&context) was called; the arrays do not overlap.
  virtual void Apply(float* params, float* const* slots, const float* grad,
                     size_t n, const UpdateContext& context) const = 0;

  // Bounds on the values after one Apply of a gradient whose magnitudes are
  // at most `max_abs_grad`, to values within `before`; false where this
  // optimizer cannot bound its update (the caller then proves the update
  // finite by a dry run). True promises that every intermediate and final
  // value of such an Apply is finite and within *after, provided
  // after->WithinLimit(1 + num_slots()).
  virtual bool BoundsAfter(const ValueBounds& before, double max_abs_grad,
                           const UpdateContext& context,
                           ValueBounds* after) const {
    return false;
  }
  // Whether BoundsAfter can ever return true (else shards keep no bounds).
  virtual bool bounds_updates() const { return false; }

  // The first i in [0, n) where Apply with these arguments would leave the
  // parameter or a slot NaN or +-Inf (finite inputs can overflow: a 3e38
  // gradient), or n if none would. Computes on copies in small chunks;
  // changes nothing. *bad_value gets the offending result.
  size_t FirstNonFiniteResult(const float* params, const float* const* slots,
                              const float* grad, size_t n,
                              const UpdateContext& context,
                              float* bad_value) const;

 protected:
  Optimizer(int num_slots, float slot0_initial, float slot1_initial)
      : num_slots_(num_slots),
        initial_slot_values_{slot0_initial, slot1_initial} {}

 private:
  int num_slots_;
  float initial_slot_values_[2];
};

// REQUIRES: `spec` was normalized (NormalizeVariableSpec).
std::unique_ptr<Optimizer> CreateOptimizer(const OptimizerSpec& spec);

// The context for one update: learning rate, step, corrected rate.
inline UpdateContext MakeUpdateContext(const Optimizer& optimizer,
                                       float learning_rate, int64_t step) {
  UpdateContext context;
  context.learning_rate = learning_rate;
  context.step = step;
  optimizer.Prepare(&context);
  return context;
}

}  // namespace psrt

#endif  // PSRT_PS_SERVER_OPTIMIZERS_OPTIMIZER_H_
