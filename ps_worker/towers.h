// Tower-style data parallelism on one worker: the step's batch is split into
// N slices computed at once on N threads (towers), and their gradients are
// combined before the single push. Each tower scales its examples' losses
// by 1 / (whole batch size), so the combined gradient is exactly the
// gradient of the whole batch's mean loss: dense gradients are the
// example-weighted mean of the towers', and a sparse row's gradient is the
// sum over the towers that saw its id, scaled the same way. N towers with
// batch B therefore make the same update as one tower with batch B.
#ifndef PSRT_PS_WORKER_TOWERS_H_
#define PSRT_PS_WORKER_TOWERS_H_

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "ps_worker/model/model.h"
#include "ps_worker/tower_runner.h"

namespace psrt {

class Towers final : public TowerRunner {
 public:
  // `model` must outlive the towers.
  Towers(const Model* model, int towers);
  ~Towers();
  Towers(const Towers&) = delete;
  Towers& operator=(const Towers&) = delete;

  int size() const override { return static_cast<int>(slices_.size()); }
  std::string device() const override { return "cpu"; }

  // Never fails.
  absl::StatusOr<double> Run(const Batch& batch, const StepParameters& params,
                             Gradients* grads, float* predictions) override;

 private:
  struct Slice {
    Gradients grads;
    double loss = 0;
  };
  // Reads the job fields without mu_: they are published before the
  // generation changes and do not change until every tower has finished.
  void Compute(int tower) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  void Loop(int tower);

  const Model* const model_;
  std::vector<Slice> slices_;
  std::vector<std::thread> threads_;

  // The current job, published to the helper threads.
  absl::Mutex mu_;
  const Batch* batch_ ABSL_GUARDED_BY(mu_) = nullptr;
  const StepParameters* params_ ABSL_GUARDED_BY(mu_) = nullptr;
  float* predictions_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar work_;  // a new generation (or stopping)
  absl::CondVar done_;  // pending_ reached 0
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_TOWERS_H_
