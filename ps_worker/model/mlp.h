// A multi-layer perceptron on row-major batches: hidden layers with ReLU,
// a linear output layer. Weights are [in, out] row-major, as kept on the PS.
#ifndef PSRT_PS_WORKER_MODEL_MLP_H_
#define PSRT_PS_WORKER_MODEL_MLP_H_

#include <functional>
#include <string>
#include <vector>

#include "ps_worker/model/model.h"

namespace psrt {

class Mlp {
 public:
  // Activations of one forward pass, kept for the backward pass.
  struct Cache {
    std::vector<std::vector<float>> layers;  // input of each layer, then output
  };

  Mlp() = default;
  // Declares the layers' variables through `add_dense` as <prefix>/<i>/w
  // and /b (<prefix>/out/... for the output layer), Glorot-initialized.
  void Declare(const std::string& prefix, int in,
               const std::vector<int>& hidden, int out, uint64_t seed,
               const std::function<int(const std::string&, std::vector<int64_t>,
                                       InitializerSpec)>& add_dense);

  int in() const { return in_; }
  int out() const { return sizes_.back(); }
  const std::vector<int>& sizes() const { return sizes_; }
  const std::vector<int>& weight_indices() const { return weight_index_; }
  const std::vector<int>& bias_indices() const { return bias_index_; }

  // out[n, out()] from x[n, in()]; fills `cache`.
  void Forward(const float* x, int n, const StepParameters& params,
               Cache* cache) const;
  // From d(out) adds weight gradients to `grads` and, if dx is not null,
  // writes d(input) [n, in()].
  void Backward(const Cache& cache, const float* dout, int n,
                const StepParameters& params, Gradients* grads,
                float* dx) const;

  const std::vector<float>& output(const Cache& cache) const {
    return cache.layers.back();
  }

 private:
  int in_ = 0;
  std::vector<int> sizes_;         // out size of each layer
  std::vector<int> weight_index_;  // dense variable index of each layer's w
  std::vector<int> bias_index_;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_MODEL_MLP_H_
