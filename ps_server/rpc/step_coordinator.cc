#include "ps_server/rpc/step_coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"

namespace psrt {

StepCoordinator::StepCoordinator(int ps_task, int max_workers, Clock* clock)
    : ps_task_(ps_task), max_workers_(std::max(1, max_workers)), clock_(clock) {
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
  // An int32: never past kMaxStep.
  if (c.staleness() < 0) {
    return invalid("staleness ", c.staleness(), " is negative (steps, >= 0)");
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
    ++changes_;
  }
  timeouts_.join();
  for (Ready& r : pending)
    r(absl::UnavailableError("ps_server is shutting down"));
}

int64_t StepCoordinator::sync_step() const {
  absl::MutexLock lock(&mu_);
  return applied_step_;
}

void StepCoordinator::SyncPush(std::unique_ptr<PushHandler> push,
                               PushDone done) {
  const PushRequestHeader& h = push->first_header();
  const int workers = h.consistency().workers();
  const int worker = h.worker_index();
  const int64_t step = h.step();
  PushResponse response;
  std::vector<std::unique_ptr<PushHandler>> barrier;
  bool holds = false;
  ReplicationLog* held_log = nullptr;
  uint64_t held_sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.empty()) {
      done(absl::UnavailableError(closed_));
      return;
    }
    if (workers < 1 || worker < 0 || worker >= workers) {
      done(absl::InvalidArgumentError(
          absl::StrCat("sync push from worker ", worker, " of ", workers,
                       ": the worker index must be in [0, workers)")));
      return;
    }
    if (sync_workers_ == 0) sync_workers_ = workers;
    if (workers != sync_workers_) {
      done(absl::FailedPreconditionError(absl::StrCat(
          "sync push from worker ", worker, " says there are ", workers,
          " workers, but earlier pushes said ", sync_workers_,
          "; every worker must use the same cluster spec")));
      return;
    }
    if (step < applied_step_) {
      response.set_stale_items(push->items());
      done(response);  // the step is done without it (TF drops stale too)
      return;
    }
    if (step == applied_step_ && applying_) {
      // (A retry of a push this step's barrier took: the step is being
      // applied and replicated right now.)
      done(absl::UnavailableError(
          absl::StrCat("sync step ", step, " of PS ", ps_task_,
                       "'s shards is being applied; retry")));
      return;
    }
    if (step > applied_step_) {
      done(absl::FailedPreconditionError(absl::StrCat(
          "worker ", worker, " pushed step ", step, " but PS ", ps_task_,
          " is still at step ", applied_step_,
          ": sync workers must pull each step before pushing it")));
      return;
    }
    auto [it, inserted] = contributions_.emplace(worker, nullptr);
    if (!inserted) {
      if (h.request_id() != 0 &&
          it->second->first_header().request_id() == h.request_id()) {
        response.set_duplicate(true);
        done(response);
        return;
      }
      done(absl::FailedPreconditionError(
          absl::StrCat("worker ", worker, " pushed step ", step,
                       " twice (two workers with the same index?)")));
      return;
    }
    it->second = std::move(push);
    holds = static_cast<int>(contributions_.size()) < sync_workers_;
    if (holds) {
      // Held until the other workers' pushes arrive. With replicas the
      // backups keep it too, logged before the step's combined update (the
      // barrier's lock orders them), so a backup that takes these shards
      // over still has it.
      it->second->ForwardHeld(ps_task_);
      held_log = it->second->replication_log();
      held_sequence = it->second->replicated_sequence();
    } else {
      for (auto& [w, p] : contributions_) barrier.push_back(std::move(p));
      contributions_.clear();
      applying_ = true;
    }
  }
  if (holds) {
    // Acknowledged once the backups have it (the handler may be applied
    // and gone by then: only the log and sequence are used), without
    // holding this thread meanwhile.
    if (held_log == nullptr || held_sequence == 0) {
      done(response);
      return;
    }
    held_log->WhenReplicated(held_sequence, [done = std::move(done), response](
                                                absl::Status replicated) {
      if (replicated.ok()) {
        done(response);
      } else {
        done(replicated);
      }
    });
    return;
  }
  // The last push of the step: apply the mean of all workers' gradients.
  auto pushes = std::make_shared<std::vector<std::unique_ptr<PushHandler>>>(
      std::move(barrier));
  PushHandler* merged = (*pushes)[0].get();
  merged->MarkSyncStep(ps_task_);
  for (size_t i = 1; i < pushes->size(); ++i) {
    merged->TakeItemsOf((*pushes)[i].get());
  }
  const absl::Status applied =
      merged->ApplyCombinedUnreplicated(1.0f / pushes->size());
  if (!applied.ok()) {
    LOG(ERROR) << "PS " << ps_task_ << ": applying sync step " << step
               << " failed; the step is skipped: " << applied;
  }
  // The step counts as applied (and the pulls waiting for it go on) once
  // the backups have it: a worker that pulled the next step's values must
  // find this step applied wherever these shards are served next.
  auto finish = [this, pushes, applied,
                 done = std::move(done)](absl::Status replicated) {
    std::vector<Ready> ready;
    {
      absl::MutexLock lock(&mu_);
      ++applied_step_;
      applying_ = false;
      ready = TakeSatisfied();
    }
    for (Ready& r : ready) r(absl::OkStatus());
    if (!applied.ok()) {
      done(applied);
      return;
    }
    if (!replicated.ok()) {
      done(replicated);
      return;
    }
    PushResponse answer;
    answer.set_rows_applied((*pushes)[0]->items());
    done(answer);
  };
  ReplicationLog* log = merged->replication_log();
  if (!applied.ok() || log == nullptr) {
    finish(absl::OkStatus());
    return;
  }
  log->WhenReplicated(merged->replicated_sequence(), std::move(finish));
}

void StepCoordinator::Resume(int64_t next_step,
                             std::vector<std::unique_ptr<PushHandler>> held,
                             const std::vector<int64_t>& clocks) {
  std::vector<Ready> ready;
  {
    absl::MutexLock lock(&mu_);
    const size_t workers =
        std::min(clocks.size(), static_cast<size_t>(max_workers_));
    if (clocks_.size() < workers) clocks_.resize(workers, 0);
    for (size_t w = 0; w < workers; ++w) {
      clocks_[w] = std::max(clocks_[w], clocks[w]);
    }
    if (workers > 0) {
      LOG(WARNING) << "ssp clocks of PS " << ps_task_
                   << "'s shards resumed here: steps pushed per worker "
                   << absl::StrJoin(clocks_, ", ");
    }
    applied_step_ = std::max(applied_step_, next_step);
    // (A PS that served these shards before, was replaced and took them
    // back may still hold pushes of a step its successor applied.)
    for (auto it = contributions_.begin(); it != contributions_.end();) {
      if (it->second->first_header().step() != applied_step_) {
        it = contributions_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& push : held) {
      const PushRequestHeader& h = push->first_header();
      if (h.step() != applied_step_) continue;
      if (sync_workers_ == 0) sync_workers_ = h.consistency().workers();
      contributions_[h.worker_index()] = std::move(push);
    }
    if (applied_step_ > 0 || !contributions_.empty()) {
      LOG(WARNING) << "sync barrier of PS " << ps_task_
                   << "'s shards resumed here at step " << applied_step_
                   << " with " << contributions_.size()
                   << " push(es) its previous primary held for it";
    }
    ready = TakeSatisfied();  // pulls already waiting may go on now
  }
  for (Ready& r : ready) r(absl::OkStatus());
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
  w.since = clock_->Now();
  const float timeout = header.consistency().timeout_seconds();
  w.deadline = w.since + absl::Seconds(timeout > 0 ? timeout : 60);
  absl::MutexLock lock(&mu_);
  if (stopping_) return 0;
  // Closed: answered UNAVAILABLE by the timeout thread, never let through.
  if (!closed_.empty()) {
    w.deadline = absl::InfinitePast();
  } else if (Satisfied(w)) {
    return 0;
  }
  w.ready = std::move(ready);
  const uint64_t token = next_token_++;
  waiters_.emplace(token, std::move(w));
  ++changes_;
  return token;
}

StepCoordinator::Handover StepCoordinator::Close(const std::string& why) {
  std::vector<Ready> pending;
  Handover handover;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](bool* applying) { return !*applying; }, &applying_));
    closed_ = why.empty() ? "closed" : why;
    // Logged again: a backup that joined the stream after they were held
    // (a rejoined PS taking these shards back) has them too.
    for (auto& [worker, push] : contributions_) push->ForwardHeld(ps_task_);
    handover.next_step = applied_step_;
    handover.clocks = clocks_;
    handover.held = static_cast<int>(contributions_.size());
    for (auto& [token, w] : waiters_) pending.push_back(std::move(w.ready));
    waiters_.clear();
    ++changes_;
  }
  for (Ready& r : pending) r(absl::UnavailableError(why));
  return handover;
}

void StepCoordinator::Reopen() {
  absl::MutexLock lock(&mu_);
  closed_.clear();
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
    const uint64_t seen = changes_;
    auto changed = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return changes_ != seen;
    };
    clock_->AwaitWithDeadline(&mu_, absl::Condition(&changed), next);
    const absl::Time now = clock_->Now();
    std::vector<std::pair<Ready, absl::Status>> expired;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second.deadline <= now) {
        expired.emplace_back(
            std::move(it->second.ready),
            !closed_.empty()
                ? absl::UnavailableError(closed_)
                : absl::DeadlineExceededError(absl::StrCat(
                      "waited ", absl::FormatDuration(now - it->second.since),
                      ": ", Blockers(it->second))));
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
