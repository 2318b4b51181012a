// The client's connections to one PS task: `channels_per_ps` gRPC channels
// (separate TCP connections), the control-RPC stub and the raw Pull/Push
// method handles.
#ifndef PSRT_CLIENTS_CPP_PS_CONNECTION_H_
#define PSRT_CLIENTS_CPP_PS_CONNECTION_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "clients/cpp/client_options.h"
#include "grpcpp/channel.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/ps.grpc.pb.h"

namespace psrt {

class DataPlaneLink;

class PsConnection {
 public:
  PsConnection(int ps_task, std::string address, const ClientOptions& options);
  ~PsConnection();
  PsConnection(const PsConnection&) = delete;
  PsConnection& operator=(const PsConnection&) = delete;

  int ps_task() const { return ps_task_; }
  const std::string& address() const { return address_; }
  // "PS 1 (host:2224)", for error messages.
  std::string Describe() const;
  // `s` from this PS as an absl::Status reading "<call> PS 1 (host:2224):
  // <message>" (call: "pull to", say) and naming this PS (ps_task_status.h).
  absl::Status StatusOf(const grpc::Status& s, absl::string_view call) const;

  // Channel for the next streaming call (round robin).
  int NextChannel() { return next_.fetch_add(1) % channels_.size(); }
  grpc::Channel* channel(int i) const { return channels_[i].channel.get(); }
  const grpc::internal::RpcMethod& pull_method(int i) const {
    return *channels_[i].pull;
  }
  const grpc::internal::RpcMethod& push_method(int i) const {
    return *channels_[i].push;
  }
  ParameterServer::Stub* stub() const { return stub_.get(); }
  // Pushes and pulls over libfabric (data_plane_link.h); null when the
  // client keeps them on gRPC (--data_plane=grpc, TLS).
  DataPlaneLink* data_plane() const { return data_plane_.get(); }

  // True when no channel to this PS is connected (READY): of several
  // failures in one call, such a PS's is the likely cause to name.
  bool Unreachable() const;

  // True when no channel is READY and one failed to connect
  // (TRANSIENT_FAILURE): the PS's process is gone or cut off. Idle
  // channels are asked to connect, so a PS that restarted is not taken
  // for down once they have.
  bool Down() const;
  // With the data plane: the times a channel left READY (watched on a
  // thread of this connection's own, which also keeps the idle channels'
  // sockets read: gRPC 1.51 reads an idle channel's socket only every
  // 5 s). A data-plane connection opened at one count is to a PS process
  // that may be gone at a later one (killed, or restarted on its address
  // meanwhile). 0 without the data plane.
  uint64_t ChannelEpoch() const { return channel_epoch_.load(); }

  // Polls the standard health service until SERVING or the deadline.
  absl::Status WaitHealthy(absl::Time deadline) const;

 private:
  struct Channel {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<grpc::internal::RpcMethod> pull, push;
  };
  // Counts the channels' departures from READY until stopping_.
  void WatchChannels();

  const int ps_task_;
  const std::string address_;
  std::vector<Channel> channels_;
  std::unique_ptr<ParameterServer::Stub> stub_;
  std::atomic<uint32_t> next_{0};
  std::atomic<uint64_t> channel_epoch_{0};
  std::atomic<bool> stopping_{false};
  grpc::CompletionQueue watch_queue_;
  std::thread watcher_;
  std::unique_ptr<DataPlaneLink> data_plane_;  // after what it uses
};

// Channel arguments shared by every psrt client channel.
grpc::ChannelArguments ClientChannelArguments(const ClientOptions& options,
                                              int channel_index);

}  // namespace psrt

#endif  // PSRT_CLIENTS_CPP_PS_CONNECTION_H_
