#include <cstdint>

#include "ps_worker/gpu/ctr_kernels.h"

namespace psrt {
namespace gpu {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t work) {
  return static_cast<int>((work + kThreads - 1) / kThreads);
}

__global__ void LinearForwardKernel(DeviceBatch b, const float* w,
                                    const float* bias, const float* u,
                                    float* z) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= b.n) return;
  float s = bias[0];
  for (int j = b.offsets[i]; j < b.offsets[i + 1]; ++j) {
    s += w[b.slots[j]] * b.values[j];
  }
  if (u != nullptr) {
    const float* x = b.dense + static_cast<int64_t>(i) * b.dense_dim;
    for (int d = 0; d < b.dense_dim; ++d) s += u[d] * x[d];
  }
  z[i] = s;
}

__global__ void LinearRowsBackwardKernel(DeviceBatch b, const float* dz,
                                         float* dw) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= b.nnz) return;
  atomicAdd(dw + b.slots[j], dz[b.example[j]] * b.values[j]);
}

// One thread per (example, factor c).
__global__ void FmSumsKernel(DeviceBatch b, const float* v, int k, float* sums,
                             float* squares) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(b.n) * k) return;
  const int i = static_cast<int>(t / k), c = static_cast<int>(t % k);
  float sum = 0, square = 0;
  for (int j = b.offsets[i]; j < b.offsets[i + 1]; ++j) {
    const float vx = v[static_cast<int64_t>(b.slots[j]) * k + c] * b.values[j];
    sum += vx;
    square += vx * vx;
  }
  sums[t] = sum;
  squares[t] = square;
}

__global__ void FmReduceKernel(int n, int k, const float* sums,
                               const float* squares, float* z) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = 0, q = 0;
  for (int c = 0; c < k; ++c) {
    const float x = sums[static_cast<int64_t>(i) * k + c];
    s += x * x;
    q += squares[static_cast<int64_t>(i) * k + c];
  }
  z[i] += 0.5f * (s - q);
}

// One thread per (feature, factor c).
__global__ void FmBackwardKernel(DeviceBatch b, const float* v, int k,
                                 const float* sums, const float* dz,
                                 float* dv) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(b.nnz) * k) return;
  const int j = static_cast<int>(t / k), c = static_cast<int>(t % k);
  const int i = b.example[j];
  const int64_t row = static_cast<int64_t>(b.slots[j]) * k + c;
  const float x = b.values[j];
  atomicAdd(dv + row,
            dz[i] * x * (sums[static_cast<int64_t>(i) * k + c] - v[row] * x));
}

// One thread per element of x.
__global__ void GatherDeepInputKernel(DeviceBatch b, const float* v, int fields,
                                      int k, float* x) {
  const int width = fields * k + b.dense_dim;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(b.n) * width) return;
  const int i = static_cast<int>(t / width), col = static_cast<int>(t % width);
  if (col < fields * k) {
    const int j = b.offsets[i] + col / k;
    x[t] = v[static_cast<int64_t>(b.slots[j]) * k + col % k] * b.values[j];
  } else {
    x[t] = b.dense[static_cast<int64_t>(i) * b.dense_dim + col - fields * k];
  }
}

// One thread per (example, embedding column).
__global__ void ScatterDeepInputKernel(DeviceBatch b, int fields, int k,
                                       const float* dx, float* dv) {
  const int width = fields * k + b.dense_dim;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(b.n) * fields * k) return;
  const int i = static_cast<int>(t / (fields * k));
  const int col = static_cast<int>(t % (fields * k));
  const int j = b.offsets[i] + col / k;
  atomicAdd(dv + static_cast<int64_t>(b.slots[j]) * k + col % k,
            dx[static_cast<int64_t>(i) * width + col] * b.values[j]);
}

__global__ void AddBiasKernel(float* y, const float* bias, int64_t count,
                              int width, bool relu) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= count) return;
  const float s = y[t] + bias[t % width];
  y[t] = relu ? fmaxf(s, 0.0f) : s;
}

__global__ void ReluBackwardKernel(float* d, const float* activation,
                                   int64_t count) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < count && !(activation[t] > 0.0f)) d[t] = 0.0f;
}

__global__ void LogisticLossKernel(const float* z, const float* deep,
                                   const float* labels, int n, float scale,
                                   double* loss, float* prob, float* dz) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  // As ps_worker/model/loss.cc: the sum z + deep in float, the loss in
  // double, stable for any z.
  const double zi = deep == nullptr ? z[i] : z[i] + deep[i];
  loss[i] = log1p(exp(-fabs(zi))) + fmax(zi, 0.0) - zi * labels[i];
  const float p = static_cast<float>(1 / (1 + exp(-zi)));
  prob[i] = p;
  dz[i] = scale * (p - labels[i]);
}

__global__ void FillKernel(float* p, float value, int64_t count) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < count) p[t] = value;
}

__global__ void AddIntoKernel(float* dst, const float* src, int64_t count) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < count) dst[t] += src[t];
}

}  // namespace

void LinearForward(const DeviceBatch& b, const float* w, const float* bias,
                   const float* u, float* z, cudaStream_t stream) {
  if (b.n == 0) return;
  LinearForwardKernel<<<Blocks(b.n), kThreads, 0, stream>>>(b, w, bias, u, z);
}

void LinearRowsBackward(const DeviceBatch& b, const float* dz, float* dw,
                        cudaStream_t stream) {
  if (b.nnz == 0) return;
  LinearRowsBackwardKernel<<<Blocks(b.nnz), kThreads, 0, stream>>>(b, dz, dw);
}

void FmForward(const DeviceBatch& b, const float* v, int k, float* z,
               float* sums, cudaStream_t stream) {
  if (b.n == 0) return;
  const int64_t work = static_cast<int64_t>(b.n) * k;
  float* squares = sums + work;  // the caller's buffer holds [2, n, k]
  FmSumsKernel<<<Blocks(work), kThreads, 0, stream>>>(b, v, k, sums, squares);
  FmReduceKernel<<<Blocks(b.n), kThreads, 0, stream>>>(b.n, k, sums, squares,
                                                       z);
}

void FmBackward(const DeviceBatch& b, const float* v, int k, const float* sums,
                const float* dz, float* dv, cudaStream_t stream) {
  const int64_t work = static_cast<int64_t>(b.nnz) * k;
  if (work == 0) return;
  FmBackwardKernel<<<Blocks(work), kThreads, 0, stream>>>(b, v, k, sums, dz,
                                                          dv);
}

void GatherDeepInput(const DeviceBatch& b, const float* v, int fields, int k,
                     float* x, cudaStream_t stream) {
  const int64_t work = static_cast<int64_t>(b.n) * (fields * k + b.dense_dim);
  if (work == 0) return;
  GatherDeepInputKernel<<<Blocks(work), kThreads, 0, stream>>>(b, v, fields, k,
                                                               x);
}

void ScatterDeepInputGradient(const DeviceBatch& b, int fields, int k,
                              const float* dx, float* dv, cudaStream_t stream) {
  const int64_t work = static_cast<int64_t>(b.n) * fields * k;
  if (work == 0) return;
  ScatterDeepInputKernel<<<Blocks(work), kThreads, 0, stream>>>(b, fields, k,
                                                                dx, dv);
}

void AddBias(float* y, const float* bias, int n, int width, bool relu,
             cudaStream_t stream) {
  const int64_t count = static_cast<int64_t>(n) * width;
  if (count == 0) return;
  AddBiasKernel<<<Blocks(count), kThreads, 0, stream>>>(y, bias, count, width,
                                                        relu);
}

void ReluBackward(float* d, const float* activation, int64_t count,
                  cudaStream_t stream) {
  if (count == 0) return;
  ReluBackwardKernel<<<Blocks(count), kThreads, 0, stream>>>(d, activation,
                                                             count);
}

void LogisticLoss(const float* z, const float* deep, const float* labels, int n,
                  float scale, double* loss, float* prob, float* dz,
                  cudaStream_t stream) {
  if (n == 0) return;
  LogisticLossKernel<<<Blocks(n), kThreads, 0, stream>>>(z, deep, labels, n,
                                                         scale, loss, prob, dz);
}

void Fill(float* p, float value, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  FillKernel<<<Blocks(count), kThreads, 0, stream>>>(p, value, count);
}

void AddInto(float* dst, const float* src, int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  AddIntoKernel<<<Blocks(count), kThreads, 0, stream>>>(dst, src, count);
}

}  // namespace gpu
}  // namespace psrt
