// Hot-path cost of Debian's prometheus-cpp 1.0.1 (atomic<double> counters,
// a mutex per histogram observation), which psrt records its metrics with,
// against the lock-free counters and histogram buckets of the hand-written
// registry it replaced (kept here, as the baseline). Every RPC the PS
// answers adds to 4 counters and observes one latency, so the cost per
// operation with the RPC threads contending is what the choice costs. Run:
//   bazel run -c opt //ps_server/metrics:metrics_overhead_benchmark
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "ps_server/metrics/metrics.h"

namespace {

// The hand-written registry's metrics, as psrt used them until it moved to
// prometheus-cpp.
class LockFreeCounter {
 public:
  void Add(int64_t n) { value_.fetch_add(n, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

class LockFreeHistogram {
 public:
  explicit LockFreeHistogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)),
        counts_(new std::atomic<int64_t>[bounds_.size() + 1]()) {}
  void Observe(double value) {
    const size_t bucket =
        std::lower_bound(bounds_.begin(), bounds_.end(), value) -
        bounds_.begin();
    counts_[bucket].fetch_add(1, std::memory_order_relaxed);
    sum_micros_.fetch_add(static_cast<int64_t>(value * 1e6),
                          std::memory_order_relaxed);
  }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<int64_t>[]> counts_;
  std::atomic<int64_t> sum_micros_{0};
};

prometheus::Registry& PrometheusRegistry() {
  static auto* registry = new prometheus::Registry();
  return *registry;
}

prometheus::Histogram::BucketBoundaries Bounds() {
  const std::vector<double> b = psrt::LatencyBuckets();
  return prometheus::Histogram::BucketBoundaries(b.begin(), b.end());
}

void BM_LockFreeCounterAdd(benchmark::State& state) {
  static LockFreeCounter counter;
  for (auto _ : state) counter.Add(4096);
}
BENCHMARK(BM_LockFreeCounterAdd)->Threads(1)->Threads(2);

void BM_PrometheusCounterIncrement(benchmark::State& state) {
  static prometheus::Counter* counter = &prometheus::BuildCounter()
                                             .Name("bench_total")
                                             .Help("bench")
                                             .Register(PrometheusRegistry())
                                             .Add({{"method", "Push"}});
  for (auto _ : state) counter->Increment(4096);
}
BENCHMARK(BM_PrometheusCounterIncrement)->Threads(1)->Threads(2);

void BM_LockFreeHistogramObserve(benchmark::State& state) {
  static LockFreeHistogram histogram(psrt::LatencyBuckets());
  double v = 1e-4;
  for (auto _ : state) {
    histogram.Observe(v);
    v = v < 1 ? v * 1.5 : 1e-4;
  }
}
BENCHMARK(BM_LockFreeHistogramObserve)->Threads(1)->Threads(2);

void BM_PrometheusHistogramObserve(benchmark::State& state) {
  static prometheus::Histogram* histogram =
      &prometheus::BuildHistogram()
           .Name("bench_seconds")
           .Help("bench")
           .Register(PrometheusRegistry())
           .Add({{"method", "Push"}}, Bounds());
  double v = 1e-4;
  for (auto _ : state) {
    histogram->Observe(v);
    v = v < 1 ? v * 1.5 : 1e-4;
  }
}
BENCHMARK(BM_PrometheusHistogramObserve)->Threads(1)->Threads(2);

}  // namespace

BENCHMARK_MAIN();
