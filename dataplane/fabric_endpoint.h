// One libfabric endpoint: reliable datagrams (FI_EP_RDM) with tagged
// messages, over the provider asked for: "tcp" (libfabric's tcp with its
// rxm layer, for other hosts), "shm" (shared memory, for a PS on the same
// host) or any other RDM provider by name ("efa" on AWS, where Debian's
// libfabric has it). Buffers are registered only where the provider needs
// it (FI_MR_LOCAL); elsewhere the fabric reads and writes the caller's
// memory where it is.
//
// Sends from one endpoint to a peer are received in the order they were
// sent (FI_ORDER_SAS, asked of the provider): a body sent as several
// messages under one tag lands in receives posted in that order.
//
// Every posted operation's context is an Op; its completion (or error) is
// handed back by Poll with that Op. Thread-safe (FI_THREAD_SAFE): any
// thread may post, and Poll may run beside posts.
#ifndef PSRT_DATAPLANE_FABRIC_ENDPOINT_H_
#define PSRT_DATAPLANE_FABRIC_ENDPOINT_H_

#include <rdma/fabric.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/doorbell.h"

struct fid_fabric;
struct fid_domain;
struct fid_av;
struct fid_cq;
struct fid_ep;
struct fid_mr;

namespace psrt::dataplane {

// A posted operation: the caller's, alive until its completion comes back
// from Poll. The provider uses the first member while it is in flight
// (FI_CONTEXT2), so an Op is passed to libfabric as its context.
struct Op {
  struct fi_context2 provider_context;
  int purpose = 0;       // what the caller posted it for
  void* user = nullptr;  // the caller's
};

struct Completion {
  Op* op = nullptr;
  absl::Status status;  // e.g. a body longer than the buffer posted for it
  uint64_t bytes = 0;   // received (receives only)
  uint64_t tag = 0;
  fi_addr_t source = FI_ADDR_NOTAVAIL;  // a receive's sender, if known
};

// A buffer registered with the endpoint's domain where the provider needs
// that; desc() is what posts take (nullptr where no registration is
// needed).
class MemoryRegion {
 public:
  MemoryRegion() = default;
  ~MemoryRegion();
  MemoryRegion(MemoryRegion&& other) noexcept;
  MemoryRegion& operator=(MemoryRegion&& other) noexcept;
  void* desc() const { return desc_; }

 private:
  friend class FabricEndpoint;
  fid_mr* mr_ = nullptr;
  void* desc_ = nullptr;
};

struct FabricOptions {
  // "tcp", "shm", or another libfabric provider's name.
  std::string provider = "tcp";
  // The address to listen on (tcp): this host's address in the cluster.
  std::string node = "127.0.0.1";
  // The port to listen on (tcp, with `node`); 0: one the kernel picks.
  int port = 0;
  // Where the provider has nothing to wake a waiter (shm): bind a
  // doorbell (doorbell.h) that peers ring when they send here, so that
  // Poll(idle) sleeps rather than polls. DataPlaneServer and
  // DataPlaneClient set it.
  bool doorbell = false;
  // How long Poll(idle) polls after the last completion before it sleeps
  // on the doorbell (200 us at least): a server's wait for its next call;
  // a client's for an answer (longer, so that a call answered within it
  // pays no wake-up).
  absl::Duration sleep_after = absl::Microseconds(200);
};

// The port of a socket-address fabric address (tcp's: a sockaddr_in or
// sockaddr_in6, as FabricEndpoint::address() returns); 0 for any other.
int AddressPort(absl::string_view address);

class FabricEndpoint {
 public:
  // UNAVAILABLE naming the provider when libfabric has none that serves
  // tagged reliable datagrams by that name here (the caller then keeps to
  // gRPC and says so).
  static absl::StatusOr<std::unique_ptr<FabricEndpoint>> Open(
      const FabricOptions& options);
  ~FabricEndpoint();
  FabricEndpoint(const FabricEndpoint&) = delete;
  // Closes the endpoint: every posted operation ends, none completes
  // after; memory regions may then be closed. Idempotent; nothing may be
  // posted after.
  void Close();
  FabricEndpoint& operator=(const FabricEndpoint&) = delete;

  // This endpoint's address, as peers insert it.
  const std::string& address() const { return address_; }
  // The provider serving it ("tcp;ofi_rxm", "shm").
  const std::string& provider() const { return provider_; }

  // A peer's address (as its address() gave it) made sendable-to.
  // INVALID_ARGUMENT for an address this provider cannot take (its length
  // checked before libfabric reads it).
  absl::StatusOr<fi_addr_t> InsertPeer(absl::string_view address);
  void RemovePeer(fi_addr_t peer);

  absl::StatusOr<MemoryRegion> Register(void* data, size_t bytes);
  // Registers the `count` pieces of one PostSendv, filling `descs` (one
  // each); the regions are added to `keep`, which must outlive the send.
  absl::Status RegisterIov(const struct iovec* iov, size_t count, void** descs,
                           std::vector<MemoryRegion>* keep);

  // Post one tagged send / receive; `op` comes back from Poll. A receive
  // from `source` (FI_ADDR_UNSPEC: anyone) matches tags equal to `tag` on
  // every bit not set in `ignore`. RESOURCE_EXHAUSTED: the provider's
  // queue is full now (poll, then post again).
  absl::Status PostSend(fi_addr_t peer, uint64_t tag, const void* data,
                        size_t bytes, void* desc, Op* op);
  absl::Status PostRecv(fi_addr_t source, uint64_t tag, uint64_t ignore,
                        void* data, size_t bytes, void* desc, Op* op);
  // One tagged send gathered from up to iov_limit() pieces of memory, in
  // order (`descs[i]` for `iov[i]`, as Register gave them).
  absl::Status PostSendv(fi_addr_t peer, uint64_t tag, const struct iovec* iov,
                         void** descs, size_t count, Op* op);
  // Pieces one PostSendv takes (the provider's, at most 4).
  size_t iov_limit() const { return iov_limit_; }
  // Asks for a posted receive to complete as cancelled.
  void Cancel(Op* op);

  // Up to `max` completions, waiting up to `timeout` for the first (and
  // driving the provider's progress meanwhile). `idle`: the caller awaits
  // no receive but its standing ones (a new message), so that an endpoint
  // with a doorbell and no send in flight may sleep on it instead of
  // polling the provider.
  size_t Poll(Completion* out, size_t max, absl::Duration timeout,
              bool idle = false);

 private:
  FabricEndpoint() = default;
  absl::Status Fail(absl::string_view call, int rc) const;
  // Counts a send about to be posted (undone by SendNotPosted) and wakes
  // this endpoint's own sleeping Poll, which must drive it.
  void SendPosting();
  void SendNotPosted();
  // A send's completion (or error) came back.
  void SendEnded();
  // After a send to `peer` is posted (which began at `posting_at`, on the
  // monotonic clock): rings its doorbell, if it has one, unless an
  // earlier send made that needless.
  void RingPeer(fi_addr_t peer, int64_t posting_at);
  // Sleeps on the doorbell until rung or `timeout`, unless a send is in
  // flight. Poll calls it only when its last completion is sleep_after
  // older than its last (empty) read of the queue, so
  // that a sender that skipped ringing (RingPeer) posted before that read.
  void Sleep(absl::Duration timeout);

  std::string provider_;
  std::string address_;
  size_t address_bytes_ = 0;  // for fixed-size address formats; 0: string
  bool needs_registration_ = false;
  bool can_wait_ = false;
  size_t iov_limit_ = 1;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  // Polled providers only (shm): doorbells, this endpoint's and its peers'.
  std::unique_ptr<Doorbell> doorbell_;
  std::unique_ptr<DoorbellRinger> ringer_;
  absl::Mutex bells_mu_;
  struct PeerBell {
    DoorbellAddress address;
    int64_t last_posting_at = INT64_MIN / 2;  // the last send's
  };
  absl::flat_hash_map<fi_addr_t, PeerBell> bells_ ABSL_GUARDED_BY(bells_mu_);
  std::atomic<int64_t> last_completion_ns_{0};
  int64_t sleep_after_ns_ = 0;
  std::atomic<int64_t> sends_in_flight_{0};
  std::atomic<bool> sleeping_{false};
  // shm: the shared lock on this endpoint's region (shm_regions.h).
  int region_hold_ = -1;
};

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_FABRIC_ENDPOINT_H_
