// Prometheus metrics, recorded with prometheus-cpp (Debian's
// prometheus-cpp-dev 1.0.1) and rendered in its text exposition format.
//
// prometheus-cpp replaced a hand-written registry: its counters and
// histograms cost 20-35 ns an update with two threads contending
// (metrics_overhead_benchmark; docs/benchmarks.md "Metrics"), against a
// push or pull RPC's tens of microseconds. What prometheus-cpp lacks,
// values computed when scraped (bytes held, the process' CPU time), this
// registry adds beside it.
//
// Hot paths hold Counter/Histogram pointers (updates take no registry
// lock); the registry's locks are taken to register metrics and to render.
#ifndef PSRT_PS_SERVER_METRICS_METRICS_H_
#define PSRT_PS_SERVER_METRICS_METRICS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_type.h"
#include "prometheus/registry.h"

namespace psrt {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Latency buckets in seconds, 50 us to 10 s.
std::vector<double> LatencyBuckets();

class MetricsRegistry {
 public:
  MetricsRegistry();

  // The metric for (name, labels), created on first use. The pointer stays
  // valid for the registry's lifetime. A name registered before with
  // another type is a programming error (prometheus-cpp throws).
  prometheus::Counter* GetCounter(const std::string& name,
                                  const std::string& help,
                                  const MetricLabels& labels = {});
  prometheus::Gauge* GetGauge(const std::string& name, const std::string& help,
                              const MetricLabels& labels = {});
  prometheus::Histogram* GetHistogram(
      const std::string& name, const std::string& help,
      const MetricLabels& labels = {},
      const std::vector<double>& bounds = LatencyBuckets());

  // Metrics whose value is computed when scraped (called from the HTTP
  // server's threads; `value` must be thread-safe and outlive the registry
  // or the server, whichever ends first). A counter computed this way must
  // never decrease.
  void AddGauge(const std::string& name, const std::string& help,
                const MetricLabels& labels, std::function<double()> value);
  void AddCounterFunction(const std::string& name, const std::string& help,
                          const MetricLabels& labels,
                          std::function<double()> value);

  // A family whose label sets are only known when scraped (one per
  // variable, say): `samples` returns (labels, value) pairs; the same
  // thread-safety and lifetime rules as above.
  using Samples = std::vector<std::pair<MetricLabels, double>>;
  void AddComputedFamily(const std::string& name, const std::string& help,
                         prometheus::MetricType type,
                         std::function<Samples()> samples);

  // The Prometheus text format (version 0.0.4), families sorted by name.
  std::string Render() const;

 private:
  struct ComputedFamily {
    std::string help;
    prometheus::MetricType type;
    std::map<prometheus::Labels, std::function<double()>> values;
    std::function<Samples()> samples;  // AddComputedFamily
  };
  void AddComputed(const std::string& name, const std::string& help,
                   prometheus::MetricType type, const MetricLabels& labels,
                   std::function<double()> value);

  std::shared_ptr<prometheus::Registry> registry_;
  mutable absl::Mutex mu_;
  std::map<std::string, ComputedFamily> computed_ ABSL_GUARDED_BY(mu_);
};

// What every psrt process exports, named as Prometheus' own clients name
// them: process_start_time_seconds, process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds (from /proc/self), and
// psrt_build_info{component, version, grpc_version} = 1.
void AddProcessMetrics(MetricsRegistry* registry, const std::string& component);

// psrt's release, as the Python package (clients/python/pyproject.toml).
inline constexpr char kPsrtVersion[] = "0.1.0";

}  // namespace psrt

#endif  // PSRT_PS_SERVER_METRICS_METRICS_H_
