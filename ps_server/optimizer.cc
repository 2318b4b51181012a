#include "ps_server/optimizer.h"

#include "ps_server/adagrad.h"
#include "ps_server/adam.h"
#include "ps_server/ftrl.h"
#include "ps_server/momentum.h"
#include "ps_server/sgd.h"

namespace psrt {

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
