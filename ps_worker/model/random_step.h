// Tests' random steps: a batch for a model's config and parameters for its
// de-duplicated ids, as the trainer would have pulled them.
#ifndef PSRT_PS_WORKER_MODEL_RANDOM_STEP_H_
#define PSRT_PS_WORKER_MODEL_RANDOM_STEP_H_

#include <cstdint>

#include "ps_worker/model/model.h"

namespace psrt {

struct RandomStepOptions {
  int examples = 37;
  int id_pool = 40;            // ids drawn from [0, id_pool): rows repeat
  bool varied_values = false;  // feature values in {0.5, 1, 1.5}, else 1
  float stddev = 0.3f;         // of the parameters
  uint64_t seed = 3;
};

struct RandomStep {
  Batch batch;  // config.fields features and config.dense_dim per example
  StepParameters params;
};

RandomStep MakeRandomStep(const Model& model, const RandomStepOptions& options);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_MODEL_RANDOM_STEP_H_
