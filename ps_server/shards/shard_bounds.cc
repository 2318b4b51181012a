#include "ps_server/shards/shard_bounds.h"

#include <algorithm>
#include <cmath>

namespace psrt {

bool ShardBounds::Clear(const void* update, int64_t version,
                        const Optimizer& optimizer, double max_abs_grad,
                        const UpdateContext& context, Compute compute) {
  cleared_ = nullptr;
  if (!optimizer.bounds_updates() || !std::isfinite(max_abs_grad)) {
    return false;
  }
  if (version != version_) valid_ = false;
  if (!valid_) {
    if (!ComputeAllowed()) return false;
    ComputeNow(compute, version);
  }
  if (!Try(optimizer, max_abs_grad, context)) {
    if (exact_ || !ComputeAllowed()) return false;
    ComputeNow(compute, version);
    if (!Try(optimizer, max_abs_grad, context)) return false;
  }
  cleared_ = update;
  return true;
}

bool ShardBounds::Try(const Optimizer& optimizer, double max_abs_grad,
                      const UpdateContext& context) {
  return optimizer.BoundsAfter(bounds_, max_abs_grad, context, &after_) &&
         after_.WithinLimit(1 + optimizer.num_slots());
}

void ShardBounds::ComputeNow(Compute compute, int64_t version) {
  bounds_ = compute();
  version_ = version;
  valid_ = true;
  exact_ = true;
  computed_once_ = true;
  updates_since_compute_ = 0;
}

void ShardBounds::Applied(const void* update, int64_t version) {
  ++updates_since_compute_;
  if (Cleared(update) && valid_) {
    ++proven_;
    bounds_ = after_;
    version_ = version;
    exact_ = false;
  } else {
    valid_ = false;
  }
  cleared_ = nullptr;
}

void ShardBounds::Cover(const float* values, int64_t n,
                        const float* slot_values, int num_slots) {
  if (!valid_) return;
  bounds_.Cover(0, values, static_cast<size_t>(n));
  for (int k = 0; k < num_slots; ++k) bounds_.Cover(1 + k, slot_values + k, 1);
}

}  // namespace psrt
