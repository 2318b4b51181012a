#include "ps_worker/continuous_evaluator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace psrt {
namespace {

// Where training stands: the servers' global step (the highest of any PS)
// and the pushes they received. A push is counted when it arrives and the
// step moves once it was applied, so the parameters changed since an
// evaluation exactly when either moved: an evaluation made between the
// last push's arrival and its step would otherwise stand for the end.
struct Progress {
  int64_t global_step = 0;
  int64_t pushes = 0;

  bool operator==(const Progress& other) const {
    return global_step == other.global_step && pushes == other.pushes;
  }
};

absl::StatusOr<Progress> ReadProgress(Client* client) {
  auto stats = client->Stats();
  if (!stats.ok()) return stats.status();
  Progress p;
  for (const StatsResponse& s : *stats) {
    p.global_step = std::max(p.global_step, s.global_step());
    p.pushes += s.push_requests();
  }
  return p;
}

// A status saying the servers are gone (stopped after training), not that
// the request was wrong.
bool ServersGone(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
         absl::IsCancelled(status) || absl::IsAborted(status);
}

}  // namespace

absl::StatusOr<ContinuousEvaluation> RunContinuousEvaluation(
    Trainer* trainer, int64_t max_steps, absl::Duration interval) {
  if (absl::Status s = trainer->PrepareToEvaluate(); !s.ok()) return s;
  trainer->Log(absl::StrCat(
      "evaluator: evaluating the latest parameters every ",
      absl::FormatDuration(interval), " whenever they changed",
      max_steps > 0 ? absl::StrCat(", until step ", max_steps) : ""));
  ContinuousEvaluation run;
  Progress evaluated{-1, -1};
  while (true) {
    const absl::Time start = trainer->clock()->Now();
    absl::StatusOr<Progress> progress = ReadProgress(trainer->client());
    absl::Status failed = progress.status();
    if (progress.ok() && !(*progress == evaluated)) {
      absl::StatusOr<EvalResult> result = trainer->Evaluate();
      if (result.ok()) {
        run.last = *result;
        run.last_global_step = progress->global_step;
        evaluated = *progress;
        ++run.evaluations;
        trainer->WriteEvalSummary(progress->global_step, *result);
        trainer->Log(absl::StrFormat(
            "evaluation %d at global step %d: examples=%d auc=%.5f "
            "logloss=%.5f accuracy=%.5f",
            run.evaluations, progress->global_step, result->examples,
            result->auc, result->log_loss, result->accuracy));
      }
      failed = result.status();
    } else if (progress.ok() && max_steps > 0 &&
               progress->global_step >= max_steps) {
      // The last step was reached and nothing moved since it was evaluated.
      return run;
    }
    if (!failed.ok()) {
      if (run.evaluations > 0 && ServersGone(failed)) {
        trainer->Log(absl::StrCat(
            "the servers are gone (", failed.message(),
            "): training is over; the last evaluation was at global step ",
            run.last_global_step));
        return run;
      }
      return failed;
    }
    trainer->clock()->SleepFor(interval - (trainer->clock()->Now() - start));
  }
}

}  // namespace psrt
