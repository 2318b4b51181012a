// Remembers recently applied pushes by (client_id, request_id) so that a
// client retrying a push whose answer it never saw (a timeout, a dropped
// connection) does not apply the same gradient twice.
#ifndef PSRT_PS_SERVER_RPC_PUSH_DEDUP_H_
#define PSRT_PS_SERVER_RPC_PUSH_DEDUP_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace psrt {

class PushDedup {
 public:
  enum class Outcome {
    kNew,         // not seen: apply it, then call Finish
    kApplied,     // already applied: acknowledge without applying
    kInProgress,  // the same request is being applied right now
  };

  // `remembered_per_client` bounds memory: the oldest ids are forgotten.
  explicit PushDedup(size_t remembered_per_client = 4096)
      : limit_(remembered_per_client) {}

  Outcome Begin(uint64_t client_id, uint64_t request_id);
  // Ends a kNew request: remembered as applied if `applied`, else forgotten
  // so a retry applies it.
  void Finish(uint64_t client_id, uint64_t request_id, bool applied);

 private:
  struct Client {
    absl::flat_hash_set<uint64_t> applied;
    std::deque<uint64_t> order;  // oldest first
    absl::flat_hash_set<uint64_t> in_progress;
  };
  const size_t limit_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Client> clients_ ABSL_GUARDED_BY(mu_);
};

// One PushDedup per primary PS (--replicas): a push is remembered under
// the primary its shards were placed on. A backup records the pushes its
// primary forwarded under that primary, apart from its own: a worker's
// step to several PS carries one request id, so its push to this PS must
// not be taken for the forwarded one; and after a failover the worker's
// retry of a push to the dead primary, redirected here, is found there.
class DedupScopes {
 public:
  explicit DedupScopes(int num_ps) {
    for (int i = 0; i < num_ps; ++i) {
      scopes_.push_back(std::make_unique<PushDedup>());
    }
  }
  // REQUIRES: 0 <= primary < num_ps.
  PushDedup* For(int primary) { return scopes_[primary].get(); }

 private:
  std::vector<std::unique_ptr<PushDedup>> scopes_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_PUSH_DEDUP_H_
