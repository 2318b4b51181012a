// The input of a deep (MLP) part over fixed fields: each example's field
// embeddings, scaled by the feature values, side by side, then its dense
// features -- and the way back to the embedding rows' gradients.
#ifndef PSRT_PS_WORKER_MODEL_DEEP_INPUT_H_
#define PSRT_PS_WORKER_MODEL_DEEP_INPUT_H_

#include <vector>

#include "ps_worker/model/model.h"

namespace psrt {

// x[n, fields * k + dense_dim] for examples [begin, end).
void GatherDeepInput(const Batch& b, int begin, int end,
                     const StepParameters& p, int table, int fields, int k,
                     std::vector<float>* x);

// Adds dx's embedding part to the rows' gradients.
void ScatterDeepInputGradient(const Batch& b, int begin, int end,
                              const StepParameters& p, int table, int fields,
                              int k, const std::vector<float>& dx,
                              Gradients* g);

}  // namespace psrt

#endif  // PSRT_PS_WORKER_MODEL_DEEP_INPUT_H_
