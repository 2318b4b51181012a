#include "ps_worker/model/mlp.h"

#include "Eigen/Core"
#include "absl/strings/str_cat.h"

namespace psrt {
namespace {
using RowMatrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using ConstVectorMap = Eigen::Map<const Eigen::RowVectorXf>;
using VectorMap = Eigen::Map<Eigen::RowVectorXf>;
}  // namespace

void Mlp::Declare(
    const std::string& prefix, int in, const std::vector<int>& hidden, int out,
    uint64_t seed,
    const std::function<int(const std::string&, std::vector<int64_t>,
                            InitializerSpec)>& add_dense) {
  in_ = in;
  sizes_ = hidden;
  sizes_.push_back(out);
  int fan_in = in;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    const std::string name = i + 1 == sizes_.size()
                                 ? absl::StrCat(prefix, "/out")
                                 : absl::StrCat(prefix, "/", i);
    weight_index_.push_back(
        add_dense(name + "/w", {fan_in, sizes_[i]},
                  GlorotUniformInit(fan_in, sizes_[i], seed + 2 * i)));
    bias_index_.push_back(add_dense(name + "/b", {sizes_[i]}, ZerosInit()));
    fan_in = sizes_[i];
  }
}

void Mlp::Forward(const float* x, int n, const StepParameters& params,
                  Cache* cache) const {
  cache->layers.resize(sizes_.size() + 1);
  cache->layers[0].assign(x, x + static_cast<size_t>(n) * in_);
  int fan_in = in_;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    std::vector<float>& y = cache->layers[i + 1];
    y.resize(static_cast<size_t>(n) * sizes_[i]);
    ConstMatrixMap X(cache->layers[i].data(), n, fan_in);
    ConstMatrixMap W(params.dense[weight_index_[i]].data(), fan_in, sizes_[i]);
    ConstVectorMap b(params.dense[bias_index_[i]].data(), sizes_[i]);
    MatrixMap Y(y.data(), n, sizes_[i]);
    Y.noalias() = X * W;
    Y.rowwise() += b;
    if (i + 1 < sizes_.size()) Y = Y.cwiseMax(0.0f);
    fan_in = sizes_[i];
  }
}

void Mlp::Backward(const Cache& cache, const float* dout, int n,
                   const StepParameters& params, Gradients* grads,
                   float* dx) const {
  std::vector<float> d(dout, dout + static_cast<size_t>(n) * sizes_.back());
  std::vector<float> d_in;
  for (int i = static_cast<int>(sizes_.size()) - 1; i >= 0; --i) {
    const int fan_in = i == 0 ? in_ : sizes_[i - 1];
    ConstMatrixMap X(cache.layers[i].data(), n, fan_in);
    ConstMatrixMap D(d.data(), n, sizes_[i]);
    MatrixMap dW(grads->dense[weight_index_[i]].data(), fan_in, sizes_[i]);
    VectorMap db(grads->dense[bias_index_[i]].data(), sizes_[i]);
    dW.noalias() += X.transpose() * D;
    // Row by row, not D.colwise().sum(): Eigen's reduction starts its
    // vector lanes where the data is aligned, so its sum would change with
    // the buffer's address -- runs on the same data would differ in the
    // last bits. Here each bias's sum runs over the rows in order.
    for (int r = 0; r < n; ++r) db += D.row(r);
    if (i == 0 && dx == nullptr) break;
    ConstMatrixMap W(params.dense[weight_index_[i]].data(), fan_in, sizes_[i]);
    d_in.resize(static_cast<size_t>(n) * fan_in);
    MatrixMap DX(d_in.data(), n, fan_in);
    DX.noalias() = D * W.transpose();
    if (i > 0) {
      // Through the ReLU of the layer below: zero where it was inactive.
      ConstMatrixMap A(cache.layers[i].data(), n, fan_in);
      DX = (A.array() > 0.0f).select(DX, 0.0f);
      d.swap(d_in);
    } else {
      std::copy(d_in.begin(), d_in.end(), dx);
    }
  }
}

}  // namespace psrt
