#include "ps_server/rpc/push_dedup.h"

#include <algorithm>

namespace psrt {

PushDedup::~PushDedup() {
  absl::MutexLock lock(&mu_);
  if (reserve_ && reserved_ > 0) (void)reserve_(-reserved_);
}

PushDedup::Outcome PushDedup::Begin(uint64_t client_id, uint64_t request_id) {
  absl::MutexLock lock(&mu_);
  Client& c = clients_[client_id];
  if (c.applied.contains(request_id)) return Outcome::kApplied;
  if (!c.in_progress.insert(request_id).second) return Outcome::kInProgress;
  AccountLocked();
  return Outcome::kNew;
}

void PushDedup::Finish(uint64_t client_id, uint64_t request_id, bool applied) {
  absl::MutexLock lock(&mu_);
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return;
  it->second.in_progress.erase(request_id);
  if (applied && it->second.applied.insert(request_id).second) {
    order_.emplace_back(client_id, request_id);
    while (order_.size() > max_entries_) ForgetOldestLocked();
  }
  DropIfEmptyLocked(client_id);
  AccountLocked();
}

void PushDedup::RecordApplied(uint64_t client_id, uint64_t request_id) {
  absl::MutexLock lock(&mu_);
  if (clients_[client_id].applied.insert(request_id).second) {
    order_.emplace_back(client_id, request_id);
    while (order_.size() > max_entries_) ForgetOldestLocked();
  }
  DropIfEmptyLocked(client_id);
  AccountLocked();
}

std::vector<std::pair<uint64_t, uint64_t>> PushDedup::Newest(size_t max) const {
  absl::MutexLock lock(&mu_);
  const size_t n = std::min(max, order_.size());
  return std::vector<std::pair<uint64_t, uint64_t>>(order_.end() - n,
                                                    order_.end());
}

void PushDedup::ForgetOldestLocked() {
  const auto [client_id, request_id] = order_.front();
  order_.pop_front();
  auto it = clients_.find(client_id);
  if (it == clients_.end()) return;
  it->second.applied.erase(request_id);
  DropIfEmptyLocked(client_id);
}

void PushDedup::DropIfEmptyLocked(uint64_t client_id) {
  auto it = clients_.find(client_id);
  if (it != clients_.end() && it->second.applied.empty() &&
      it->second.in_progress.empty()) {
    clients_.erase(it);
  }
}

void PushDedup::AccountLocked() {
  if (!reserve_) {
    reserved_ = BytesLocked();
    return;
  }
  // Grow a step at a time; a refused step forgets the oldest pushes.
  while (BytesLocked() > reserved_) {
    if (reserve_(kReserveStep).ok()) {
      reserved_ += kReserveStep;
    } else if (!order_.empty()) {
      ForgetOldestLocked();
    } else {
      break;  // only pushes in progress: they are bounded by the calls
    }
  }
  // Give back what two steps below would leave unused.
  while (reserved_ - BytesLocked() > 2 * kReserveStep) {
    (void)reserve_(-kReserveStep);
    reserved_ -= kReserveStep;
  }
}

size_t PushDedup::entries() const {
  absl::MutexLock lock(&mu_);
  return order_.size();
}

size_t PushDedup::clients() const {
  absl::MutexLock lock(&mu_);
  return clients_.size();
}

int64_t PushDedup::bytes() const {
  absl::MutexLock lock(&mu_);
  return BytesLocked();
}

int64_t PushDedup::reserved_bytes() const {
  absl::MutexLock lock(&mu_);
  return reserved_;
}

}  // namespace psrt
