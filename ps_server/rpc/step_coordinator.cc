#include "ps_server/rpc/step_coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"

namespace psrt {

StepCoordinator::StepCoordinator(int ps_task, int max_workers, PushDedup* dedup)
    : ps_task_(ps_task), max_workers_(std::max(1, max_workers)), dedup_(dedup) {
  timeouts_ = std::thread([this] { TimeoutLoop(); });
}

absl::Status StepCoordinator::CheckStepFields(const Consistency& c,
                                              int worker_index,
                                              int64_t step) const {
  auto invalid = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  };
  if (!Consistency::Mode_IsValid(c.mode())) {
    return invalid("consistency mode ", c.mode(),
                   " is not ASYNC (0), SYNC (1) or SSP (2)");
  }
  if (step < 0 || step > kMaxStep) {
    return invalid("step ", step, " is outside [0, ", kMaxStep, "]");
  }
  if (c.workers() < 0 || c.workers() > max_workers_) {
    return invalid("the request says ", c.workers(),
                   " workers; this cluster's spec lists ", max_workers_,
                   " (give every process the same cluster spec)");
  }
  if (!(c.timeout_seconds() >= 0 &&
        c.timeout_seconds() <= kMaxTimeoutSeconds)) {
    return invalid("timeout_seconds ", c.timeout_seconds(), " is outside [0, ",
                   kMaxTimeoutSeconds, "]");
  }
  if (c.mode() == Consistency::ASYNC) {
    if (worker_index < -1 || worker_index >= max_workers_) {
      return invalid("worker_index ", worker_index, " is outside [-1, ",
                     max_workers_, ")");
    }
    return absl::OkStatus();
  }
  const char* mode = c.mode() == Consistency::SYNC ? "sync" : "ssp";
  if (c.workers() < 1) {
    return invalid(mode,
                   " needs the number of workers (consistency.workers "
                   ">= 1)");
  }
  if (worker_index < 0 || worker_index >= c.workers()) {
    return invalid(mode, " request from worker ", worker_index, " of ",
                   c.workers(), ": the worker index must be in [0, workers)");
  }
  if (c.staleness() < 0 || c.staleness() > kMaxStep) {
    return invalid("staleness ", c.staleness(), " is outside [0, ", kMaxStep,
                   "]");
  }
  return absl::OkStatus();
}

StepCoordinator::~StepCoordinator() {
  std::vector<Ready> pending;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [token, w] : waiters_) pending.push_back(std::move(w.ready));
    waiters_.clear();
    changed_.SignalAll();
  }
  timeouts_.join();
  for (Ready& r : pending)
    r(absl::UnavailableError("ps_server is shutting down"));
}

int64_t StepCoordinator::sync_step() const {
  absl::MutexLock lock(&mu_);
  return applied_step_;
}

absl::StatusOr<PushResponse> StepCoordinator::SyncPush(
    std::unique_ptr<PushHandler> push) {
  const PushRequestHeader& h = push->first_header();
  const int workers = h.consistency().workers();
  const int worker = h.worker_index();
  const int64_t step = h.step();
  PushResponse response;
  std::vector<std::unique_ptr<PushHandler>> barrier;
  {
    absl::MutexLock lock(&mu_);
    if (workers < 1 || worker < 0 || worker >= workers) {
      return absl::InvalidArgumentError(
          absl::StrCat("sync push from worker ", worker, " of ", workers,
                       ": the worker index must be in [0, workers)"));
    }
    if (sync_workers_ == 0) sync_workers_ = workers;
    if (workers != sync_workers_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sync push from worker ", worker, " says there are ", workers,
          " workers, but earlier pushes said ", sync_workers_,
          "; every worker must use the same cluster spec"));
    }
    if (step < applied_step_) {
      response.set_stale_items(push->items());
      return response;  // the step is done without it (TF drops stale too)
    }
    if (step > applied_step_) {
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", worker, " pushed step ", step, " but PS ",
                       ps_task_, " is still at step ", applied_step_,
                       ": sync workers must pull each step before pushing it"));
    }
    auto [it, inserted] = contributions_.emplace(worker, nullptr);
    if (!inserted) {
      if (h.request_id() != 0 &&
          it->second->first_header().request_id() == h.request_id()) {
        response.set_duplicate(true);
        return response;
      }
      return absl::FailedPreconditionError(
          absl::StrCat("worker ", worker, " pushed step ", step,
                       " twice (two workers with the same index?)"));
    }
    it->second = std::move(push);
    if (static_cast<int>(contributions_.size()) < sync_workers_) {
      return response;  // held until the other workers' pushes arrive
    }
    for (auto& [w, p] : contributions_) barrier.push_back(std::move(p));
    contributions_.clear();
  }
  // The last push of the step: apply the mean of all workers' gradients.
  PushHandler* merged = barrier[0].get();
  for (size_t i = 1; i < barrier.size(); ++i)
    merged->TakeItemsOf(barrier[i].get());
  absl::Status applied = merged->ApplyCombined(1.0f / barrier.size());
  if (!applied.ok()) {
    LOG(ERROR) << "PS " << ps_task_ << ": applying sync step " << step
               << " failed; the step is skipped: " << applied;
  }
  std::vector<Ready> ready;
  {
    absl::MutexLock lock(&mu_);
    ++applied_step_;
    ready = TakeSatisfied();
  }
  for (Ready& r : ready) r(absl::OkStatus());
  if (!applied.ok()) return applied;
  response.set_rows_applied(merged->items());
  return response;
}

void StepCoordinator::AdvanceClock(const PushRequestHeader& h) {
  const int workers = h.consistency().workers();
  const int worker = h.worker_index();
  if (worker < 0 || worker >= workers) return;
  std::vector<Ready> ready;
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(clocks_.size()) < workers) clocks_.resize(workers, 0);
    clocks_[worker] = std::max(clocks_[worker], h.step() + 1);
    ready = TakeSatisfied();
  }
  for (Ready& r : ready) r(absl::OkStatus());
}

bool StepCoordinator::Satisfied(const Waiter& w) const {
  switch (w.consistency.mode()) {
    case Consistency::SYNC:
      return applied_step_ >= w.step;
    case Consistency::SSP: {
      const int64_t needed = w.step - w.consistency.staleness();
      for (int v = 0; v < w.consistency.workers(); ++v) {
        const int64_t clock =
            v < static_cast<int>(clocks_.size()) ? clocks_[v] : 0;
        if (clock < needed) return false;
      }
      return true;
    }
    default:
      return true;
  }
}

std::string StepCoordinator::Blockers(const Waiter& w) const {
  std::vector<std::string> missing;
  if (w.consistency.mode() == Consistency::SYNC) {
    for (int v = 0; v < w.consistency.workers(); ++v) {
      if (contributions_.count(v) == 0) {
        missing.push_back(absl::StrCat("worker ", v));
      }
    }
    return absl::StrCat(
        "sync step ", applied_step_, " on PS ", ps_task_, " has pushes from ",
        contributions_.size(), " of ", w.consistency.workers(),
        " workers; still missing: ", absl::StrJoin(missing, ", "),
        " (dead, stuck, or started without the others?)");
  }
  const int64_t needed = w.step - w.consistency.staleness();
  for (int v = 0; v < w.consistency.workers(); ++v) {
    const int64_t clock = v < static_cast<int>(clocks_.size()) ? clocks_[v] : 0;
    if (clock < needed) {
      missing.push_back(absl::StrCat("worker ", v, " (at step ", clock, ")"));
    }
  }
  return absl::StrCat("worker ", w.worker, " at step ", w.step,
                      " may be at most ", w.consistency.staleness(),
                      " steps ahead of the slowest; waiting for ",
                      absl::StrJoin(missing, ", "), " on PS ", ps_task_);
}

std::vector<StepCoordinator::Ready> StepCoordinator::TakeSatisfied() {
  std::vector<Ready> ready;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (Satisfied(it->second)) {
      ready.push_back(std::move(it->second.ready));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  return ready;
}

uint64_t StepCoordinator::WaitForPull(const PullRequestHeader& header,
                                      Ready ready) {
  if (header.consistency().mode() == Consistency::ASYNC) return 0;
  Waiter w;
  w.consistency = header.consistency();
  w.worker = header.worker_index();
  w.step = header.step();
  w.since = absl::Now();
  const float timeout = header.consistency().timeout_seconds();
  w.deadline = w.since + absl::Seconds(timeout > 0 ? timeout : 60);
  absl::MutexLock lock(&mu_);
  if (Satisfied(w)) return 0;
  if (stopping_) return 0;
  w.ready = std::move(ready);
  const uint64_t token = next_token_++;
  waiters_.emplace(token, std::move(w));
  changed_.SignalAll();
  return token;
}

bool StepCoordinator::Cancel(uint64_t token) {
  absl::MutexLock lock(&mu_);
  return waiters_.erase(token) > 0;
}

void StepCoordinator::TimeoutLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    absl::Time next = absl::InfiniteFuture();
    for (const auto& [token, w] : waiters_) next = std::min(next, w.deadline);
    changed_.WaitWithDeadline(&mu_, next);
    const absl::Time now = absl::Now();
    std::vector<std::pair<Ready, absl::Status>> expired;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second.deadline <= now) {
        expired.emplace_back(
            std::move(it->second.ready),
            absl::DeadlineExceededError(absl::StrCat(
                "waited ", absl::FormatDuration(now - it->second.since), ": ",
                Blockers(it->second))));
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    if (expired.empty()) continue;
    mu_.Unlock();
    for (auto& [r, status] : expired) r(status);
    mu_.Lock();
  }
}

}  // namespace psrt
