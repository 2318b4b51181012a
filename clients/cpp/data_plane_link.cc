#include "clients/cpp/data_plane_link.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "clients/cpp/ps_connection.h"
#include "dataplane/host_key.h"
#include "dataplane/local_address.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "partitioner/cluster_spec.h"

namespace psrt {

struct DataPlaneLink::LaneState {
  std::thread thread;
  // Guarded by the link's mu_.
  std::deque<Job> jobs;
  bool busy = false;  // running a job
  // The lane thread's own.
  std::unique_ptr<dataplane::DataPlaneClient> client;
  std::vector<uint8_t> scratch;
};

DataPlaneLink::DataPlaneLink(PsConnection* connection,
                             const ClientOptions& options)
    : connection_(connection),
      options_(options),
      host_key_(dataplane::SharedMemoryHostKey()) {}

DataPlaneLink::~DataPlaneLink() {
  std::vector<LaneState*> lanes;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& lane : lanes_) lanes.push_back(lane.get());
  }
  for (LaneState* lane : lanes) lane->thread.join();
}

absl::StatusOr<std::unique_ptr<dataplane::DataPlaneClient>>
DataPlaneLink::Open() {
  const absl::Time deadline =
      absl::Now() + std::min(options_.call_timeout, absl::Seconds(20));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  OpenDataPlaneRequest request;
  for (const std::string& p : options_.data_plane_providers) {
    request.add_providers(p);
  }
  request.set_host_key(host_key_);
  request.set_process_id(static_cast<uint32_t>(getpid()));
  OpenDataPlaneResponse response;
  grpc::Status opened =
      connection_->stub()->OpenDataPlane(&context, request, &response);
  if (!opened.ok()) {
    absl::Status s = connection_->StatusOf(opened, "opening the data plane to");
    // The PS said it serves none this client can use (or predates it).
    if (absl::IsFailedPrecondition(s) || absl::IsUnimplemented(s)) Decide(s);
    return s;
  }
  dataplane::FabricOptions fabric;
  fabric.provider = response.provider();
  std::string host;
  int port;
  fabric.node =
      fabric.provider == "shm" ||
              !SplitHostPort(connection_->address(), &host, &port).ok()
          ? ""
          : dataplane::LocalAddressToward(host);
  dataplane::Challenge challenge;
  challenge.connection_id = response.connection_id();
  challenge.nonce = response.nonce();
  PsConnection* connection = connection_;
  // OpenDataPlane just went over channel 0: READY now.
  const uint64_t epoch = connection->ChannelEpoch();
  auto peer_check = [connection, epoch]() -> absl::Status {
    if (connection->ChannelEpoch() != epoch) {
      return absl::UnavailableError(absl::StrCat(
          connection->Describe(),
          " lost a gRPC connection since this data-plane connection opened "
          "(PS restarted or gone?)"));
    }
    if (!connection->Down()) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat(connection->Describe(),
                     " dropped its gRPC connection during a "
                     "data-plane call (PS gone?)"));
  };
  absl::StatusOr<std::unique_ptr<dataplane::DataPlaneClient>> client =
      dataplane::DataPlaneClient::Connect(
          fabric, response.address(), challenge, options_.security.auth_token,
          deadline, dataplane::FrameLimits(), peer_check);
  if (!client.ok()) {
    // The PS went away meanwhile: not the data plane's fault.
    if (absl::Status gone = peer_check(); !gone.ok()) return gone;
    // The PS offered it, but this host cannot open the provider or reach
    // the PS over it (a firewall): gRPC still can.
    absl::Status s = absl::FailedPreconditionError(absl::StrCat(
        "the data plane (", fabric.provider, ") to ", connection_->Describe(),
        " does not open here: ", client.status().message()));
    Decide(s);
    return s;
  }
  {
    absl::MutexLock lock(&mu_);
    provider_ = fabric.provider;
  }
  Decide(absl::OkStatus());
  return client;
}

bool DataPlaneLink::Decide(const absl::Status& opened) {
  absl::MutexLock lock(&mu_);
  if (decision_ == Decision::kGrpc) return false;
  if (opened.ok()) {
    if (decision_ == Decision::kUndecided) {
      LOG(INFO) << "pushes and pulls to " << connection_->Describe()
                << " over the data plane (" << provider_ << ")";
    }
    decision_ = Decision::kUse;
    return true;
  }
  LOG(WARNING) << "pushes and pulls to " << connection_->Describe()
               << " over gRPC: " << opened.message();
  decision_ = Decision::kGrpc;
  return false;
}

bool DataPlaneLink::Usable() {
  {
    absl::MutexLock lock(&mu_);
    if (decision_ != Decision::kUndecided) return decision_ == Decision::kUse;
  }
  absl::StatusOr<std::unique_ptr<dataplane::DataPlaneClient>> probe = Open();
  absl::MutexLock lock(&mu_);
  if (probe.ok() && probed_ == nullptr) probed_ = *std::move(probe);
  return decision_ != Decision::kGrpc;
}

void DataPlaneLink::Run(Job job) {
  absl::MutexLock lock(&mu_);
  LaneState* chosen = nullptr;
  for (auto& lane : lanes_) {
    if (!lane->busy && lane->jobs.empty()) {
      chosen = lane.get();
      break;
    }
  }
  if (chosen == nullptr && lanes_.size() < kMaxLanes) {
    lanes_.push_back(std::make_unique<LaneState>());
    chosen = lanes_.back().get();
    chosen->thread = std::thread([this, chosen] { LaneLoop(chosen); });
  }
  if (chosen == nullptr) chosen = lanes_[next_lane_++ % lanes_.size()].get();
  chosen->jobs.push_back(std::move(job));
}

void DataPlaneLink::LaneLoop(LaneState* lane) {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      lane->busy = false;
      auto ready = [this, lane]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !lane->jobs.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (lane->jobs.empty()) return;  // stopping, nothing left
      job = std::move(lane->jobs.front());
      lane->jobs.pop_front();
      lane->busy = true;
    }
    // A connection to a PS process that may be gone is opened anew.
    if (lane->client == nullptr || lane->client->broken() ||
        !lane->client->CheckPeer().ok()) {
      lane->client.reset();
      {
        absl::MutexLock lock(&mu_);
        lane->client = std::move(probed_);
      }
      if (lane->client == nullptr) {
        absl::StatusOr<std::unique_ptr<dataplane::DataPlaneClient>> opened =
            Open();
        if (!opened.ok()) {
          absl::Status s = opened.status();
          // Decided for gRPC: the call fails retryable, and its retry
          // goes over gRPC (Usable() is false now).
          if (absl::IsFailedPrecondition(s)) {
            s = absl::UnavailableError(
                absl::StrCat(s.message(), "; retried over gRPC"));
          }
          job(s);
          continue;
        }
        lane->client = *std::move(opened);
      }
    }
    job(Lane{lane->client.get(), &lane->scratch});
  }
}

}  // namespace psrt
