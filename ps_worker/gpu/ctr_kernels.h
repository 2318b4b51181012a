// CUDA kernels for the CTR models' step (ps_worker/model's LinearPart,
// FmPart, deep input and logistic loss), launched on a caller's stream.
// Dense layers are cuBLAS calls made by GpuTowers; these are the rest.
//
// Row gradients are summed with atomicAdd (ids repeated in the batch hit the
// same row), so their low bits depend on the order the GPU adds in: results
// equal the CPU's within float rounding, not bit for bit.
#ifndef PSRT_PS_WORKER_GPU_CTR_KERNELS_H_
#define PSRT_PS_WORKER_GPU_CTR_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace psrt {
namespace gpu {

// One tower's examples on the device (struct-of-arrays as psrt::Batch).
struct DeviceBatch {
  int n = 0;                         // examples
  int nnz = 0;                       // sparse features
  int dense_dim = 0;                 // dense features per example
  const int32_t* offsets = nullptr;  // [n + 1], from 0
  const int32_t* slots = nullptr;    // [nnz]: row in the step's unique ids
  const int32_t* example = nullptr;  // [nnz]: the example a feature is in
  const float* values = nullptr;     // [nnz]
  const float* labels = nullptr;     // [n]
  const float* dense = nullptr;      // [n, dense_dim]
};

// z[i] = bias + sum_j w[slot_j] * value_j + u . dense_i (u may be null).
void LinearForward(const DeviceBatch& b, const float* w, const float* bias,
                   const float* u, float* z, cudaStream_t stream);
// dw[slot_j] += dz[example_j] * value_j.
void LinearRowsBackward(const DeviceBatch& b, const float* dz, float* dw,
                        cudaStream_t stream);

// z[i] += 0.5 * sum_c ((sum_j v_jc x_j)^2 - sum_j (v_jc x_j)^2); keeps the
// per-example sums [n, k] for the backward pass.
void FmForward(const DeviceBatch& b, const float* v, int k, float* z,
               float* sums, cudaStream_t stream);
// dv[slot_j, c] += dz_i * x_j * (sums[i, c] - v[slot_j, c] * x_j).
void FmBackward(const DeviceBatch& b, const float* v, int k, const float* sums,
                const float* dz, float* dv, cudaStream_t stream);

// x[n, fields * k + dense_dim]: each field's row scaled by its value, then
// the dense features. REQUIRES: b has exactly `fields` features per example.
void GatherDeepInput(const DeviceBatch& b, const float* v, int fields, int k,
                     float* x, cudaStream_t stream);
// dv[slot, c] += dx[i, f * k + c] * value for the embedding part of dx.
void ScatterDeepInputGradient(const DeviceBatch& b, int fields, int k,
                              const float* dx, float* dv, cudaStream_t stream);

// y[i, c] = (y[i, c] + bias[c]), then max(0, .) if relu.
void AddBias(float* y, const float* bias, int n, int width, bool relu,
             cudaStream_t stream);
// d[i] = 0 where activation[i] <= 0 (through a ReLU).
void ReluBackward(float* d, const float* activation, int64_t count,
                  cudaStream_t stream);

// Logistic loss of z (+ deep if not null) per example, in double as the
// CPU's LogisticLoss: loss[i], probability prob[i], dz[i] = scale * (p - y).
void LogisticLoss(const float* z, const float* deep, const float* labels, int n,
                  float scale, double* loss, float* prob, float* dz,
                  cudaStream_t stream);

// p[i] = value.
void Fill(float* p, float value, int64_t count, cudaStream_t stream);

// dst[i] += src[i].
void AddInto(float* dst, const float* src, int64_t count, cudaStream_t stream);

}  // namespace gpu
}  // namespace psrt

#endif  // PSRT_PS_WORKER_GPU_CTR_KERNELS_H_
