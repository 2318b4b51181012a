// Remembers recently applied pushes by (client_id, request_id) so that a
// client retrying a push whose answer it never saw (a timeout, a dropped
// connection) does not apply the same gradient twice.
//
// Bounded, whatever the wire sends: at most `max_entries` applied pushes
// are remembered, the oldest forgotten first (a retry comes within its
// client's deadline, long before a table of that size turns over), and a
// client is forgotten with its last push. Its memory (an estimate per
// entry and per client) is taken from the PS's memory limit through
// `reserve`, in steps of kReserveStep; a step refused makes the table
// forget its oldest pushes instead of growing.
#ifndef PSRT_PS_SERVER_RPC_PUSH_DEDUP_H_
#define PSRT_PS_SERVER_RPC_PUSH_DEDUP_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace psrt {

class PushDedup {
 public:
  enum class Outcome {
    kNew,         // not seen: apply it, then call Finish
    kApplied,     // already applied: acknowledge without applying
    kInProgress,  // the same request is being applied right now
  };
  // Takes (bytes > 0) or gives back (bytes < 0) memory from the PS's
  // limit; a refusal is a status that is not OK.
  using Reserve = std::function<absl::Status(int64_t bytes)>;

  // What the table counts for its memory: a remembered push (its id in a
  // client's set and in the age queue), and a client (its map slot and
  // sets).
  static constexpr int64_t kBytesPerEntry = 48;
  static constexpr int64_t kBytesPerClient = 192;
  static constexpr int64_t kReserveStep = int64_t{1} << 20;
  static constexpr size_t kDefaultMaxEntries = size_t{1} << 17;
  // The most pushes a rejoin answer carries, over all its scopes (2 MiB
  // on the wire, within a peer channel's 4 MiB message).
  static constexpr size_t kMostSentOnRejoin = size_t{1} << 17;

  explicit PushDedup(size_t max_entries = kDefaultMaxEntries,
                     Reserve reserve = nullptr)
      : max_entries_(max_entries), reserve_(std::move(reserve)) {}
  ~PushDedup();
  PushDedup(const PushDedup&) = delete;
  PushDedup& operator=(const PushDedup&) = delete;

  Outcome Begin(uint64_t client_id, uint64_t request_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends a kNew request: remembered as applied if `applied`, else forgotten
  // so a retry applies it.
  void Finish(uint64_t client_id, uint64_t request_id, bool applied)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Remembers a push as applied whatever its state here (one that this
  // PS's copy of the shards holds: a rejoin snapshot's, a forwarded
  // update's). Nothing if it is already.
  void RecordApplied(uint64_t client_id, uint64_t request_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The newest `max` pushes remembered as applied, oldest first.
  std::vector<std::pair<uint64_t, uint64_t>> Newest(size_t max) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Pushes remembered, clients known, and the bytes counted for them
  // (what the table holds, within kReserveStep of what it reserved).
  size_t entries() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t clients() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t reserved_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Client {
    absl::flat_hash_set<uint64_t> applied;
    absl::flat_hash_set<uint64_t> in_progress;
  };
  int64_t BytesLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return static_cast<int64_t>(order_.size()) * kBytesPerEntry +
           static_cast<int64_t>(clients_.size()) * kBytesPerClient;
  }
  // Forgets the oldest remembered push.
  void ForgetOldestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops `client_id` if it holds nothing.
  void DropIfEmptyLocked(uint64_t client_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reserves (or gives back) memory so that reserved_ covers the table
  // (forgetting the oldest pushes where a step is refused).
  void AccountLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_entries_;
  const Reserve reserve_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Client> clients_ ABSL_GUARDED_BY(mu_);
  // Applied pushes, oldest first.
  std::deque<std::pair<uint64_t, uint64_t>> order_ ABSL_GUARDED_BY(mu_);
  int64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
};

// One PushDedup per primary PS (--replicas): a push is remembered under
// the primary its shards were placed on. A backup records the pushes its
// primary forwarded under that primary, apart from its own: a worker's
// step to several PS carries one request id, so its push to this PS must
// not be taken for the forwarded one; and after a failover the worker's
// retry of a push to the dead primary, redirected here, is found there.
class DedupScopes {
 public:
  explicit DedupScopes(int num_ps,
                       size_t max_entries = PushDedup::kDefaultMaxEntries,
                       PushDedup::Reserve reserve = nullptr) {
    for (int i = 0; i < num_ps; ++i) {
      scopes_.push_back(std::make_unique<PushDedup>(max_entries, reserve));
    }
  }
  // REQUIRES: 0 <= primary < num_ps.
  PushDedup* For(int primary) { return scopes_[primary].get(); }
  // Every scope's PushDedup::bytes().
  int64_t bytes() const {
    int64_t total = 0;
    for (const auto& scope : scopes_) total += scope->bytes();
    return total;
  }

 private:
  std::vector<std::unique_ptr<PushDedup>> scopes_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_PUSH_DEDUP_H_
