// --compute=none: the row-path ceiling. A TowerRunner that does no model
// math: it hands back gradients with exactly the shapes the step's pulls
// filled (every table's rows for the step's unique ids, every dense
// variable whole), so the worker reads, de-duplicates, pulls and pushes
// what the real model would, and the examples/s it reaches is the most any
// model could reach with today's input pipeline, client and servers.
#ifndef PSRT_PS_WORKER_NO_COMPUTE_TOWERS_H_
#define PSRT_PS_WORKER_NO_COMPUTE_TOWERS_H_

#include <string>

#include "ps_worker/tower_runner.h"

namespace psrt {

class NoComputeTowers final : public TowerRunner {
 public:
  // Every gradient value pushed (finite and tiny, so the servers' optimizers
  // really update rows and slots, as for a real model).
  static constexpr float kGradient = 1e-7f;

  int size() const override { return 1; }
  std::string device() const override { return "none (no model math)"; }

  // Shapes *grads like `params` and fills it with kGradient; predictions are
  // 0.5 and the returned loss is batch.size * ln 2 (a coin's log-loss), so
  // progress lines stay well-formed. Never fails.
  absl::StatusOr<double> Run(const Batch& batch, const StepParameters& params,
                             Gradients* grads, float* predictions) override;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_NO_COMPUTE_TOWERS_H_
