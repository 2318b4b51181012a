// What a ps_worker exports on --metrics_port (Prometheus text at /metrics):
// steps and examples done, the time each step spent per phase, the last
// progress interval's loss and AUC (or accuracy), the last evaluation, PS
// recoveries and lost pushes, plus the process series every psrt program
// exports. Every series carries worker="<index>" ("evaluator" for TF's
// evaluator task). Updated by the training loop's thread; scraped from the
// HTTP server's.
#ifndef PSRT_PS_WORKER_WORKER_METRICS_H_
#define PSRT_PS_WORKER_WORKER_METRICS_H_

#include <cstdint>
#include <string>

#include "ps_server/metrics/metrics.h"

namespace psrt {

class WorkerMetrics {
 public:
  enum Phase { kData, kPull, kCompute, kPush, kNumPhases };

  explicit WorkerMetrics(const std::string& worker);

  // One step's time in `phase`, in milliseconds (as the progress line's).
  void AddPhase(Phase phase, double ms) { phases_[phase]->Observe(ms / 1000); }
  // After a step's phases: the step is done.
  void StepDone(int64_t examples, int64_t epoch) {
    examples_->Increment(static_cast<double>(examples));
    steps_->Increment();
    epoch_->Set(static_cast<double>(epoch));
  }
  // A progress line's figures: the interval's mean loss and AUC (binary)
  // or accuracy.
  void Interval(double loss, double auc_or_accuracy, bool binary);
  void Evaluation(double auc, double log_loss, double accuracy);
  void Recovery() { recoveries_->Increment(); }
  void LostPush() { lost_pushes_->Increment(); }

  const MetricsRegistry& registry() const { return registry_; }

 private:
  MetricsRegistry registry_;
  prometheus::Counter* steps_;
  prometheus::Counter* examples_;
  prometheus::Gauge* epoch_;
  prometheus::Histogram* phases_[kNumPhases];
  prometheus::Gauge* loss_;
  prometheus::Gauge* auc_;
  prometheus::Gauge* accuracy_;
  prometheus::Gauge* eval_auc_;
  prometheus::Gauge* eval_log_loss_;
  prometheus::Gauge* eval_accuracy_;
  prometheus::Counter* recoveries_;
  prometheus::Counter* lost_pushes_;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_WORKER_METRICS_H_
