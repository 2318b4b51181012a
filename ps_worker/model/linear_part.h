// The linear part shared by LR, FM, DeepFM and Wide & Deep:
//   bias + sum_j w[id_j] * value_j + dense . u
// with w an embedding table of dim 1, u a dense vector over the dense
// features (when the data has any) and a scalar bias.
#ifndef PSRT_PS_WORKER_MODEL_LINEAR_PART_H_
#define PSRT_PS_WORKER_MODEL_LINEAR_PART_H_

#include <functional>
#include <string>

#include "ps_worker/model/model.h"

namespace psrt {

class LinearPart {
 public:
  using AddTable = std::function<int(const std::string&, int, InitializerSpec)>;
  using AddDense = std::function<int(const std::string&, std::vector<int64_t>,
                                     InitializerSpec)>;

  void Declare(const std::string& prefix, int dense_dim,
               const AddTable& add_table, const AddDense& add_dense);

  // Indices of its table and dense variables (-1: none).
  int table() const { return table_; }
  int bias() const { return bias_; }
  int dense() const { return dense_; }

  // z[i - begin] += linear part of example i.
  void Forward(const Batch& b, int begin, int end, const StepParameters& p,
               float* z) const;
  // Adds gradients for d(loss)/dz.
  void Backward(const Batch& b, int begin, int end, const StepParameters& p,
                const float* dz, Gradients* g) const;

 private:
  int table_ = -1, bias_ = -1, dense_ = -1;
  int dense_dim_ = 0;
};

// The factorization-machine interactions 0.5 * sum_k ((sum_j v_jk x_j)^2 -
// sum_j (v_jk x_j)^2) over each example's features (Rendle 2010), with v an
// embedding table of dim k.
class FmPart {
 public:
  void Declare(const std::string& name, int k, uint64_t seed,
               const LinearPart::AddTable& add_table);
  int table() const { return table_; }

  // z[i - begin] += interactions of example i.
  void Forward(const Batch& b, int begin, int end, const StepParameters& p,
               float* z) const;
  void Backward(const Batch& b, int begin, int end, const StepParameters& p,
                const float* dz, Gradients* g) const;

 private:
  int table_ = -1;
  int k_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_MODEL_LINEAR_PART_H_
