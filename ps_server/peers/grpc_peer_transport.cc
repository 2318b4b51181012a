#include "ps_server/peers/grpc_peer_transport.h"

namespace psrt {

absl::StatusOr<std::unique_ptr<GrpcPeerTransport>> GrpcPeerTransport::Create(
    const std::vector<std::string>& addresses, int self,
    const SecurityOptions& security) {
  std::unique_ptr<GrpcPeerTransport> transport(new GrpcPeerTransport());
  for (int t = 0; t < static_cast<int>(addresses.size()); ++t) {
    if (t == self) {
      transport->channels_.push_back(nullptr);
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
    auto channel = MakeChannel(addresses[t], security, args);
    if (!channel.ok()) return channel.status();
    transport->channels_.push_back(*std::move(channel));
  }
  return transport;
}

}  // namespace psrt
