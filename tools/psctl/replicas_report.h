// psctl replicas: where every shard's copies are (--replicas) and whether
// they agree, asked of each PS on its own so that a dead PS does not hide
// the others: per PS whether it answers, R and the failovers it knows of;
// per shard its placed primary, the PS serving it now, each copy's role,
// version and digest, and the backups' lag (primary version - backup
// version; equal digests at equal versions: the same bits).
#ifndef PSRT_TOOLS_PSCTL_REPLICAS_REPORT_H_
#define PSRT_TOOLS_PSCTL_REPLICAS_REPORT_H_

#include <ostream>

#include "clients/cpp/client_options.h"

namespace psrt {

// Writes the report to `out`; returns 0 if every shard has R copies that
// agree (quiescent cluster), 1 otherwise (a copy missing, lagging or
// different; a PS not answering).
int ReplicasReport(const ClientOptions& options, std::ostream& out);

}  // namespace psrt

#endif  // PSRT_TOOLS_PSCTL_REPLICAS_REPORT_H_
