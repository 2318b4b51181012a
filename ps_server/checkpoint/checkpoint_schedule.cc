#include "ps_server/checkpoint/checkpoint_schedule.h"

#include "glog/logging.h"

namespace psrt {

ScheduledCheckpoints::ScheduledCheckpoints(CheckpointCoordinator* coordinator,
                                           const ShardStore* store,
                                           CheckpointSchedule schedule)
    : coordinator_(coordinator), store_(store), schedule_(schedule) {
  const bool periodic =
      schedule_.every > absl::ZeroDuration() || schedule_.every_steps > 0;
  if (store_->ps_task() == 0 && !coordinator_->options().uri.empty() &&
      periodic) {
    thread_ = std::thread([this] { Loop(); });
  }
}

void ScheduledCheckpoints::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

bool ScheduledCheckpoints::Due(const CheckpointSchedule& schedule, int64_t step,
                               int64_t last_step, absl::Duration since_last) {
  if (step <= last_step) return false;
  const bool by_time =
      schedule.every > absl::ZeroDuration() && since_last >= schedule.every;
  const bool by_steps =
      schedule.every_steps > 0 && step - last_step >= schedule.every_steps;
  return by_time || by_steps;
}

void ScheduledCheckpoints::Loop() {
  // Polled every 100 ms (two atomic reads) so that a checkpoint every N
  // steps lands near step N even when training runs hundreds of steps a
  // second.
  Clock* const clock = coordinator_->clock();
  while (!clock->WaitForNotification(stop_, absl::Milliseconds(100))) {
    if (store_->Variables().empty() ||
        !Due(schedule_, store_->global_step(), coordinator_->last_step(),
             clock->Now() - coordinator_->last_time())) {
      continue;
    }
    auto result = coordinator_->Checkpoint("");
    if (!result.ok()) {
      LOG(ERROR) << "periodic checkpoint failed (training continues; next "
                    "try at the next interval): "
                 << result.status();
      coordinator_->set_last(clock->Now(), coordinator_->last_step());
    }
  }
}

bool TakeFinalCheckpoint(CheckpointCoordinator* coordinator,
                         const ShardStore& store,
                         const CheckpointSchedule& schedule,
                         const std::function<bool()>& saved_by_ps0) {
  if (coordinator->options().uri.empty() || !schedule.on_shutdown) {
    return true;
  }
  if (store.ps_task() == 0) {
    if (store.Variables().empty()) return true;
    LOG(INFO) << "final checkpoint before shutdown";
    auto result = coordinator->Checkpoint("", /*final=*/true);
    if (!result.ok()) {
      LOG(ERROR) << "final checkpoint failed: " << result.status();
      return false;
    }
    return true;
  }
  // Keep serving until PS 0 has saved this PS's shards, PS 0 is gone, or
  // the wait runs out.
  LOG(INFO) << "waiting up to " << absl::FormatDuration(schedule.final_wait)
            << " for PS 0's final checkpoint";
  const PsPeers& peers = coordinator->peers();
  Clock* const clock = coordinator->clock();
  const absl::Time deadline = clock->Now() + schedule.final_wait;
  int unreachable = 0;
  while (!saved_by_ps0()) {
    if (clock->Now() > deadline) {
      LOG(WARNING) << "no final checkpoint from PS 0 within "
                   << absl::FormatDuration(schedule.final_wait) << "; stopping";
      return true;
    }
    unreachable = peers.Ping(0, absl::Seconds(1)).ok() ? 0 : unreachable + 1;
    if (unreachable >= 3) {
      LOG(WARNING) << peers.Describe(0)
                   << " is unreachable; stopping without a final checkpoint";
      return true;
    }
    clock->SleepFor(absl::Milliseconds(200));
  }
  LOG(INFO) << "PS 0 saved this PS's shards in its final checkpoint";
  return true;
}

}  // namespace psrt
