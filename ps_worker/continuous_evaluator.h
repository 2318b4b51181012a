// TensorFlow's evaluator task for a psrt cluster: a process that trains
// nothing and evaluates the latest parameters on the evaluation files
// while the workers train, as tf.estimator.train_and_evaluate's evaluator
// does with each new checkpoint. It evaluates whenever the servers applied
// pushes since its last evaluation, at most once per interval; it ends
// once the global step reached --max_steps and nothing moved since it
// evaluated, or when the servers go away after the workers finished (the
// launcher stops them), with the last evaluation.
#ifndef PSRT_PS_WORKER_CONTINUOUS_EVALUATOR_H_
#define PSRT_PS_WORKER_CONTINUOUS_EVALUATOR_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps_worker/trainer.h"

namespace psrt {

struct ContinuousEvaluation {
  EvalResult last;               // the last evaluation
  int64_t last_global_step = 0;  // the servers' step it evaluated
  int evaluations = 0;
};

// Runs the evaluator on `trainer` (options.evaluator, options.eval set):
// evaluates every `interval` while the parameters move. Fails if the
// servers cannot be reached before a first evaluation.
absl::StatusOr<ContinuousEvaluation> RunContinuousEvaluation(
    Trainer* trainer, int64_t max_steps, absl::Duration interval);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_CONTINUOUS_EVALUATOR_H_
