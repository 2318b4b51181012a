#include "ps_server/peers/in_process_links.h"

#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "security/security.h"

namespace psrt {

class InProcessLinks::Transport : public PeerTransport {
 public:
  Transport(InProcessLinks* links, int self) : links_(links), self_(self) {}
  std::shared_ptr<grpc::Channel> ChannelTo(int task) const override {
    return links_->ChannelFor(self_, task);
  }

 private:
  InProcessLinks* const links_;
  const int self_;
};

InProcessLinks::InProcessLinks(int num_ps, std::string auth_token,
                               int num_workers)
    : num_ps_(num_ps),
      nodes_(num_ps + num_workers),
      auth_token_(std::move(auth_token)),
      dead_(grpc::CreateChannel("unix:/nonexistent/psrt-cut-link",
                                grpc::InsecureChannelCredentials())),
      servers_(num_ps, nullptr),
      cut_(nodes_ * nodes_, false),
      restarting_(num_ps, false),
      delay_(nodes_ * nodes_, absl::ZeroDuration()),
      calls_(nodes_ * nodes_, 0),
      channels_(nodes_ * nodes_) {}

void InProcessLinks::Attach(int task, grpc::Server* server) {
  absl::MutexLock lock(&mu_);
  servers_[task] = server;
  restarting_[task] = false;
  for (int from = 0; from < nodes_; ++from) {
    if (from == task) continue;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    // As a real PS's channels (MakeChannel): the cluster's token on every
    // call.
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors;
    if (auto token = MakeTokenInterceptorFactory(auth_token_)) {
      interceptors.push_back(std::move(token));
    }
    channels_[from * nodes_ + task] =
        server->experimental().InProcessChannelWithInterceptors(
            args, std::move(interceptors));
  }
}

void InProcessLinks::Kill(int task) {
  absl::MutexLock lock(&mu_);
  servers_[task] = nullptr;
  restarting_[task] = false;
  for (int from = 0; from < nodes_; ++from) {
    channels_[from * nodes_ + task] = nullptr;
  }
}

void InProcessLinks::Restarting(int task) {
  absl::MutexLock lock(&mu_);
  restarting_[task] = true;
}

void InProcessLinks::Cut(int from, int to) {
  absl::MutexLock lock(&mu_);
  cut_[from * nodes_ + to] = true;
}

void InProcessLinks::Heal(int from, int to) {
  absl::MutexLock lock(&mu_);
  cut_[from * nodes_ + to] = false;
}

void InProcessLinks::Partition(const std::vector<std::vector<int>>& sides) {
  absl::MutexLock lock(&mu_);
  for (size_t a = 0; a < sides.size(); ++a) {
    for (size_t b = 0; b < sides.size(); ++b) {
      if (a == b) continue;
      for (int from : sides[a]) {
        for (int to : sides[b]) cut_[from * nodes_ + to] = true;
      }
    }
  }
}

void InProcessLinks::HealAll() {
  absl::MutexLock lock(&mu_);
  std::fill(cut_.begin(), cut_.end(), false);
}

void InProcessLinks::Delay(int from, int to, absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  delay_[from * nodes_ + to] = delay;
}

int64_t InProcessLinks::calls(int from, int to) const {
  absl::MutexLock lock(&mu_);
  return calls_[from * nodes_ + to];
}

std::shared_ptr<grpc::Channel> InProcessLinks::ChannelFor(int from, int to) {
  // PsPeers asks for the channel once per call, just before making it:
  // each call is counted, and delayed, here.
  absl::Duration delay;
  std::shared_ptr<grpc::Channel> channel;
  {
    absl::MutexLock lock(&mu_);
    auto attached = [this, to]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !restarting_[to];
    };
    mu_.Await(absl::Condition(&attached));
    const int link = from * nodes_ + to;
    ++calls_[link];
    delay = delay_[link];
    channel =
        cut_[link] || channels_[link] == nullptr ? dead_ : channels_[link];
  }
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  return channel;
}

std::unique_ptr<PeerTransport> InProcessLinks::TransportFor(int self) {
  return std::make_unique<Transport>(this, self);
}

}  // namespace psrt
