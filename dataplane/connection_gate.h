// Who may open a data-plane connection: a challenge handed out over gRPC
// (whose calls already carry the cluster's token and, with TLS, its
// encryption), redeemed once by the hello that opens the connection.
//
// The server issues a connection id and a 32-byte random nonce; the client
// answers in its hello with its fabric address and
// HMAC-SHA256(token, "psrt-dataplane/1|" + id + "|" + nonce + "|" + address).
// The server recomputes it: a hello proves its maker knew the token, and
// binds the connection to the fabric address it came from. A challenge is
// good for one hello within `ttl`; at most `max_pending` are outstanding
// (the oldest is dropped first), so handing out challenges cannot grow the
// server's memory. With no token configured the proof is empty and only
// the challenge's single use is checked, as gRPC then checks nothing.
#ifndef PSRT_DATAPLANE_CONNECTION_GATE_H_
#define PSRT_DATAPLANE_CONNECTION_GATE_H_

#include <cstdint>
#include <deque>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace psrt::dataplane {

inline constexpr size_t kNonceBytes = 32;

struct Challenge {
  uint32_t connection_id = 0;
  std::string nonce;  // kNonceBytes random bytes
};

// A fresh random connection key (frame.h), never 0.
uint64_t NewConnectionKey();

// The proof a hello carries (empty for an empty token).
std::string HelloProof(absl::string_view token, const Challenge& challenge,
                       absl::string_view client_address);

// A hello's body: the client's fabric address and its proof, each with a
// 2-byte little-endian length.
std::string EncodeHello(absl::string_view client_address,
                        absl::string_view proof);
struct Hello {
  std::string client_address;
  std::string proof;
};
// INVALID_ARGUMENT for lengths that overrun the body or leave bytes over.
absl::StatusOr<Hello> DecodeHello(absl::string_view body);

class ConnectionGate {
 public:
  explicit ConnectionGate(std::string token, size_t max_pending = 4096,
                          absl::Duration ttl = absl::Seconds(60));

  // A fresh challenge (ids are never reused by this gate).
  Challenge Issue() ABSL_LOCKS_EXCLUDED(mu_);

  // OK when `hello` redeems the outstanding challenge `connection_id`
  // (which is then gone). PERMISSION_DENIED naming why: no such challenge
  // (never issued, used already, expired, or dropped for newer ones), or a
  // proof that does not check. `*was_outstanding` (if given) says whether
  // the challenge existed, i.e. whether this server handed it out.
  absl::Status Redeem(uint32_t connection_id, const Hello& hello,
                      bool* was_outstanding = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  size_t pending() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Pending {
    std::string nonce;
    absl::Time expires;
  };
  void DropExpiredLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string token_;
  const size_t max_pending_;
  const absl::Duration ttl_;
  mutable absl::Mutex mu_;
  uint32_t next_id_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<uint32_t> issue_order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt::dataplane

#endif  // PSRT_DATAPLANE_CONNECTION_GATE_H_
