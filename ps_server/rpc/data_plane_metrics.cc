#include "ps_server/rpc/data_plane_metrics.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace psrt {
namespace {

using Field = std::function<int64_t(const dataplane::DataPlaneServerStats&)>;

// One family: a sample per provider and per (label value, field).
void AddFamily(const DataPlanes* planes, MetricsRegistry* registry,
               const std::string& name, const std::string& help,
               prometheus::MetricType type, const std::string& label,
               std::vector<std::pair<std::string, Field>> fields) {
  registry->AddComputedFamily(
      name, help, type, [planes, label, fields = std::move(fields)] {
        MetricsRegistry::Samples samples;
        for (const auto& [provider, stats] : planes->Stats()) {
          for (const auto& [value, field] : fields) {
            MetricLabels labels = {{"provider", provider}};
            if (!label.empty()) labels.emplace_back(label, value);
            // In name order, as the registry's other series are.
            std::sort(labels.begin(), labels.end());
            samples.push_back(
                {std::move(labels), static_cast<double>(field(stats))});
          }
        }
        return samples;
      });
}

}  // namespace

void ExportDataPlaneMetrics(const DataPlanes* planes,
                            MetricsRegistry* registry) {
  using Stats = dataplane::DataPlaneServerStats;
  constexpr auto kCounter = prometheus::MetricType::Counter;
  AddFamily(planes, registry, "psrt_data_plane_refused_total",
            "Data-plane input refused before any call saw it: hellos "
            "without a valid proof, frames malformed or from an unknown "
            "connection, bodies not the size their header announced",
            kCounter, "what",
            {{"hello", [](const Stats& s) { return s.refused_hellos; }},
             {"frame", [](const Stats& s) { return s.refused_frames; }},
             {"body", [](const Stats& s) { return s.refused_bodies; }}});
  AddFamily(planes, registry, "psrt_data_plane_body_bytes_total",
            "Bodies of data-plane calls, inline or separate: requests "
            "handed to the PS (in), replies sent (out)",
            kCounter, "direction",
            {{"in", [](const Stats& s) { return s.bytes_in; }},
             {"out", [](const Stats& s) { return s.bytes_out; }}});
  AddFamily(planes, registry, "psrt_data_plane_inflight_body_bytes",
            "Request bodies being received or handled now, bytes (bounded "
            "by the PS's body budget)",
            prometheus::MetricType::Gauge, "",
            {{"", [](const Stats& s) { return s.inflight_body_bytes; }}});
  AddFamily(planes, registry, "psrt_data_plane_late_completions_total",
            "Completions the provider reported for operations the server "
            "had finished with (a peer that died mid-call)",
            kCounter, "",
            {{"", [](const Stats& s) { return s.late_completions; }}});
  AddFamily(planes, registry, "psrt_data_plane_unclaimed_replies_total",
            "Reply bodies dropped because their client never said it was "
            "ready for them (a client gone mid-call)",
            kCounter, "",
            {{"", [](const Stats& s) { return s.unclaimed_replies; }}});
  AddFamily(planes, registry, "psrt_data_plane_late_readies_total",
            "Ready frames that came for a reply body already dropped (their "
            "client was stopped or starved meanwhile), answered so that the "
            "client retries at once",
            kCounter, "",
            {{"", [](const Stats& s) { return s.late_readies; }}});
}

}  // namespace psrt
