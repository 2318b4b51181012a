// The workers' all-reduce ring (ps_worker --dense_sync=allreduce): Gloo
// over TCP, its members met through PS 0's rendezvous store
// (ring_rendezvous_store.h).
//
// Generations: the ring first forms as generation 0. A ring that broke
// (a worker died) may form again as the next generation; a worker that
// starts joins the newest generation it has set no keys in, so a restarted
// worker meets the survivors there. Each member says whether it holds
// trained state; state_holder() is the lowest such rank, which the others
// take their state from (Broadcast).
//
// Sum is Gloo's chunked ring all-reduce: every member ends with the same
// bits. A Sum or Broadcast fails when a peer died (its connection closed)
// or did not take part within the timeout; the failed member closes its
// connections, which fails the calls waiting on them. Each survivor then
// says in the store that it is alive, and the error names the workers that
// did not within the timeout (and kAliveMargin) of the first failure: the
// dead ones. A survivor thus fails naming them at most that long after
// the ring broke. A member destroyed after its calls returned waits until
// its peers' calls returned too (or kLeaveWait), so that closing its
// connections breaks none of theirs. Join makes the process ignore
// SIGPIPE (unless it has a handler): Gloo's writes to a dead peer would
// otherwise end it.
#ifndef PSRT_PS_WORKER_ALLREDUCE_ALLREDUCE_RING_H_
#define PSRT_PS_WORKER_ALLREDUCE_ALLREDUCE_RING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps_worker/allreduce/ring_rendezvous_store.h"

namespace gloo {
class Algorithm;
class Context;
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace psrt {

class AllreduceRing {
 public:
  struct Options {
    int worker = 0;
    int num_workers = 1;
    // The address this worker's peers reach it at (its TF_CONFIG host);
    // it listens there on a port of its own choosing.
    std::string hostname = "127.0.0.1";
    // Every worker's address (TF_CONFIG's worker list), to name a dead one
    // (empty: named by index alone).
    std::vector<std::string> worker_addresses;
    // A rendezvous, a Sum or a Broadcast that waits longer fails.
    absl::Duration timeout = absl::Seconds(30);
    RendezvousCall rendezvous;
  };

  // The generation a worker starting now joins: the newest one it has set
  // no keys in (0 when there is none).
  static absl::StatusOr<int64_t> GenerationToJoin(const Options& options);

  // Survivors of a broken ring wait for each other to say they are alive
  // until the timeout and this margin after the first of them failed: a
  // survivor's call fails within the timeout (a member computing when the
  // ring broke reaches its next call within a step).
  static constexpr absl::Duration kAliveMargin = absl::Seconds(2);

  // A member leaving (destroyed) waits up to this long for every peer to
  // have finished the collectives it finished (Leave).
  static constexpr absl::Duration kLeaveWait = absl::Seconds(2);

  // Joins ring generation `generation` and waits up to `join_timeout`
  // (0: options.timeout) until every worker has: DEADLINE_EXCEEDED names
  // those that did not. `holds_state`: this worker holds trained state
  // the others should take.
  static absl::StatusOr<std::unique_ptr<AllreduceRing>> Join(
      const Options& options, int64_t generation, bool holds_state,
      absl::Duration join_timeout = absl::ZeroDuration());
  ~AllreduceRing();

  // Sums data[0, n) over the members in place: every member gets the same
  // bits. Calls with the same buffer reuse its registration (pass the same
  // fused buffer every step). Fails naming the workers gone (see above); the
  // ring is then broken, every later call fails.
  absl::Status Sum(float* data, size_t n);
  // Member `root`'s bytes [0, bytes) to every member.
  absl::Status Broadcast(void* data, size_t bytes, int root);

  int64_t generation() const { return store_.generation(); }
  // The lowest rank that joined holding state; -1 if none did.
  int state_holder() const { return state_holder_; }
  bool broken() const { return context_ == nullptr; }
  const Options& options() const { return options_; }

 private:
  AllreduceRing(const Options& options, int64_t generation,
                absl::Duration join_timeout);
  // After a failed collective `what`: closes the connections, says this
  // worker is alive, and returns UNAVAILABLE naming the workers that did
  // not say so within the grace period.
  absl::Status Broke(const std::string& what, const std::string& cause);
  // Before the destructor closes the connections: waits (up to
  // kLeaveWait) until every peer has completed the collectives this
  // member completed, each saying so in the store as it leaves.
  void Leave();
  // Closes every connection, then frees the algorithm's buffers, the
  // context and the device, in that order (see the definition).
  void Disconnect();
  std::string Name(int worker) const;

  const Options options_;
  RingRendezvousStore store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;  // null once broken
  // Sum's algorithm, over the buffer it was last given.
  std::unique_ptr<gloo::Algorithm> sum_;
  // Sum's last algorithms over other buffers (see Sum), freed after the
  // connections close.
  static constexpr size_t kRetiredSums = 2;
  std::vector<std::unique_ptr<gloo::Algorithm>> retired_sums_;
  const float* sum_data_ = nullptr;
  size_t sum_floats_ = 0;
  int state_holder_ = -1;
  int64_t collectives_ = 0;  // completed Sum and Broadcast calls
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_ALLREDUCE_ALLREDUCE_RING_H_
