#include "ps_server/rpc/push_dedup.h"

namespace psrt {

PushDedup::Outcome PushDedup::Begin(uint64_t client_id, uint64_t request_id) {
  absl::MutexLock lock(&mu_);
  Client& c = clients_[client_id];
  if (c.applied.contains(request_id)) return Outcome::kApplied;
  if (!c.in_progress.insert(request_id).second) return Outcome::kInProgress;
  return Outcome::kNew;
}

void PushDedup::Finish(uint64_t client_id, uint64_t request_id, bool applied) {
  absl::MutexLock lock(&mu_);
  Client& c = clients_[client_id];
  c.in_progress.erase(request_id);
  if (!applied) return;
  c.applied.insert(request_id);
  c.order.push_back(request_id);
  while (c.order.size() > limit_) {
    c.applied.erase(c.order.front());
    c.order.pop_front();
  }
}

}  // namespace psrt
