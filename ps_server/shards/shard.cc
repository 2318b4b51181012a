#include "ps_server/shards/shard.h"

namespace psrt {

absl::Status Shard::ApplyUpdate(ShardUpdate update, float scale) {
  if (absl::Status s = Prepare(&update, scale); !s.ok()) return s;
  absl::MutexLock lock(mutex());
  if (absl::Status s = CheckLocked(&update); !s.ok()) return s;
  std::vector<float> undo(NeedsUndoLocked(update) ? UndoFloats(update) : 0);
  absl::Status s = ApplyLocked(update, undo.empty() ? nullptr : undo.data());
  if (!s.ok()) UndoLocked(update, undo.data());
  return s;
}

}  // namespace psrt
