#include "ps_server/metrics/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "grpcpp/grpcpp.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace psrt {
namespace {

prometheus::Labels ToLabels(const MetricLabels& labels) {
  return prometheus::Labels(labels.begin(), labels.end());
}

// The fields of /proc/self/stat after the command name (field 3, the
// state, is [0]); empty if it cannot be read.
std::vector<std::string> ProcSelfStat() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return {};
  std::istringstream rest(line.substr(paren + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  return fields;
}

// Field N of proc(5)'s /proc/[pid]/stat, numbered from 1 as there.
double StatField(const std::vector<std::string>& fields, int n) {
  const size_t i = static_cast<size_t>(n - 3);
  return i < fields.size() ? std::strtod(fields[i].c_str(), nullptr) : 0;
}

double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  for (std::string key; in >> key;) {
    if (key == "btime") {
      double t = 0;
      in >> t;
      return t;
    }
    std::string skip;
    std::getline(in, skip);
  }
  return 0;
}

double OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the directory stream's own descriptor
}

}  // namespace

std::vector<double> LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3, 10e-3,
          25e-3, 50e-3,  100e-3, 250e-3, 500e-3, 1.0,    2.5,  10.0};
}

MetricsRegistry::MetricsRegistry()
    : registry_(std::make_shared<prometheus::Registry>()) {}

namespace {

// The metric for (name, labels) of the family `builder` makes (or finds) in
// `registry`; `args` are the metric's own (a histogram's buckets).
template <typename Builder, typename... Args>
auto* Metric(Builder builder, prometheus::Registry& registry,
             const std::string& name, const std::string& help,
             const MetricLabels& labels, Args&&... args) {
  return &builder.Name(name).Help(help).Register(registry).Add(
      ToLabels(labels), std::forward<Args>(args)...);
}

}  // namespace

prometheus::Counter* MetricsRegistry::GetCounter(const std::string& name,
                                                 const std::string& help,
                                                 const MetricLabels& labels) {
  return Metric(prometheus::BuildCounter(), *registry_, name, help, labels);
}

prometheus::Gauge* MetricsRegistry::GetGauge(const std::string& name,
                                             const std::string& help,
                                             const MetricLabels& labels) {
  return Metric(prometheus::BuildGauge(), *registry_, name, help, labels);
}

prometheus::Histogram* MetricsRegistry::GetHistogram(
    const std::string& name, const std::string& help,
    const MetricLabels& labels, const std::vector<double>& bounds) {
  return Metric(
      prometheus::BuildHistogram(), *registry_, name, help, labels,
      prometheus::Histogram::BucketBoundaries(bounds.begin(), bounds.end()));
}

void MetricsRegistry::AddComputed(const std::string& name,
                                  const std::string& help,
                                  prometheus::MetricType type,
                                  const MetricLabels& labels,
                                  std::function<double()> value) {
  absl::MutexLock lock(&mu_);
  ComputedFamily& family = computed_[name];
  if (family.values.empty()) {
    family.help = help;
    family.type = type;
  }
  family.values[ToLabels(labels)] = std::move(value);
}

void MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                               const MetricLabels& labels,
                               std::function<double()> value) {
  AddComputed(name, help, prometheus::MetricType::Gauge, labels,
              std::move(value));
}

void MetricsRegistry::AddCounterFunction(const std::string& name,
                                         const std::string& help,
                                         const MetricLabels& labels,
                                         std::function<double()> value) {
  AddComputed(name, help, prometheus::MetricType::Counter, labels,
              std::move(value));
}

void MetricsRegistry::AddComputedFamily(const std::string& name,
                                        const std::string& help,
                                        prometheus::MetricType type,
                                        std::function<Samples()> samples) {
  absl::MutexLock lock(&mu_);
  ComputedFamily& family = computed_[name];
  family.help = help;
  family.type = type;
  family.samples = std::move(samples);
}

std::string MetricsRegistry::Render() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, computed] : computed_) {
      prometheus::MetricFamily family;
      family.name = name;
      family.help = computed.help;
      family.type = computed.type;
      const bool counter = computed.type == prometheus::MetricType::Counter;
      auto add = [&family, counter](const auto& labels, double value) {
        prometheus::ClientMetric metric;
        for (const auto& [k, v] : labels) metric.label.push_back({k, v});
        if (counter) {
          metric.counter.value = value;
        } else {
          metric.gauge.value = value;
        }
        family.metric.push_back(std::move(metric));
      };
      for (const auto& [labels, value] : computed.values) add(labels, value());
      if (computed.samples) {
        for (const auto& [labels, value] : computed.samples()) {
          add(labels, value);
        }
      }
      if (family.metric.empty()) continue;  // no such series now
      families.push_back(std::move(family));
    }
  }
  std::sort(families.begin(), families.end(),
            [](const prometheus::MetricFamily& a,
               const prometheus::MetricFamily& b) { return a.name < b.name; });
  return prometheus::TextSerializer().Serialize(families);
}

void AddProcessMetrics(MetricsRegistry* registry,
                       const std::string& component) {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double start =
      BootTimeSeconds() + StatField(ProcSelfStat(), 22) / ticks;
  registry->AddGauge("process_start_time_seconds",
                     "Start time of the process since the Unix epoch, seconds",
                     {}, [start] { return start; });
  registry->AddCounterFunction(
      "process_cpu_seconds_total", "User and system CPU time spent, seconds",
      {}, [ticks] {
        const std::vector<std::string> stat = ProcSelfStat();
        return (StatField(stat, 14) + StatField(stat, 15)) / ticks;
      });
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  registry->AddGauge("process_resident_memory_bytes", "Resident memory, bytes",
                     {},
                     [page] { return StatField(ProcSelfStat(), 24) * page; });
  registry->AddGauge("process_virtual_memory_bytes", "Virtual memory, bytes",
                     {}, [] { return StatField(ProcSelfStat(), 23); });
  registry->AddGauge("process_open_fds", "Open file descriptors", {},
                     [] { return OpenFds(); });
  registry->AddGauge("process_max_fds", "Limit on open file descriptors", {},
                     [] {
                       rlimit limit{};
                       getrlimit(RLIMIT_NOFILE, &limit);
                       return static_cast<double>(limit.rlim_cur);
                     });
  registry
      ->GetGauge("psrt_build_info",
                 "Always 1; the labels say which psrt program and release",
                 {{"component", component},
                  {"version", kPsrtVersion},
                  {"grpc_version", grpc::Version()}})
      ->Set(1);
}

}  // namespace psrt
