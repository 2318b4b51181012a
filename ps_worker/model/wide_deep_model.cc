#include "ps_worker/model/deep_input.h"
#include "ps_worker/model/linear_part.h"
#include "ps_worker/model/loss.h"
#include "ps_worker/model/mlp.h"
#include "ps_worker/model/models.h"
#include "ps_worker/model/sparse_model.h"

namespace psrt {
namespace {

class WideDeepModel final : public SparseModel {
 public:
  explicit WideDeepModel(const ModelConfig& config)
      : SparseModel(config, true) {
    wide_.Declare("wide_deep/wide", config.dense_dim, table_adder(),
                  dense_adder());
    embeddings_ = AddTable("wide_deep/embeddings", config.embedding_dim,
                           NormalInit(0.05f, config.seed));
    mlp_.Declare("wide_deep/deep",
                 config.fields * config.embedding_dim + config.dense_dim,
                 config.hidden, 1, config.seed + 100, dense_adder());
    SetParts(wide_, -1, embeddings_, &mlp_);
  }

  double Compute(const Batch& b, int begin, int end, float scale,
                 const StepParameters& p, Gradients* g,
                 float* predictions) const override {
    const int n = end - begin;
    const int k = config_.embedding_dim, fields = config_.fields;
    std::vector<float> z(n, 0.0f), dz(n);
    wide_.Forward(b, begin, end, p, z.data());
    std::vector<float> x;
    GatherDeepInput(b, begin, end, p, embeddings_, fields, k, &x);
    Mlp::Cache cache;
    mlp_.Forward(x.data(), n, p, &cache);
    const std::vector<float>& deep = mlp_.output(cache);
    for (int i = 0; i < n; ++i) z[i] += deep[i];
    const double loss =
        LogisticLoss(z.data(), b.labels.data() + begin, n, scale,
                     g ? dz.data() : nullptr, predictions);
    if (g == nullptr) return loss;
    wide_.Backward(b, begin, end, p, dz.data(), g);
    std::vector<float> dx(x.size());
    mlp_.Backward(cache, dz.data(), n, p, g, dx.data());
    ScatterDeepInputGradient(b, begin, end, p, embeddings_, fields, k, dx, g);
    return loss;
  }

 private:
  LinearPart wide_;
  int embeddings_ = -1;
  Mlp mlp_;
};

}  // namespace

std::unique_ptr<Model> NewWideDeepModel(const ModelConfig& config) {
  return std::make_unique<WideDeepModel>(config);
}

}  // namespace psrt
