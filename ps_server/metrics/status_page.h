// The PS's status page (/statusz on its metrics port): one self-contained
// HTML document -- variables and their shards, bytes per PS with a balance
// chart (inline SVG), request rates, checkpoint history, workers seen --
// with no external assets, for a browser pointed at a pod or a host.
#ifndef PSRT_PS_SERVER_METRICS_STATUS_PAGE_H_
#define PSRT_PS_SERVER_METRICS_STATUS_PAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace psrt {

struct StatusPageData {
  int ps_task = 0;
  int num_ps = 1;
  double uptime_seconds = 0;
  int64_t global_step = 0;
  std::string restored_from;

  // --replicas (0 or 1: none): copies of each shard, the shards this PS
  // serves and the backup copies it keeps, the failovers it knows of,
  // its lease ("held", "NOT HELD", empty: no leases with fewer than 3
  // PS), and whether a backup took its shards over.
  int replicas = 0;
  int primary_shards = 0;
  int backup_shards = 0;
  std::vector<int> failed_ps;
  std::string lease;
  bool replaced = false;

  struct Variable {
    std::string name;
    std::string kind;  // DENSE, EMBEDDING, HASH_EMBEDDING
    int num_shards = 0;
    int local_shards = 0;
    int64_t local_rows = 0;
    int64_t local_bytes = 0;
    // Hash embeddings with feature admission (0: none): over the shards
    // here, rows admission created and gradient rows it dropped.
    int admission_min_count = 0;
    int64_t admitted_rows = 0;
    int64_t unadmitted_gradients = 0;
    // With eviction (0: none): its ttl and max_rows, and the rows evicted
    // here.
    int64_t eviction_ttl_steps = 0;
    int64_t eviction_max_rows = 0;
    int64_t evicted_rows = 0;
    // With an SSD tier: the rows here on disk (of local_rows).
    bool ssd_tier = false;
    int64_t spilled_rows = 0;
  };
  std::vector<Variable> variables;
  // Bytes each PS holds: planned from the shard map for dense and
  // embedding shards, plus (this PS only) its hash rows.
  std::vector<int64_t> bytes_per_ps;

  int64_t pull_requests = 0;
  int64_t push_requests = 0;
  int64_t rows_pulled = 0;
  int64_t rows_pushed = 0;
  int64_t bytes_in = 0;
  int64_t bytes_out = 0;
  // The same six per second over the last `recent_seconds` (RecentRates;
  // empty: no sample yet).
  std::vector<double> recent_rates;
  double recent_seconds = 0;

  struct Checkpoint {
    std::string name;
    int64_t bytes = 0;
    double seconds = 0;
    absl::Time finished;
  };
  std::vector<Checkpoint> checkpoints;  // this PS's saves, newest first

  struct Worker {
    int index = 0;
    int64_t last_step = 0;
    double seconds_ago = 0;
  };
  std::vector<Worker> workers;
};

// Every string from the data (variable names come from clients) is
// escaped; numbers carry ids (id="ps-task", id="var-<i>-bytes", ...) so
// scripts and tests can read them.
std::string RenderStatusPage(const StatusPageData& data);

// &, <, >, " and ' as HTML entities.
std::string HtmlEscape(absl::string_view text);

}  // namespace psrt

#endif  // PSRT_PS_SERVER_METRICS_STATUS_PAGE_H_
