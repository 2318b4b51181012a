#include "ps_worker/model/deep_input.h"

#include <cstring>

namespace psrt {

void GatherDeepInput(const Batch& b, int begin, int end,
                     const StepParameters& p, int table, int fields, int k,
                     std::vector<float>* x) {
  const int width = fields * k + b.dense_dim;
  x->resize(static_cast<size_t>(end - begin) * width);
  const float* v = p.tables[table].data();
  for (int i = begin; i < end; ++i) {
    float* row = x->data() + static_cast<size_t>(i - begin) * width;
    for (int f = 0; f < fields; ++f) {
      const int j = b.offsets[i] + f;
      const float* e = v + static_cast<size_t>(p.slots[j]) * k;
      const float value = b.values[j];
      for (int c = 0; c < k; ++c) row[f * k + c] = e[c] * value;
    }
    if (b.dense_dim > 0) {
      std::memcpy(row + fields * k,
                  b.dense.data() + static_cast<size_t>(i) * b.dense_dim,
                  b.dense_dim * sizeof(float));
    }
  }
}

void ScatterDeepInputGradient(const Batch& b, int begin, int end,
                              const StepParameters& p, int table, int fields,
                              int k, const std::vector<float>& dx,
                              Gradients* g) {
  const int width = fields * k + b.dense_dim;
  float* dv = g->tables[table].data();
  for (int i = begin; i < end; ++i) {
    const float* row = dx.data() + static_cast<size_t>(i - begin) * width;
    for (int f = 0; f < fields; ++f) {
      const int j = b.offsets[i] + f;
      float* d = dv + static_cast<size_t>(p.slots[j]) * k;
      const float value = b.values[j];
      for (int c = 0; c < k; ++c) d[c] += row[f * k + c] * value;
    }
  }
}

}  // namespace psrt
