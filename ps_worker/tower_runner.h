// What computes a step's gradients on one worker: CPU threads (towers.h) or
// GPUs (gpu/gpu_towers.h), chosen by device.h.
#ifndef PSRT_PS_WORKER_TOWER_RUNNER_H_
#define PSRT_PS_WORKER_TOWER_RUNNER_H_

#include <string>

#include "absl/status/statusor.h"
#include "ps_worker/model/model.h"

namespace psrt {

class TowerRunner {
 public:
  virtual ~TowerRunner() = default;

  virtual int size() const = 0;  // towers
  // Where they run, for logs: "cpu" or the GPUs' names.
  virtual std::string device() const = 0;

  // Gradients of the mean loss over `batch` into *grads (reshaped and
  // overwritten) and predictions[0, batch.size); returns the summed loss.
  // Each tower computes a slice of the batch; their gradients are combined
  // before this returns, so N towers make the same update as one.
  virtual absl::StatusOr<double> Run(const Batch& batch,
                                     const StepParameters& params,
                                     Gradients* grads, float* predictions) = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_TOWER_RUNNER_H_
