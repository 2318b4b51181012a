// Base for models over sparse (and optional dense) features with a binary
// logistic output: registration helpers and the fixed-field check.
#ifndef PSRT_PS_WORKER_MODEL_SPARSE_MODEL_H_
#define PSRT_PS_WORKER_MODEL_SPARSE_MODEL_H_

#include "absl/strings/str_cat.h"
#include "ps_worker/model/linear_part.h"
#include "ps_worker/model/mlp.h"
#include "ps_worker/model/model.h"

namespace psrt {

class SparseModel : public Model {
 protected:
  SparseModel(ModelConfig config, bool fixed_fields)
      : Model(std::move(config)), fixed_fields_(fixed_fields) {}

  LinearPart::AddTable table_adder() {
    return [this](const std::string& n, int dim, InitializerSpec init) {
      return AddTable(n, dim, init);
    };
  }
  LinearPart::AddDense dense_adder() {
    return [this](const std::string& n, std::vector<int64_t> shape,
                  InitializerSpec init) { return AddDense(n, shape, init); };
  }

  const CtrModelParts* ctr_parts() const override { return &parts_; }

  // Records the structure (call at the end of the subclass's constructor;
  // fm_table / deep_table -1 where the model has no such part).
  void SetParts(const LinearPart& linear, int fm_table, int deep_table,
                const Mlp* mlp) {
    parts_.linear_table = linear.table();
    parts_.linear_bias = linear.bias();
    parts_.linear_dense = linear.dense();
    parts_.fm_table = fm_table;
    parts_.deep_table = deep_table;
    parts_.fields = config_.fields;
    parts_.embedding_dim = config_.embedding_dim;
    if (mlp != nullptr) {
      parts_.mlp_in = mlp->in();
      parts_.mlp_sizes = mlp->sizes();
      parts_.mlp_weights = mlp->weight_indices();
      parts_.mlp_biases = mlp->bias_indices();
    }
  }

  absl::Status Check(const Batch& batch) const override {
    if (absl::Status s = Model::Check(batch); !s.ok()) return s;
    if (config_.classes != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_.name, " is a binary model (classes = 2)"));
    }
    if (fixed_fields_ && batch.size > 0 && batch.fields() != config_.fields) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_.name, " needs exactly ", config_.fields,
                       " sparse features (fields) per example; this batch has ",
                       batch.fields() < 0 ? std::string("varying counts")
                                          : absl::StrCat(batch.fields())));
    }
    return absl::OkStatus();
  }

 private:
  const bool fixed_fields_;
  CtrModelParts parts_;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_MODEL_SPARSE_MODEL_H_
