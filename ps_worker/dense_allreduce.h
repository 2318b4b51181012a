// ps_worker --dense_sync=allreduce: the model's dense variables live in
// every worker; each step their gradients are averaged over the workers in
// one all-reduce and every worker applies the variables' optimizer (the
// PS's own code, ps_server/optimizers) to its copy. The sum is the same
// bits on every worker (allreduce_ring.h), and so, from the same start, are
// the parameters and optimizer slots after every step.
//
// Tensor fusion, as Horovod's: the step's dense gradients are copied into
// one buffer, reduced in one call, and applied from it.
//
// State: the parameters, the optimizer slots, the count of updates applied
// (Adam's t) and the next training step. When the ring forms, every member
// takes the state of its lowest member that holds one (worker 0 at the
// first start, all from the same PS values; after a restart, a survivor).
//
// A broken ring (a worker died) fails the step naming the dead worker. With
// a reform timeout it forms again instead, as the next generation, once the
// restarted worker joins (within that timeout): the step whose all-reduce
// broke is not applied (counted in dropped_updates()), and every member
// goes on from the survivors' state.
#ifndef PSRT_PS_WORKER_DENSE_ALLREDUCE_H_
#define PSRT_PS_WORKER_DENSE_ALLREDUCE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "ps_server/optimizers/optimizer.h"
#include "ps_worker/allreduce/allreduce_ring.h"

namespace psrt {

class DenseAllreduce {
 public:
  struct Options {
    AllreduceRing::Options ring;
    // 0: a broken ring fails training. Else how long the survivors wait
    // for the ring to form again with a restarted worker.
    absl::Duration reform_timeout = absl::ZeroDuration();
  };

  // For the model's dense variables, specs as created on the PS (any
  // embedding specs are refused).
  static absl::StatusOr<std::unique_ptr<DenseAllreduce>> Create(
      std::vector<VariableSpec> specs, Options options);

  // Joins the ring (the generation a starting worker joins) with `values`
  // (one per variable, e.g. pulled from the PS) and `next_step`; then
  // every member holds the state holder's: values(), next_step().
  absl::Status Start(std::vector<std::vector<float>> values, int64_t next_step);

  // One training step's update: `grads` (one per variable, this worker's
  // tower average) are averaged over the workers and applied with
  // `learning_rate` (0: each variable's own). `step` is the training
  // step. An update that would leave a value non-finite is refused on
  // every worker alike, naming the variable and element.
  absl::Status Apply(const std::vector<std::vector<float>>& grads,
                     float learning_rate, int64_t step);

  const std::vector<std::vector<float>>& values() const { return values_; }
  // The step training continues at (after Start: the state holder's).
  int64_t next_step() const { return next_step_; }
  int64_t updates() const { return updates_; }
  // CRC-32C of the values (every variable's float32 bits, in order): equal
  // on every worker.
  uint32_t values_crc32c() const;
  int64_t dropped_updates() const { return dropped_updates_; }
  int64_t generation() const { return ring_ ? ring_->generation() : -1; }
  // Floats of all the dense variables, as one all-reduce moves them.
  int64_t floats() const;
  // The mean time of the all-reduces so far (zero before the first).
  absl::Duration mean_allreduce_time() const {
    return allreduces_ == 0 ? absl::ZeroDuration()
                            : allreduce_time_ / allreduces_;
  }

 private:
  DenseAllreduce(std::vector<VariableSpec> specs, Options options);
  // Joins `generation` and takes the state holder's state (worker 0's if
  // none holds one).
  absl::Status Form(int64_t generation, bool holds_state,
                    absl::Duration join_timeout);
  // The state as bytes, and back.
  std::vector<char> SaveState() const;
  absl::Status LoadState(const std::vector<char>& bytes);

  const std::vector<VariableSpec> specs_;
  const Options options_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;
  std::vector<std::vector<float>> values_;
  std::vector<std::vector<std::vector<float>>> slots_;  // [variable][slot]
  std::vector<float> fused_;  // the step's gradients, then their mean
  std::unique_ptr<AllreduceRing> ring_;
  int64_t updates_ = 0;
  int64_t next_step_ = 0;
  int64_t dropped_updates_ = 0;
  absl::Duration allreduce_time_;  // all the Sums so far
  int64_t allreduces_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_DENSE_ALLREDUCE_H_
