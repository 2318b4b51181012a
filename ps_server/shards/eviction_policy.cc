#include "ps_server/shards/eviction_policy.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "partitioner/id_hash.h"

namespace psrt {
namespace {

// Each shard's part of max_rows, rounded up (without overflow near 2^63).
int64_t ShareOf(int64_t max_rows, int num_shards) {
  if (max_rows <= 0) return 0;
  return max_rows / num_shards + (max_rows % num_shards != 0);
}

}  // namespace

EvictionPolicy::EvictionPolicy(const EvictionSpec& spec, int num_shards,
                               bool at_memory_limit)
    : ttl_steps_(spec.ttl_steps()),
      max_rows_(ShareOf(spec.max_rows(), num_shards)),
      at_memory_limit_(at_memory_limit),
      tracks_steps_(ttl_steps_ > 0 || max_rows_ > 0 || at_memory_limit) {}

int64_t EvictionPolicy::IdleBefore(int64_t global_step) const {
  return ttl_steps_ > 0 ? global_step - ttl_steps_
                        : std::numeric_limits<int64_t>::min();
}

int64_t EvictionPolicy::SweepExcess(int64_t rows) const {
  if (max_rows_ <= 0) return 0;
  return std::max<int64_t>(0, rows - max_rows_ / 10 * 9);
}

int64_t EvictionPolicy::RoomFor(int64_t rows, int64_t count, int64_t limit) {
  return rows + count - limit + limit / 100;
}

int64_t EvictionPolicy::CutoffStep(absl::Span<const int64_t> last_steps,
                                   int64_t current_step, double fraction,
                                   uint64_t first_sample) {
  const int64_t rows = static_cast<int64_t>(last_steps.size());
  const int64_t k = std::min<int64_t>(rows, kSample);
  std::vector<int64_t> steps(k);
  for (int64_t j = 0; j < k; ++j) {
    const uint64_t z = MixId(static_cast<int64_t>(first_sample + j));
    const int64_t step = last_steps[z % static_cast<uint64_t>(rows)];
    steps[j] = step < 0 ? current_step : step;  // restored: recent
  }
  const int64_t at = std::min<int64_t>(
      k - 1, static_cast<int64_t>(fraction * static_cast<double>(k)));
  std::nth_element(steps.begin(), steps.begin() + at, steps.end());
  return steps[at];
}

}  // namespace psrt
