// Eviction (VariableSpec.eviction, ps_server --memory_budget_mb): which
// rows of a hash embedding shard go, by the global step of each row's last
// update (the shard keeps one per row while the policy tracks steps).
//
// - ttl_steps T: a sweep drops rows last updated before global step - T.
// - max_rows M (this shard's share of it): a sweep trims the rows above
//   90% of the share; a push that finds the shard full makes room for its
//   new rows plus 1% of the share. The victims are the rows last updated
//   at or before a cutoff step, estimated from a sample of the rows.
// - at the memory limit (--memory_budget_mb): as max_rows, with the rows
//   the shard's blocks hold as the limit.
//
// The policy decides numbers; the shard finds and moves the rows. It is
// immutable and thread-safe.
#ifndef PSRT_PS_SERVER_SHARDS_EVICTION_POLICY_H_
#define PSRT_PS_SERVER_SHARDS_EVICTION_POLICY_H_

#include <cstdint>

#include "absl/types/span.h"
#include "proto/ps.pb.h"

namespace psrt {

class EvictionPolicy {
 public:
  // Rows sampled for a cutoff step.
  static constexpr int64_t kSample = 1024;

  // `spec` of a variable of `num_shards` shards; `at_memory_limit`: the
  // PS evicts hash rows at its memory budget.
  EvictionPolicy(const EvictionSpec& spec, int num_shards,
                 bool at_memory_limit);

  // Whether rows record their last update's step (any rule above).
  bool tracks_steps() const { return tracks_steps_; }
  int64_t ttl_steps() const { return ttl_steps_; }
  // This shard's share of max_rows, rounded up (0: no max_rows).
  int64_t max_rows() const { return max_rows_; }
  bool at_memory_limit() const { return at_memory_limit_; }

  // TTL: rows last updated before this step are idle at `global_step`
  // (the lowest int64 without TTL: none is).
  int64_t IdleBefore(int64_t global_step) const;
  // The rows a sweep trims from a shard holding `rows` (above 90% of the
  // max_rows share; 0 without max_rows or below it).
  int64_t SweepExcess(int64_t rows) const;
  // The rows to evict so that `count` new ones fit beside `rows` under
  // `limit`, plus 1% of `limit` spare, so that the pushes after it find
  // room without a search each.
  static int64_t RoomFor(int64_t rows, int64_t count, int64_t limit);
  // The step at or before which about `fraction` of the rows were last
  // updated, from min(rows, kSample) of `last_steps` at well-mixed
  // positions (sample k reads position MixId(first_sample + k)); a row
  // restored from a checkpoint (step < 0) counts as `current_step`.
  // REQUIRES: last_steps not empty.
  static int64_t CutoffStep(absl::Span<const int64_t> last_steps,
                            int64_t current_step, double fraction,
                            uint64_t first_sample);

 private:
  const int64_t ttl_steps_;
  const int64_t max_rows_;
  const bool at_memory_limit_;
  const bool tracks_steps_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_EVICTION_POLICY_H_
