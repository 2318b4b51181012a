#include "ps_worker/worker_metrics.h"

namespace psrt {

WorkerMetrics::WorkerMetrics(const std::string& worker) {
  const MetricLabels w = {{"worker", worker}};
  // Steps before examples: a scrape then reads them in this order, and a
  // step adds its examples before it counts (tests rely on both).
  steps_ = registry_.GetCounter("psrt_worker_steps_total",
                                "Training steps this worker finished", w);
  examples_ = registry_.GetCounter("psrt_worker_examples_total",
                                   "Examples this worker trained on", w);
  epoch_ = registry_.GetGauge("psrt_worker_epoch",
                              "The training data's current pass", w);
  const char* names[kNumPhases] = {"data", "pull", "compute", "push"};
  for (int p = 0; p < kNumPhases; ++p) {
    phases_[p] = registry_.GetHistogram(
        "psrt_worker_step_phase_duration_seconds",
        "Time a step waited for its batch (data), its parameters (pull), "
        "the model (compute) and the push window (push)",
        {{"worker", worker}, {"phase", names[p]}});
  }
  loss_ =
      registry_.GetGauge("psrt_worker_loss",
                         "Mean training loss of the last progress interval", w);
  auc_ = registry_.GetGauge("psrt_worker_auc",
                            "Training AUC of the last progress interval", w);
  accuracy_ = registry_.GetGauge(
      "psrt_worker_accuracy",
      "Training accuracy of the last progress interval (multi-class)", w);
  eval_auc_ = registry_.GetGauge("psrt_worker_eval_auc",
                                 "AUC of the last evaluation", w);
  eval_log_loss_ = registry_.GetGauge("psrt_worker_eval_logloss",
                                      "Log loss of the last evaluation", w);
  eval_accuracy_ = registry_.GetGauge("psrt_worker_eval_accuracy",
                                      "Accuracy of the last evaluation", w);
  recoveries_ = registry_.GetCounter(
      "psrt_worker_ps_recoveries_total",
      "Times training waited for a failed PS to come back", w);
  lost_pushes_ =
      registry_.GetCounter("psrt_worker_lost_pushes_total",
                           "Pushes a failed PS did not (all) apply", w);
  AddProcessMetrics(&registry_, "ps_worker");
}

void WorkerMetrics::Interval(double loss, double auc_or_accuracy, bool binary) {
  loss_->Set(loss);
  (binary ? auc_ : accuracy_)->Set(auc_or_accuracy);
}

void WorkerMetrics::Evaluation(double auc, double log_loss, double accuracy) {
  eval_auc_->Set(auc);
  eval_log_loss_->Set(log_loss);
  eval_accuracy_->Set(accuracy);
}

}  // namespace psrt
