#include "ps_server/metrics/grpc_server_metrics.h"

#include <array>
#include <atomic>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace psrt {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::ServerRpcInfo;

constexpr int kNumCodes = 17;  // grpc::StatusCode OK .. UNAUTHENTICATED

const char* TypeName(ServerRpcInfo::Type type) {
  switch (type) {
    case ServerRpcInfo::Type::UNARY:
      return "unary";
    case ServerRpcInfo::Type::CLIENT_STREAMING:
      return "client_stream";
    case ServerRpcInfo::Type::SERVER_STREAMING:
      return "server_stream";
    case ServerRpcInfo::Type::BIDI_STREAMING:
      return "bidi_stream";
  }
  return "unknown";
}

// One method's metrics; its handled counters are made on first use of each
// code (a dashboard sees only codes that happened).
class MethodMetricsEntry {
 public:
  MethodMetricsEntry(MetricsRegistry* registry, const char* method,
                     ServerRpcInfo::Type type)
      : registry_(registry) {
    // "/package.Service/Method"
    absl::string_view full(method);
    absl::ConsumePrefix(&full, "/");
    const size_t slash = full.rfind('/');
    labels_ = {{"grpc_type", TypeName(type)},
               {"grpc_service", std::string(slash == absl::string_view::npos
                                                ? absl::string_view()
                                                : full.substr(0, slash))},
               {"grpc_method", std::string(slash == absl::string_view::npos
                                               ? full
                                               : full.substr(slash + 1))}};
    started_ = registry->GetCounter(
        "grpc_server_started_total",
        "RPCs started on the server, by type, service and method", labels_);
    handling_ = registry->GetHistogram(
        "grpc_server_handling_seconds",
        "Time from an RPC's start to its status being sent", labels_);
    for (auto& counter : handled_) counter.store(nullptr);
  }

  void Started() { started_->Increment(); }

  void Handled(grpc::StatusCode code, double seconds) {
    handling_->Observe(seconds);
    const int index = static_cast<int>(code);
    if (index < 0 || index >= kNumCodes) return;
    prometheus::Counter* counter =
        handled_[index].load(std::memory_order_acquire);
    if (counter == nullptr) {
      MetricLabels labels = labels_;
      labels.emplace_back(
          "grpc_code",
          absl::StatusCodeToString(static_cast<absl::StatusCode>(index)));
      // GetCounter returns the same counter for the same labels, so two
      // threads racing here store the same pointer.
      counter = registry_->GetCounter(
          "grpc_server_handled_total",
          "RPCs completed on the server, by type, service, method and code",
          labels);
      handled_[index].store(counter, std::memory_order_release);
    }
    counter->Increment();
  }

 private:
  MetricsRegistry* const registry_;
  MetricLabels labels_;
  prometheus::Counter* started_;
  prometheus::Histogram* handling_;
  std::array<std::atomic<prometheus::Counter*>, kNumCodes> handled_;
};

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit MetricsInterceptor(MethodMetricsEntry* entry)
      : entry_(entry), start_(absl::Now()) {
    entry_->Started();
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      entry_->Handled(methods->GetSendStatus().error_code(),
                      absl::ToDoubleSeconds(absl::Now() - start_));
    }
    methods->Proceed();
  }

 private:
  MethodMetricsEntry* const entry_;
  const absl::Time start_;
};

class MetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(MetricsRegistry* registry)
      : registry_(registry) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      ServerRpcInfo* info) override {
    return new MetricsInterceptor(Entry(info->method(), info->type()));
  }

 private:
  MethodMetricsEntry* Entry(const char* method, ServerRpcInfo::Type type) {
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = entries_.find(method);
      if (it != entries_.end()) return it->second.get();
    }
    absl::MutexLock lock(&mu_);
    auto& entry = entries_[method];
    if (entry == nullptr) {
      entry = std::make_unique<MethodMetricsEntry>(registry_, method, type);
    }
    return entry.get();
  }

  MetricsRegistry* const registry_;
  absl::Mutex mu_;
  // Keyed by the full method name; entries are never removed (a server
  // hosts a fixed set of methods).
  absl::flat_hash_map<std::string, std::unique_ptr<MethodMetricsEntry>> entries_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
MakeGrpcServerMetricsFactory(MetricsRegistry* registry) {
  return std::make_unique<MetricsInterceptorFactory>(registry);
}

}  // namespace psrt
