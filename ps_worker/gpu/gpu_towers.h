// Tower-style data parallelism on NVIDIA GPUs (TF's multi-GPU towers): each
// step's batch is split into one slice per tower, tower t runs on GPU
// t % (GPU count), and the towers' gradients are summed on the first tower's
// GPU (peer copies, then one add kernel per tower) before a single copy back
// for the push. Each tower scales its losses by 1 / (whole batch size), so
// the sum is the whole batch's mean-loss gradient: N towers make the update
// one tower would.
//
// Per step and tower: the pulled rows and dense weights (packed once into
// a pinned host buffer) and the tower's slice of the batch are copied in on
// the tower's own stream, then its kernels run there, so one tower's copies
// overlap another's compute. Embedding gather / scatter-add, FM terms and
// the loss are ours (ctr_kernels.cu); dense layers are cuBLAS SGEMMs.
//
// Runs the models that describe themselves with Model::ctr_parts() (lr, fm,
// deepfm, wide_deep).
#ifndef PSRT_PS_WORKER_GPU_GPU_TOWERS_H_
#define PSRT_PS_WORKER_GPU_GPU_TOWERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ps_worker/model/model.h"
#include "ps_worker/tower_runner.h"

namespace psrt {

struct GpuInfo {
  int count = 0;
  std::string names;  // e.g. "1 x NVIDIA H100 80GB HBM3 (sm_90)"
};

// The usable GPUs; an error says why there are none (built without CUDA,
// no driver, no device, GPUs older than sm_80).
absl::StatusOr<GpuInfo> ProbeGpus();

// `towers` towers over the probed GPUs (0: one per GPU). Fails if the model
// has no ctr_parts() or a CUDA / cuBLAS call fails.
absl::StatusOr<std::unique_ptr<TowerRunner>> NewGpuTowers(const Model* model,
                                                          int towers);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_GPU_GPU_TOWERS_H_
