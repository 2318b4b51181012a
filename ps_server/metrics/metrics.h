// A small Prometheus metrics registry: counters, gauges computed at scrape
// time, and latency histograms, rendered in the text exposition format
// (version 0.0.4). Prometheus' own C++ client is not packaged by Debian.
//
// Hot paths hold Counter/Histogram pointers (lock-free updates); the
// registry's lock is taken only to register metrics and to render.
#ifndef PSRT_PS_SERVER_METRICS_METRICS_H_
#define PSRT_PS_SERVER_METRICS_METRICS_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace psrt {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Add(int64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);

  // Cumulative counts per bucket (the last is +Inf), the sum and count.
  std::vector<int64_t> CumulativeCounts() const;
  double sum() const;
  const std::vector<double>& upper_bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<int64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<int64_t> sum_micros_{0};
};

// Latency buckets in seconds, 50 us to 10 s.
std::vector<double> LatencyBuckets();

class MetricsRegistry {
 public:
  // Returns the metric for (name, labels), creating it on first use. The
  // pointer stays valid for the registry's lifetime.
  Counter* GetCounter(const std::string& name, const std::string& help,
                      const MetricLabels& labels = {});
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const MetricLabels& labels = {},
                          std::vector<double> bounds = LatencyBuckets());
  // A gauge whose value is computed when scraped.
  void AddGauge(const std::string& name, const std::string& help,
                const MetricLabels& labels, std::function<double()> value);

  // The Prometheus text format.
  std::string Render() const;

 private:
  struct Family {
    std::string help;
    std::string type;
    std::map<std::string, std::unique_ptr<Counter>> counters;
    std::map<std::string, std::unique_ptr<Histogram>> histograms;
    std::map<std::string, std::function<double()>> gauges;
  };
  Family& GetFamily(const std::string& name, const std::string& help,
                    const std::string& type) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_METRICS_METRICS_H_
