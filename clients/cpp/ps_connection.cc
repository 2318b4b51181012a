#include "clients/cpp/ps_connection.h"

#include <chrono>
#include <climits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "clients/cpp/data_plane_link.h"
#include "clients/cpp/ps_task_status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "proto/byte_buffer_bytes.h"
#include "util/grpc_status.h"

namespace psrt {
namespace {

// grpc.health.v1.HealthCheckRequest{service: ""} is the empty message; the
// response is HealthCheckResponse{status = 1 (SERVING)}: bytes 08 01.
constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";

}  // namespace

grpc::ChannelArguments ClientChannelArguments(const ClientOptions& options,
                                              int channel_index) {
  grpc::ChannelArguments args;
  // Each channel gets its own TCP connection (gRPC would otherwise share one
  // subchannel among identical channels).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("psrt.channel_index", channel_index);
  const int limit = static_cast<int>(
      std::max<size_t>(options.message_bytes, 16 << 20) + (1 << 20));
  args.SetMaxReceiveMessageSize(limit);
  args.SetMaxSendMessageSize(limit);
  // A restarted PS is found again within seconds, not gRPC's default two
  // minutes of reconnect backoff.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Despite its name, this is gRPC's minimum *connect timeout*: the time one
  // attempt (TCP connect plus the server's first HTTP/2 frame) may take. At
  // 100 ms a loaded host failed connections with "tcp handshaker shutdown"
  // (tests/slow_connect_test.cc); 5 s still gives up on a silent
  // (partitioned) peer as fast as the keepalive below does.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  // A partitioned network drops packets silently: pings every 10 s fail a
  // connection (and its calls, with UNAVAILABLE, which is retried) after 5 s
  // without an answer, instead of waiting out the call timeout.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // With pushes and pulls on the data plane, a channel may see no call
  // for long: it stays connected (never idle), so that a channel not
  // READY means the PS is gone (a data-plane call's peer check).
  args.SetInt(GRPC_ARG_CLIENT_IDLE_TIMEOUT_MS, INT_MAX);
  return args;
}

PsConnection::PsConnection(int ps_task, std::string address,
                           const ClientOptions& options)
    : ps_task_(ps_task), address_(std::move(address)) {
  const int n = std::max(1, options.channels_per_ps);
  for (int i = 0; i < n; ++i) {
    Channel c;
    // Connect() checked that the credentials can be made.
    c.channel = *MakeChannel(address_, options.security,
                             ClientChannelArguments(options, i));
    c.pull = std::make_unique<grpc::internal::RpcMethod>(
        "/psrt.ParameterServer/Pull",
        grpc::internal::RpcMethod::SERVER_STREAMING, c.channel);
    c.push = std::make_unique<grpc::internal::RpcMethod>(
        "/psrt.ParameterServer/Push",
        grpc::internal::RpcMethod::CLIENT_STREAMING, c.channel);
    channels_.push_back(std::move(c));
  }
  stub_ = ParameterServer::NewStub(channels_[0].channel);
  // The data plane carries no encryption: with TLS, all stays on gRPC.
  if (options.data_plane == "fabric" && !options.security.tls()) {
    data_plane_ = std::make_unique<DataPlaneLink>(this, options);
    watcher_ = std::thread([this] { WatchChannels(); });
  }
}

PsConnection::~PsConnection() {
  stopping_ = true;
  if (watcher_.joinable()) watcher_.join();
}

void PsConnection::WatchChannels() {
  // Watches of 100 ms, renewed until stopping_: the watching thread is
  // what polls the channels' sockets, and it ends within 100 ms of being
  // asked to.
  std::vector<grpc_connectivity_state> seen(channels_.size());
  auto watch = [&](size_t i) {
    channels_[i].channel->NotifyOnStateChange(
        seen[i],
        std::chrono::system_clock::now() + std::chrono::milliseconds(100),
        &watch_queue_, reinterpret_cast<void*>(i));
  };
  for (size_t i = 0; i < channels_.size(); ++i) {
    seen[i] = channels_[i].channel->GetState(/*try_to_connect=*/false);
    watch(i);
  }
  size_t watching = channels_.size();
  void* tag = nullptr;
  bool changed = false;
  while (watching > 0 && watch_queue_.Next(&tag, &changed)) {
    --watching;
    const size_t i = reinterpret_cast<size_t>(tag);
    const grpc_connectivity_state now =
        channels_[i].channel->GetState(/*try_to_connect=*/false);
    if (seen[i] == GRPC_CHANNEL_READY && now != GRPC_CHANNEL_READY) {
      ++channel_epoch_;
    }
    seen[i] = now;
    if (!stopping_) {
      watch(i);
      ++watching;
    }
  }
  watch_queue_.Shutdown();
  while (watch_queue_.Next(&tag, &changed)) {
  }
}

bool PsConnection::Unreachable() const {
  for (const Channel& c : channels_) {
    if (c.channel->GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) {
      return false;
    }
  }
  return true;
}

bool PsConnection::Down() const {
  bool failed = false;
  for (const Channel& c : channels_) {
    const grpc_connectivity_state state =
        c.channel->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return false;
    failed |= state == GRPC_CHANNEL_TRANSIENT_FAILURE;
  }
  return failed;
}

absl::Status PsConnection::StatusOf(const grpc::Status& s,
                                    absl::string_view call) const {
  return WithPsTask(FromGrpcStatus(s, absl::StrCat(call, " ", Describe())),
                    ps_task_);
}

std::string PsConnection::Describe() const {
  return absl::StrCat("PS ", ps_task_, " (", address_, ")");
}

absl::Status PsConnection::WaitHealthy(absl::Time deadline) const {
  grpc::GenericStub generic(channels_[0].channel);
  std::string last_error = "no answer";
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Seconds(2))));
    context.set_wait_for_ready(true);
    grpc::Slice empty;
    grpc::ByteBuffer request(&empty, 1), response;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&context, kHealthCheckMethod, grpc::StubOptions(),
                      &request, &response, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    if (status.ok()) {
      std::string bytes;
      ByteBufferBytes(response, &bytes);
      if (bytes == std::string("\x08\x01", 2)) return absl::OkStatus();
      last_error = "health check says NOT_SERVING";
    } else {
      last_error = status.error_message();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          Describe(), " did not become healthy in time: ", last_error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace psrt
