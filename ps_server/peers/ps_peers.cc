#include "ps_server/peers/ps_peers.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/impl/codegen/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "proto/byte_buffer_bytes.h"
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
  std::unique_ptr<PsPeers> peers(new PsPeers(std::move(addresses), self));
  for (int t = 0; t < peers->size(); ++t) {
    if (t == self) {
      peers->stubs_.push_back(nullptr);
      peers->channels_.push_back(nullptr);
      continue;
    }
    // As clients do (clients/cpp/ps_connection.cc): a peer that restarts
    // is found again within 2 s, and a connection attempt gets 5 s.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
    // A connection cut by a partition is found dead within about 4 s (a
    // ping unanswered 2 s after 2 s of silence) and made again when the
    // network returns, instead of calls hanging on it for TCP's minutes:
    // a rejoin or a replication stream to a PS that comes back from a
    // partition must reach it. Servers accept pings this often
    // (GRPC_ARG_HTTP2_MAX_PING_STRIKES 0, server.cc).
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    auto channel = MakeChannel(peers->addresses_[t], security, args);
    if (!channel.ok()) return channel.status();
    peers->stubs_.push_back(ParameterServer::NewStub(*channel));
    peers->channels_.push_back(*channel);
  }
  return peers;
}

std::string PsPeers::Describe(int task) const {
  return absl::StrCat("PS ", task, " (", addresses_[task], ")");
}

absl::StatusOr<SaveShardsResponse> PsPeers::SaveShards(
    int task, const SaveShardsRequest& request, absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  SaveShardsResponse response;
  const grpc::Status s = stubs_[task]->SaveShards(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::Status PsPeers::CommitCheckpoint(int task,
                                       const CommitCheckpointRequest& request,
                                       absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  CommitCheckpointResponse response;
  const grpc::Status s =
      stubs_[task]->CommitCheckpoint(&context, request, &response);
  return FromGrpcStatus(s);
}

absl::Status PsPeers::Ping(int task, absl::Duration timeout) const {
  return Stats(task, timeout).status();
}

absl::StatusOr<StatsResponse> PsPeers::Stats(int task,
                                             absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  StatsRequest request;
  StatsResponse response;
  const grpc::Status s = stubs_[task]->GetStats(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<SuspectResponse> PsPeers::Suspect(int task, int suspect,
                                                 absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  SuspectRequest request;
  request.set_task(suspect);
  SuspectResponse response;
  const grpc::Status s = stubs_[task]->Suspect(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<LeaseResponse> PsPeers::RenewLease(
    int task, int64_t own_term, absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  LeaseRequest request;
  request.set_from_task(self_);
  request.set_from_term(own_term);
  LeaseResponse response;
  const grpc::Status s = stubs_[task]->RenewLease(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<std::string> PsPeers::ClientStream(
    int task, const char* method_path,
    const std::vector<grpc::ByteBuffer>& messages, absl::Duration timeout,
    bool wait_for_ready) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  context.set_wait_for_ready(wait_for_ready);
  const grpc::internal::RpcMethod method(
      method_path, grpc::internal::RpcMethod::CLIENT_STREAMING,
      channels_[task]);
  grpc::ByteBuffer response;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
          channels_[task].get(), method, &context, &response));
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

absl::StatusOr<ReplicateResponse> PsPeers::Replicate(
    int task, const std::vector<grpc::ByteBuffer>& messages,
    absl::Duration timeout) const {
  auto bytes =
      ClientStream(task, "/psrt.ParameterServer/Replicate", messages, timeout);
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
  RejoinRequest request;
  request.set_from_task(self_);
  RejoinResponse response;
  const grpc::Status s = stubs_[task]->Rejoin(context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<HandbackResponse> PsPeers::Handback(
    int task, const HandbackRequest& request, absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  HandbackResponse response;
  const grpc::Status s = stubs_[task]->Handback(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

absl::StatusOr<ListVariablesResponse> PsPeers::ListVariables(
    int task, absl::Duration timeout) const {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  ListVariablesRequest request;
  ListVariablesResponse response;
  const grpc::Status s =
      stubs_[task]->ListVariables(&context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response;
}

}  // namespace psrt
