// The real PS-to-PS link: one gRPC channel to each peer's host:port, made
// once, with the cluster's TLS and token (security/security.h), kept alive
// by keepalive pings so a partition is noticed and a returning peer found.
#ifndef PSRT_PS_SERVER_PEERS_GRPC_PEER_TRANSPORT_H_
#define PSRT_PS_SERVER_PEERS_GRPC_PEER_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps_server/peers/peer_transport.h"
#include "security/security.h"

namespace psrt {

class GrpcPeerTransport : public PeerTransport {
 public:
  // Channels to every PS of `addresses` but `self`. INVALID_ARGUMENT if
  // the credentials of `security` cannot be made.
  static absl::StatusOr<std::unique_ptr<GrpcPeerTransport>> Create(
      const std::vector<std::string>& addresses, int self,
      const SecurityOptions& security);

  std::shared_ptr<grpc::Channel> ChannelTo(int task) const override {
    return channels_[task];
  }

 private:
  GrpcPeerTransport() = default;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;  // null: self
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_PEERS_GRPC_PEER_TRANSPORT_H_
