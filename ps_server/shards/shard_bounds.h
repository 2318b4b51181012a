// A shard's bounds on its values (optimizers/value_bounds.h), kept across
// updates so that an update the optimizer can bound needs neither a dry run
// (dense shards) nor undo copies and a finite check of every row (embedding
// shards) to be applied all or nothing.
//
// Life of the bounds: computed from the values on first use (a pass over
// the shard); after an update proven finite by them they become the
// optimizer's bounds after it (valid, no longer exact); any other change
// of the values makes them unknown until computed again: an update proven
// some other way or applied directly (seen as a shard version they do not
// know; an update undone restores the version and the values they knew),
// or a restore (Invalidate). A failed proof with bounds carried over
// many updates (they only grow) computes them again, since the values may
// be far inside; a shard whose updates keep failing computes at most once
// per kUpdatesBetweenRecomputes of them (a restore always may).
//
// Not thread-safe: REQUIRES the owning shard's mutex for every call.
#ifndef PSRT_PS_SERVER_SHARDS_SHARD_BOUNDS_H_
#define PSRT_PS_SERVER_SHARDS_SHARD_BOUNDS_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "ps_server/optimizers/optimizer.h"
#include "ps_server/optimizers/value_bounds.h"
#include "ps_server/shards/shard.h"

namespace psrt {

class ShardBounds {
 public:
  static constexpr int64_t kUpdatesBetweenRecomputes = 64;

  // The shard's exact bounds, computed from its values.
  using Compute = absl::FunctionRef<ValueBounds()>;

  // True if `optimizer`'s bounds prove that `update` (its max_abs_grad and
  // learning rate), applied to the shard at `version`, leaves every value
  // finite. Remembers `update` for Cleared and Applied.
  bool Clear(const ShardUpdate& update, int64_t version,
             const Optimizer& optimizer, Compute compute);
  // Whether the last Clear proved `update`.
  bool Cleared(const ShardUpdate& update) const { return cleared_ == &update; }
  // `update` was applied, taking the shard to `version`: the bounds follow
  // it if Clear proved it, else they are unknown.
  void Applied(const ShardUpdate& update, int64_t version);
  // Updates applied that Clear had proven finite.
  int64_t proven() const { return proven_; }
  // The values changed in a way the bounds do not follow (a restore): the
  // next Clear computes them again.
  void Invalidate() {
    valid_ = false;
    cleared_ = nullptr;
    updates_since_compute_ = kUpdatesBetweenRecomputes;
  }
  // A row created ([values | slots], width floats each) joins the bounds.
  void CoverRow(const float* row, int64_t width, int num_slots) {
    if (valid_) bounds_.CoverRow(row, width, num_slots);
  }

 private:
  bool Try(const Optimizer& optimizer, const ShardUpdate& update,
           const UpdateContext& context);
  bool ComputeAllowed() const {
    return !computed_once_ ||
           updates_since_compute_ >= kUpdatesBetweenRecomputes;
  }
  void ComputeNow(Compute compute, int64_t version);

  ValueBounds bounds_;
  ValueBounds after_;  // the bounds once cleared_ is applied
  const ShardUpdate* cleared_ = nullptr;
  int64_t version_ = 0;  // the shard's version the bounds describe
  bool valid_ = false;
  bool exact_ = false;
  bool computed_once_ = false;
  int64_t updates_since_compute_ = 0;
  int64_t proven_ = 0;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_SHARD_BOUNDS_H_
