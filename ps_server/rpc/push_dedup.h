// Remembers recently applied pushes by (client_id, request_id) so that a
// client retrying a push whose answer it never saw (a timeout, a dropped
// connection) does not apply the same gradient twice.
#ifndef PSRT_PS_SERVER_RPC_PUSH_DEDUP_H_
#define PSRT_PS_SERVER_RPC_PUSH_DEDUP_H_

#include <cstdint>
#include <deque>

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

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_PUSH_DEDUP_H_
