#include "ps_server/rpc/data_planes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dataplane/host_key.h"
#include "glog/logging.h"

namespace psrt {
namespace {

bool Lists(const google::protobuf::RepeatedPtrField<std::string>& providers,
           const std::string& provider) {
  return std::find(providers.begin(), providers.end(), provider) !=
         providers.end();
}

}  // namespace

std::unique_ptr<DataPlanes> DataPlanes::Start(
    const DataPlanesOptions& options, dataplane::AsyncCallHandler handler) {
  std::unique_ptr<DataPlanes> planes(new DataPlanes());
  planes->host_key_ = dataplane::SharedMemoryHostKey();
  planes->tcp_node_ = options.tcp_node;
  for (const std::string& provider : options.providers) {
    dataplane::DataPlaneServerOptions server_options;
    server_options.fabric.provider = provider;
    server_options.fabric.node = options.tcp_node;
    server_options.token = options.token;
    server_options.limits.max_body_bytes = options.max_body_bytes;
    absl::StatusOr<std::unique_ptr<dataplane::DataPlaneServer>> server =
        dataplane::DataPlaneServer::Start(server_options, handler);
    if (!server.ok()) {
      LOG(WARNING) << "data plane: provider " << provider
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
    const OpenDataPlaneRequest& request) {
  dataplane::DataPlaneServer* server = nullptr;
  std::string provider;
  if (shm_ != nullptr && !host_key_.empty() &&
      request.host_key() == host_key_ && Lists(request.providers(), "shm")) {
    server = shm_.get();
    provider = "shm";
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
  OpenDataPlaneResponse response;
  response.set_provider(provider);
  response.set_address(server->address());
  response.set_connection_id(challenge.connection_id);
  response.set_nonce(challenge.nonce);
  return response;
}

std::string DataPlanes::Describe() const {
  std::vector<std::string> served;
  if (shm_ != nullptr) served.push_back("shm");
  if (tcp_ != nullptr) {
    served.push_back(absl::StrCat(tcp_provider_, " at ", tcp_node_));
  }
  return served.empty() ? "nothing" : absl::StrJoin(served, ", ");
}

}  // namespace psrt
