// When a PS takes checkpoints: PS 0 every so many seconds or steps of
// progress (never twice at one step), and once more on shutdown, when the
// other PS keep serving until PS 0 has saved their shards. The policy
// behind ps_server's --checkpoint_every_secs/steps, --checkpoint_on_shutdown
// and --final_checkpoint_wait_secs.
#ifndef PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_SCHEDULE_H_
#define PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_SCHEDULE_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "ps_server/checkpoint/checkpoint_coordinator.h"
#include "ps_server/shards/shard_store.h"

namespace psrt {

struct CheckpointSchedule {
  absl::Duration every = absl::ZeroDuration();  // 0: not by time
  int64_t every_steps = 0;                      // 0: not by steps
  bool on_shutdown = true;
  // How long a PS other than 0 keeps serving on shutdown for PS 0's final
  // checkpoint to save its shards.
  absl::Duration final_wait = absl::Minutes(10);
};

// Runs the periodic checkpoints of PS 0 on a thread of its own, from
// construction until Stop() (or destruction). Does nothing on other PS, or
// without a checkpoint location or an interval.
class ScheduledCheckpoints {
 public:
  ScheduledCheckpoints(CheckpointCoordinator* coordinator,
                       const ShardStore* store, CheckpointSchedule schedule);
  ~ScheduledCheckpoints() { Stop(); }
  ScheduledCheckpoints(const ScheduledCheckpoints&) = delete;
  ScheduledCheckpoints& operator=(const ScheduledCheckpoints&) = delete;

  // Waits for a checkpoint under way to end.
  void Stop();

  // Whether checkpoints are due now: training progressed since the last
  // one, and the interval of time or steps has passed.
  static bool Due(const CheckpointSchedule& schedule, int64_t step,
                  int64_t last_step, absl::Duration since_last);

 private:
  void Loop();

  CheckpointCoordinator* const coordinator_;
  const ShardStore* const store_;
  const CheckpointSchedule schedule_;
  absl::Notification stop_;
  std::thread thread_;
};

// What a PS does on SIGTERM before it stops serving: PS 0 takes the final
// checkpoint of every PS; the others wait (up to schedule.final_wait) until
// `saved_by_ps0()` says PS 0 saved their shards, or PS 0 stops answering.
// Returns false only if PS 0's final checkpoint failed.
bool TakeFinalCheckpoint(CheckpointCoordinator* coordinator,
                         const ShardStore& store,
                         const CheckpointSchedule& schedule,
                         const std::function<bool()>& saved_by_ps0);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_SCHEDULE_H_
