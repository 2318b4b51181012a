#include "ps_server/rpc/ps_service.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "proto/byte_buffer_bytes.h"
#include "proto/frame_reader.h"
#include "ps_server/checkpoint/transfer_progress.h"
#include "ps_server/metrics/status_page.h"
#include "ps_server/replication/rejoin_source.h"
#include "ps_server/replication/shard_role.h"
#include "ps_server/replication/snapshot_installer.h"
#include "ps_server/rpc/data_planes.h"
#include "ps_server/rpc/out_of_memory.h"
#include "ps_server/rpc/pull_handler.h"
#include "ps_server/rpc/push_handler.h"
#include "ps_server/rpc/request_item.h"
#include "ps_server/shards/shard_digest.h"
#include "security/security.h"
#include "util/grpc_status.h"

namespace psrt {
namespace {

int64_t Count(const prometheus::Counter* counter) {
  return static_cast<int64_t>(counter->Value());
}

double SecondsSince(absl::Time start) {
  return absl::ToDoubleSeconds(absl::Now() - start);
}

}  // namespace

// Streams a pull's response: while one message is being written, the next
// is prepared (its rows gathered).
//
// Threading: reactions (and the coordinator's "ready" callback, which runs
// on the thread of the push that released the pull) may run concurrently.
// Finish and StartWriteAndFinish end the call, after which gRPC may delete
// the reactor on another thread at once: they are never called with mu_
// held, and nothing of the reactor is touched after them.
class ParameterServerService::PullReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  PullReactor(ParameterServerService* service, const grpc::ByteBuffer* request)
      : service_(service) {
    PullRequestHeader header;
    absl::Status s =
        service_->ReadPullRequest(*request, &frame_, &header, &coordinator_);
    if (!s.ok()) {
      service_->FinishFailed(this, "Pull", s);
      return;
    }
    // SYNC and SSP pulls may have to wait for other workers' pushes.
    uint64_t token;
    {
      absl::MutexLock lock(&mu_);
      token = token_ = coordinator_->WaitForPull(
          header, [this](absl::Status ready) { Proceed(ready, true); });
    }
    if (token == 0) Proceed(absl::OkStatus(), false);
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      if (preparing_) {  // Pump continues when it is done
        (ok ? write_done_ : failed_) = true;
        return;
      }
    }
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "pull response write failed (client gone?)"));
      return;
    }
    Pump();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      if (token_ == 0 || !coordinator_->Cancel(token_)) return;
      token_ = 0;
    }
    Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                        "pull cancelled while waiting for other workers"));
  }

  void OnDone() override {
    service_->pull_.latency->Observe(SecondsSince(start_));
    delete this;
  }

 private:
  void Proceed(absl::Status ready, bool waited) {
    if (waited) {
      absl::MutexLock lock(&mu_);
      token_ = 0;
    }
    absl::StatusOr<std::unique_ptr<PullResponder>> responder =
        ready.ok() ? service_->MakePullResponder(frame_, coordinator_) : ready;
    if (!responder.ok()) {
      service_->FinishFailed(this, "Pull", responder.status());
      return;
    }
    responder_ = std::move(*responder);
    if (absl::Status s = responder_->Next(&prepared_); !s.ok()) {
      service_->FinishFailed(this, "Pull", s);
      return;
    }
    Pump();
  }

  // Writes the prepared message and, while it is in flight, prepares the
  // next. REQUIRES: no write in flight.
  void Pump() {
    while (true) {
      bool last;
      absl::Status prepared;
      {
        absl::MutexLock lock(&mu_);
        prepared = prepare_status_;
        last = responder_->done();
        if (!last) {
          std::swap(writing_, prepared_);
          preparing_ = true;
        }
      }
      if (!prepared.ok()) {  // no write in flight: what was sent is dropped
        service_->FinishFailed(this, "Pull", prepared);
        return;
      }
      if (last) {
        StartWriteAndFinish(&prepared_, grpc::WriteOptions(), grpc::Status::OK);
        return;
      }
      StartWrite(&writing_);
      bool again, failed;
      {
        absl::MutexLock lock(&mu_);
        prepare_status_ = AnswerOutOfMemory(
            "Pull", [&] { return responder_->Next(&prepared_); });
        preparing_ = false;
        again = write_done_;
        failed = failed_;
        write_done_ = failed_ = false;
      }
      if (failed) {
        Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                            "pull response write failed (client gone?)"));
        return;
      }
      if (!again) return;  // OnWriteDone continues
    }
  }

  ParameterServerService* const service_;
  // The barrier waited on (SYNC, SSP).
  StepCoordinator* coordinator_ = service_->step_barriers_.own();
  const absl::Time start_ = absl::Now();
  FrameReader frame_;
  std::unique_ptr<PullResponder> responder_;
  grpc::ByteBuffer writing_, prepared_;
  absl::Mutex mu_;
  uint64_t token_ ABSL_GUARDED_BY(mu_) = 0;      // waiting in the coordinator
  bool preparing_ ABSL_GUARDED_BY(mu_) = false;  // Pump is between writes
  bool write_done_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  // Why prepared_ could not be built (the pull then fails with it).
  absl::Status prepare_status_ ABSL_GUARDED_BY(mu_);
};

// Collects a push's stream; validates each message as it arrives and applies
// the whole push after the last one.
class ParameterServerService::PushReactor final
    : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  PushReactor(ParameterServerService* service, grpc::ByteBuffer* response)
      : service_(service),
        response_(response),
        handler_(service->NewPushHandler()) {
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (ok) {
      absl::Status s = AnswerOutOfMemory(
          "Push", [&] { return handler_->AddMessage(message_); });
      if (!s.ok()) {
        service_->FinishFailed(this, "Push", s);
        return;
      }
      StartRead(&message_);
      return;
    }
    // End of the stream: the client finished writing (or went away; then
    // the final message is missing and Finish refuses to apply).
    service_->FinishPush(
        &handler_, [this](absl::StatusOr<PushResponse> result) {
          if (!result.ok()) {
            service_->FinishFailed(this, "Push", result.status());
            return;
          }
          grpc::Slice slice(result->SerializeAsString());
          *response_ = grpc::ByteBuffer(&slice, 1);
          Finish(grpc::Status::OK);
        });
  }

  void OnDone() override {
    service_->push_.latency->Observe(SecondsSince(start_));
    delete this;
  }

 private:
  ParameterServerService* const service_;
  grpc::ByteBuffer* const response_;
  const absl::Time start_ = absl::Now();
  std::unique_ptr<PushHandler> handler_;
  grpc::ByteBuffer message_;
};

// A PS-to-PS client-streaming call: every message to `Call` (AddMessage),
// then its Finish answers. Call: ReplicateCall or SnapshotInstaller.
template <typename Call>
class ParameterServerService::ReadAllReactor final
    : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  ReadAllReactor(ParameterServerService* service, const char* method,
                 grpc::ByteBuffer* response, Call call)
      : service_(service),
        method_(method),
        response_(response),
        call_(std::move(call)) {
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (ok) {
      absl::Status s = AnswerOutOfMemory(
          method_, [&] { return call_.AddMessage(message_); });
      if (!s.ok()) {
        service_->FinishFailed(this, method_, s);
        return;
      }
      StartRead(&message_);
      return;
    }
    auto result = call_.Finish();
    if (!result.ok()) {
      service_->FinishFailed(this, method_, result.status());
      return;
    }
    grpc::Slice slice(result->SerializeAsString());
    *response_ = grpc::ByteBuffer(&slice, 1);
    Finish(grpc::Status::OK);
  }

  void OnDone() override { delete this; }

 private:
  ParameterServerService* const service_;
  const char* const method_;
  grpc::ByteBuffer* const response_;
  Call call_;
  grpc::ByteBuffer message_;
};

// A primary's Replicate stream, applied in order; a new process of a
// primary whose previous one this PS followed is taken over at once
// (TakeOverRestarted) and told so.
class ParameterServerService::ReplicateCall {
 public:
  // `proven_from`: the PS the call proved to come from (-1: not proven).
  ReplicateCall(ParameterServerService* service, int proven_from)
      : service_(service), call_(&service->replica_applier_, proven_from) {}
  absl::Status AddMessage(const grpc::ByteBuffer& message) {
    return call_.AddMessage(message);
  }
  absl::StatusOr<ReplicateResponse> Finish() {
    absl::StatusOr<ReplicateResponse> result = call_.Finish();
    if (!result.ok() &&
        absl::StrContains(result.status().message(), kRestartedMarker) &&
        service_->transfer_ != nullptr &&
        service_->transfer_->TakeOverRestarted(call_.from())) {
      return absl::FailedPreconditionError(
          absl::StrCat("PS ", service_->store_->ps_task(), " ", kReplacedMarker,
                       " PS ", call_.from(),
                       ": its previous process is gone (this one is new) "
                       "and this PS held the copy that followed it"));
    }
    if (result.ok() && service_->transfer_ != nullptr) {
      service_->transfer_->HandbackSettledBy(call_.from());
    }
    return result;
  }

 private:
  ParameterServerService* const service_;
  ReplicaApplier::Call call_;
};

ParameterServerService::ParameterServerService(
    ShardStore* store, MetricsRegistry* metrics, ServiceLimits limits,
    CheckpointCoordinator* checkpoints, std::string restored_from,
    std::string auth_token, ClusterMembers* checkpoint_callers,
    ReplicationLog* replicator, Clock* clock)
    : store_(store),
      metrics_(metrics),
      checkpoints_(checkpoints),
      restored_from_(std::move(restored_from)),
      auth_token_(std::move(auth_token)),
      checkpoint_callers_(checkpoint_callers),
      limits_(limits),
      // Counted against the PS's memory limit (push_dedup.h).
      dedup_scopes_(
          store->num_ps(), PushDedup::kDefaultMaxEntries,
          [store](int64_t bytes) { return store->ReserveMemory(bytes); }),
      replicator_(replicator),
      replica_applier_(store, &dedup_scopes_, limits.max_push_bytes),
      clock_(clock != nullptr ? clock : Clock::Real()),
      step_barriers_(store, &dedup_scopes_, limits.max_push_bytes,
                     limits.max_workers, replicator, clock_),
      workers_seen_(limits.max_workers),
      rendezvous_(limits.max_workers),
      pull_(MakeMethodMetrics("Pull")),
      push_(MakeMethodMetrics("Push")),
      create_(MakeMethodMetrics("CreateVariables")),
      rejected_nonfinite_(metrics->GetCounter(
          "psrt_rejected_nonfinite_pushes_total",
          "Pushes rejected because a gradient held NaN or Inf")),
      push_apply_seconds_(metrics->GetHistogram(
          "psrt_push_apply_duration_seconds",
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
  metrics->AddGauge(
      "psrt_global_step",
      "The global step this PS has seen (sum of the workers' steps)", {},
      [store] { return static_cast<double>(store->global_step()); });
  AddVariableMetrics();
  if (checkpoints != nullptr) AddCheckpointMetrics(store->ps_task());
  recent_rates_.StartSampling(absl::Seconds(5));
}

std::vector<int64_t> ParameterServerService::RequestCounters() const {
  return {Count(pull_.requests),
          Count(push_.requests),
          Count(pull_.rows),
          Count(push_.rows),
          Count(pull_.bytes_in) + Count(push_.bytes_in),
          Count(pull_.bytes_out)};
}

void ParameterServerService::AddVariableMetrics() {
  // Per variable, over the shards this PS serves (a backup's copies are
  // its primary's to report).
  struct Totals {
    int64_t rows = 0, bytes = 0;
    bool has_admission = false, has_eviction = false, has_ssd_tier = false;
    HashRowCounts counts;
  };
  const ShardStore* store = store_;
  auto totals = [store] {
    std::vector<std::pair<std::string, Totals>> out;
    for (const LocalVariable* v : store->Variables()) {
      Totals t;
      t.has_admission = v->layout->spec.has_admission();
      t.has_eviction = v->layout->spec.has_eviction();
      t.has_ssd_tier = v->layout->spec.storage().tier() == StorageSpec::SSD;
      for (int s = 0; s < v->layout->num_shards(); ++s) {
        if (!v->IsPrimary(s)) continue;
        t.rows += v->shard(s).num_rows();
        t.bytes += v->shard(s).bytes();
        t.counts += v->shard(s).row_counts();
      }
      out.emplace_back(v->name(), t);
    }
    return out;
  };
  using Field = std::function<double(const Totals&)>;
  using Applies = bool (*)(const Totals&);
  auto family = [this, totals](const char* name, const char* help,
                               prometheus::MetricType type, Applies applies,
                               Field field) {
    metrics_->AddComputedFamily(name, help, type, [totals, applies, field] {
      MetricsRegistry::Samples samples;
      for (const auto& [variable, t] : totals()) {
        if (applies(t)) samples.push_back({{{"variable", variable}}, field(t)});
      }
      return samples;
    });
  };
  const Applies every = [](const Totals&) { return true; };
  const Applies with_admission = [](const Totals& t) {
    return t.has_admission;
  };
  family("psrt_variable_rows",
         "Rows of each variable in the shards this PS serves (hash "
         "embeddings: rows held now)",
         prometheus::MetricType::Gauge, every,
         [](const Totals& t) { return static_cast<double>(t.rows); });
  family("psrt_variable_bytes",
         "Bytes of each variable's shards this PS serves: parameters, "
         "optimizer slots, index and admission sketch",
         prometheus::MetricType::Gauge, every,
         [](const Totals& t) { return static_cast<double>(t.bytes); });
  family("psrt_admitted_rows_total",
         "Rows feature admission created (variables with admission)",
         prometheus::MetricType::Counter, with_admission, [](const Totals& t) {
           return static_cast<double>(t.counts.admitted_rows);
         });
  family(
      "psrt_unadmitted_gradients_total",
      "Gradient rows dropped because their id had no row: not admitted "
      "yet, or new while a checkpoint read a shard at --memory_budget_mb "
      "(variables with admission, or dropped rows)",
      prometheus::MetricType::Counter,
      [](const Totals& t) {
        return t.has_admission || t.counts.unadmitted_gradients > 0;
      },
      [](const Totals& t) {
        return static_cast<double>(t.counts.unadmitted_gradients);
      });
  family(
      "psrt_evicted_rows_total",
      "Rows evicted: idle for ttl_steps, or least recently updated beyond "
      "max_rows or at --memory_budget_mb (variables with eviction, or "
      "evicted rows)",
      prometheus::MetricType::Counter,
      [](const Totals& t) {
        return t.has_eviction || t.counts.evicted_rows > 0;
      },
      [](const Totals& t) {
        return static_cast<double>(t.counts.evicted_rows);
      });
  auto with_ssd_tier = [](const Totals& t) { return t.has_ssd_tier; };
  family("psrt_spilled_rows",
         "Rows of SSD-tier hash embeddings on disk now (storage.tier = SSD)",
         prometheus::MetricType::Gauge, with_ssd_tier, [](const Totals& t) {
           return static_cast<double>(t.counts.spilled_rows);
         });
  family("psrt_spilled_bytes",
         "Bytes of SSD-tier hash embeddings' spilled rows: files on disk "
         "and the write buffers not yet in them",
         prometheus::MetricType::Gauge, with_ssd_tier, [](const Totals& t) {
           return static_cast<double>(t.counts.spilled_bytes);
         });
  family(
      "psrt_promoted_rows_total",
      "Spilled rows brought back to memory by a pull or push that carried them",
      prometheus::MetricType::Counter, with_ssd_tier, [](const Totals& t) {
        return static_cast<double>(t.counts.promoted_rows);
      });
}

void ParameterServerService::AddCheckpointMetrics(int ps_task) {
  const CheckpointCoordinator* c = checkpoints_;
  metrics_->AddCounterFunction(
      "psrt_checkpoint_saved_bytes_total",
      "Bytes of this PS's shards written to checkpoints", {},
      [c] { return static_cast<double>(c->totals().saved_bytes); });
  metrics_->AddGauge(
      "psrt_checkpoint_last_save_timestamp_seconds",
      "When this PS last finished writing its shards to a checkpoint (Unix "
      "seconds; 0: never)",
      {}, [c] {
        const absl::Time t = c->totals().last_save;
        return t == absl::InfinitePast() ? 0.0 : absl::ToUnixMicros(t) / 1e6;
      });
  // The cluster's checkpoints are run by PS 0; the other PS would only
  // report zeros, which alerts would read as "never checkpointed".
  if (ps_task != 0) return;
  for (const char* result : {"success", "failure"}) {
    const bool success = result[0] == 's';
    metrics_->AddCounterFunction(
        "psrt_checkpoints_total",
        "Cluster checkpoints run by this PS (PS 0), by result",
        {{"result", result}}, [c, success] {
          const auto t = c->totals();
          return static_cast<double>(success ? t.succeeded : t.failed);
        });
  }
  metrics_->AddGauge(
      "psrt_checkpoint_last_success_timestamp_seconds",
      "When the last complete cluster checkpoint was recorded (Unix seconds; "
      "0: none since start)",
      {}, [c] {
        const absl::Time t = c->totals().last_success;
        return t == absl::InfinitePast() ? 0.0 : absl::ToUnixMicros(t) / 1e6;
      });
  metrics_->AddGauge("psrt_checkpoint_last_duration_seconds",
                     "How long the last complete checkpoint took", {},
                     [c] { return c->totals().last_seconds; });
  metrics_->AddGauge(
      "psrt_checkpoint_last_bytes", "Bytes in the last complete checkpoint", {},
      [c] { return static_cast<double>(c->totals().last_bytes); });
  metrics_->AddGauge(
      "psrt_checkpoint_last_global_step",
      "The global step the last complete checkpoint holds", {},
      [c] { return static_cast<double>(c->totals().last_step); });
}

MethodMetrics ParameterServerService::MakeMethodMetrics(const char* method) {
  const MetricLabels labels = {{"method", method}};
  return MethodMetrics{
      metrics_->GetCounter("psrt_requests_total", "RPCs received", labels),
      metrics_->GetCounter("psrt_received_bytes_total",
                           "Request bytes received", labels),
      metrics_->GetCounter("psrt_sent_bytes_total",
                           "Tensor bytes sent in responses", labels),
      metrics_->GetCounter("psrt_rows_total",
                           "Embedding rows (and dense items) moved", labels),
      metrics_->GetHistogram("psrt_request_duration_seconds", "RPC latency",
                             labels),
  };
}

grpc::Status ParameterServerService::Fail(const char* method,
                                          const absl::Status& status) {
  metrics_
      ->GetCounter("psrt_errors_total", "RPCs that failed, by status code",
                   {{"method", method},
                    {"code", absl::StatusCodeToString(status.code())}})
      ->Increment();
  if (status.GetPayload(kNonFiniteGradient).has_value()) {
    rejected_nonfinite_->Increment();
  }
  VLOG(1) << method << " failed: " << status;
  return ToGrpcStatus(status);
}

namespace {

// The request's bytes as `Request`; INVALID_ARGUMENT naming the method if
// they are not one (gRPC's own parsing would answer with no detail).
template <typename Request>
absl::StatusOr<Request> ParseRequest(const grpc::ByteBuffer& bytes,
                                     const char* method) {
  Request request;
  std::string data;
  if (!ByteBufferBytes(bytes, &data)) {
    return absl::InvalidArgumentError(
        absl::StrCat(method, ": unreadable request"));
  }
  if (!request.ParseFromString(data)) {
    return absl::InvalidArgumentError(absl::StrCat(
        method, ": the request (", data.size(), " bytes) is not a valid ",
        Request::descriptor()->full_name(), " message"));
  }
  return request;
}

template <typename Response>
void SerializeResponse(const Response& response, grpc::ByteBuffer* out) {
  grpc::Slice slice(response.SerializeAsString());
  *out = grpc::ByteBuffer(&slice, 1);
}

}  // namespace

absl::Status ParameterServerService::ReadPullRequest(
    const grpc::ByteBuffer& request, FrameReader* frame,
    PullRequestHeader* header, StepCoordinator** coordinator) {
  pull_.requests->Increment();
  pull_.bytes_in->Increment(static_cast<double>(request.Length()));
  *coordinator = step_barriers_.own();
  absl::Status s = frame->Parse(request);
  if (s.ok()) s = frame->ParseHeader(header);
  if (s.ok()) {
    s = step_barriers_.own()->CheckStepFields(
        header->consistency(), header->worker_index(), header->step());
  }
  if (s.ok() && header->consistency().mode() != Consistency::ASYNC) {
    absl::StatusOr<StepCoordinator*> found = step_barriers_.For(*header);
    if (found.ok()) *coordinator = *found;
    s = found.status();
  }
  return s;
}

absl::StatusOr<std::unique_ptr<PullResponder>>
ParameterServerService::MakePullResponder(const FrameReader& frame,
                                          StepCoordinator* coordinator) {
  absl::StatusOr<std::unique_ptr<PullResponder>> responder =
      AnswerOutOfMemory("Pull", [&] {
        return PullResponder::Create(*store_, frame, limits_.max_message_bytes);
      });
  if (!responder.ok()) return responder;
  (*responder)->set_sync_step(coordinator->sync_step());
  pull_.rows->Increment(static_cast<double>((*responder)->rows()));
  pull_.bytes_out->Increment(static_cast<double>((*responder)->value_bytes()));
  return responder;
}

std::unique_ptr<PushHandler> ParameterServerService::NewPushHandler() {
  push_.requests->Increment();
  auto handler = std::make_unique<PushHandler>(
      store_, dedup_scopes_.For(store_->ps_task()), limits_.max_push_bytes,
      RequestKind::kPush, replicator_);
  handler->set_dedup_scopes(&dedup_scopes_);
  return handler;
}

void ParameterServerService::FinishPush(
    std::unique_ptr<PushHandler>* handler_slot,
    std::function<void(absl::StatusOr<PushResponse>)> done) {
  PushHandler* handler = handler_slot->get();
  push_.bytes_in->Increment(static_cast<double>(handler->bytes()));
  const PushRequestHeader& first = handler->first_header();
  const Consistency consistency = first.consistency();
  if (absl::Status s = step_barriers_.own()->CheckStepFields(
          consistency, first.worker_index(), first.step());
      handler->complete() && !s.ok()) {
    done(s);
    return;
  }
  StepCoordinator* coordinator = step_barriers_.own();
  if (consistency.mode() != Consistency::ASYNC && handler->complete()) {
    absl::StatusOr<StepCoordinator*> found = step_barriers_.For(first);
    absl::Status s = found.status();
    if (s.ok() && first.has_for_ps())
      s = handler->CheckPlacedOn(first.for_ps());
    if (!s.ok()) {
      done(s);
      return;
    }
    coordinator = *found;
  }
  const int worker_index = first.worker_index();
  const int64_t step = first.step();
  auto counted = [this, worker_index, step,
                  done = std::move(done)](absl::StatusOr<PushResponse> result) {
    if (result.ok()) {
      push_.rows->Increment(static_cast<double>(result->rows_applied()));
      workers_seen_.Saw(worker_index, step);
    }
    done(std::move(result));
  };
  if (consistency.mode() == Consistency::SYNC && handler->complete()) {
    // Held for the step's barrier; applied with the other workers'.
    coordinator->SyncPush(std::move(*handler_slot), std::move(counted));
    return;
  }
  // Answered when the backups (--replicas) have it too, without holding
  // the caller's thread meanwhile.
  handler->FinishAsync(
      [this, handler, coordinator,
       counted = std::move(counted)](absl::StatusOr<PushResponse> result) {
        push_apply_seconds_->Observe(handler->apply_seconds());
        const PushRequestHeader& header = handler->first_header();
        if (result.ok() && header.consistency().mode() == Consistency::SSP) {
          coordinator->AdvanceClock(header);
        }
        counted(std::move(result));
      });
}

// One unary method: token, parse, `handle` (on a thread of its own when
// `detached`: checkpoints take seconds to minutes, longer than gRPC's
// callback threads may be held), respond.
template <typename Request, typename Handle>
grpc::ServerUnaryReactor* ParameterServerService::ServeUnary(
    grpc::CallbackServerContext* context, const char* method,
    const grpc::ByteBuffer* request_bytes, grpc::ByteBuffer* response_bytes,
    bool detached, Handle handle) {
  auto* reactor = context->DefaultReactor();
  absl::Status s = CheckToken(context, auth_token_);
  absl::StatusOr<Request> request =
      s.ok() ? ParseRequest<Request>(*request_bytes, method)
             : absl::StatusOr<Request>(s);
  if (!request.ok()) {
    reactor->Finish(Fail(method, request.status()));
    return reactor;
  }
  auto respond = [this, reactor, method, response_bytes, handle,
                  request = *std::move(request)] {
    auto result = AnswerOutOfMemory(method, [&] { return handle(request); });
    if (result.ok()) {
      SerializeResponse(*result, response_bytes);
      reactor->Finish(grpc::Status::OK);
    } else {
      reactor->Finish(Fail(method, result.status()));
    }
  };
  if (detached) {
    std::thread(std::move(respond)).detach();
  } else {
    respond();
  }
  return reactor;
}

grpc::ServerUnaryReactor* ParameterServerService::CreateVariables(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<CreateVariablesRequest>(
      // Detached: a restore in PREPARE, or an AWAIT, may take seconds.
      context, "CreateVariables", request, response, /*detached=*/true,
      [this](const CreateVariablesRequest& r)
          -> absl::StatusOr<CreateVariablesResponse> {
        create_.requests->Increment();
        std::vector<VariableSpec> specs(r.specs().begin(), r.specs().end());
        absl::StatusOr<int> size;
        bool restoring = false;
        switch (r.phase()) {
          case CreateVariablesRequest::PREPARE:
            size = store_->PrepareVariables(r.creation_id(), r.first_index(),
                                            specs, r.num_ps(),
                                            r.fill_in_background());
            break;
          case CreateVariablesRequest::AWAIT: {
            if (r.await_ms() < 0) {
              size = absl::InvalidArgumentError(
                  absl::StrCat("CreateVariables: await_ms=", r.await_ms()));
              break;
            }
            const absl::Duration wait = absl::Milliseconds(
                r.await_ms() == 0 ? 5000 : std::min(r.await_ms(), 30000));
            absl::StatusOr<bool> done =
                store_->AwaitPrepared(r.creation_id(), wait);
            if (done.ok()) {
              size = 0;
              restoring = !*done;
            } else {
              size = done.status();
            }
            break;
          }
          case CreateVariablesRequest::COMMIT:
            size = store_->CommitVariables(r.creation_id());
            break;
          case CreateVariablesRequest::ABORT: {
            const absl::Status aborted =
                store_->AbortVariables(r.creation_id());
            if (aborted.ok()) {
              size = 0;
            } else {
              size = aborted;
            }
            break;
          }
          case CreateVariablesRequest::CREATE:
            size = store_->CreateVariables(r.first_index(), specs, r.num_ps());
            break;
          default:
            size = absl::InvalidArgumentError(
                absl::StrCat("CreateVariables: unknown phase ", r.phase()));
        }
        if (!size.ok()) return size.status();
        CreateVariablesResponse out;
        out.set_catalog_size(*size);
        out.set_restoring(restoring);
        return out;
      });
}

absl::StatusOr<int> ParameterServerService::CheckPeerCaller(
    grpc::CallbackServerContext* context, const char* method) {
  if (peer_identity_ != nullptr && peer_identity_->enabled()) {
    auto task = peer_identity_->Verify(
        context, absl::StrCat("/psrt.ParameterServer/", method),
        store_->num_ps());
    if (!task.ok()) {
      LOG(WARNING) << "refused " << context->peer() << ": "
                   << task.status().message();
      return task.status();
    }
    if (*task == store_->ps_task()) {
      return absl::PermissionDeniedError(absl::StrCat(
          method, ": the call proves to come from this PS itself (PS ", *task,
          "), which never calls itself"));
    }
    return task;
  }
  if (checkpoint_callers_ != nullptr) {
    absl::Status s = checkpoint_callers_->Check(context->peer(), method);
    if (!s.ok()) {
      LOG(WARNING) << "refused: " << s.message();
      return s;
    }
  }
  return -1;
}

namespace {
// A PS-to-PS request names its sender (`named`: from_task); the call
// proved `proven` (-1: not proven, the cluster trusts its network).
absl::Status CheckNamesCaller(int proven, int named, const char* method) {
  if (proven < 0 || named == proven) return absl::OkStatus();
  LOG(WARNING) << method << " naming PS " << named << " came from PS " << proven
               << ": refused";
  return absl::PermissionDeniedError(
      absl::StrCat(method, " names PS ", named,
                   " as its sender but the call proves to "
                   "come from PS ",
                   proven, ": a PS speaks only for itself"));
}
}  // namespace

absl::Status ParameterServerService::CheckCheckpointCaller(
    grpc::CallbackServerContext* context, const char* method) {
  if (checkpoint_callers_ != nullptr) {
    absl::Status s = checkpoint_callers_->Check(context->peer(), method);
    if (!s.ok()) {
      LOG(WARNING) << "refused: " << s.message();
      return s;
    }
  }
  if (checkpoints_ == nullptr) {
    return absl::UnimplementedError("checkpoints are not configured");
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ParameterServerService::Checkpoint(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::Status caller = CheckCheckpointCaller(context, "Checkpoint");
  return ServeUnary<CheckpointRequest>(
      context, "Checkpoint", request, response, /*detached=*/caller.ok(),
      [this, caller](
          const CheckpointRequest& r) -> absl::StatusOr<CheckpointResponse> {
        if (!caller.ok()) return caller;
        return checkpoints_->Checkpoint(r.checkpoint_uri());
      });
}

grpc::ServerUnaryReactor* ParameterServerService::SaveShards(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::Status caller = CheckPeerCaller(context, "SaveShards").status();
  if (caller.ok() && checkpoints_ == nullptr) {
    caller = absl::UnimplementedError("checkpoints are not configured");
  }
  return ServeUnary<SaveShardsRequest>(
      context, "SaveShards", request, response, /*detached=*/caller.ok(),
      [this, caller](
          const SaveShardsRequest& r) -> absl::StatusOr<SaveShardsResponse> {
        if (!caller.ok()) return caller;
        auto result = checkpoints_->SaveShards(r);
        if (result.ok() && r.final()) final_saved_.store(true);
        return result;
      });
}

grpc::ServerUnaryReactor* ParameterServerService::CommitCheckpoint(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::Status caller = CheckPeerCaller(context, "CommitCheckpoint").status();
  if (caller.ok() && checkpoints_ == nullptr) {
    caller = absl::UnimplementedError("checkpoints are not configured");
  }
  return ServeUnary<CommitCheckpointRequest>(
      context, "CommitCheckpoint", request, response, /*detached=*/caller.ok(),
      [this, caller](const CommitCheckpointRequest& r)
          -> absl::StatusOr<CommitCheckpointResponse> {
        if (!caller.ok()) return caller;
        if (absl::Status s = checkpoints_->CommitCheckpoint(r); !s.ok()) {
          return s;
        }
        return CommitCheckpointResponse();
      });
}

grpc::ServerUnaryReactor* ParameterServerService::ListVariables(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<ListVariablesRequest>(
      context, "ListVariables", request, response, /*detached=*/false,
      [this](const ListVariablesRequest& request)
          -> absl::StatusOr<ListVariablesResponse> {
        ListVariablesResponse out;
        out.set_ps_task(store_->ps_task());
        out.set_num_ps(store_->num_ps());
        for (const LocalVariable* v : store_->Variables()) {
          VariableInfo* info = out.add_variables();
          *info->mutable_spec() = v->layout->spec;
          for (int s = 0; s < v->layout->num_shards(); ++s) {
            if (!v->Holds(s)) continue;
            const ShardLayout& layout = v->layout->shards[s];
            ShardInfo* shard = info->add_shards();
            shard->set_shard(s);
            shard->set_ps_task(layout.ps_task);
            shard->set_row_begin(layout.row_begin);
            shard->set_num_rows(v->shard(s).num_rows());
            shard->set_bytes(v->shard(s).bytes());
            shard->set_version(v->shard(s).version());
            const HashRowCounts admission = v->shard(s).row_counts();
            shard->set_admitted_rows(admission.admitted_rows);
            shard->set_unadmitted_gradients(admission.unadmitted_gradients);
            shard->set_evicted_rows(admission.evicted_rows);
            shard->set_spilled_rows(admission.spilled_rows);
            shard->set_promoted_rows(admission.promoted_rows);
            shard->set_spilled_bytes(admission.spilled_bytes);
            shard->set_backup(v->IsBackup(s));
            shard->set_role(ShardRole::Name(v->roles[s].role()));
            if (request.with_digests()) {
              shard->set_digest(ShardDigest(v->shard(s)));
            }
          }
          for (int s = 0; request.with_layout() && s < v->layout->num_shards();
               ++s) {
            const ShardLayout& layout = v->layout->shards[s];
            ShardInfo* shard = info->add_layout();
            shard->set_shard(s);
            shard->set_ps_task(layout.ps_task);
            shard->set_row_begin(layout.row_begin);
            shard->set_num_rows(layout.num_rows);
          }
        }
        return out;
      });
}

grpc::ServerUnaryReactor* ParameterServerService::GetStats(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<StatsRequest>(
      context, "GetStats", request, response, /*detached=*/false,
      [this](const StatsRequest&) -> absl::StatusOr<StatsResponse> {
        StatsResponse out;
        out.set_ps_task(store_->ps_task());
        out.set_replicas(store_->replicas().replicas());
        if (membership_ != nullptr) {
          out.set_membership_epoch(membership_->epoch());
          for (int t : membership_->failed()) out.add_failed_ps(t);
          for (const auto& [task, term] : membership_->terms()) {
            (*out.mutable_ps_terms())[task] = term;
          }
        }
        out.set_parameter_bytes(store_->parameter_bytes());
        out.set_num_shards(store_->num_local_shards());
        out.set_pull_requests(Count(pull_.requests));
        out.set_push_requests(Count(push_.requests));
        out.set_rejected_pushes(
            metrics_
                ->GetCounter("psrt_errors_total",
                             "RPCs that failed, by status code",
                             {{"method", "Push"}, {"code", "INVALID_ARGUMENT"}})
                ->Value());
        out.set_rejected_nonfinite_pushes(Count(rejected_nonfinite_));
        out.set_bytes_in(Count(pull_.bytes_in) + Count(push_.bytes_in));
        out.set_bytes_out(Count(pull_.bytes_out));
        out.set_rows_pulled(Count(pull_.rows));
        out.set_rows_pushed(Count(push_.rows));
        out.set_uptime_seconds(SecondsSince(started_));
        out.set_global_step(store_->global_step());
        out.set_restored_from(restored_from_);
        for (const TransferSnapshot& t : ActiveTransfers()) {
          Transfer* transfer = out.add_transfers();
          transfer->set_what(t.what);
          transfer->set_done_bytes(t.done_bytes);
          transfer->set_total_bytes(t.total_bytes);
          transfer->set_seconds(t.seconds);
        }
        return out;
      });
}

std::string ParameterServerService::StatusPageHtml() const {
  StatusPageData d;
  d.ps_task = store_->ps_task();
  d.num_ps = store_->num_ps();
  d.uptime_seconds = SecondsSince(started_);
  d.global_step = store_->global_step();
  d.restored_from = restored_from_;
  d.replicas = store_->replicas().replicas();
  if (membership_ != nullptr) d.failed_ps = membership_->failed();
  if (lease_ != nullptr) d.lease = lease_->Check().ok() ? "held" : "NOT HELD";
  d.replaced = replicator_ != nullptr && replicator_->replaced();
  d.bytes_per_ps.assign(d.num_ps, 0);
  for (const LocalVariable* v : store_->Variables()) {
    const VariableLayout& layout = *v->layout;
    StatusPageData::Variable row;
    row.name = v->name();
    row.kind = VariableKind_Name(layout.kind());
    row.num_shards = layout.num_shards();
    row.admission_min_count = layout.spec.admission().min_count();
    row.eviction_ttl_steps = layout.spec.eviction().ttl_steps();
    row.eviction_max_rows = layout.spec.eviction().max_rows();
    HashRowCounts counts;
    for (int s = 0; s < layout.num_shards(); ++s) {
      const ShardLayout& shard = layout.shards[s];
      if (layout.kind() != HASH_EMBEDDING && shard.ps_task < d.num_ps) {
        d.bytes_per_ps[shard.ps_task] += shard.bytes;
      }
      if (!v->Holds(s)) continue;
      ++(v->IsPrimary(s) ? d.primary_shards : d.backup_shards);
      ++row.local_shards;
      row.local_rows += v->shard(s).num_rows();
      counts += v->shard(s).row_counts();
      if (layout.kind() == HASH_EMBEDDING) {
        d.bytes_per_ps[d.ps_task] += v->shard(s).bytes();
      }
    }
    row.admitted_rows = counts.admitted_rows;
    row.unadmitted_gradients = counts.unadmitted_gradients;
    row.evicted_rows = counts.evicted_rows;
    row.ssd_tier = layout.spec.storage().tier() == StorageSpec::SSD;
    row.spilled_rows = counts.spilled_rows;
    row.local_bytes = v->bytes();
    d.variables.push_back(std::move(row));
  }
  d.pull_requests = Count(pull_.requests);
  d.push_requests = Count(push_.requests);
  d.rows_pulled = Count(pull_.rows);
  d.rows_pushed = Count(push_.rows);
  d.bytes_in = Count(pull_.bytes_in) + Count(push_.bytes_in);
  d.bytes_out = Count(pull_.bytes_out);
  d.recent_rates =
      recent_rates_.Rates(RequestCounters(), absl::Now(), &d.recent_seconds);
  if (checkpoints_ != nullptr) {
    for (const auto& c : checkpoints_->SaveHistory()) {
      d.checkpoints.push_back({c.name, c.bytes, c.seconds, c.finished});
    }
  }
  const absl::Time now = absl::Now();
  for (const WorkersSeen::Worker& w : workers_seen_.Workers()) {
    d.workers.push_back(
        {w.index, w.last_step, absl::ToDoubleSeconds(now - w.last_seen)});
  }
  return RenderStatusPage(d);
}

namespace {
// Answers a streaming call with an error at once (a call without the token).
class RejectWriteReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  RejectWriteReactor(ParameterServerService* service, const absl::Status& s) {
    service->FinishFailed(this, "Pull", s);
  }
  void OnDone() override { delete this; }
};
class RejectReadReactor final
    : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  RejectReadReactor(ParameterServerService* service, const char* method,
                    const absl::Status& s) {
    service->FinishFailed(this, method, s);
  }
  void OnDone() override { delete this; }
};
}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* ParameterServerService::Pull(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  absl::Status s = CheckToken(context, auth_token_);
  if (s.ok()) s = CheckNotReplaced();
  if (!s.ok()) return new RejectWriteReactor(this, s);
  return new PullReactor(this, request);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterServerService::Push(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  absl::Status s = CheckToken(context, auth_token_);
  if (s.ok()) s = CheckNotReplaced();
  if (!s.ok()) return new RejectReadReactor(this, "Push", s);
  return new PushReactor(this, response);
}

grpc::ServerUnaryReactor* ParameterServerService::OpenDataPlane(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<OpenDataPlaneRequest>(
      context, "OpenDataPlane", request, response, /*detached=*/false,
      [this, context](const OpenDataPlaneRequest& r)
          -> absl::StatusOr<OpenDataPlaneResponse> {
        DataPlaneCaller caller;
        if (r.from_peer()) {
          // As a PS-to-PS call over gRPC would be checked; and served
          // while this PS waits for its own backups, as Replicate is (its
          // primary's stream may be what they wait on).
          absl::StatusOr<int> task = CheckPeerCaller(context, "OpenDataPlane");
          if (!task.ok()) return task.status();
          caller = *task;
        } else if (absl::Status s = CheckNotReplaced(); !s.ok()) {
          return s;
        }
        if (data_planes_ == nullptr) {
          return absl::FailedPreconditionError(
              "this PS serves pushes and pulls over gRPC only "
              "(--data_plane=grpc, TLS required, or no libfabric provider "
              "opened here)");
        }
        return data_planes_->Open(r, caller);
      });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterServerService::Replicate(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  absl::Status s = CheckToken(context, auth_token_);
  absl::StatusOr<int> caller = -1;
  if (s.ok()) caller = CheckPeerCaller(context, "Replicate");
  if (s.ok()) s = caller.status();
  if (!s.ok()) return new RejectReadReactor(this, "Replicate", s);
  return new ReadAllReactor<ReplicateCall>(this, "Replicate", response,
                                           ReplicateCall(this, *caller));
}

// The data plane's Replicate (data_plane_calls.cc), here beside
// ReplicateCall: the gRPC call's path on a body that arrived whole.
void ParameterServerService::ServeDataPlaneReplicate(
    std::vector<grpc::ByteBuffer> messages, int proven_from,
    dataplane::Respond respond) {
  ReplicateCall call(this, proven_from);
  for (const grpc::ByteBuffer& message : messages) {
    absl::Status s = AnswerOutOfMemory(
        "Replicate", [&] { return call.AddMessage(message); });
    if (!s.ok()) {
      FailDataPlane("Replicate", s, std::move(respond));
      return;
    }
  }
  absl::StatusOr<ReplicateResponse> result = call.Finish();
  if (!result.ok()) {
    FailDataPlane("Replicate", result.status(), std::move(respond));
    return;
  }
  auto bytes = std::make_shared<std::string>(result->SerializeAsString());
  respond(dataplane::Reply{
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes->data()),
                          bytes->size()),
      bytes});
}

absl::Status ParameterServerService::CheckNotReplaced() const {
  if (replicator_ != nullptr && !replicator_->ready()) {
    return absl::UnavailableError(absl::StrCat(
        "PS ", store_->ps_task(),
        " is waiting for its backups to accept its stream (--replicas)"));
  }
  if (lease_ != nullptr) {
    if (absl::Status s = lease_->Check(); !s.ok()) return s;
  }
  if (replicator_ != nullptr && replicator_->replaced()) {
    return absl::UnavailableError(absl::StrCat(
        "PS ", store_->ps_task(),
        " was replaced by its backup (failover) and serves nothing; ask any "
        "PS for the cluster's failovers (GetStats) and use the backup"));
  }
  if (replicator_ != nullptr && replicator_->active() &&
      !restored_from_.empty() && !told_serving_restored_.exchange(true)) {
    // A backup that had followed this PS's previous process would have
    // taken its shards over (it would be replaced now): none did.
    LOG(WARNING) << "PS " << store_->ps_task() << " serves its shards as "
                 << "restored from " << restored_from_ << " (step "
                 << store_->global_step() << "): no backup held a live copy "
                 << "of them, so their updates after that checkpoint are lost";
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ParameterServerService::Suspect(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::StatusOr<int> caller = CheckPeerCaller(context, "Suspect");
  return ServeUnary<SuspectRequest>(
      context, "Suspect", request, response, /*detached=*/caller.ok(),
      [this,
       caller](const SuspectRequest& r) -> absl::StatusOr<SuspectResponse> {
        if (!caller.ok()) return caller.status();
        if (peers_ == nullptr) {
          return absl::FailedPreconditionError(
              "Suspect: this PS runs without replicas");
        }
        if (r.task() < 0 || r.task() >= peers_->size() ||
            r.task() == peers_->self()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "Suspect: task ", r.task(), " is not another PS of this ",
              peers_->size(), "-PS cluster"));
        }
        if (absl::Status s =
                CheckNamesCaller(*caller, r.from_task(), "Suspect");
            !s.ok()) {
          return s;
        }
        SuspectResponse out;
        // A drop: the caller's view without the suspect, recorded before
        // it acknowledges a push without it. A takeover: what this PS
        // knows of the suspect's stream.
        if (r.drop()) membership_->RecordView(r.from_task(), r.view());
        if (r.takeover()) *out.mutable_view() = membership_->ViewOf(r.task());
        // A PS that holds a lease from here is reachable whatever the
        // ping says; an unreachable answer is a vote (membership.h).
        const bool pinged = membership_->HoldsLeaseFromHere(r.task()) ||
                            peers_->Ping(r.task(), absl::Seconds(1)).ok();
        out.set_reachable(membership_->VoteReachable(r.task(), pinged));
        return out;
      });
}

grpc::ServerUnaryReactor* ParameterServerService::Rejoin(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::StatusOr<int> caller = CheckPeerCaller(context, "Rejoin");
  // Detached: the snapshot takes as long as its shards take to send.
  return ServeUnary<RejoinRequest>(
      context, "Rejoin", request, response, /*detached=*/caller.ok(),
      [this, caller](const RejoinRequest& r) -> absl::StatusOr<RejoinResponse> {
        if (!caller.ok()) return caller.status();
        if (absl::Status s = CheckNamesCaller(*caller, r.from_task(), "Rejoin");
            !s.ok()) {
          return s;
        }
        if (peers_ == nullptr) {
          return absl::FailedPreconditionError(
              "Rejoin: this PS runs without replicas");
        }
        if (absl::Status s = CheckNotReplaced(); !s.ok()) return s;
        return ServeRejoin(store_, replicator_, peers_, &dedup_scopes_,
                           r.from_task());
      });
}

grpc::ServerUnaryReactor* ParameterServerService::Handback(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::StatusOr<int> caller = CheckPeerCaller(context, "Handback");
  // Detached: waits for the caller to apply the last updates of its shards.
  return ServeUnary<HandbackRequest>(
      context, "Handback", request, response, /*detached=*/caller.ok(),
      [this,
       caller](const HandbackRequest& r) -> absl::StatusOr<HandbackResponse> {
        if (!caller.ok()) return caller.status();
        if (absl::Status s =
                CheckNamesCaller(*caller, r.from_task(), "Handback");
            !s.ok()) {
          return s;
        }
        if (transfer_ == nullptr) {
          return absl::FailedPreconditionError(
              "Handback: this PS runs without replicas");
        }
        return transfer_->ServeHandback(r);
      });
}

grpc::ServerReadReactor<grpc::ByteBuffer>*
ParameterServerService::InstallSnapshot(grpc::CallbackServerContext* context,
                                        grpc::ByteBuffer* response) {
  absl::Status s = CheckToken(context, auth_token_);
  absl::StatusOr<int> caller = -1;
  if (s.ok()) caller = CheckPeerCaller(context, "InstallSnapshot");
  if (s.ok()) s = caller.status();
  if (!s.ok()) return new RejectReadReactor(this, "InstallSnapshot", s);
  return new ReadAllReactor<SnapshotInstaller>(
      this, "InstallSnapshot", response,
      SnapshotInstaller(store_, &replica_applier_, *caller));
}

grpc::ServerUnaryReactor* ParameterServerService::RenewLease(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::StatusOr<int> caller = CheckPeerCaller(context, "RenewLease");
  return ServeUnary<LeaseRequest>(
      context, "RenewLease", request, response, /*detached=*/false,
      [this, caller](const LeaseRequest& r) -> absl::StatusOr<LeaseResponse> {
        if (!caller.ok()) return caller.status();
        if (absl::Status s =
                CheckNamesCaller(*caller, r.from_task(), "RenewLease");
            !s.ok()) {
          return s;
        }
        if (membership_ == nullptr || peers_ == nullptr) {
          return absl::FailedPreconditionError(
              "RenewLease: this PS runs without replicas");
        }
        if (r.from_task() < 0 || r.from_task() >= peers_->size() ||
            r.from_task() == peers_->self()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "RenewLease: from_task ", r.from_task(),
              " is not another PS of this ", peers_->size(), "-PS cluster"));
        }
        // Its stream view, before the grant: a replaced PS's view is as
        // true as any (the newer version wins).
        membership_->RecordView(r.from_task(), r.view());
        if (absl::Status s = membership_->Grant(r.from_task(), r.from_term());
            !s.ok()) {
          return s;
        }
        LeaseResponse out;
        for (int t : membership_->failed()) out.add_failed_ps(t);
        for (const auto& [task, term] : membership_->terms()) {
          (*out.mutable_ps_terms())[task] = term;
        }
        return out;
      });
}

grpc::ServerUnaryReactor* ParameterServerService::Rendezvous(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<RendezvousRequest>(
      context, "Rendezvous", request, response, /*detached=*/false,
      [this](const RendezvousRequest& r) -> absl::StatusOr<RendezvousResponse> {
        if (store_->ps_task() != 0) {
          return absl::FailedPreconditionError(absl::StrCat(
              "Rendezvous: the workers' all-reduce ring meets on PS 0; this "
              "is PS ",
              store_->ps_task()));
        }
        return rendezvous_.Serve(r);
      });
}

grpc::ServerUnaryReactor* ParameterServerService::Witness(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<WitnessRequest>(
      context, "Witness", request, response, /*detached=*/false,
      [this](const WitnessRequest& r) -> absl::StatusOr<WitnessResponse> {
        if (membership_ == nullptr || lease_ == nullptr ||
            membership_->witnesses() == 0) {
          return absl::FailedPreconditionError(
              "Witness: this PS takes no votes from workers (they vote only "
              "with 2 PS, --replicas > 1 and no --peer_secret_file)");
        }
        absl::StatusOr<Membership::WitnessCall> call = membership_->Witness(r);
        if (!call.ok()) return call.status();
        lease_->Witnessed(r.worker(), call->granted_since);
        WitnessResponse out;
        out.set_challenge(call->challenge);
        *out.mutable_view() = lease_->View();
        for (const auto& [task, term] : membership_->terms()) {
          (*out.mutable_ps_terms())[task] = term;
        }
        return out;
      });
}

}  // namespace psrt
