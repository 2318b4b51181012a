// Gloo's rendezvous store (gloo::rendezvous::Store) over PS 0's
// Rendezvous RPC (ps_server/rpc/rendezvous_store.h), for one generation of
// the workers' all-reduce ring. Gloo's keys are stored under "gloo/"; the
// ring's own (who holds trained state, who is still alive) beside them.
//
// Gloo's interface throws: set, get and wait throw gloo::IoException with
// a message naming what failed (the workers whose keys did not come within
// the timeout). Set, Read and WaitFor are the same without exceptions.
#ifndef PSRT_PS_WORKER_ALLREDUCE_RING_RENDEZVOUS_STORE_H_
#define PSRT_PS_WORKER_ALLREDUCE_RING_RENDEZVOUS_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "proto/ps.pb.h"

namespace psrt {

// One Rendezvous call: psrt::Client::Rendezvous, or a RendezvousStore in
// the same process (tests).
using RendezvousCall =
    std::function<absl::StatusOr<RendezvousResponse>(const RendezvousRequest&)>;

class RingRendezvousStore : public gloo::rendezvous::Store {
 public:
  // Worker `worker`'s view of ring generation `generation`; waits without
  // a timeout of their own last `timeout`.
  RingRendezvousStore(int worker, int64_t generation, RendezvousCall call,
                      absl::Duration timeout);

  // gloo::rendezvous::Store (keys under "gloo/"); throw gloo::IoException.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The same, for the ring's own keys (stored as given).
  absl::Status Set(const std::string& key, const std::string& value);
  // The keys of `keys` present now.
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> Read(
      const std::vector<std::string>& keys);
  // Waits until every key of `keys` is present or `timeout` passed; the
  // keys present then (all of them, or DEADLINE_EXCEEDED naming the
  // others with `missing_says`, e.g. "did not join").
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> WaitFor(
      const std::vector<std::string>& keys, absl::Duration timeout,
      const std::string& missing_says);

  int64_t generation() const { return generation_; }

 private:
  const int worker_;
  const int64_t generation_;
  const RendezvousCall call_;
  const absl::Duration timeout_;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_ALLREDUCE_RING_RENDEZVOUS_STORE_H_
