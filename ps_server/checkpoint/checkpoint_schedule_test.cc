#include "ps_server/checkpoint/checkpoint_schedule.h"

#include "gtest/gtest.h"

namespace psrt {
namespace {

TEST(CheckpointScheduleTest, DueByTimeOrStepsOnlyAfterProgress) {
  CheckpointSchedule by_time;
  by_time.every = absl::Seconds(600);
  // No progress since the last checkpoint: never, however long ago.
  EXPECT_FALSE(ScheduledCheckpoints::Due(by_time, 10, 10, absl::Hours(5)));
  EXPECT_FALSE(ScheduledCheckpoints::Due(by_time, 11, 10, absl::Seconds(599)));
  EXPECT_TRUE(ScheduledCheckpoints::Due(by_time, 11, 10, absl::Seconds(600)));

  CheckpointSchedule by_steps;
  by_steps.every_steps = 100;
  EXPECT_FALSE(ScheduledCheckpoints::Due(by_steps, 199, 100, absl::Hours(5)));
  EXPECT_TRUE(
      ScheduledCheckpoints::Due(by_steps, 200, 100, absl::ZeroDuration()));

  CheckpointSchedule both = by_time;
  both.every_steps = 100;
  EXPECT_TRUE(ScheduledCheckpoints::Due(both, 150, 100, absl::Seconds(601)));
  EXPECT_TRUE(ScheduledCheckpoints::Due(both, 200, 100, absl::Seconds(1)));
  EXPECT_FALSE(ScheduledCheckpoints::Due(both, 150, 100, absl::Seconds(1)));

  CheckpointSchedule never;  // neither interval set
  EXPECT_FALSE(ScheduledCheckpoints::Due(never, 1000, 0, absl::Hours(100)));
}

}  // namespace
}  // namespace psrt
