#include "ps_server/peers/ps_peers.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "partitioner/cluster_spec.h"
#include "proto/byte_buffer_bytes.h"
#include "proto/data_plane_call.h"
#include "ps_server/peers/grpc_peer_transport.h"
#include "util/grpc_status.h"

namespace psrt {
namespace {

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context->set_wait_for_ready(false);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsPeers>> PsPeers::Create(
    std::vector<std::string> addresses, int self,
    const SecurityOptions& security) {
  auto transport = GrpcPeerTransport::Create(addresses, self, security);
  if (!transport.ok()) return transport.status();
  return Create(std::move(addresses), self, *std::move(transport),
                security.peer_secret);
}

std::unique_ptr<PsPeers> PsPeers::Create(
    std::vector<std::string> addresses, int self,
    std::unique_ptr<PeerTransport> transport, std::string peer_secret) {
  return std::unique_ptr<PsPeers>(new PsPeers(std::move(addresses), self,
                                              std::move(transport),
                                              std::move(peer_secret)));
}

std::unique_ptr<ParameterServer::Stub> PsPeers::StubTo(int task) const {
  return ParameterServer::NewStub(transport_->ChannelTo(task));
}

std::string PsPeers::Describe(int task) const {
  return absl::StrCat("PS ", task, " (", addresses_[task], ")");
}

absl::StatusOr<SaveShardsResponse> PsPeers::SaveShards(
    int task, const SaveShardsRequest& request, absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  identity_.Sign(&context, self_, "/psrt.ParameterServer/SaveShards");
  SaveShardsResponse response;
  const grpc::Status s = StubTo(task)->SaveShards(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::Status PsPeers::CommitCheckpoint(int task,
                                       const CommitCheckpointRequest& request,
                                       absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  identity_.Sign(&context, self_, "/psrt.ParameterServer/CommitCheckpoint");
  CommitCheckpointResponse response;
  const grpc::Status s =
      StubTo(task)->CommitCheckpoint(&context, request, &response);
  return FromGrpcStatus(s);
}

absl::Status PsPeers::Ping(int task, absl::Duration timeout) const {
  return Stats(task, timeout).status();
}

absl::StatusOr<StatsResponse> PsPeers::Stats(int task,
                                             absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  identity_.Sign(&context, self_, "/psrt.ParameterServer/GetStats");
  StatsRequest request;
  StatsResponse response;
  const grpc::Status s = StubTo(task)->GetStats(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<SuspectResponse> PsPeers::Suspect(int task, int suspect,
                                                 absl::Duration timeout) const {
  SuspectRequest request;
  request.set_task(suspect);
  return Suspect(task, std::move(request), timeout);
}

absl::StatusOr<SuspectResponse> PsPeers::Suspect(int task,
                                                 SuspectRequest request,
                                                 absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  identity_.Sign(&context, self_, "/psrt.ParameterServer/Suspect");
  request.set_from_task(self_);
  SuspectResponse response;
  const grpc::Status s = StubTo(task)->Suspect(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<LeaseResponse> PsPeers::RenewLease(
    int task, int64_t own_term, absl::Duration timeout,
    const StreamView& view) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  identity_.Sign(&context, self_, "/psrt.ParameterServer/RenewLease");
  LeaseRequest request;
  request.set_from_task(self_);
  request.set_from_term(own_term);
  *request.mutable_view() = view;
  LeaseResponse response;
  const grpc::Status s = StubTo(task)->RenewLease(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<std::string> PsPeers::ClientStream(
    int task, const char* method_path,
    const std::vector<grpc::ByteBuffer>& messages, absl::Duration timeout,
    bool wait_for_ready) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  identity_.Sign(&context, self_, method_path);
  context.set_wait_for_ready(wait_for_ready);
  const std::shared_ptr<grpc::Channel> channel = transport_->ChannelTo(task);
  const grpc::internal::RpcMethod method(
      method_path, grpc::internal::RpcMethod::CLIENT_STREAMING, channel);
  grpc::ByteBuffer response;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
          channel.get(), method, &context, &response));
  for (const grpc::ByteBuffer& message : messages) {
    if (!writer->Write(message)) break;  // Finish says why
  }
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  if (!s.ok()) return FromGrpcStatus(s);
  std::string bytes;
  if (!ByteBufferBytes(response, &bytes)) {
    return absl::InternalError(
        absl::StrCat("unreadable answer to ", method_path));
  }
  return bytes;
}

void PsPeers::UseDataPlane(PeerDataPlane::Options options) {
  std::vector<std::string> hosts;
  for (const std::string& address : addresses_) {
    std::string host;
    int port;
    hosts.push_back(SplitHostPort(address, &host, &port).ok() ? host : "");
  }
  auto open =
      [this](int task, const OpenDataPlaneRequest& request,
             absl::Time deadline) -> absl::StatusOr<OpenDataPlaneResponse> {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    identity_.Sign(&context, self_, "/psrt.ParameterServer/OpenDataPlane");
    OpenDataPlaneResponse response;
    const grpc::Status s =
        StubTo(task)->OpenDataPlane(&context, request, &response);
    if (!s.ok()) return FromGrpcStatus(s);
    return response;
  };
  auto watch = [this](int task) -> dataplane::DataPlaneClient::PeerCheck {
    const int64_t term_seen = FailoverTerm(task);
    return [this, task, term_seen] { return CheckServing(task, term_seen); };
  };
  data_plane_ = std::make_unique<PeerDataPlane>(
      std::move(hosts), std::move(options), std::move(open), std::move(watch));
}

int64_t PsPeers::FailoverTerm(int task) const {
  std::function<int64_t(int)> term_of;
  {
    absl::MutexLock lock(&probe_mu_);
    term_of = failover_terms_;
  }
  return term_of ? term_of(task) : 0;
}

void PsPeers::set_failover_terms(std::function<int64_t(int task)> term_of) {
  absl::MutexLock lock(&probe_mu_);
  failover_terms_ = std::move(term_of);
}

absl::Status PsPeers::CheckServing(int task, int64_t term_seen) const {
  auto failed_over = [&]() -> absl::Status {
    const int64_t term = FailoverTerm(task);
    if (term == term_seen || term % 2 == 0) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat(
        Describe(task), " ", kFailedOverMarker,
        " waited: most of the cluster cannot reach it (paused, hung or cut "
        "off) and its backup serves its shards"));
  };
  // Before the ping (no second spent on a peer known to be replaced) and
  // after it (what this PS learned while the ping waited counts).
  if (absl::Status s = failed_over(); !s.ok()) return s;
  absl::Status alive = CheckAlive(task);
  if (absl::Status s = failed_over(); !s.ok()) return s;
  return alive;
}

absl::Status PsPeers::CheckAlive(int task) const {
  const grpc_connectivity_state state =
      transport_->ChannelTo(task)->GetState(/*try_to_connect=*/false);
  if (state == GRPC_CHANNEL_TRANSIENT_FAILURE ||
      state == GRPC_CHANNEL_SHUTDOWN) {
    return absl::UnavailableError(absl::StrCat(
        Describe(task), " dropped its gRPC connection (PS gone?)"));
  }
  {
    absl::MutexLock lock(&probe_mu_);
    const absl::Time now = absl::Now();
    if (now - last_probe_[task] < absl::Seconds(1)) {
      return absl::OkStatus();
    }
    last_probe_[task] = now;
  }
  const absl::Status ping = Ping(task, absl::Seconds(1));
  if (absl::IsUnavailable(ping)) {
    return absl::UnavailableError(
        absl::StrCat(Describe(task),
                     " does not answer a ping (PS gone?): ", ping.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ReplicateResponse> PsPeers::Replicate(
    int task, const std::vector<grpc::ByteBuffer>& messages,
    absl::Duration timeout) const {
  std::optional<absl::StatusOr<std::string>> over_data_plane;
  if (data_plane_ != nullptr) {
    over_data_plane = data_plane_->Call(task, DataPlaneMethod::kReplicate,
                                        messages, absl::Now() + timeout);
  }
  absl::StatusOr<std::string> bytes =
      over_data_plane.has_value()
          ? *std::move(over_data_plane)
          : ClientStream(task, "/psrt.ParameterServer/Replicate", messages,
                         timeout);
  if (!bytes.ok()) return bytes.status();
  ReplicateResponse parsed;
  if (!parsed.ParseFromString(*bytes)) {
    return absl::InternalError("unreadable ReplicateResponse");
  }
  return parsed;
}

absl::StatusOr<InstallSnapshotResponse> PsPeers::InstallSnapshot(
    int task, const std::vector<grpc::ByteBuffer>& messages,
    absl::Duration timeout) const {
  // The rejoiner just (re)started: this PS's channel to it may still be
  // backing off from when it was down; wait for it to connect.
  auto bytes = ClientStream(task, "/psrt.ParameterServer/InstallSnapshot",
                            messages, timeout, /*wait_for_ready=*/true);
  if (!bytes.ok()) return bytes.status();
  InstallSnapshotResponse parsed;
  if (!parsed.ParseFromString(*bytes)) {
    return absl::InternalError("unreadable InstallSnapshotResponse");
  }
  return parsed;
}

absl::StatusOr<RejoinResponse> PsPeers::Rejoin(
    int task, absl::Duration timeout, grpc::ClientContext* context) const {
  grpc::ClientContext own;
  if (context == nullptr) context = &own;
  SetDeadline(context, timeout);
  identity_.Sign(context, self_, "/psrt.ParameterServer/Rejoin");
  RejoinRequest request;
  request.set_from_task(self_);
  RejoinResponse response;
  const grpc::Status s = StubTo(task)->Rejoin(context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<HandbackResponse> PsPeers::Handback(
    int task, const HandbackRequest& request, absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  identity_.Sign(&context, self_, "/psrt.ParameterServer/Handback");
  HandbackResponse response;
  const grpc::Status s = StubTo(task)->Handback(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<ListVariablesResponse> PsPeers::ListVariables(
    int task, absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  identity_.Sign(&context, self_, "/psrt.ParameterServer/ListVariables");
  ListVariablesRequest request;
  ListVariablesResponse response;
  const grpc::Status s =
      StubTo(task)->ListVariables(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

}  // namespace psrt
