#include "ps_server/optimizers/optimizer_reference.h"

#include <cmath>

namespace psrt {

ReferenceState ReferenceState::Start(const OptimizerSpec& spec,
                                     std::vector<float> initial) {
  ReferenceState s;
  const size_t n = initial.size();
  s.params = std::move(initial);
  const bool accumulates = spec.kind() == OptimizerSpec::ADAGRAD ||
                           spec.kind() == OptimizerSpec::FTRL;
  s.slot0.assign(n, accumulates ? spec.initial_accumulator_value() : 0.0f);
  s.slot1.assign(n, 0.0f);
  return s;
}

void ReferenceUpdate(const OptimizerSpec& o, int64_t step, const float* g,
                     ReferenceState* state) {
  const float lr = o.learning_rate();
  for (size_t i = 0; i < state->params.size(); ++i) {
    float& p = state->params[i];
    float& a = state->slot0[i];
    float& b = state->slot1[i];
    switch (o.kind()) {
      case OptimizerSpec::SGD:
        p -= lr * g[i];
        break;
      case OptimizerSpec::MOMENTUM:
        a = o.momentum() * a + g[i];
        p -= o.nesterov() ? lr * (g[i] + o.momentum() * a) : lr * a;
        break;
      case OptimizerSpec::ADAGRAD:
        a += g[i] * g[i];
        p -= lr * g[i] / std::sqrt(a);
        break;
      case OptimizerSpec::ADAM: {
        a = o.beta1() * a + (1 - o.beta1()) * g[i];
        b = o.beta2() * b + (1 - o.beta2()) * g[i] * g[i];
        const double lr_t = lr * std::sqrt(1 - std::pow(o.beta2(), step)) /
                            (1 - std::pow(o.beta1(), step));
        p -= static_cast<float>(lr_t) * a / (std::sqrt(b) + o.epsilon());
        break;
      }
      case OptimizerSpec::FTRL: {
        const float n_new = a + g[i] * g[i];
        const float sigma = (std::sqrt(n_new) - std::sqrt(a)) / lr;
        b += g[i] - sigma * p;
        a = n_new;
        if (std::fabs(b) <= o.l1()) {
          p = 0;
        } else {
          const float sign = b > 0 ? 1.0f : -1.0f;
          p = (sign * o.l1() - b) /
              ((o.beta() + std::sqrt(a)) / lr + 2 * o.l2());
        }
        break;
      }
      default:
        break;
    }
  }
}

}  // namespace psrt
