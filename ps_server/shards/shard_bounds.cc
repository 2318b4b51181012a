#include "ps_server/shards/shard_bounds.h"

#include <cmath>

namespace psrt {

bool ShardBounds::Clear(const ShardUpdate& update, int64_t version,
                        const Optimizer& optimizer, Compute compute) {
  cleared_ = nullptr;
  if (!optimizer.bounds_updates() || !std::isfinite(update.max_abs_grad)) {
    return false;
  }
  const UpdateContext context =
      MakeUpdateContext(optimizer, update.learning_rate, version + 1);
  if (version != version_) valid_ = false;
  if (!valid_) {
    if (!ComputeAllowed()) return false;
    ComputeNow(compute, version);
  }
  if (!Try(optimizer, update, context)) {
    if (exact_ || !ComputeAllowed()) return false;
    ComputeNow(compute, version);
    if (!Try(optimizer, update, context)) return false;
  }
  cleared_ = &update;
  return true;
}

bool ShardBounds::Try(const Optimizer& optimizer, const ShardUpdate& update,
                      const UpdateContext& context) {
  return optimizer.BoundsAfter(bounds_, update.max_abs_grad, context,
                               &after_) &&
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

void ShardBounds::Applied(const ShardUpdate& update, int64_t version) {
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

}  // namespace psrt
