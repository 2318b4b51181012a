// --device and --towers: what computes a worker's gradients.
//   cpu   towers are threads (default 1);
//   gpu   towers are GPUs (default one per GPU); no usable GPU is an error;
//   auto  gpu where a usable GPU exists and the model has GPU kernels,
//         else cpu, saying why in one log line.
#ifndef PSRT_PS_WORKER_DEVICE_H_
#define PSRT_PS_WORKER_DEVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ps_worker/model/model.h"
#include "ps_worker/tower_runner.h"

namespace psrt {

// `towers` 0 takes the device's default. *choice gets one line for the log
// saying what was chosen and, for auto's fallback, why.
absl::StatusOr<std::unique_ptr<TowerRunner>> CreateTowerRunner(
    const Model* model, absl::string_view device, int towers,
    std::string* choice);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DEVICE_H_
