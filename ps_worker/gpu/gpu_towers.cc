#include "ps_worker/gpu/gpu_towers.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

#ifdef PSRT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "ps_worker/gpu/ctr_kernels.h"
#include "ps_worker/gpu/cublas_library.h"
#endif

namespace psrt {
namespace {

// The model's structure for the GPU kernels, or why it has none.
absl::StatusOr<const CtrModelParts*> GpuParts(const Model* model) {
  const CtrModelParts* parts = model->ctr_parts();
  if (parts == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", model->config().name,
                     " has no GPU kernels (lr, fm, deepfm and wide_deep do)"));
  }
  return parts;
}

}  // namespace

#ifndef PSRT_HAVE_CUDA

absl::StatusOr<GpuInfo> ProbeGpus() {
  return absl::UnimplementedError(
      "this ps_worker was built without CUDA (no toolkit at PSRT_CUDA_PATH "
      "or /usr/local/cuda when it was compiled)");
}

absl::StatusOr<std::unique_ptr<TowerRunner>> NewGpuTowers(const Model* model,
                                                          int) {
  if (absl::Status s = GpuParts(model).status(); !s.ok()) return s;
  return ProbeGpus().status();
}

#else  // PSRT_HAVE_CUDA

namespace {

absl::Status CudaError(cudaError_t e, const char* call) {
  return absl::InternalError(absl::StrCat(call,
                                          " failed: ", cudaGetErrorName(e),
                                          " (", cudaGetErrorString(e), ")"));
}

#define PSRT_CUDA(call)                         \
  do {                                          \
    const cudaError_t psrt_cuda_error = (call); \
    if (psrt_cuda_error != cudaSuccess)         \
      return CudaError(psrt_cuda_error, #call); \
  } while (0)

#define PSRT_CUBLAS(call)                                                    \
  do {                                                                       \
    const cublasStatus_t psrt_blas_status = (call);                          \
    if (psrt_blas_status != CUBLAS_STATUS_SUCCESS) {                         \
      return absl::InternalError(                                            \
          absl::StrCat(#call, " failed: cuBLAS status ", psrt_blas_status)); \
    }                                                                        \
  } while (0)

// Grow-only memory: on a device (cudaMalloc) or pinned on the host.
template <typename T, bool kPinned>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Free(); }

  // REQUIRES (device memory): the owning device is current.
  absl::Status Reserve(int64_t count) {
    if (count <= capacity_) return absl::OkStatus();
    Free();
    const int64_t want = std::max<int64_t>(count + count / 2, 256);
    void* p = nullptr;
    if (kPinned) {
      PSRT_CUDA(cudaHostAlloc(&p, want * sizeof(T), cudaHostAllocPortable));
    } else {
      PSRT_CUDA(cudaMalloc(&p, want * sizeof(T)));
    }
    ptr_ = static_cast<T*>(p);
    capacity_ = want;
    return absl::OkStatus();
  }
  T* get() const { return ptr_; }

 private:
  void Free() {
    if (ptr_ == nullptr) return;
    if (kPinned) {
      cudaFreeHost(ptr_);
    } else {
      cudaFree(ptr_);
    }
    ptr_ = nullptr;
    capacity_ = 0;
  }
  T* ptr_ = nullptr;
  int64_t capacity_ = 0;
};

template <typename T>
using DeviceBuffer = Buffer<T, false>;
template <typename T>
using PinnedBuffer = Buffer<T, true>;

// Where each table and dense variable sits in the flat parameter (and
// gradient) buffer of a step with `unique` rows.
struct FlatLayout {
  std::vector<int64_t> table_offset, dense_offset;
  int64_t total = 0;

  FlatLayout(const Model& model, int64_t unique) {
    for (const Model::Table& t : model.tables()) {
      table_offset.push_back(total);
      total += unique * t.dim;
    }
    for (const Model::DenseVariable& d : model.dense_variables()) {
      dense_offset.push_back(total);
      total += d.size;
    }
  }
};

class GpuTowers final : public TowerRunner {
 public:
  GpuTowers(const Model* model, const CtrModelParts& parts,
            const gpu::CublasLibrary* blas, int devices, std::string names)
      : model_(model),
        parts_(parts),
        blas_(blas),
        devices_(devices),
        names_(std::move(names)) {}

  ~GpuTowers() override {
    for (Tower& t : towers_) {
      cudaSetDevice(t.device);
      if (t.blas != nullptr) blas_->destroy(t.blas);
      if (t.done != nullptr) cudaEventDestroy(t.done);
      if (t.stream != nullptr) cudaStreamDestroy(t.stream);
    }
  }

  absl::Status Init(int towers) {
    towers_ = std::vector<Tower>(towers);
    for (int i = 0; i < towers; ++i) {
      Tower& t = towers_[i];
      t.device = i % devices_;
      PSRT_CUDA(cudaSetDevice(t.device));
      PSRT_CUDA(cudaStreamCreateWithFlags(&t.stream, cudaStreamNonBlocking));
      PSRT_CUDA(cudaEventCreateWithFlags(&t.done, cudaEventDisableTiming));
      PSRT_CUBLAS(blas_->create(&t.blas));
      PSRT_CUBLAS(blas_->set_stream(t.blas, t.stream));
    }
    // Peer access lets the gradient copies go GPU to GPU (NVLink / PCIe);
    // without it cudaMemcpyPeerAsync stages through the host.
    for (int d = 1; d < std::min(devices_, towers); ++d) {
      int can = 0;
      PSRT_CUDA(cudaDeviceCanAccessPeer(&can, towers_[0].device, d));
      if (!can) continue;
      PSRT_CUDA(cudaSetDevice(towers_[0].device));
      const cudaError_t e = cudaDeviceEnablePeerAccess(d, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
        return CudaError(e, "cudaDeviceEnablePeerAccess");
      }
      cudaGetLastError();  // clears "already enabled"
    }
    return absl::OkStatus();
  }

  int size() const override { return static_cast<int>(towers_.size()); }
  std::string device() const override { return names_; }

  absl::StatusOr<double> Run(const Batch& batch, const StepParameters& params,
                             Gradients* grads, float* predictions) override;

 private:
  struct Tower {
    int device = 0;
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;  // its gradients are complete
    cublasHandle_t blas = nullptr;
    int begin = 0, end = 0;  // its examples
    DeviceBuffer<float> params, grads, received;
    DeviceBuffer<int32_t> ints;  // offsets, slots, example of each feature
    DeviceBuffer<float> floats;  // values, labels, dense features
    DeviceBuffer<float> z, dz, fm_sums, ones, delta[2];
    int64_t ones_filled = 0;  // leading elements of `ones` set to 1
    std::vector<DeviceBuffer<float>> layers;  // MLP input, then each output
    DeviceBuffer<double> loss;
    DeviceBuffer<float> prob;
    PinnedBuffer<int32_t> host_ints;
    PinnedBuffer<float> host_floats;
    PinnedBuffer<double> host_loss;
    PinnedBuffer<float> host_prob;
  };

  absl::Status Enqueue(Tower& t, const Batch& batch,
                       const StepParameters& params, const FlatLayout& layout);
  absl::Status Forward(Tower& t, const gpu::DeviceBatch& b,
                       const FlatLayout& layout, float scale);
  absl::Status Backward(Tower& t, const gpu::DeviceBatch& b,
                        const FlatLayout& layout);
  absl::Status Reduce(const FlatLayout& layout);

  const Model* const model_;
  const CtrModelParts parts_;
  const gpu::CublasLibrary* const blas_;
  const int devices_;
  const std::string names_;
  std::vector<Tower> towers_;
  PinnedBuffer<float> host_params_, host_grads_;
};

absl::StatusOr<double> GpuTowers::Run(const Batch& batch,
                                      const StepParameters& params,
                                      Gradients* grads, float* predictions) {
  const int64_t unique = static_cast<int64_t>(params.unique_ids.size());
  const FlatLayout layout(*model_, unique);
  if (absl::Status s = host_params_.Reserve(layout.total); !s.ok()) return s;
  if (absl::Status s = host_grads_.Reserve(layout.total); !s.ok()) return s;
  for (size_t i = 0; i < params.tables.size(); ++i) {
    std::memcpy(host_params_.get() + layout.table_offset[i],
                params.tables[i].data(),
                params.tables[i].size() * sizeof(float));
  }
  for (size_t i = 0; i < params.dense.size(); ++i) {
    std::memcpy(host_params_.get() + layout.dense_offset[i],
                params.dense[i].data(), params.dense[i].size() * sizeof(float));
  }
  const int n = size();
  for (int i = 0; i < n; ++i) {
    Tower& t = towers_[i];
    t.begin = static_cast<int>(static_cast<int64_t>(batch.size) * i / n);
    t.end = static_cast<int>(static_cast<int64_t>(batch.size) * (i + 1) / n);
    if (absl::Status s = Enqueue(t, batch, params, layout); !s.ok()) return s;
  }
  if (absl::Status s = Reduce(layout); !s.ok()) return s;

  double loss = 0;
  for (Tower& t : towers_) {
    PSRT_CUDA(cudaStreamSynchronize(t.stream));
    const int count = t.end - t.begin;
    for (int i = 0; i < count; ++i) loss += t.host_loss.get()[i];
    std::memcpy(predictions + t.begin, t.host_prob.get(),
                count * sizeof(float));
  }
  grads->tables.resize(model_->tables().size());
  grads->dense.resize(model_->dense_variables().size());
  for (size_t i = 0; i < grads->tables.size(); ++i) {
    const float* from = host_grads_.get() + layout.table_offset[i];
    grads->tables[i].assign(from, from + unique * model_->tables()[i].dim);
  }
  for (size_t i = 0; i < grads->dense.size(); ++i) {
    const float* from = host_grads_.get() + layout.dense_offset[i];
    grads->dense[i].assign(from, from + model_->dense_variables()[i].size);
  }
  return loss;
}

absl::Status GpuTowers::Enqueue(Tower& t, const Batch& batch,
                                const StepParameters& params,
                                const FlatLayout& layout) {
  PSRT_CUDA(cudaSetDevice(t.device));
  const int n = t.end - t.begin;
  const int first = batch.offsets[t.begin];
  const int nnz = batch.offsets[t.end] - first;
  const int dense_dim = batch.dense_dim;

  // The slice, packed into pinned memory: ints = offsets | slots | example,
  // floats = values | labels | dense.
  const int64_t int_count = (n + 1) + 2 * static_cast<int64_t>(nnz);
  const int64_t float_count = nnz + n + static_cast<int64_t>(n) * dense_dim;
  for (absl::Status s :
       {t.host_ints.Reserve(int_count), t.host_floats.Reserve(float_count),
        t.ints.Reserve(int_count), t.floats.Reserve(float_count),
        t.params.Reserve(layout.total), t.grads.Reserve(layout.total)}) {
    if (!s.ok()) return s;
  }
  int32_t* offsets = t.host_ints.get();
  int32_t* slots = offsets + n + 1;
  int32_t* example = slots + nnz;
  for (int i = 0; i <= n; ++i) offsets[i] = batch.offsets[t.begin + i] - first;
  std::memcpy(slots, params.slots.data() + first, nnz * sizeof(int32_t));
  for (int i = 0; i < n; ++i) {
    std::fill(example + offsets[i], example + offsets[i + 1], i);
  }
  float* values = t.host_floats.get();
  float* labels = values + nnz;
  float* dense = labels + n;
  std::memcpy(values, batch.values.data() + first, nnz * sizeof(float));
  std::memcpy(labels, batch.labels.data() + t.begin, n * sizeof(float));
  std::memcpy(dense,
              batch.dense.data() + static_cast<int64_t>(t.begin) * dense_dim,
              static_cast<int64_t>(n) * dense_dim * sizeof(float));

  PSRT_CUDA(cudaMemcpyAsync(t.params.get(), host_params_.get(),
                            layout.total * sizeof(float),
                            cudaMemcpyHostToDevice, t.stream));
  PSRT_CUDA(cudaMemcpyAsync(t.ints.get(), t.host_ints.get(),
                            int_count * sizeof(int32_t), cudaMemcpyHostToDevice,
                            t.stream));
  PSRT_CUDA(cudaMemcpyAsync(t.floats.get(), t.host_floats.get(),
                            float_count * sizeof(float), cudaMemcpyHostToDevice,
                            t.stream));
  PSRT_CUDA(cudaMemsetAsync(t.grads.get(), 0, layout.total * sizeof(float),
                            t.stream));
  if (n > 0) {
    gpu::DeviceBatch b;
    b.n = n;
    b.nnz = nnz;
    b.dense_dim = dense_dim;
    b.offsets = t.ints.get();
    b.slots = b.offsets + n + 1;
    b.example = b.slots + nnz;
    b.values = t.floats.get();
    b.labels = b.values + nnz;
    b.dense = b.labels + n;
    if (absl::Status s = Forward(t, b, layout, 1.0f / batch.size); !s.ok()) {
      return s;
    }
    if (absl::Status s = Backward(t, b, layout); !s.ok()) return s;
    PSRT_CUDA(cudaMemcpyAsync(t.host_loss.get(), t.loss.get(),
                              n * sizeof(double), cudaMemcpyDeviceToHost,
                              t.stream));
    PSRT_CUDA(cudaMemcpyAsync(t.host_prob.get(), t.prob.get(),
                              n * sizeof(float), cudaMemcpyDeviceToHost,
                              t.stream));
  }
  PSRT_CUDA(cudaGetLastError());  // a failed kernel launch
  PSRT_CUDA(cudaEventRecord(t.done, t.stream));
  return absl::OkStatus();
}

absl::Status GpuTowers::Forward(Tower& t, const gpu::DeviceBatch& b,
                                const FlatLayout& layout, float scale) {
  const int n = b.n;
  const float* p = t.params.get();
  auto table = [&](int i) { return p + layout.table_offset[i]; };
  auto dense = [&](int i) { return p + layout.dense_offset[i]; };
  const int k = parts_.embedding_dim;
  const size_t mlp_layers = parts_.mlp_sizes.size();
  for (absl::Status s :
       {t.z.Reserve(n), t.dz.Reserve(n), t.loss.Reserve(n), t.prob.Reserve(n),
        t.ones.Reserve(n), t.fm_sums.Reserve(2 * static_cast<int64_t>(n) * k),
        t.host_loss.Reserve(n), t.host_prob.Reserve(n)}) {
    if (!s.ok()) return s;
  }
  if (n > t.ones_filled) {  // (a grown buffer is always refilled here)
    gpu::Fill(t.ones.get(), 1.0f, n, t.stream);
    t.ones_filled = n;
  }

  gpu::LinearForward(
      b, table(parts_.linear_table), dense(parts_.linear_bias),
      parts_.linear_dense >= 0 ? dense(parts_.linear_dense) : nullptr,
      t.z.get(), t.stream);
  if (parts_.fm_table >= 0) {
    gpu::FmForward(b, table(parts_.fm_table), k, t.z.get(), t.fm_sums.get(),
                   t.stream);
  }
  const float* deep = nullptr;
  if (parts_.deep_table >= 0) {
    if (parts_.fields * k + b.dense_dim != parts_.mlp_in) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the deep part takes ", parts_.mlp_in, " inputs; this batch gives ",
          parts_.fields, " fields x ", k, " + ", b.dense_dim, " dense"));
    }
    if (t.layers.size() != mlp_layers + 1) {
      t.layers = std::vector<DeviceBuffer<float>>(mlp_layers + 1);
    }
    int widest = parts_.mlp_in;
    for (int s : parts_.mlp_sizes) widest = std::max(widest, s);
    for (absl::Status s : {t.delta[0].Reserve(int64_t{n} * widest),
                           t.delta[1].Reserve(int64_t{n} * widest),
                           t.layers[0].Reserve(int64_t{n} * parts_.mlp_in)}) {
      if (!s.ok()) return s;
    }
    gpu::GatherDeepInput(b, table(parts_.deep_table), parts_.fields, k,
                         t.layers[0].get(), t.stream);
    int fan_in = parts_.mlp_in;
    const float one = 1.0f, zero = 0.0f;
    for (size_t l = 0; l < mlp_layers; ++l) {
      const int out = parts_.mlp_sizes[l];
      if (absl::Status s = t.layers[l + 1].Reserve(int64_t{n} * out); !s.ok()) {
        return s;
      }
      // Row-major Y[n, out] = X[n, in] W[in, out] is column-major
      // Y^T = W^T X^T, with W^T [out, in] (ld out) and X^T [in, n] (ld in).
      PSRT_CUBLAS(blas_->sgemm(t.blas, CUBLAS_OP_N, CUBLAS_OP_N, out, n, fan_in,
                               &one, dense(parts_.mlp_weights[l]), out,
                               t.layers[l].get(), fan_in, &zero,
                               t.layers[l + 1].get(), out));
      gpu::AddBias(t.layers[l + 1].get(), dense(parts_.mlp_biases[l]), n, out,
                   /*relu=*/l + 1 < mlp_layers, t.stream);
      fan_in = out;
    }
    deep = t.layers[mlp_layers].get();  // [n, 1]
  }
  gpu::LogisticLoss(t.z.get(), deep, b.labels, n, scale, t.loss.get(),
                    t.prob.get(), t.dz.get(), t.stream);
  return absl::OkStatus();
}

absl::Status GpuTowers::Backward(Tower& t, const gpu::DeviceBatch& b,
                                 const FlatLayout& layout) {
  const int n = b.n;
  const float* p = t.params.get();
  float* g = t.grads.get();
  const int k = parts_.embedding_dim;
  const float one = 1.0f, zero = 0.0f;
  const float* dz = t.dz.get();

  gpu::LinearRowsBackward(b, dz, g + layout.table_offset[parts_.linear_table],
                          t.stream);
  // d bias = sum dz: dz as a [1, n] matrix times ones.
  PSRT_CUBLAS(blas_->sgemv(t.blas, CUBLAS_OP_N, 1, n, &one, dz, 1, t.ones.get(),
                           1, &one, g + layout.dense_offset[parts_.linear_bias],
                           1));
  if (parts_.linear_dense >= 0 && b.dense_dim > 0) {
    // d u = dense^T dz; row-major dense [n, d] is column-major [d, n].
    PSRT_CUBLAS(blas_->sgemv(t.blas, CUBLAS_OP_N, b.dense_dim, n, &one, b.dense,
                             b.dense_dim, dz, 1, &one,
                             g + layout.dense_offset[parts_.linear_dense], 1));
  }
  if (parts_.fm_table >= 0) {
    const int64_t at = layout.table_offset[parts_.fm_table];
    gpu::FmBackward(b, p + at, k, t.fm_sums.get(), dz, g + at, t.stream);
  }
  if (parts_.deep_table < 0) return absl::OkStatus();

  const float* delta = dz;  // d(loss)/d(output of layer l), [n, out]
  int next = 0;
  for (int l = static_cast<int>(parts_.mlp_sizes.size()) - 1; l >= 0; --l) {
    const int out = parts_.mlp_sizes[l];
    const int fan_in = l == 0 ? parts_.mlp_in : parts_.mlp_sizes[l - 1];
    const float* input = t.layers[l].get();
    const float* w = p + layout.dense_offset[parts_.mlp_weights[l]];
    // dW^T [out, in] += delta^T [out, n] * X [n, in] (column-major views).
    PSRT_CUBLAS(blas_->sgemm(t.blas, CUBLAS_OP_N, CUBLAS_OP_T, out, fan_in, n,
                             &one, delta, out, input, fan_in, &one,
                             g + layout.dense_offset[parts_.mlp_weights[l]],
                             out));
    PSRT_CUBLAS(blas_->sgemv(t.blas, CUBLAS_OP_N, out, n, &one, delta, out,
                             t.ones.get(), 1, &one,
                             g + layout.dense_offset[parts_.mlp_biases[l]], 1));
    // d input [n, in] = delta W^T: column-major [in, n] = W (W^T ld out)^T
    // times delta^T.
    float* d_input = t.delta[next].get();
    PSRT_CUBLAS(blas_->sgemm(t.blas, CUBLAS_OP_T, CUBLAS_OP_N, fan_in, n, out,
                             &one, w, out, delta, out, &zero, d_input, fan_in));
    if (l > 0) {
      gpu::ReluBackward(d_input, input, int64_t{n} * fan_in, t.stream);
      delta = d_input;
      next = 1 - next;
    } else {
      gpu::ScatterDeepInputGradient(b, parts_.fields, k, d_input,
                                    g + layout.table_offset[parts_.deep_table],
                                    t.stream);
    }
  }
  return absl::OkStatus();
}

absl::Status GpuTowers::Reduce(const FlatLayout& layout) {
  Tower& root = towers_[0];
  PSRT_CUDA(cudaSetDevice(root.device));
  for (size_t i = 1; i < towers_.size(); ++i) {
    Tower& t = towers_[i];
    PSRT_CUDA(cudaStreamWaitEvent(root.stream, t.done, 0));
    const float* from = t.grads.get();
    if (t.device != root.device) {
      if (absl::Status s = root.received.Reserve(layout.total); !s.ok()) {
        return s;
      }
      PSRT_CUDA(cudaMemcpyPeerAsync(root.received.get(), root.device,
                                    t.grads.get(), t.device,
                                    layout.total * sizeof(float), root.stream));
      from = root.received.get();
    }
    gpu::AddInto(root.grads.get(), from, layout.total, root.stream);
  }
  PSRT_CUDA(cudaMemcpyAsync(host_grads_.get(), root.grads.get(),
                            layout.total * sizeof(float),
                            cudaMemcpyDeviceToHost, root.stream));
  PSRT_CUDA(cudaGetLastError());
  return absl::OkStatus();
}

absl::StatusOr<GpuInfo> Probe() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorInsufficientDriver) {
    return absl::UnavailableError(
        "no usable GPU: no NVIDIA driver, or one older than CUDA 13 needs "
        "(cudaErrorInsufficientDriver)");
  }
  if (e != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat("no usable GPU: ", cudaGetErrorName(e), " (",
                     cudaGetErrorString(e), ")"));
  }
  if (count == 0) return absl::UnavailableError("no usable GPU: none found");
  GpuInfo info;
  std::string last;
  int same = 0;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop;
    PSRT_CUDA(cudaGetDeviceProperties(&prop, d));
    if (prop.major < 8) {
      return absl::FailedPreconditionError(absl::StrCat(
          "GPU ", d, " (", prop.name, ") is sm_", prop.major, prop.minor,
          "; psrt's kernels are built for sm_80 and newer"));
    }
    const std::string name =
        absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ")");
    if (name != last && same > 0) {
      absl::StrAppend(&info.names, info.names.empty() ? "" : ", ", same, " x ",
                      last);
      same = 0;
    }
    last = name;
    ++same;
  }
  absl::StrAppend(&info.names, info.names.empty() ? "" : ", ", same, " x ",
                  last);
  info.count = count;
  return info;
}

}  // namespace

absl::StatusOr<GpuInfo> ProbeGpus() {
  static const absl::StatusOr<GpuInfo>* const probed =
      new absl::StatusOr<GpuInfo>(Probe());
  return *probed;
}

absl::StatusOr<std::unique_ptr<TowerRunner>> NewGpuTowers(const Model* model,
                                                          int towers) {
  absl::StatusOr<const CtrModelParts*> parts = GpuParts(model);
  if (!parts.ok()) return parts.status();
  absl::StatusOr<GpuInfo> gpus = ProbeGpus();
  if (!gpus.ok()) return gpus.status();
  absl::StatusOr<const gpu::CublasLibrary*> blas = gpu::LoadCublas();
  if (!blas.ok()) return blas.status();
  if (towers <= 0) towers = gpus->count;
  auto runner = std::make_unique<GpuTowers>(
      model, **parts, *blas, gpus->count,
      absl::StrCat(gpus->names, ", cuBLAS from ", (*blas)->path));
  if (absl::Status s = runner->Init(towers); !s.ok()) return s;
  return runner;
}

#endif  // PSRT_HAVE_CUDA

}  // namespace psrt
