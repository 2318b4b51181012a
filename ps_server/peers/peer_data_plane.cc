#include "ps_server/peers/peer_data_plane.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "dataplane/host_key.h"
#include "dataplane/local_address.h"
#include "glog/logging.h"

namespace psrt {

PeerDataPlane::PeerDataPlane(std::vector<std::string> hosts, Options options,
                             Opener opener, PeerWatch peer_watch)
    : hosts_(std::move(hosts)),
      options_(std::move(options)),
      opener_(std::move(opener)),
      peer_watch_(std::move(peer_watch)) {
  for (size_t t = 0; t < hosts_.size(); ++t) {
    peers_.push_back(std::make_unique<Peer>());
  }
}

PeerDataPlane::~PeerDataPlane() = default;

void PeerDataPlane::UseGrpc(int task, Peer* peer, const absl::Status& why) {
  peer->grpc_until = absl::Now() + kRetryAfter;
  peer->client.reset();
  if (!peer->told) {
    LOG(WARNING) << "forwards to PS " << task
                 << " over gRPC: " << why.message();
    peer->told = true;
  }
}

absl::Status PeerDataPlane::Open(int task, Peer* peer, absl::Time deadline) {
  OpenDataPlaneRequest request;
  for (const std::string& provider : options_.providers) {
    if (provider != "shm") request.add_providers(provider);
  }
  request.set_host_key(dataplane::SharedMemoryHostKey());
  request.set_from_peer(true);
  if (request.providers().empty()) {
    absl::Status none = absl::FailedPreconditionError(
        "no provider across hosts among --data_plane_providers");
    UseGrpc(task, peer, none);
    return none;
  }
  absl::StatusOr<OpenDataPlaneResponse> response =
      opener_(task, request, deadline);
  if (!response.ok()) {
    // The peer said it serves none this PS can use (or predates it).
    if (absl::IsFailedPrecondition(response.status()) ||
        absl::IsUnimplemented(response.status())) {
      UseGrpc(task, peer, response.status());
    }
    return response.status();
  }
  dataplane::FabricOptions fabric;
  fabric.provider = response->provider();
  fabric.node = dataplane::LocalAddressToward(hosts_[task]);
  dataplane::Challenge challenge;
  challenge.connection_id = response->connection_id();
  challenge.nonce = response->nonce();
  const dataplane::DataPlaneClient::PeerCheck check = peer_watch_(task);
  absl::StatusOr<std::unique_ptr<dataplane::DataPlaneClient>> client =
      dataplane::DataPlaneClient::Connect(fabric, response->address(),
                                          challenge, options_.token, deadline,
                                          dataplane::FrameLimits(), check);
  if (!client.ok()) {
    // The peer went away meanwhile: not the data plane's fault.
    if (absl::Status gone = check(); !gone.ok()) return gone;
    // It offered the data plane, but this host cannot open the provider
    // or reach the peer over it (a firewall): gRPC still can.
    absl::Status s = absl::FailedPreconditionError(
        absl::StrCat("the data plane (", fabric.provider, ") to PS ", task,
                     " does not open here: ", client.status().message()));
    UseGrpc(task, peer, s);
    return s;
  }
  peer->client = *std::move(client);
  if (!peer->told) {
    LOG(INFO) << "forwards to PS " << task << " over the data plane ("
              << fabric.provider << ")";
    peer->told = true;
  }
  return absl::OkStatus();
}

void PeerDataPlane::Stop() {
  for (auto& peer : peers_) {
    absl::MutexLock lock(&peer->mu);
    peer->stopped = true;
    peer->client.reset();
  }
}

std::optional<absl::StatusOr<std::string>> PeerDataPlane::Call(
    int task, DataPlaneMethod method,
    const std::vector<grpc::ByteBuffer>& messages, absl::Time deadline) {
  if (DataPlaneCallBytes(messages) > options_.max_body_bytes) {
    return std::nullopt;
  }
  Peer* peer = peers_[task].get();
  absl::MutexLock lock(&peer->mu);
  if (peer->stopped || absl::Now() < peer->grpc_until) return std::nullopt;
  // A connection to a peer process that may be gone is opened anew.
  if (peer->client != nullptr &&
      (peer->client->broken() || !peer->client->CheckPeer().ok())) {
    peer->client.reset();
  }
  if (peer->client == nullptr) {
    if (absl::Status s = Open(task, peer, deadline); !s.ok()) {
      if (absl::Now() < peer->grpc_until) return std::nullopt;
      return absl::StatusOr<std::string>(s);
    }
  }
  std::vector<uint8_t> framing;
  std::vector<grpc::Slice> slices;
  const std::vector<dataplane::Segment> segments =
      DataPlaneCallSegments(method, messages, &framing, &slices);
  absl::StatusOr<std::string> reply = peer->client->Call(segments, deadline);
  if (!reply.ok() && peer->client->broken()) peer->client.reset();
  if (absl::IsPermissionDenied(reply.status())) {
    // The peer no longer knows this connection as a PS's (it remembers a
    // bounded number): a new one is, so the caller's retry takes one.
    peer->client.reset();
    return absl::StatusOr<std::string>(absl::UnavailableError(
        absl::StrCat("PS ", task,
                     " refused a PS-to-PS call on this "
                     "connection (",
                     reply.status().message(), "); opening another")));
  }
  return reply;
}

}  // namespace psrt
