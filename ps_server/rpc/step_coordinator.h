// Coordinates training steps across workers on one PS (Consistency in
// proto/ps.proto): the SYNC barrier, SSP clocks, and pulls that must wait.
//
// SYNC: every worker sends one push per PS per step (empty if it has
// nothing there). Pushes for the current step are validated and held; when
// all R workers' pushes have arrived, their mean gradient is applied as one
// update (each shard's version advances once) and the step advances. A push
// for an applied step is stale and dropped. A pull for step k waits until
// step k - 1 has been applied here.
//
// SSP: pushes apply on arrival and advance their worker's clock; a pull for
// step t waits until every worker's clock is at least t - staleness.
//
// Waits are asynchronous (no thread is blocked) and have deadlines: a pull
// that waits too long fails with DEADLINE_EXCEEDED naming the workers it
// waited for.
#ifndef PSRT_PS_SERVER_RPC_STEP_COORDINATOR_H_
#define PSRT_PS_SERVER_RPC_STEP_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps.pb.h"
#include "ps_server/rpc/push_handler.h"
#include "util/clock.h"

namespace psrt {

class StepCoordinator {
 public:
  using Ready = std::function<void(absl::Status)>;

  // `ps_task`: the PS whose shards (in the placement) this barrier is for:
  // this PS's own, or after a failover those of the PS it took over.
  // `max_workers`: the cluster's worker count; requests declaring more are
  // refused (each declared worker costs memory and time here).
  // `clock` times the pulls' waits (it must outlive this).
  StepCoordinator(int ps_task, int max_workers, Clock* clock = Clock::Real());

  // Steps above this are refused: no training runs this long, and a step
  // from the wire must neither overflow the global step nor name absurd
  // checkpoints.
  static constexpr int64_t kMaxStep = int64_t{1} << 40;
  // Longest a pull may ask to wait for other workers.
  static constexpr float kMaxTimeoutSeconds = 24 * 3600;

  // OK if a request's mode, worker count, worker index, step, staleness
  // and timeout are within what this cluster allows; INVALID_ARGUMENT
  // naming the field and the bound otherwise. Every pull and push is
  // checked before it waits, is held, or is applied.
  absl::Status CheckStepFields(const Consistency& consistency, int worker_index,
                               int64_t step) const;
  // Fails the pulls still waiting with UNAVAILABLE.
  ~StepCoordinator();
  StepCoordinator(const StepCoordinator&) = delete;
  StepCoordinator& operator=(const StepCoordinator&) = delete;

  // SYNC: takes a validated, complete push. Holds it for its step's barrier
  // (and applies the step when it is the last one), drops it if stale, or
  // rejects it (wrong worker or step); `done` gets the answer once the
  // backups (--replicas) have the held push or the applied step: on this
  // thread, or on a replication thread (no thread waits for them).
  using PushDone = std::function<void(absl::StatusOr<PushResponse>)>;
  void SyncPush(std::unique_ptr<PushHandler> push, PushDone done);

  // A failover: this PS took over the shards placed on the PS this barrier
  // is for, and resumes the barrier where the failed primary's stream left
  // its backup: `next_step` is the first step not applied, `held` the
  // pushes the failed primary held for it (each acknowledged to its
  // worker, who will not send it again). Call before serving the shards.
  // `clocks`: SSP, the steps each worker had pushed there.
  void Resume(int64_t next_step, std::vector<std::unique_ptr<PushHandler>> held,
              const std::vector<int64_t>& clocks);

  // Handback: these shards are served elsewhere from now on. Waits for a
  // step being applied to finish, logs the held pushes again for the
  // backups (ForwardHeld: one that joined the stream after they were held
  // gets them too), then answers waiting and later pulls and pushes
  // UNAVAILABLE with `why` (the client learns the routing and retries).
  // Returns where the barrier stands, for the PS that serves it next
  // (Resume with the held pushes its copy of the stream has).
  struct Handover {
    int64_t next_step = 0;        // SYNC: the first step not applied
    std::vector<int64_t> clocks;  // SSP: steps pushed per worker
    int held = 0;                 // SYNC: pushes held for next_step
  };
  Handover Close(const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);
  // A handback that failed: serves again as before Close.
  void Reopen() ABSL_LOCKS_EXCLUDED(mu_);

  // SSP: records that `header`'s worker has pushed its step.
  void AdvanceClock(const PushRequestHeader& header);

  // Returns 0 if a pull with `header` may proceed now. Otherwise returns a
  // token and later calls `ready` exactly once: OK when the pull may
  // proceed, DEADLINE_EXCEEDED (naming the missing workers) after the
  // header's timeout -- unless Cancel(token) returned true first.
  uint64_t WaitForPull(const PullRequestHeader& header, Ready ready);
  bool Cancel(uint64_t token);

  // SYNC: the next step to apply.
  int64_t sync_step() const;

 private:
  struct Waiter {
    Consistency consistency;
    int worker = 0;
    int64_t step = 0;
    absl::Time since, deadline;
    Ready ready;
  };
  bool Satisfied(const Waiter& w) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string Blockers(const Waiter& w) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Removes and returns the waiters that may now proceed.
  std::vector<Ready> TakeSatisfied() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TimeoutLoop();

  const int ps_task_;
  const int max_workers_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  // Bumped when waiters are added or dropped, or it stops: the timeout
  // loop looks at the deadlines again.
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  // SYNC
  int64_t applied_step_ ABSL_GUARDED_BY(mu_) = 0;
  int sync_workers_ ABSL_GUARDED_BY(mu_) = 0;
  // The step's barrier was taken; it is being applied and replicated.
  bool applying_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int, std::unique_ptr<PushHandler>> contributions_
      ABSL_GUARDED_BY(mu_);
  // SSP: steps pushed per worker.
  std::vector<int64_t> clocks_ ABSL_GUARDED_BY(mu_);
  // Waiting pulls.
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string closed_ ABSL_GUARDED_BY(mu_);  // Close's why (empty: open)
  std::thread timeouts_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_STEP_COORDINATOR_H_
