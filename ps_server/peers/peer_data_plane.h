// A PS's data-plane connections to the other PS of its cluster, for the
// PS-to-PS calls that carry tensors (the R=2 forward, Replicate): the
// bytes go over libfabric as a worker's pushes do (dataplane/), the rest
// of the call's life is PsPeers' (deadline, retries by the caller).
//
// One connection per peer, opened on the first call and again after one
// broke: OpenDataPlane over the peer's gRPC channel, marked from_peer and
// signed as every PS-to-PS call (security/peer_identity.h), so that the
// peer accepts PS-to-PS calls on it and on no worker's connection. A peer
// that serves no data plane this PS can open (--data_plane=grpc, TLS, a
// provider missing here or there, a firewall, a PS older than this) is
// told once in the log and called over gRPC; the data plane is tried
// again after kRetryAfter (a restarted peer may serve one).
//
// Only providers across hosts are used (tcp): replicas live on other
// hosts in every layout psrt deploys (one PS per host); on one host
// their forwards ride loopback TCP.
#ifndef PSRT_PS_SERVER_PEERS_PEER_DATA_PLANE_H_
#define PSRT_PS_SERVER_PEERS_PEER_DATA_PLANE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "dataplane/data_plane_client.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/data_plane_call.h"
#include "proto/ps.pb.h"

namespace psrt {

class PeerDataPlane {
 public:
  struct Options {
    // Providers this PS may open toward its peers, in preference ("shm"
    // is skipped: see above).
    std::vector<std::string> providers = {"tcp"};
    std::string token;  // the cluster's (--auth_token); empty: none
    // Calls whose body is larger go over gRPC (a peer's data plane
    // refuses bodies beyond its limit).
    uint64_t max_body_bytes = uint64_t{1} << 30;
  };
  // OpenDataPlane to PS `task` (from_peer, signed) until `deadline`.
  using Opener = std::function<absl::StatusOr<OpenDataPlaneResponse>(
      int task, const OpenDataPlaneRequest& request, absl::Time deadline)>;
  // The check a connection opened to PS `task` now makes while its calls
  // wait (dataplane::DataPlaneClient::PeerCheck): OK while that PS's
  // process is there and still the one the cluster serves from. Made per
  // connection, so that it can tell what changed since the connection
  // opened.
  using PeerWatch =
      std::function<dataplane::DataPlaneClient::PeerCheck(int task)>;

  // `hosts[t]`: PS t's host (its cluster-spec address without the port).
  PeerDataPlane(std::vector<std::string> hosts, Options options, Opener opener,
                PeerWatch peer_watch);
  ~PeerDataPlane();
  PeerDataPlane(const PeerDataPlane&) = delete;
  PeerDataPlane& operator=(const PeerDataPlane&) = delete;

  // One call of `method` carrying `messages` (sent from their memory) to
  // PS `task`; the reply's bytes, or the error the peer answered or the
  // fabric gave (the connection is then opened anew by the next call). A
  // peer refusing the connection as no PS's (PERMISSION_DENIED: it
  // forgot it) is UNAVAILABLE here, and the next call opens another.
  // std::nullopt: the peer is not reachable over the data plane from here
  // (see above), or the body is over max_body_bytes; the caller makes the
  // call over gRPC.
  std::optional<absl::StatusOr<std::string>> Call(
      int task, DataPlaneMethod method,
      const std::vector<grpc::ByteBuffer>& messages, absl::Time deadline);

  // Waits for the calls in flight, closes every connection, and sends
  // every later call to gRPC (std::nullopt).
  void Stop();

  // How long a peer found without a usable data plane is called over
  // gRPC before the data plane is tried again.
  static constexpr absl::Duration kRetryAfter = absl::Seconds(30);

 private:
  struct Peer {
    absl::Mutex mu;  // one call to a peer at a time
    std::unique_ptr<dataplane::DataPlaneClient> client ABSL_GUARDED_BY(mu);
    absl::Time grpc_until ABSL_GUARDED_BY(mu) = absl::InfinitePast();
    bool told ABSL_GUARDED_BY(mu) = false;  // the log said which path
    bool stopped ABSL_GUARDED_BY(mu) = false;
  };
  // A new connection to `task` in peer->client, or why not; a peer found
  // without a usable data plane is sent to gRPC (UseGrpc) first.
  absl::Status Open(int task, Peer* peer, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(peer->mu);
  void UseGrpc(int task, Peer* peer, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(peer->mu);

  const std::vector<std::string> hosts_;
  const Options options_;
  const Opener opener_;
  const PeerWatch peer_watch_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by task; fixed size
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_PEERS_PEER_DATA_PLANE_H_
