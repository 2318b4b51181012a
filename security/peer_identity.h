// Which PS made a PS-to-PS call, proven rather than claimed.
//
// The cluster's PS share a secret that only ps_server processes hold
// (--peer_secret_file; never given to workers or clients, unlike the auth
// token). PS `task`'s credential is HMAC-SHA256(secret, "psrt-ps/<task>"),
// and every call it makes to another PS carries, in the `x-psrt-peer`
// metadata, "<task>:<hex of HMAC-SHA256(credential, method path)>". The
// called PS recomputes it: a call proves it comes from PS `task` only if
// its maker knew that task's credential. A worker (it holds the token but
// not the secret) proves nothing; a PS naming another task in a request
// (RenewLease.from_task, a Replicate header, ...) is refused, because the
// service compares what a request names with what its call proved.
//
// The proof is fixed per (task, method): whoever can read a PS's traffic
// can replay it, as it can the token. Run TLS off a private network
// (docs/operations.md, "Security model").
#ifndef PSRT_SECURITY_PEER_IDENTITY_H_
#define PSRT_SECURITY_PEER_IDENTITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/client_context.h"
#include "grpcpp/server_context.h"

namespace psrt {

class PeerIdentity {
 public:
  static constexpr char kMetadataKey[] = "x-psrt-peer";

  // `secret` empty: calls carry no proof and Verify is never asked (the
  // cluster trusts its network, or has one PS).
  explicit PeerIdentity(std::string secret = "");

  bool enabled() const { return !secret_.empty(); }

  // The metadata value proving a call of `method` ("/psrt.ParameterServer/
  // RenewLease") comes from PS `task`.
  std::string Proof(int task, absl::string_view method) const;
  // Adds the proof of PS `task` calling `method` to `context` (nothing
  // when disabled).
  void Sign(grpc::ClientContext* context, int task,
            absl::string_view method) const;
  // The PS task whose proof the call carries, for a cluster of `num_ps`.
  // PERMISSION_DENIED saying what is wrong (no proof: a worker's or
  // client's call; a task out of range; a proof that does not check) and
  // naming `method`.
  absl::StatusOr<int> Verify(const grpc::ServerContextBase* context,
                             absl::string_view method, int num_ps) const;

 private:
  const std::string secret_;
};

}  // namespace psrt

#endif  // PSRT_SECURITY_PEER_IDENTITY_H_
