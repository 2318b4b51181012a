#include "ps_server/peers/in_process_links.h"

#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace psrt {

// Counts each call of a link and holds it for the link's delay before its
// first bytes go.
class InProcessLinks::CountingInterceptorFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  CountingInterceptorFactory(InProcessLinks* links, int from, int to)
      : links_(links), from_(from), to_(to) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new Interceptor(links_, from_, to_);
  }

 private:
  class Interceptor : public grpc::experimental::Interceptor {
   public:
    Interceptor(InProcessLinks* links, int from, int to)
        : links_(links), from_(from), to_(to) {}
    void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
      if (m->QueryInterceptionHookPoint(
              grpc::experimental::InterceptionHookPoints::
                  PRE_SEND_INITIAL_METADATA)) {
        absl::Duration delay;
        links_->CountCall(from_, to_, &delay);
        if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
      }
      m->Proceed();
    }

   private:
    InProcessLinks* const links_;
    const int from_, to_;
  };

  InProcessLinks* const links_;
  const int from_, to_;
};

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

InProcessLinks::InProcessLinks(int num_ps)
    : num_ps_(num_ps),
      dead_(grpc::CreateChannel("unix:/nonexistent/psrt-cut-link",
                                grpc::InsecureChannelCredentials())),
      servers_(num_ps, nullptr),
      cut_(num_ps * num_ps, false),
      delay_(num_ps * num_ps, absl::ZeroDuration()),
      calls_(num_ps * num_ps, 0),
      channels_(num_ps * num_ps) {}

void InProcessLinks::Attach(int task, grpc::Server* server) {
  absl::MutexLock lock(&mu_);
  servers_[task] = server;
  for (int from = 0; from < num_ps_; ++from) {
    if (from == task) continue;
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(
        std::make_unique<CountingInterceptorFactory>(this, from, task));
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    channels_[from * num_ps_ + task] =
        server->experimental().InProcessChannelWithInterceptors(
            args, std::move(interceptors));
  }
}

void InProcessLinks::Kill(int task) {
  absl::MutexLock lock(&mu_);
  servers_[task] = nullptr;
  for (int from = 0; from < num_ps_; ++from) {
    channels_[from * num_ps_ + task] = nullptr;
  }
}

void InProcessLinks::Cut(int from, int to) {
  absl::MutexLock lock(&mu_);
  cut_[from * num_ps_ + to] = true;
}

void InProcessLinks::Heal(int from, int to) {
  absl::MutexLock lock(&mu_);
  cut_[from * num_ps_ + to] = false;
}

void InProcessLinks::Partition(const std::vector<std::vector<int>>& sides) {
  absl::MutexLock lock(&mu_);
  for (size_t a = 0; a < sides.size(); ++a) {
    for (size_t b = 0; b < sides.size(); ++b) {
      if (a == b) continue;
      for (int from : sides[a]) {
        for (int to : sides[b]) cut_[from * num_ps_ + to] = true;
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
  delay_[from * num_ps_ + to] = delay;
}

int64_t InProcessLinks::calls(int from, int to) const {
  absl::MutexLock lock(&mu_);
  return calls_[from * num_ps_ + to];
}

void InProcessLinks::CountCall(int from, int to, absl::Duration* delay) {
  absl::MutexLock lock(&mu_);
  ++calls_[from * num_ps_ + to];
  *delay = delay_[from * num_ps_ + to];
}

std::shared_ptr<grpc::Channel> InProcessLinks::ChannelFor(int from, int to) {
  absl::MutexLock lock(&mu_);
  const int link = from * num_ps_ + to;
  if (cut_[link] || channels_[link] == nullptr) {
    ++calls_[link];
    return dead_;
  }
  return channels_[link];
}

std::unique_ptr<PeerTransport> InProcessLinks::TransportFor(int self) {
  return std::make_unique<Transport>(this, self);
}

}  // namespace psrt
