#include "ps_worker/model/linear_part.h"

#include <vector>

namespace psrt {

void LinearPart::Declare(const std::string& prefix, int dense_dim,
                         const AddTable& add_table, const AddDense& add_dense) {
  table_ = add_table(prefix + "/weights", 1, ZerosInit());
  bias_ = add_dense(prefix + "/bias", {1}, ZerosInit());
  dense_dim_ = dense_dim;
  if (dense_dim > 0)
    dense_ = add_dense(prefix + "/dense", {dense_dim}, ZerosInit());
}

void LinearPart::Forward(const Batch& b, int begin, int end,
                         const StepParameters& p, float* z) const {
  const float* w = p.tables[table_].data();
  const float bias = p.dense[bias_][0];
  for (int i = begin; i < end; ++i) {
    float s = bias;
    for (int j = b.offsets[i]; j < b.offsets[i + 1]; ++j) {
      s += w[p.slots[j]] * b.values[j];
    }
    if (dense_ >= 0) {
      const float* x = b.dense.data() + static_cast<size_t>(i) * dense_dim_;
      const float* u = p.dense[dense_].data();
      for (int d = 0; d < dense_dim_; ++d) s += u[d] * x[d];
    }
    z[i - begin] += s;
  }
}

void LinearPart::Backward(const Batch& b, int begin, int end,
                          const StepParameters& p, const float* dz,
                          Gradients* g) const {
  float* dw = g->tables[table_].data();
  for (int i = begin; i < end; ++i) {
    const float d = dz[i - begin];
    g->dense[bias_][0] += d;
    for (int j = b.offsets[i]; j < b.offsets[i + 1]; ++j) {
      dw[p.slots[j]] += d * b.values[j];
    }
    if (dense_ >= 0) {
      const float* x = b.dense.data() + static_cast<size_t>(i) * dense_dim_;
      float* du = g->dense[dense_].data();
      for (int k = 0; k < dense_dim_; ++k) du[k] += d * x[k];
    }
  }
}

void FmPart::Declare(const std::string& name, int k, uint64_t seed,
                     const LinearPart::AddTable& add_table) {
  k_ = k;
  table_ = add_table(name, k, NormalInit(0.01f, seed));
}

void FmPart::Forward(const Batch& b, int begin, int end,
                     const StepParameters& p, float* z) const {
  const float* v = p.tables[table_].data();
  std::vector<float> sum(k_);
  for (int i = begin; i < end; ++i) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    float squares = 0;
    for (int j = b.offsets[i]; j < b.offsets[i + 1]; ++j) {
      const float* row = v + static_cast<size_t>(p.slots[j]) * k_;
      const float x = b.values[j];
      for (int c = 0; c < k_; ++c) {
        const float vx = row[c] * x;
        sum[c] += vx;
        squares += vx * vx;
      }
    }
    float s = 0;
    for (int c = 0; c < k_; ++c) s += sum[c] * sum[c];
    z[i - begin] += 0.5f * (s - squares);
  }
}

void FmPart::Backward(const Batch& b, int begin, int end,
                      const StepParameters& p, const float* dz,
                      Gradients* g) const {
  const float* v = p.tables[table_].data();
  float* dv = g->tables[table_].data();
  std::vector<float> sum(k_);
  for (int i = begin; i < end; ++i) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int j = b.offsets[i]; j < b.offsets[i + 1]; ++j) {
      const float* row = v + static_cast<size_t>(p.slots[j]) * k_;
      for (int c = 0; c < k_; ++c) sum[c] += row[c] * b.values[j];
    }
    const float d = dz[i - begin];
    for (int j = b.offsets[i]; j < b.offsets[i + 1]; ++j) {
      const size_t s = static_cast<size_t>(p.slots[j]) * k_;
      const float x = b.values[j];
      for (int c = 0; c < k_; ++c) {
        dv[s + c] += d * x * (sum[c] - v[s + c] * x);
      }
    }
  }
}

}  // namespace psrt
