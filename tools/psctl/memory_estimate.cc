#include "tools/psctl/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "partitioner/shard_map.h"
#include "partitioner/variable_spec.h"

namespace psrt {
namespace {

// Rows shard `s` of hash variable `v` holds: its capacity share when
// bounded (by shape[0] or eviction.max_rows, whichever is smaller), else
// its share of `unbounded_rows`.
int64_t HashShardRows(const VariableLayout& v, const ShardLayout& s,
                      int64_t unbounded_rows) {
  const int64_t n = v.num_shards();
  int64_t rows = s.num_rows > 0 ? s.num_rows : (unbounded_rows + n - 1) / n;
  if (const int64_t max_rows = v.spec.eviction().max_rows(); max_rows > 0) {
    rows = std::min(rows, (max_rows + n - 1) / n);
  }
  return rows;
}

}  // namespace

int64_t PsBaseBytes(int replicas, bool data_plane) {
  if (!data_plane) return kProcessBaseBytes;
  return kProcessBaseBytes + kDataPlaneBaseBytes +
         (replicas - 1) * kDataPlanePerBackupBytes;
}

absl::StatusOr<std::vector<PsMemoryEstimate>> EstimatePsMemory(
    std::vector<VariableSpec> specs, int num_ps, int64_t unbounded_hash_rows,
    int replicas, bool data_plane) {
  if (num_ps < 1 || num_ps > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("PS count ", num_ps, " is not in [1, 4096]"));
  }
  if (replicas < 1 || replicas > num_ps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicas ", replicas, " is not in [1, the PS count ", num_ps, "]"));
  }
  if (unbounded_hash_rows < 0 || unbounded_hash_rows > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected hash rows ", unbounded_hash_rows, " is not in [0, 2^40]"));
  }
  ShardMap map(num_ps);
  for (VariableSpec& spec : specs) {
    if (absl::Status s = NormalizeVariableSpec(&spec); !s.ok()) return s;
    if (absl::Status s = map.Add(spec); !s.ok()) return s;
  }
  std::vector<PsMemoryEstimate> out(num_ps);
  for (const VariableLayout& v : map.variables()) {
    const int64_t row_bytes =
        v.row_width * static_cast<int64_t>(sizeof(float)) * (1 + v.num_slots);
    for (const ShardLayout& s : v.shards) {
      PsMemoryEstimate& e = out[s.ps_task];
      if (v.kind() == HASH_EMBEDDING) {
        const int64_t rows = HashShardRows(v, s, unbounded_hash_rows);
        e.hash_rows += rows;
        e.parameter_bytes += rows * row_bytes;
        e.row_overhead_bytes += rows * kHashRowOverheadBytes;
      } else {
        e.parameter_bytes += s.bytes;
      }
    }
  }
  for (PsMemoryEstimate& e : out) {
    e.total_bytes = PsBaseBytes(replicas, data_plane) +
                    replicas * (e.parameter_bytes + e.row_overhead_bytes);
    e.limit_bytes = static_cast<int64_t>(
        std::ceil(static_cast<double>(e.total_bytes) * (1 + kLimitHeadroom)));
  }
  return out;
}

}  // namespace psrt
