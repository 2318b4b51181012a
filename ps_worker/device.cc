#include "ps_worker/device.h"

#include "absl/strings/str_cat.h"
#include "ps_worker/gpu/gpu_towers.h"
#include "ps_worker/towers.h"

namespace psrt {
namespace {

std::unique_ptr<TowerRunner> CpuTowers(const Model* model, int towers) {
  return std::make_unique<Towers>(model, towers > 0 ? towers : 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TowerRunner>> CreateTowerRunner(
    const Model* model, absl::string_view device, int towers,
    std::string* choice) {
  if (towers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--towers=", towers, ": must be >= 0 (0: default)"));
  }
  if (device != "cpu" && device != "gpu" && device != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, ": expected cpu, gpu or auto"));
  }
  std::unique_ptr<TowerRunner> runner;
  if (device == "cpu") {
    runner = CpuTowers(model, towers);
  } else {
    // NewGpuTowers says why it cannot: no kernels for the model, no usable
    // GPU, a CUDA or cuBLAS failure.
    absl::StatusOr<std::unique_ptr<TowerRunner>> gpu =
        NewGpuTowers(model, towers);
    if (!gpu.ok() && device == "gpu") {
      return absl::Status(
          gpu.status().code(),
          absl::StrCat("--device=gpu: ", gpu.status().message()));
    }
    if (!gpu.ok()) {
      runner = CpuTowers(model, towers);
      *choice = absl::StrCat("--device=auto: ", gpu.status().message(),
                             "; training on the CPU with ", runner->size(),
                             " tower(s)");
      return runner;
    }
    runner = *std::move(gpu);
  }
  *choice = absl::StrCat("computing on ", runner->device(), " with ",
                         runner->size(), " tower(s)");
  return runner;
}

}  // namespace psrt
