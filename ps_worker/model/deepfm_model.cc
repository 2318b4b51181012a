#include "ps_worker/model/deep_input.h"
#include "ps_worker/model/linear_part.h"
#include "ps_worker/model/loss.h"
#include "ps_worker/model/mlp.h"
#include "ps_worker/model/models.h"
#include "ps_worker/model/sparse_model.h"

namespace psrt {
namespace {

class DeepFmModel final : public SparseModel {
 public:
  explicit DeepFmModel(const ModelConfig& config) : SparseModel(config, true) {
    linear_.Declare("deepfm/linear", config.dense_dim, table_adder(),
                    dense_adder());
    fm_.Declare("deepfm/factors", config.embedding_dim, config.seed,
                table_adder());
    mlp_.Declare("deepfm/mlp",
                 config.fields * config.embedding_dim + config.dense_dim,
                 config.hidden, 1, config.seed + 100, dense_adder());
    SetParts(linear_, fm_.table(), fm_.table(), &mlp_);
  }

  double Compute(const Batch& b, int begin, int end, float scale,
                 const StepParameters& p, Gradients* g,
                 float* predictions) const override {
    const int n = end - begin;
    const int k = config_.embedding_dim, fields = config_.fields;
    std::vector<float> z(n, 0.0f), dz(n);
    linear_.Forward(b, begin, end, p, z.data());
    fm_.Forward(b, begin, end, p, z.data());
    std::vector<float> x;
    GatherDeepInput(b, begin, end, p, fm_.table(), fields, k, &x);
    Mlp::Cache cache;
    mlp_.Forward(x.data(), n, p, &cache);
    const std::vector<float>& deep = mlp_.output(cache);
    for (int i = 0; i < n; ++i) z[i] += deep[i];
    const double loss =
        LogisticLoss(z.data(), b.labels.data() + begin, n, scale,
                     g ? dz.data() : nullptr, predictions);
    if (g == nullptr) return loss;
    linear_.Backward(b, begin, end, p, dz.data(), g);
    fm_.Backward(b, begin, end, p, dz.data(), g);
    std::vector<float> dx(x.size());
    mlp_.Backward(cache, dz.data(), n, p, g, dx.data());
    ScatterDeepInputGradient(b, begin, end, p, fm_.table(), fields, k, dx, g);
    return loss;
  }

 private:
  LinearPart linear_;
  FmPart fm_;
  Mlp mlp_;
};

}  // namespace

std::unique_ptr<Model> NewDeepFmModel(const ModelConfig& config) {
  return std::make_unique<DeepFmModel>(config);
}

}  // namespace psrt
