#include "absl/strings/str_cat.h"
#include "ps_worker/model/loss.h"
#include "ps_worker/model/mlp.h"
#include "ps_worker/model/models.h"

namespace psrt {
namespace {

class MlpModel final : public Model {
 public:
  explicit MlpModel(const ModelConfig& config) : Model(config) {
    mlp_.Declare(
        "mlp", config.dense_dim, config.hidden,
        config.classes == 2 ? 1 : config.classes, config.seed,
        [this](const std::string& n, std::vector<int64_t> shape,
               InitializerSpec init) { return AddDense(n, shape, init); });
  }

  absl::Status Check(const Batch& batch) const override {
    if (absl::Status s = Model::Check(batch); !s.ok()) return s;
    if (config_.dense_dim < 1) {
      return absl::InvalidArgumentError("mlp needs dense features (dense_dim)");
    }
    return absl::OkStatus();
  }

  double Compute(const Batch& b, int begin, int end, float scale,
                 const StepParameters& p, Gradients* g,
                 float* predictions) const override {
    const int n = end - begin;
    Mlp::Cache cache;
    mlp_.Forward(b.dense.data() + static_cast<size_t>(begin) * b.dense_dim, n,
                 p, &cache);
    const std::vector<float>& z = mlp_.output(cache);
    std::vector<float> dz(z.size());
    const float* labels = b.labels.data() + begin;
    const double loss =
        config_.classes == 2
            ? LogisticLoss(z.data(), labels, n, scale, g ? dz.data() : nullptr,
                           predictions)
            : SoftmaxCrossEntropy(z.data(), labels, n, config_.classes, scale,
                                  g ? dz.data() : nullptr, predictions);
    if (g != nullptr) mlp_.Backward(cache, dz.data(), n, p, g, nullptr);
    return loss;
  }

 private:
  Mlp mlp_;
};

}  // namespace

std::unique_ptr<Model> NewMlpModel(const ModelConfig& config) {
  return std::make_unique<MlpModel>(config);
}

}  // namespace psrt
