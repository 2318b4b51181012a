// The SSP and SYNC step barriers on a simulated clock (InProcessCluster: 2
// real PS services, no replicas, a psrt::Client per worker on loopback
// ports): a pull that runs ahead is held exactly as long as its timeout on
// the PS's clock, then refused naming the worker it waited for; one whose
// slowest worker catches up goes at once, with no time passing.
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "clients/cpp/client.h"
#include "gtest/gtest.h"
#include "ps_server/rpc/in_process_cluster.h"

namespace psrt {
namespace {

VariableSpec DenseSpec() {
  VariableSpec s;
  s.set_name("d");
  s.set_kind(DENSE);
  s.add_shape(4);
  s.mutable_partition()->set_num_shards(1);
  s.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  s.mutable_optimizer()->set_learning_rate(1.0f);
  return s;
}

class StepBarrierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InProcessCluster::Options options;
    options.num_ps = 2;
    options.replicas = 1;
    options.num_workers = 3;
    options.client_ports = true;
    auto cluster = InProcessCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    ClientOptions o;
    o.ps_addresses = cluster_->client_addresses();
    // Longer than any wait here: the PS's clock ends them, not gRPC's.
    o.call_timeout = absl::Seconds(60);
    auto setup = Client::Connect(o);
    ASSERT_TRUE(setup.ok()) << setup.status();
    ASSERT_EQ((*setup)->CreateVariables({DenseSpec()}), absl::OkStatus());
    for (int w = 0; w < 3; ++w) {
      o.worker_index = w;
      auto worker = Client::Connect(o);
      ASSERT_TRUE(worker.ok()) << worker.status();
      workers_[w] = std::move(*worker);
      ASSERT_TRUE(workers_[w]->RefreshCatalog().ok());
    }
  }

  absl::Status Push(int worker, const StepOptions& step) {
    return workers_[worker]->Push({PushOp::Dense("d", ones_.data())}, step);
  }

  // Starts worker `worker`'s pull for `step` on a thread; `done` fires
  // with its answer in `status`.
  std::thread StartPull(int worker, const StepOptions& step,
                        absl::Status* status, absl::Notification* done) {
    return std::thread([=] {
      *status =
          workers_[worker]->Pull({PullOp::Dense("d", pulled_.data())}, step);
      done->Notify();
    });
  }

  std::unique_ptr<InProcessCluster> cluster_;
  std::unique_ptr<Client> workers_[3];
  const std::vector<float> ones_ = std::vector<float>(4, 1.0f);
  std::vector<float> pulled_ = std::vector<float>(4);
};

// SSP, staleness 2: a pull for step t waits until every worker pushed
// step t - 3. Held for its 1 s timeout on the clock (not a nanosecond
// less), then refused naming the slow worker; held again, it goes when
// that worker pushes, the clock standing still.
TEST_F(StepBarrierTest, SspHoldsAFastWorkerForItsTimeoutThenNamesTheSlowOne) {
  StepOptions step;
  step.consistency.set_mode(Consistency::SSP);
  step.consistency.set_workers(3);
  step.consistency.set_staleness(2);
  step.consistency.set_timeout_seconds(1);
  for (int64_t k = 0; k < 5; ++k) {  // workers 0 and 1: steps 0..4
    step.step = k;
    for (int w = 0; w < 2; ++w) ASSERT_EQ(Push(w, step), absl::OkStatus());
  }
  step.step = 0;
  ASSERT_EQ(Push(2, step), absl::OkStatus());  // worker 2: step 0 only
  // Worker 2's clock is 1: pulls up to step 1 + 2 = 3 go at once.
  step.step = 3;
  EXPECT_EQ(workers_[0]->Pull({PullOp::Dense("d", pulled_.data())}, step),
            absl::OkStatus());

  step.step = 4;  // 3 ahead of worker 2
  absl::Status held;
  absl::Notification held_done;
  const absl::Time timeout_at = cluster_->clock()->Now() + absl::Seconds(1);
  std::thread pull = StartPull(0, step, &held, &held_done);
  ASSERT_TRUE(cluster_->clock()->AwaitWaiterFor(timeout_at, absl::Seconds(10)))
      << "the pull was not held";
  cluster_->Advance(absl::Seconds(1) - absl::Milliseconds(1));
  EXPECT_FALSE(held_done.WaitForNotificationWithTimeout(absl::Milliseconds(50)))
      << "answered before its timeout: " << held;
  cluster_->Advance(absl::Milliseconds(1));
  ASSERT_TRUE(held_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  pull.join();
  EXPECT_EQ(held.code(), absl::StatusCode::kDeadlineExceeded) << held;
  EXPECT_TRUE(absl::StrContains(held.message(), "waited 1s")) << held;
  EXPECT_TRUE(absl::StrContains(held.message(), "worker 2 (at step 1)"))
      << held;

  // Released by worker 2's push of step 1, with no time passing.
  step.consistency.set_timeout_seconds(15);
  const absl::Time before = cluster_->clock()->Now();
  absl::Status released;
  absl::Notification released_done;
  pull = StartPull(1, step, &released, &released_done);
  EXPECT_FALSE(
      released_done.WaitForNotificationWithTimeout(absl::Milliseconds(50)))
      << "went ahead before worker 2 caught up: " << released;
  StepOptions slow = step;
  slow.step = 1;
  ASSERT_EQ(Push(2, slow), absl::OkStatus());
  ASSERT_TRUE(released_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  pull.join();
  EXPECT_EQ(released, absl::OkStatus());
  EXPECT_EQ(cluster_->clock()->Now(), before);
  EXPECT_EQ(pulled_[0], -12.0f);  // 5 + 5 + 2 pushes of 1, applied on arrival
}

// SYNC: worker 0's pull of step 1 waits for worker 1's push of step 0;
// after the timeout (20 s on the clock) it is refused naming worker 1,
// and the step was not applied (its push is held, not lost or half-done).
TEST_F(StepBarrierTest, SyncRefusesAPullAfterItsTimeoutNamingTheMissingWorker) {
  StepOptions step;
  step.consistency.set_mode(Consistency::SYNC);
  step.consistency.set_workers(2);
  step.consistency.set_timeout_seconds(20);
  step.step = 0;
  ASSERT_EQ(Push(0, step), absl::OkStatus());
  step.step = 1;
  absl::Status held;
  absl::Notification done;
  const absl::Time timeout_at = cluster_->clock()->Now() + absl::Seconds(20);
  std::thread pull = StartPull(0, step, &held, &done);
  ASSERT_TRUE(cluster_->clock()->AwaitWaiterFor(timeout_at, absl::Seconds(10)))
      << "the pull was not held";
  cluster_->Advance(absl::Seconds(19));
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(50)))
      << held;
  cluster_->Advance(absl::Seconds(1));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  pull.join();
  EXPECT_EQ(held.code(), absl::StatusCode::kDeadlineExceeded) << held;
  EXPECT_TRUE(absl::StrContains(held.message(), "waited 20s")) << held;
  EXPECT_TRUE(absl::StrContains(held.message(), "worker 1")) << held;
  // Worker 1's push completes step 0: applied once, the mean of both.
  step.step = 0;
  ASSERT_EQ(Push(1, step), absl::OkStatus());
  step.step = 1;
  ASSERT_EQ(workers_[0]->Pull({PullOp::Dense("d", pulled_.data())}, step),
            absl::OkStatus());
  EXPECT_EQ(pulled_[0], -1.0f);
}

}  // namespace
}  // namespace psrt
