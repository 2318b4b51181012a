#include "ps_server/ps_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "proto/frame_reader.h"
#include "ps_server/pull_handler.h"
#include "ps_server/push_handler.h"
#include "ps_server/request_item.h"

namespace psrt {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

double SecondsSince(absl::Time start) {
  return absl::ToDoubleSeconds(absl::Now() - start);
}

}  // namespace

// Streams a pull's response: while one message is being written, the next
// is prepared (its rows gathered).
class ParameterServerService::PullReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  PullReactor(ParameterServerService* service, const grpc::ByteBuffer* request)
      : service_(service) {
    const MethodMetrics& m = service_->pull_;
    m.requests->Add();
    m.bytes_in->Add(static_cast<int64_t>(request->Length()));
    FrameReader frame;
    const absl::Status parsed = frame.Parse(*request);
    absl::StatusOr<std::unique_ptr<PullResponder>> responder =
        parsed.ok() ? PullResponder::Create(*service_->store_, frame,
                                            service_->limits_.max_message_bytes)
                    : parsed;
    if (!responder.ok()) {
      Finish(service_->Fail("Pull", responder.status()));
      return;
    }
    responder_ = std::move(*responder);
    m.rows->Add(responder_->rows());
    m.bytes_out->Add(responder_->value_bytes());
    absl::MutexLock lock(&mu_);
    responder_->Next(&prepared_);
    WritePrepared();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "pull response write failed (client gone?)"));
      return;
    }
    WritePrepared();
  }

  void OnDone() override {
    service_->pull_.latency->Observe(SecondsSince(start_));
    delete this;
  }

 private:
  // Writes the prepared message and prepares the next while it is in
  // flight. The lock keeps OnWriteDone from racing the preparation.
  void WritePrepared() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (responder_->done()) {
      StartWriteAndFinish(&prepared_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    std::swap(writing_, prepared_);
    StartWrite(&writing_);
    responder_->Next(&prepared_);
  }

  ParameterServerService* const service_;
  const absl::Time start_ = absl::Now();
  std::unique_ptr<PullResponder> responder_;
  absl::Mutex mu_;
  grpc::ByteBuffer writing_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer prepared_ ABSL_GUARDED_BY(mu_);
};

// Collects a push's stream; validates each message as it arrives and applies
// the whole push after the last one.
class ParameterServerService::PushReactor final
    : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  PushReactor(ParameterServerService* service, grpc::ByteBuffer* response)
      : service_(service),
        response_(response),
        handler_(service->store_, &service->dedup_,
                 service->limits_.max_push_bytes) {
    service_->push_.requests->Add();
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (ok) {
      absl::Status s = handler_.AddMessage(message_);
      if (!s.ok()) {
        Finish(service_->Fail("Push", s));
        return;
      }
      StartRead(&message_);
      return;
    }
    // End of the stream: the client finished writing (or went away; then
    // the final message is missing and Finish refuses to apply).
    service_->push_.bytes_in->Add(static_cast<int64_t>(handler_.bytes()));
    const absl::Time apply_start = absl::Now();
    absl::StatusOr<PushResponse> result = handler_.Finish();
    service_->push_apply_seconds_->Observe(SecondsSince(apply_start));
    if (!result.ok()) {
      Finish(service_->Fail("Push", result.status()));
      return;
    }
    service_->push_.rows->Add(result->rows_applied());
    grpc::Slice slice(result->SerializeAsString());
    *response_ = grpc::ByteBuffer(&slice, 1);
    Finish(grpc::Status::OK);
  }

  void OnDone() override {
    service_->push_.latency->Observe(SecondsSince(start_));
    delete this;
  }

 private:
  ParameterServerService* const service_;
  grpc::ByteBuffer* const response_;
  const absl::Time start_ = absl::Now();
  PushHandler handler_;
  grpc::ByteBuffer message_;
};

ParameterServerService::ParameterServerService(ShardStore* store,
                                               MetricsRegistry* metrics,
                                               ServiceLimits limits)
    : store_(store),
      metrics_(metrics),
      limits_(limits),
      pull_(MakeMethodMetrics("Pull")),
      push_(MakeMethodMetrics("Push")),
      create_(MakeMethodMetrics("CreateVariables")),
      rejected_nonfinite_(metrics->GetCounter(
          "psrt_rejected_nonfinite_pushes_total",
          "Pushes rejected because a gradient held NaN or Inf")),
      push_apply_seconds_(metrics->GetHistogram(
          "psrt_push_apply_seconds",
          "Time from a push's last message to its update being applied")) {
  metrics->AddGauge("psrt_parameter_bytes",
                    "Bytes of parameters and optimizer slots held by this PS",
                    {{"ps_task", absl::StrCat(store->ps_task())}}, [store] {
                      return static_cast<double>(store->parameter_bytes());
                    });
  metrics->AddGauge("psrt_local_shards", "Shards held by this PS",
                    {{"ps_task", absl::StrCat(store->ps_task())}}, [store] {
                      return static_cast<double>(store->num_local_shards());
                    });
  metrics->AddGauge("psrt_uptime_seconds", "Seconds since the server started",
                    {}, [start = started_] { return SecondsSince(start); });
}

MethodMetrics ParameterServerService::MakeMethodMetrics(const char* method) {
  const MetricLabels labels = {{"method", method}};
  return MethodMetrics{
      metrics_->GetCounter("psrt_requests_total", "RPCs received", labels),
      metrics_->GetCounter("psrt_bytes_in_total", "Request bytes received",
                           labels),
      metrics_->GetCounter("psrt_bytes_out_total",
                           "Tensor bytes sent in responses", labels),
      metrics_->GetCounter("psrt_rows_total",
                           "Embedding rows (and dense items) moved", labels),
      metrics_->GetHistogram("psrt_request_seconds", "RPC latency", labels),
  };
}

grpc::Status ParameterServerService::Fail(const char* method,
                                          const absl::Status& status) {
  metrics_
      ->GetCounter("psrt_errors_total", "RPCs that failed, by status code",
                   {{"method", method},
                    {"code", absl::StatusCodeToString(status.code())}})
      ->Add();
  if (status.GetPayload(kNonFiniteGradient).has_value()) {
    rejected_nonfinite_->Add();
  }
  VLOG(1) << method << " failed: " << status;
  return ToGrpc(status);
}

grpc::ServerUnaryReactor* ParameterServerService::CreateVariables(
    grpc::CallbackServerContext* context, const CreateVariablesRequest* request,
    CreateVariablesResponse* response) {
  auto* reactor = context->DefaultReactor();
  create_.requests->Add();
  std::vector<VariableSpec> specs(request->specs().begin(),
                                  request->specs().end());
  absl::StatusOr<int> size =
      store_->CreateVariables(request->first_index(), specs, request->num_ps());
  if (!size.ok()) {
    reactor->Finish(Fail("CreateVariables", size.status()));
    return reactor;
  }
  response->set_catalog_size(*size);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::ListVariables(
    grpc::CallbackServerContext* context, const ListVariablesRequest*,
    ListVariablesResponse* response) {
  response->set_ps_task(store_->ps_task());
  response->set_num_ps(store_->num_ps());
  for (const LocalVariable* v : store_->Variables()) {
    VariableInfo* info = response->add_variables();
    *info->mutable_spec() = v->layout->spec;
    for (int s = 0; s < v->layout->num_shards(); ++s) {
      if (!v->Holds(s)) continue;
      const ShardLayout& layout = v->layout->shards[s];
      ShardInfo* shard = info->add_shards();
      shard->set_shard(s);
      shard->set_ps_task(layout.ps_task);
      shard->set_row_begin(layout.row_begin);
      if (v->is_dense()) {
        shard->set_num_rows(layout.num_rows);
        shard->set_bytes(v->dense[s]->bytes());
        shard->set_version(v->dense[s]->version());
      } else {
        shard->set_num_rows(v->rows[s]->num_rows());
        shard->set_bytes(v->rows[s]->bytes());
        shard->set_version(v->rows[s]->version());
      }
    }
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::GetStats(
    grpc::CallbackServerContext* context, const StatsRequest*,
    StatsResponse* response) {
  response->set_ps_task(store_->ps_task());
  response->set_parameter_bytes(store_->parameter_bytes());
  response->set_num_shards(store_->num_local_shards());
  response->set_pull_requests(pull_.requests->value());
  response->set_push_requests(push_.requests->value());
  response->set_rejected_pushes(
      metrics_
          ->GetCounter("psrt_errors_total", "RPCs that failed, by status code",
                       {{"method", "Push"}, {"code", "INVALID_ARGUMENT"}})
          ->value());
  response->set_rejected_nonfinite_pushes(rejected_nonfinite_->value());
  response->set_bytes_in(pull_.bytes_in->value() + push_.bytes_in->value());
  response->set_bytes_out(pull_.bytes_out->value());
  response->set_rows_pulled(pull_.rows->value());
  response->set_rows_pushed(push_.rows->value());
  response->set_uptime_seconds(SecondsSince(started_));
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ParameterServerService::Pull(
    grpc::CallbackServerContext*, const grpc::ByteBuffer* request) {
  return new PullReactor(this, request);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterServerService::Push(
    grpc::CallbackServerContext*, grpc::ByteBuffer* response) {
  return new PushReactor(this, response);
}

}  // namespace psrt
