// Quality metrics for predictions: ROC AUC and log loss for binary tasks,
// accuracy for multiclass ones.
#ifndef PSRT_PS_WORKER_EVALUATION_H_
#define PSRT_PS_WORKER_EVALUATION_H_

#include <vector>

namespace psrt {

// Area under the ROC curve of `scores` (higher = more likely positive)
// against 0/1 `labels`; ties count one half (Mann-Whitney U). 0.5 if one
// class is absent.
double RocAuc(const std::vector<float>& scores,
              const std::vector<float>& labels);

// Mean binary cross-entropy of probabilities (clipped to [1e-7, 1 - 1e-7]).
double LogLoss(const std::vector<float>& probabilities,
               const std::vector<float>& labels);

// Accumulates binary predictions or class predictions over batches.
class Evaluator {
 public:
  void AddBinary(const float* probabilities, const float* labels, int n);
  void AddClasses(const int* predicted, const float* labels, int n);

  double auc() const { return RocAuc(scores_, labels_); }
  double log_loss() const { return LogLoss(scores_, labels_); }
  // Multiclass: share of correct classes; binary: share of probabilities on
  // the right side of 0.5.
  double accuracy() const;
  long examples() const {
    return total_ > 0 ? total_ : static_cast<long>(labels_.size());
  }
  bool binary() const { return !labels_.empty(); }

 private:
  std::vector<float> scores_, labels_;
  long correct_ = 0, total_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_EVALUATION_H_
