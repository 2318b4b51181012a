// Dense variables trained by all-reduce among worker threads over real
// Gloo TCP on loopback, meeting through a real RendezvousStore.
#include "ps_worker/dense_allreduce.h"

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "partitioner/variable_spec.h"
#include "ps_server/rpc/rendezvous_store.h"

namespace psrt {
namespace {

constexpr int kWorkers = 3;

VariableSpec Dense(const std::string& name, int64_t size,
                   OptimizerSpec::Kind optimizer) {
  VariableSpec spec;
  spec.set_name(name);
  spec.set_kind(DENSE);
  spec.add_shape(size);
  spec.mutable_optimizer()->set_kind(optimizer);
  spec.mutable_optimizer()->set_learning_rate(0.01f);
  return spec;
}

std::vector<VariableSpec> Specs() {
  return {Dense("w", 1000, OptimizerSpec::ADAM),
          Dense("b", 7, OptimizerSpec::ADAGRAD)};
}

DenseAllreduce::Options WorkerOptions(RendezvousStore* store, int worker,
                                      absl::Duration reform_timeout) {
  DenseAllreduce::Options options;
  options.ring.worker = worker;
  options.ring.num_workers = kWorkers;
  options.ring.timeout = absl::Seconds(5);
  options.ring.rendezvous = [store](const RendezvousRequest& r) {
    return store->Serve(r);
  };
  options.reform_timeout = reform_timeout;
  return options;
}

// Worker w's gradient of step s: different on every worker and step.
std::vector<std::vector<float>> Gradients(int w, int64_t s) {
  std::vector<std::vector<float>> grads = {std::vector<float>(1000),
                                           std::vector<float>(7)};
  for (auto& g : grads) {
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = std::sin(0.37f * i + 1.3f * w + 0.11f * s) * (1 + w);
    }
  }
  return grads;
}

std::vector<std::vector<float>> StartValues() {
  return {std::vector<float>(1000, 0.5f), std::vector<float>(7, -0.25f)};
}

template <typename Body>
void OnEveryWorker(int n, Body body) {
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) threads.emplace_back([&body, w] { body(w); });
  for (std::thread& t : threads) t.join();
}

// Destroys every worker's ring at once, as separate worker processes end:
// a member leaving waits (kLeaveWait at most) until its peers leave too.
void LeaveTogether(std::vector<std::unique_ptr<DenseAllreduce>>* workers) {
  OnEveryWorker(static_cast<int>(workers->size()),
                [workers](int w) { (*workers)[w].reset(); });
}

TEST(DenseAllreduceTest, EveryWorkerHoldsTheSameBitsAndTheReferenceMath) {
  constexpr int kSteps = 50;
  RendezvousStore store(kWorkers);
  std::vector<std::unique_ptr<DenseAllreduce>> workers(kWorkers);
  OnEveryWorker(kWorkers, [&](int w) {
    auto dense = DenseAllreduce::Create(
        Specs(), WorkerOptions(&store, w, absl::ZeroDuration()));
    ASSERT_TRUE(dense.ok()) << dense.status();
    // Worker 0's values win: the others start from other values.
    std::vector<std::vector<float>> start = StartValues();
    if (w > 0) start[0][3] = 99.0f;
    ASSERT_TRUE((*dense)->Start(start, 0).ok());
    for (int64_t s = 0; s < kSteps; ++s) {
      absl::Status applied = (*dense)->Apply(Gradients(w, s), 0, s);
      ASSERT_TRUE(applied.ok()) << applied;
    }
    workers[w] = *std::move(dense);
  });
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_NE(workers[w], nullptr);
    EXPECT_EQ(workers[w]->next_step(), kSteps);
    EXPECT_EQ(workers[w]->updates(), kSteps);
    for (size_t v = 0; v < 2; ++v) {
      EXPECT_EQ(std::memcmp(workers[w]->values()[v].data(),
                            workers[0]->values()[v].data(),
                            workers[0]->values()[v].size() * sizeof(float)),
                0)
          << "worker " << w << " variable " << v;
    }
  }
  // The same math in one process: the mean gradient (summed in doubles),
  // the PS's optimizers on one copy.
  std::vector<VariableSpec> specs = Specs();
  std::vector<std::vector<float>> reference = StartValues();
  for (size_t v = 0; v < specs.size(); ++v) {
    ASSERT_TRUE(NormalizeVariableSpec(&specs[v]).ok());
    std::unique_ptr<Optimizer> optimizer =
        CreateOptimizer(specs[v].optimizer());
    std::vector<std::vector<float>> slots;
    for (int k = 0; k < optimizer->num_slots(); ++k) {
      slots.emplace_back(reference[v].size(), optimizer->initial_slot_value(k));
    }
    float* slot_ptrs[2] = {nullptr, nullptr};
    for (size_t k = 0; k < slots.size(); ++k) slot_ptrs[k] = slots[k].data();
    for (int64_t s = 0; s < kSteps; ++s) {
      std::vector<double> sum(reference[v].size(), 0);
      for (int w = 0; w < kWorkers; ++w) {
        const std::vector<float> g = Gradients(w, s)[v];
        for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
      }
      std::vector<float> mean(sum.size());
      for (size_t i = 0; i < sum.size(); ++i) mean[i] = sum[i] / kWorkers;
      const UpdateContext context = MakeUpdateContext(
          *optimizer, specs[v].optimizer().learning_rate(), s + 1);
      optimizer->Apply(reference[v].data(), slot_ptrs, mean.data(), mean.size(),
                       context);
    }
    double worst = 0;
    for (size_t i = 0; i < reference[v].size(); ++i) {
      worst = std::max<double>(
          worst, std::abs(workers[0]->values()[v][i] - reference[v][i]));
    }
    // Float rounding of the sum's order only: far below one step's move
    // (0.01 for Adam).
    EXPECT_LT(worst, 1e-4) << specs[v].name();
    EXPECT_NE(workers[0]->values()[v][3], StartValues()[v][3]);
  }
  LeaveTogether(&workers);
}

TEST(DenseAllreduceTest, ANonFiniteMeanIsRefusedOnEveryWorkerNamingIt) {
  RendezvousStore store(kWorkers);
  std::vector<absl::Status> status(kWorkers);
  std::vector<float> after(kWorkers);
  OnEveryWorker(kWorkers, [&](int w) {
    auto dense = DenseAllreduce::Create(
        Specs(), WorkerOptions(&store, w, absl::ZeroDuration()));
    ASSERT_TRUE(dense.ok());
    ASSERT_TRUE((*dense)->Start(StartValues(), 0).ok());
    std::vector<std::vector<float>> grads = Gradients(w, 0);
    if (w == 1) grads[1][4] = std::nanf("");
    status[w] = (*dense)->Apply(grads, 0, 0);
    after[w] = (*dense)->values()[1][4];
  });
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(status[w].code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(status[w].message(),
                                  "all-reduced gradient of b would make its "
                                  "element 4 nan"))
        << status[w];
    EXPECT_EQ(after[w], -0.25f) << "nothing applied on worker " << w;
  }
}

TEST(DenseAllreduceTest, ARestartedWorkerTakesTheSurvivorsStateAndGoesOn) {
  RendezvousStore store(kWorkers);
  std::vector<std::unique_ptr<DenseAllreduce>> workers(kWorkers);
  OnEveryWorker(kWorkers, [&](int w) {
    auto dense = DenseAllreduce::Create(
        Specs(), WorkerOptions(&store, w, absl::Seconds(30)));
    ASSERT_TRUE(dense.ok());
    ASSERT_TRUE((*dense)->Start(StartValues(), 0).ok());
    for (int64_t s = 0; s < 10; ++s) {
      ASSERT_TRUE((*dense)->Apply(Gradients(w, s), 0, s).ok());
    }
    workers[w] = *std::move(dense);
  });
  // Worker 2 dies (its connections close) and starts again from nothing:
  // other values, step 0.
  workers[2].reset();
  OnEveryWorker(kWorkers, [&](int w) {
    if (w == 2) {
      auto dense = DenseAllreduce::Create(
          Specs(), WorkerOptions(&store, w, absl::Seconds(30)));
      ASSERT_TRUE(dense.ok());
      std::vector<std::vector<float>> fresh = StartValues();
      fresh[0][0] = 42.0f;
      ASSERT_TRUE((*dense)->Start(fresh, 0).ok());
      workers[2] = *std::move(dense);
    } else {
      // Step 10's all-reduce breaks; the ring forms again with worker 2.
      absl::Status s = workers[w]->Apply(Gradients(w, 10), 0, 10);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(workers[w]->dropped_updates(), 1);
    }
    EXPECT_EQ(workers[w]->generation(), 1);
    EXPECT_EQ(workers[w]->next_step(), 11) << "worker " << w;
    for (int64_t s = workers[w]->next_step(); s < 15; ++s) {
      ASSERT_TRUE(workers[w]->Apply(Gradients(w, s), 0, s).ok());
    }
  });
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(workers[w]->updates(), 14) << "10 + 4; step 10 dropped";
    EXPECT_EQ(workers[w]->values(), workers[0]->values()) << "worker " << w;
  }
  EXPECT_NE(workers[2]->values()[0][0], 42.0f);
  LeaveTogether(&workers);
}

}  // namespace
}  // namespace psrt
