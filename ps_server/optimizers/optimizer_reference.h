// Straightforward scalar transcriptions of the update rules psrt's
// optimizers claim to implement (TF's training ops), one coordinate at a
// time. Tests compare the vectorized optimizers and whole clusters against
// these.
#ifndef PSRT_PS_SERVER_OPTIMIZERS_OPTIMIZER_REFERENCE_H_
#define PSRT_PS_SERVER_OPTIMIZERS_OPTIMIZER_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "proto/ps.pb.h"

namespace psrt {

struct ReferenceState {
  std::vector<float> params, slot0, slot1;

  // Parameters `initial` with slots at the optimizer's start values.
  static ReferenceState Start(const OptimizerSpec& spec,
                              std::vector<float> initial);
};

// One update with gradient `grad` (params.size() floats); `step` is the
// 1-based update count (Adam). REQUIRES: spec normalized.
void ReferenceUpdate(const OptimizerSpec& spec, int64_t step, const float* grad,
                     ReferenceState* state);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_OPTIMIZERS_OPTIMIZER_REFERENCE_H_
