#include "ps_server/metrics/metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace psrt {
namespace {

std::string Escape(const std::string& value) {
  return absl::StrReplaceAll(value,
                             {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

// {a="1",b="2"} or "" without labels.
std::string LabelText(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& [k, v] : labels) {
    parts.push_back(absl::StrCat(k, "=\"", Escape(v), "\""));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

// Adds one label to an existing label text.
std::string WithLabel(const std::string& labels, const std::string& extra) {
  if (labels.empty()) return absl::StrCat("{", extra, "}");
  return absl::StrCat(labels.substr(0, labels.size() - 1), ",", extra, "}");
}

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  return absl::StrCat(v);
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)),
      counts_(new std::atomic<int64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i] = 0;
}

void Histogram::Observe(double value) {
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_micros_.fetch_add(static_cast<int64_t>(value * 1e6),
                        std::memory_order_relaxed);
}

std::vector<int64_t> Histogram::CumulativeCounts() const {
  std::vector<int64_t> out(bounds_.size() + 1);
  int64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

double Histogram::sum() const {
  return sum_micros_.load(std::memory_order_relaxed) / 1e6;
}

std::vector<double> LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3, 10e-3,
          25e-3, 50e-3,  100e-3, 250e-3, 500e-3, 1.0,    2.5,  10.0};
}

MetricsRegistry::Family& MetricsRegistry::GetFamily(const std::string& name,
                                                    const std::string& help,
                                                    const std::string& type) {
  Family& f = families_[name];
  if (f.type.empty()) {
    f.help = help;
    f.type = type;
  }
  return f;
}

Counter* MetricsRegistry::GetCounter(const std::string& name,
                                     const std::string& help,
                                     const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  auto& slot = GetFamily(name, help, "counter").counters[LabelText(labels)];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

Histogram* MetricsRegistry::GetHistogram(const std::string& name,
                                         const std::string& help,
                                         const MetricLabels& labels,
                                         std::vector<double> bounds) {
  absl::MutexLock lock(&mu_);
  auto& slot = GetFamily(name, help, "histogram").histograms[LabelText(labels)];
  if (!slot) slot = std::make_unique<Histogram>(std::move(bounds));
  return slot.get();
}

void MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                               const MetricLabels& labels,
                               std::function<double()> value) {
  absl::MutexLock lock(&mu_);
  GetFamily(name, help, "gauge").gauges[LabelText(labels)] = std::move(value);
}

std::string MetricsRegistry::Render() const {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    absl::StrAppend(&out, "# HELP ", name, " ", f.help, "\n# TYPE ", name, " ",
                    f.type, "\n");
    for (const auto& [labels, c] : f.counters) {
      absl::StrAppend(&out, name, labels, " ", c->value(), "\n");
    }
    for (const auto& [labels, g] : f.gauges) {
      absl::StrAppend(&out, name, labels, " ", Number(g()), "\n");
    }
    for (const auto& [labels, h] : f.histograms) {
      const std::vector<int64_t> counts = h->CumulativeCounts();
      for (size_t i = 0; i < counts.size(); ++i) {
        const double le =
            i < h->upper_bounds().size() ? h->upper_bounds()[i] : INFINITY;
        absl::StrAppend(
            &out, name, "_bucket",
            WithLabel(labels, absl::StrCat("le=\"", Number(le), "\"")), " ",
            counts[i], "\n");
      }
      absl::StrAppend(&out, name, "_sum", labels, " ", Number(h->sum()), "\n",
                      name, "_count", labels, " ", counts.back(), "\n");
    }
  }
  return out;
}

}  // namespace psrt
