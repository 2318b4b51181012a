#include "ps_server/optimizers/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ps_server/optimizers/adagrad.h"
#include "ps_server/optimizers/adam.h"
#include "ps_server/optimizers/ftrl.h"
#include "ps_server/optimizers/momentum.h"
#include "ps_server/optimizers/sgd.h"
#include "util/finite.h"

namespace psrt {

size_t Optimizer::FirstNonFiniteResult(const float* params,
                                       const float* const* slots,
                                       const float* grad, size_t n,
                                       const UpdateContext& context,
                                       float* bad_value) const {
  constexpr size_t kChunk = 256;  // copies stay in L1
  float p[kChunk], s0[kChunk], s1[kChunk];
  float* copies[2] = {s0, s1};
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t m = std::min(kChunk, n - begin);
    std::memcpy(p, params + begin, m * sizeof(float));
    for (int k = 0; k < num_slots_; ++k) {
      std::memcpy(copies[k], slots[k] + begin, m * sizeof(float));
    }
    Apply(p, copies, grad + begin, m, context);
    bool finite = SpanFinite(p, m);
    for (int k = 0; k < num_slots_; ++k) {
      finite = finite && SpanFinite(copies[k], m);
    }
    if (finite) continue;
    for (size_t i = 0; i < m; ++i) {
      const float* results[3] = {&p[i], &s0[i], &s1[i]};
      for (int k = 0; k <= num_slots_; ++k) {
        if (!std::isfinite(*results[k])) {
          *bad_value = *results[k];
          return begin + i;
        }
      }
    }
  }
  return n;
}

std::unique_ptr<Optimizer> CreateOptimizer(const OptimizerSpec& spec) {
  switch (spec.kind()) {
    case OptimizerSpec::MOMENTUM:
      return std::make_unique<Momentum>(spec.momentum(), spec.nesterov());
    case OptimizerSpec::ADAGRAD:
      return std::make_unique<Adagrad>(spec.initial_accumulator_value());
    case OptimizerSpec::ADAM:
      return std::make_unique<Adam>(spec.beta1(), spec.beta2(), spec.epsilon());
    case OptimizerSpec::FTRL:
      return std::make_unique<Ftrl>(spec.initial_accumulator_value(), spec.l1(),
                                    spec.l2(), spec.beta());
    case OptimizerSpec::SGD:
    default:
      return std::make_unique<Sgd>();
  }
}

}  // namespace psrt
