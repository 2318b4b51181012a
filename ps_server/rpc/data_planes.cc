#include "ps_server/rpc/data_planes.h"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "dataplane/fabric_endpoint.h"
#include "dataplane/host_key.h"
#include "glog/logging.h"

namespace psrt {
namespace {

bool Lists(const google::protobuf::RepeatedPtrField<std::string>& providers,
           const std::string& provider) {
  return std::find(providers.begin(), providers.end(), provider) !=
         providers.end();
}

// Which server a connection id belongs to (each issues its own ids).
enum ServerIndex : uint64_t { kShm = 0, kTcp = 1 };

uint64_t ConnectionKey(ServerIndex server, uint32_t connection_id) {
  return (static_cast<uint64_t>(server) << 32) | connection_id;
}

}  // namespace

class DataPlanes::PeerConnections {
 public:
  void Add(ServerIndex server, uint32_t connection_id, int task)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const uint64_t key = ConnectionKey(server, connection_id);
    if (!tasks_.emplace(key, task).second) return;
    order_.push_back(key);
    if (order_.size() > kMaxRemembered) {
      tasks_.erase(order_.front());
      order_.pop_front();
    }
  }
  DataPlaneCaller Find(ServerIndex server, uint32_t connection_id) const
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = tasks_.find(ConnectionKey(server, connection_id));
    if (it == tasks_.end()) return std::nullopt;
    return it->second;
  }

 private:
  // Far above what a cluster's PS open (one per peer, again after a
  // break).
  static constexpr size_t kMaxRemembered = 4096;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, int> tasks_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> order_ ABSL_GUARDED_BY(mu_);
};

DataPlanes::DataPlanes()
    : peer_connections_(std::make_shared<PeerConnections>()) {}

std::unique_ptr<DataPlanes> DataPlanes::Start(const DataPlanesOptions& options,
                                              CallHandler handler) {
  std::unique_ptr<DataPlanes> planes(new DataPlanes());
  planes->host_key_ = dataplane::SharedMemoryHostKey();
  planes->tcp_node_ = options.tcp_node;
  for (const std::string& provider : options.providers) {
    dataplane::DataPlaneServerOptions server_options;
    server_options.fabric.provider = provider;
    server_options.fabric.node = options.tcp_node;
    if (provider != "shm") server_options.fabric.port = options.tcp_port;
    server_options.token = options.token;
    server_options.limits.max_body_bytes = options.max_body_bytes;
    const ServerIndex index =
        provider == "shm" ? ServerIndex::kShm : ServerIndex::kTcp;
    std::shared_ptr<PeerConnections> peers = planes->peer_connections_;
    absl::StatusOr<std::unique_ptr<dataplane::DataPlaneServer>> server =
        dataplane::DataPlaneServer::Start(
            server_options,
            [handler, peers, index](dataplane::Request request,
                                    dataplane::Respond respond) {
              const DataPlaneCaller caller =
                  peers->Find(index, request.connection_id);
              handler(std::move(request), caller, std::move(respond));
            });
    if (!server.ok()) {
      LOG(WARNING) << "data plane: provider " << provider
                   << (provider == "shm"
                           ? std::string()
                           : absl::StrCat(" (at ", options.tcp_node, ":",
                                          options.tcp_port, ")"))
                   << " not served, its clients push and pull over gRPC: "
                   << server.status();
      continue;
    }
    if (provider == "shm") {
      planes->shm_ = *std::move(server);
    } else if (planes->tcp_ == nullptr) {  // the first other: across hosts
      planes->tcp_ = *std::move(server);
      planes->tcp_provider_ = provider;
    }
  }
  if (planes->shm_ == nullptr && planes->tcp_ == nullptr) {
    LOG(WARNING) << "data plane: no provider opens here; pushes and pulls "
                    "travel over gRPC";
    return nullptr;
  }
  LOG(INFO) << "data plane: pushes and pulls over libfabric ("
            << planes->Describe() << "); gRPC for the rest";
  return planes;
}

absl::StatusOr<OpenDataPlaneResponse> DataPlanes::Open(
    const OpenDataPlaneRequest& request, DataPlaneCaller caller) {
  dataplane::DataPlaneServer* server = nullptr;
  std::string provider;
  ServerIndex index = ServerIndex::kTcp;
  if (shm_ != nullptr && !host_key_.empty() &&
      request.host_key() == host_key_ && request.process_id() != 0 &&
      request.process_id() != static_cast<uint32_t>(getpid()) &&
      Lists(request.providers(), "shm") && TakeShmOffer()) {
    server = shm_.get();
    provider = "shm";
    index = ServerIndex::kShm;
  } else if (tcp_ != nullptr && Lists(request.providers(), tcp_provider_)) {
    server = tcp_.get();
    provider = tcp_provider_;
  }
  if (server == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("this PS's data plane serves ", Describe(),
                     (shm_ != nullptr ? " (shm to its own host only)" : ""),
                     "; the client offered [",
                     absl::StrJoin(request.providers(), ", "), "]: use gRPC"));
  }
  dataplane::Challenge challenge = server->IssueChallenge();
  if (caller.has_value()) {
    peer_connections_->Add(index, challenge.connection_id, *caller);
  }
  OpenDataPlaneResponse response;
  response.set_provider(provider);
  response.set_address(server->address());
  response.set_connection_id(challenge.connection_id);
  response.set_nonce(challenge.nonce);
  return response;
}

bool DataPlanes::TakeShmOffer() {
  const int offered = shm_offers_.fetch_add(1);
  if (offered == kShmOffers) {
    LOG(WARNING) << "data plane: " << kShmOffers
                 << " shared-memory connections offered, as many as "
                    "libfabric's shm endpoint takes in its life; clients "
                    "on this host get tcp from now on";
  }
  return offered < kShmOffers;
}

std::string DataPlanes::Describe() const {
  std::vector<std::string> served;
  if (shm_ != nullptr) served.push_back("shm");
  if (tcp_ != nullptr) {
    const int port = dataplane::AddressPort(tcp_->address());
    served.push_back(absl::StrCat(tcp_provider_, " at ", tcp_node_,
                                  port > 0 ? absl::StrCat(":", port) : ""));
  }
  return served.empty() ? "nothing" : absl::StrJoin(served, ", ");
}

std::vector<std::pair<std::string, dataplane::DataPlaneServerStats>>
DataPlanes::Stats() const {
  std::vector<std::pair<std::string, dataplane::DataPlaneServerStats>> stats;
  if (shm_ != nullptr) stats.emplace_back("shm", shm_->stats());
  if (tcp_ != nullptr) stats.emplace_back(tcp_provider_, tcp_->stats());
  return stats;
}

}  // namespace psrt
