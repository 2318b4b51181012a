#include "ps_worker/device.h"

#include "absl/strings/str_cat.h"
#include "ps_worker/gpu/gpu_towers.h"
#include "ps_worker/towers.h"

namespace psrt {
namespace {

std::unique_ptr<TowerRunner> CpuTowers(const Model* model, int towers) {
  return std::make_unique<Towers>(model, towers > 0 ? towers : 1);
}

// Why the GPU path cannot run this model here (OK if it can).
absl::Status GpuUnusable(const Model* model) {
  if (model->ctr_parts() == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", model->config().name,
                     " has no GPU kernels (lr, fm, deepfm and wide_deep do)"));
  }
  return ProbeGpus().status();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TowerRunner>> CreateTowerRunner(
    const Model* model, absl::string_view device, int towers,
    std::string* choice) {
  if (towers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--towers=", towers, ": must be >= 0 (0: default)"));
  }
  std::unique_ptr<TowerRunner> runner;
  if (device == "cpu") {
    runner = CpuTowers(model, towers);
  } else if (device == "gpu" || device == "auto") {
    absl::Status unusable = GpuUnusable(model);
    if (unusable.ok()) {
      absl::StatusOr<std::unique_ptr<TowerRunner>> gpu =
          NewGpuTowers(model, towers);
      if (!gpu.ok()) unusable = gpu.status();
      if (gpu.ok()) runner = std::move(*gpu);
    }
    if (!unusable.ok()) {
      if (device == "gpu") {
        return absl::Status(unusable.code(),
                            absl::StrCat("--device=gpu: ", unusable.message()));
      }
      runner = CpuTowers(model, towers);
      *choice = absl::StrCat("--device=auto: ", unusable.message(),
                             "; training on the CPU with ", runner->size(),
                             " tower(s)");
      return runner;
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, ": expected cpu, gpu or auto"));
  }
  *choice = absl::StrCat("computing on ", runner->device(), " with ",
                         runner->size(), " tower(s)");
  return runner;
}

}  // namespace psrt
