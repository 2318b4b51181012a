#include "ps_server/checkpoint/checkpoint_schedule.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "ps_server/checkpoint/checkpoint_catalog.h"
#include "storage/memory_storage.h"
#include "util/simulated_clock.h"

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

// The schedule's thread on a simulated clock, over in-memory storage: what
// tests/checkpoint_test's trigger test proved with 16 s of real waiting.
class ScheduledCheckpointsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    VariableSpec dense;
    dense.set_name("w");
    dense.set_kind(DENSE);
    dense.add_shape(8);
    dense.mutable_partition()->set_num_shards(1);
    dense.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
    dense.mutable_optimizer()->set_learning_rate(0.1f);
    ASSERT_TRUE(store_.CreateVariables(0, {dense}, 1).ok());
    auto peers = PsPeers::Create({"127.0.0.1:1"}, 0, SecurityOptions());
    ASSERT_TRUE(peers.ok()) << peers.status();
    peers_ = std::move(*peers);
    CheckpointOptions options;
    options.uri = "mem://bucket/run";
    options.keep = 0;
    options.open_storage = MemoryStorageOpener(objects_);
    options.clock = &clock_;
    coordinator_ =
        std::make_unique<CheckpointCoordinator>(&store_, peers_.get(), options);
    coordinator_->set_last(clock_.Now(), store_.global_step());
  }

  // Moves the clock 100 ms at a time for `duration`, training one step a
  // tick while `training`; returns when each checkpoint was taken (seconds
  // since the test began).
  void Run(absl::Duration duration, bool training) {
    // The schedule's thread waits for its first tick before time moves.
    ASSERT_TRUE(clock_.AwaitWaiters(1, absl::Seconds(10)));
    for (absl::Duration d; d < duration; d += absl::Milliseconds(100)) {
      if (training) store_.set_global_step(store_.global_step() + 1);
      clock_.Advance(absl::Milliseconds(100));
      ASSERT_TRUE(clock_.AwaitWaiters(1, absl::Seconds(10)));
      const int64_t done = coordinator_->totals().succeeded;
      while (static_cast<int64_t>(taken_.size()) < done) {
        taken_.push_back(absl::ToDoubleSeconds(clock_.Now() - start_));
      }
    }
  }

  SimulatedClock clock_;
  const absl::Time start_ = clock_.Now();
  std::shared_ptr<MemoryObjects> objects_ = std::make_shared<MemoryObjects>();
  ShardStore store_{0, 1};
  std::unique_ptr<PsPeers> peers_;
  std::unique_ptr<CheckpointCoordinator> coordinator_;
  std::vector<double> taken_;
};

TEST_F(ScheduledCheckpointsTest, EverySecondsWhileTrainingProgressesOnly) {
  CheckpointSchedule schedule;
  schedule.every = absl::Seconds(2);
  ScheduledCheckpoints periodic(coordinator_.get(), &store_, schedule);
  Run(absl::Seconds(7), /*training=*/true);
  // One every 2 s, to the tick the interval ends on.
  EXPECT_EQ(taken_, (std::vector<double>{2, 4, 6}));
  // Stopped: the steps since the last one get one more at its interval...
  Run(absl::Seconds(60), /*training=*/false);
  EXPECT_EQ(taken_, (std::vector<double>{2, 4, 6, 8}));
  EXPECT_EQ(coordinator_->last_step(), 70);
  // ...and every one of them is complete in storage.
  auto storage = MemoryStorageOpener(objects_)("mem://bucket/run");
  ASSERT_TRUE(storage.ok()) << storage.status();
  auto listed = ListCheckpoints(**storage);
  ASSERT_TRUE(listed.ok()) << listed.status();
  int complete = 0;
  for (const CheckpointListing& l : *listed) complete += l.complete;
  EXPECT_EQ(complete, 4);
}

TEST_F(ScheduledCheckpointsTest, EveryStepsLandsOnTheStepNotTheClock) {
  CheckpointSchedule schedule;
  schedule.every_steps = 25;
  ScheduledCheckpoints periodic(coordinator_.get(), &store_, schedule);
  Run(absl::Seconds(6), /*training=*/true);  // steps 1..60
  EXPECT_EQ(taken_, (std::vector<double>{2.5, 5}));
  EXPECT_EQ(coordinator_->last_step(), 50);
  Run(absl::Hours(1), /*training=*/false);
  EXPECT_EQ(taken_.size(), 2u) << "no checkpoint without 25 more steps";
}

}  // namespace
}  // namespace psrt
