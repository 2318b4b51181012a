// A client's data plane to one PS (dataplane/): pushes and pulls over
// libfabric beside the PS's gRPC channels, which still carry everything
// else and open each connection (OpenDataPlane: a challenge answered
// with the cluster's token).
//
// Calls run on lanes: a lane is a thread with one connection, opened when
// it first has a call and again after one broke (a deadline, a PS gone).
// A call takes an idle lane, or a new one (up to kMaxLanes): a SYNC pull
// waiting at the PS for other workers' pushes must not hold up this
// worker's own push behind it.
// A PS that serves no data plane this client can use (--data_plane=grpc,
// TLS, no provider in common, a PS older than the data plane) is told
// once, in the log, and its calls go over gRPC from then on.
#ifndef PSRT_CLIENTS_CPP_DATA_PLANE_LINK_H_
#define PSRT_CLIENTS_CPP_DATA_PLANE_LINK_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "clients/cpp/client_options.h"
#include "dataplane/data_plane_client.h"

namespace psrt {

class PsConnection;

class DataPlaneLink {
 public:
  // What a call runs with: its lane's connection and reusable memory.
  struct Lane {
    dataplane::DataPlaneClient* client;
    std::vector<uint8_t>* scratch;
  };
  using Job = std::function<void(absl::StatusOr<Lane> lane)>;

  // `connection` must outlive the link.
  DataPlaneLink(PsConnection* connection, const ClientOptions& options);
  ~DataPlaneLink();
  DataPlaneLink(const DataPlaneLink&) = delete;
  DataPlaneLink& operator=(const DataPlaneLink&) = delete;

  // Whether calls to this PS should take the data plane. The first time,
  // opens a connection to find out (blocking up to the call timeout);
  // while the PS cannot be reached it stays undecided (true: the call
  // fails as over gRPC, and is retried).
  bool Usable() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `job` on an idle lane's thread, with its connection (opened
  // first if it has none) or why none could be opened.
  void Run(Job job) ABSL_LOCKS_EXCLUDED(mu_);

  // Lanes (threads, connections) per PS at most; beyond, calls queue.
  static constexpr size_t kMaxLanes = 16;

 private:
  struct LaneState;
  enum class Decision { kUndecided, kUse, kGrpc };

  // A new connection: OpenDataPlane, then the fabric handshake.
  absl::StatusOr<std::unique_ptr<dataplane::DataPlaneClient>> Open()
      ABSL_LOCKS_EXCLUDED(mu_);
  // Settles the decision from an Open's outcome; false: use gRPC.
  bool Decide(const absl::Status& opened) ABSL_LOCKS_EXCLUDED(mu_);
  void LaneLoop(LaneState* lane);

  PsConnection* const connection_;
  const ClientOptions options_;
  const std::string host_key_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<LaneState>> lanes_ ABSL_GUARDED_BY(mu_);
  size_t next_lane_ ABSL_GUARDED_BY(mu_) = 0;  // when all are busy
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Decision decision_ ABSL_GUARDED_BY(mu_) = Decision::kUndecided;
  std::string provider_ ABSL_GUARDED_BY(mu_);
  // Opened by the deciding probe, for the first lane to take.
  std::unique_ptr<dataplane::DataPlaneClient> probed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_DATA_PLANE_LINK_H_
