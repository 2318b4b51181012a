#include "ps_worker/model/linear_part.h"
#include "ps_worker/model/loss.h"
#include "ps_worker/model/models.h"
#include "ps_worker/model/sparse_model.h"

namespace psrt {
namespace {

class LrModel final : public SparseModel {
 public:
  explicit LrModel(const ModelConfig& config) : SparseModel(config, false) {
    linear_.Declare("lr", config.dense_dim, table_adder(), dense_adder());
    SetParts(linear_, -1, -1, nullptr);
  }

  double Compute(const Batch& b, int begin, int end, float scale,
                 const StepParameters& p, Gradients* g,
                 float* predictions) const override {
    const int n = end - begin;
    std::vector<float> z(n, 0.0f), dz(n);
    linear_.Forward(b, begin, end, p, z.data());
    const double loss =
        LogisticLoss(z.data(), b.labels.data() + begin, n, scale,
                     g ? dz.data() : nullptr, predictions);
    if (g != nullptr) linear_.Backward(b, begin, end, p, dz.data(), g);
    return loss;
  }

 private:
  LinearPart linear_;
};

}  // namespace

std::unique_ptr<Model> NewLrModel(const ModelConfig& config) {
  return std::make_unique<LrModel>(config);
}

}  // namespace psrt
