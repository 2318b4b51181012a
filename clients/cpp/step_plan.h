// Turns a batched pull or push (PullOps / PushOps) into per-PS work:
// embedding ids de-duplicated and routed to their shards, gradient rows of
// repeated ids summed and gathered per shard, dense variables cut into their
// shards. Pure computation on the client's catalog; no network.
#ifndef PSRT_CLIENTS_CPP_STEP_PLAN_H_
#define PSRT_CLIENTS_CPP_STEP_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "clients/cpp/ops.h"
#include "partitioner/shard_map.h"
#include "proto/buffer_pool.h"

namespace psrt {

// One variable shard's part of the step, as one PS will see it.
struct PlannedItem {
  const VariableLayout* layout = nullptr;
  int shard = 0;
  float learning_rate = 0;  // push override
  bool assign = false;      // push: dense_grad holds values (PushOp.assign)

  // DENSE: the whole shard, [0, count) floats.
  int64_t count = 0;
  float* dense_out = nullptr;         // pull: where the shard's values go
  const float* dense_grad = nullptr;  // push: the shard's gradient

  // Embeddings: unique ids of this shard.
  std::vector<int64_t> ids;
  // Pull: the op's output row receiving each id (its first occurrence).
  std::vector<int32_t> out_rows;
  float* rows_out = nullptr;
  // Push: one gradient row per id (repeats summed), in a pooled buffer (no
  // zero-fill, no fresh pages per step).
  PooledBuffer grads;
  float* grad_rows() const { return reinterpret_cast<float*>(grads.data()); }

  int64_t width() const { return layout->row_width; }
  int64_t value_floats() const {
    return layout->kind() == DENSE ? count
                                   : static_cast<int64_t>(ids.size()) * width();
  }
};

// After a pull: out rows of repeated ids copied from their first occurrence.
struct RowCopy {
  float* dst;
  const float* src;
  int64_t floats;
};

struct StepPlan {
  // items_by_ps[p]: what PS p receives (may be empty).
  std::vector<std::vector<PlannedItem>> items_by_ps;
  std::vector<RowCopy> repeated_rows;  // pull only
  int64_t rows = 0;                    // embedding rows requested
};

// REQUIRES: every op's buffers stay valid while the plan is used.
absl::StatusOr<StepPlan> PlanPull(const ShardMap& catalog,
                                  absl::Span<const PullOp> ops);
absl::StatusOr<StepPlan> PlanPush(const ShardMap& catalog,
                                  absl::Span<const PushOp> ops);

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_STEP_PLAN_H_
