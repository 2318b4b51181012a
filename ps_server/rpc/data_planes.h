// A PS's data plane (dataplane/): the libfabric servers its pushes and
// pulls may travel over beside gRPC, and the challenges (OpenDataPlane)
// that open a connection to them.
//
// Two servers, each started when its provider opens here: `shm` for
// clients on this host (dataplane/host_key.h) in other processes, and
// `tcp` for the others,
// listening on this PS's host in the cluster spec. A PS with neither
// serves gRPC only and says so once; clients then push and pull over
// gRPC (the fallback). Not started with TLS: the data plane carries no
// encryption, so a cluster that requires TLS keeps every byte on gRPC.
//
// A connection opened by another PS (OpenDataPlane from_peer, which the
// service lets only a proven PS ask) is remembered as that PS's: its
// calls reach the handler with the PS's task, so that PS-to-PS calls
// (the R=2 forward) are served on it and on no worker's connection.
#ifndef PSRT_PS_SERVER_RPC_DATA_PLANES_H_
#define PSRT_PS_SERVER_RPC_DATA_PLANES_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/data_plane_server.h"
#include "proto/ps.pb.h"

namespace psrt {

struct DataPlanesOptions {
  // Providers to serve: "shm" on this host, and one for other hosts
  // ("tcp"; another libfabric provider by name, such as "efa").
  std::vector<std::string> providers = {"tcp"};
  // Where clients on other hosts reach this PS (tcp): its host in the
  // cluster spec.
  std::string tcp_node = "127.0.0.1";
  int tcp_port = 0;   // 0: one the kernel picks
  std::string token;  // the cluster's (--auth_token); empty: none
  uint64_t max_body_bytes = uint64_t{1} << 30;
};

// Who opened a call's connection: std::nullopt for a worker (any
// client), else the PS's task (-1: a PS whose task the cluster does not
// prove, without --peer_secret).
using DataPlaneCaller = std::optional<int>;

class DataPlanes {
 public:
  // A call as DataPlaneServer's AsyncCallHandler has it, with its caller.
  using CallHandler =
      std::function<void(dataplane::Request request, DataPlaneCaller caller,
                         dataplane::Respond respond)>;

  // Starts what opens here (logged; a provider that does not open is
  // named with why). Null when none does.
  static std::unique_ptr<DataPlanes> Start(const DataPlanesOptions& options,
                                           CallHandler handler);

  // A challenge on the server the client should use: shm when it runs
  // on this host, in another process (whose id it says: older clients,
  // which do not ring the shm server's doorbell, say none), and can open
  // shm (and fewer than
  // kShmOffers shm challenges were handed out before), else tcp.
  // FAILED_PRECONDITION when no provider served here is one the client can
  // open. `caller`: who the gRPC call proved to be (the connection's calls
  // carry it).
  absl::StatusOr<OpenDataPlaneResponse> Open(
      const OpenDataPlaneRequest& request,
      DataPlaneCaller caller = std::nullopt);

  // "shm, tcp at 10.0.0.2": for logs and the status page.
  std::string Describe() const;

  // Each server's counters, by provider ("shm", "tcp"): what
  // ExportDataPlaneMetrics (data_plane_metrics.h) publishes. Thread-safe.
  std::vector<std::pair<std::string, dataplane::DataPlaneServerStats>> Stats()
      const;

  // libfabric 1.17's shm endpoint takes 256 peers in its life (each
  // hello's insert counts; nothing here removes one): past this many
  // offers, clients on this host get tcp.
  static constexpr int kShmOffers = 240;

 private:
  // The connections PS opened, by (server, connection id); the oldest
  // are forgotten beyond a bound (a challenge never redeemed stays here).
  class PeerConnections;

  DataPlanes();
  // Counts an shm challenge; false once kShmOffers were handed out.
  bool TakeShmOffer();
  std::shared_ptr<PeerConnections> peer_connections_;
  std::string host_key_;
  std::unique_ptr<dataplane::DataPlaneServer> shm_;
  std::atomic<int> shm_offers_{0};
  // Across hosts: the first provider listed other than shm (tcp).
  std::unique_ptr<dataplane::DataPlaneServer> tcp_;
  std::string tcp_provider_, tcp_node_;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_RPC_DATA_PLANES_H_
