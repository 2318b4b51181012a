// Where the workers of a --dense_sync=allreduce run meet to form their
// all-reduce ring (Gloo's rendezvous), served by PS 0 (Rendezvous RPC): a
// small key/value store, one namespace per ring generation.
//
// A ring that loses a worker forms again as the next generation: its
// members set their keys there, a restarted worker joins the newest
// generation it has no keys in. PS 0 keeps the two newest generations
// (the one forming and the one before, whose stragglers still read it);
// a key set in an older one is refused.
//
// Everything is checked against the cluster before it is stored: the
// caller's worker index, key names (1-128 bytes of [A-Za-z0-9_./-]),
// value sizes (4 KiB plus 512 bytes a worker: a full mesh's addresses),
// entries per generation (4 a worker plus 16). A request is stored whole
// or not at all. A key is set once; setting it again with the same value
// is a retry and succeeds, with another value it is refused.
#ifndef PSRT_PS_SERVER_RPC_RENDEZVOUS_STORE_H_
#define PSRT_PS_SERVER_RPC_RENDEZVOUS_STORE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/ps.pb.h"

namespace psrt {

class RendezvousStore {
 public:
  static constexpr size_t kMaxKeyBytes = 128;
  static constexpr int64_t kMaxGeneration = int64_t{1} << 40;

  // For a cluster of `num_workers` workers (at least 1).
  explicit RendezvousStore(int num_workers);

  // Stores `request.set`, then answers the keys of `request.get` present.
  absl::StatusOr<RendezvousResponse> Serve(const RendezvousRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);

  size_t max_value_bytes() const { return max_value_bytes_; }
  int max_entries_per_generation() const { return max_entries_; }

 private:
  struct Entry {
    std::string value;
    int worker = 0;  // who set it
  };
  struct Generation {
    absl::flat_hash_map<std::string, Entry> entries;
    std::set<int> workers;  // who set keys in it
  };

  // The request's shape, before anything is stored.
  absl::Status Check(const RendezvousRequest& request) const;

  const int num_workers_;
  const size_t max_value_bytes_;
  const int max_entries_;
  absl::Mutex mu_;
  std::map<int64_t, Generation> generations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_RENDEZVOUS_STORE_H_
