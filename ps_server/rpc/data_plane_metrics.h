// What a PS's data-plane servers count, as Prometheus series: hellos,
// frames and bodies refused, body bytes in and out, bodies held now,
// late completions and reply bodies nobody claimed, each by provider.
// Computed from DataPlanes::Stats when scraped.
#ifndef PSRT_PS_SERVER_RPC_DATA_PLANE_METRICS_H_
#define PSRT_PS_SERVER_RPC_DATA_PLANE_METRICS_H_

#include "ps_server/metrics/metrics.h"
#include "ps_server/rpc/data_planes.h"

namespace psrt {

// Registers the series; `planes` must outlive the registry's scrapes.
void ExportDataPlaneMetrics(const DataPlanes* planes,
                            MetricsRegistry* registry);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_DATA_PLANE_METRICS_H_
