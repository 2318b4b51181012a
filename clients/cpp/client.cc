#include "clients/cpp/client.h"

#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "clients/cpp/batched_call.h"
#include "clients/cpp/ps_connection.h"
#include "clients/cpp/ps_task_status.h"
#include "clients/cpp/step_plan.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "partitioner/variable_spec.h"
#include "ps_server/peers/grpc_peer_transport.h"

namespace psrt {
namespace {

// Retries a unary control RPC on UNAVAILABLE with the client's backoff.
template <typename Call>
grpc::Status CallWithRetry(const ClientOptions& options, Call&& call) {
  absl::Duration backoff = options.initial_backoff;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + options.call_timeout));
    grpc::Status s = call(&context);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE ||
        attempt >= options.max_attempts) {
      return s;
    }
    options.clock->SleepFor(backoff);
    backoff = std::min(options.max_backoff, backoff * 2);
  }
}

}  // namespace

PendingCall::PendingCall(std::unique_ptr<BatchedCall> request)
    : request_(std::move(request)) {}

PendingCall::~PendingCall() {
  if (!waited_) Wait().IgnoreError();
}

int64_t PendingCall::sync_step() const { return request_->sync_step(); }

absl::Status PendingCall::Wait() {
  if (!waited_) {
    status_ = request_->Wait();
    waited_ = true;
  }
  return status_;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  if (options.ps_addresses.empty()) {
    return absl::InvalidArgumentError("ClientOptions.ps_addresses is empty");
  }
  if (options.message_bytes < 4096) {
    return absl::InvalidArgumentError("ClientOptions.message_bytes < 4096");
  }
  if (options.max_attempts < 1) options.max_attempts = 1;
  if (options.clock == nullptr) options.clock = Clock::Real();
  // Read the certificates now so a bad path is an error here, not a
  // connection that never comes up.
  if (auto credentials = MakeChannelCredentials(options.security);
      !credentials.ok()) {
    return credentials.status();
  }
  return std::unique_ptr<Client>(new Client(std::move(options)));
}

Client::Client(ClientOptions options)
    : options_(std::move(options)),
      client_id_(std::random_device{}() * uint64_t{0x100000000} ^
                 std::random_device{}()),
      catalog_(static_cast<int>(options_.ps_addresses.size())),
      routing_(options_.ps_addresses, options_.clock) {
  for (size_t i = 0; i < options_.ps_addresses.size(); ++i) {
    connections_.push_back(std::make_unique<PsConnection>(
        static_cast<int>(i), options_.ps_addresses[i], options_));
  }
  // Only 2-PS clusters take workers' votes; a PS that takes none says so
  // and is not called again.
  const int witness = options_.witness_index == ClientOptions::kSameAsWorker
                          ? options_.worker_index
                          : options_.witness_index;
  if (witness >= 0 && num_ps() == 2) {
    // Its own channels: a grant must not wait behind a large push.
    auto transport = GrpcPeerTransport::Create(options_.ps_addresses,
                                               /*self=*/-1, options_.security);
    if (transport.ok()) {
      WorkerWitness::Options o;
      o.clock = options_.clock;
      witness_ = std::make_unique<WorkerWitness>(witness, num_ps(),
                                                 *std::move(transport), o);
    }
  }
}

Client::~Client() = default;

absl::Status Client::WaitForServers(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const auto& c : connections_) {
    if (absl::Status s = c->WaitHealthy(deadline); !s.ok()) {
      return WithPsTask(std::move(s), c->ps_task());
    }
  }
  return absl::OkStatus();
}

const VariableLayout* Client::Find(absl::string_view name) const {
  absl::ReaderMutexLock lock(&catalog_mu_);
  return catalog_.Find(name);
}

absl::Status Client::RefreshCatalog() {
  absl::MutexLock lock(&create_mu_);
  return RefreshCatalogLocked();
}

absl::Status Client::RefreshCatalogLocked() {
  ListVariablesResponse response;
  const PsConnection& ps0 = *connections_[0];
  grpc::Status s = CallWithRetry(options_, [&](grpc::ClientContext* context) {
    return ps0.stub()->ListVariables(context, ListVariablesRequest(),
                                     &response);
  });
  if (!s.ok()) return ps0.StatusOf(s, "ListVariables on");
  if (response.num_ps() != num_ps()) {
    return absl::FailedPreconditionError(absl::StrCat(
        ps0.Describe(), " is part of a ", response.num_ps(),
        "-PS cluster but this client was given ", num_ps(), " PS addresses"));
  }
  absl::MutexLock catalog_lock(&catalog_mu_);
  const auto& known = catalog_.variables();
  for (int i = 0; i < response.variables_size(); ++i) {
    const VariableSpec& spec = response.variables(i).spec();
    if (i < static_cast<int>(known.size())) {
      if (!SameSpec(known[i].spec, spec)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the cluster's catalog changed under this client: position ", i,
            " was {", DescribeSpec(known[i].spec), "} and is now {",
            DescribeSpec(spec), "} (servers restarted with another model?)"));
      }
      continue;
    }
    if (absl::Status added = catalog_.Add(spec); !added.ok()) return added;
  }
  return absl::OkStatus();
}

absl::Status Client::CreateVariables(std::vector<VariableSpec> specs) {
  for (VariableSpec& spec : specs) {
    if (absl::Status s = NormalizeVariableSpec(&spec); !s.ok()) return s;
  }
  absl::MutexLock lock(&create_mu_);
  // Another process may be creating the same or other variables: learn the
  // catalog, send what is new at its end, and start over if PS 0 says the
  // catalog moved meanwhile, or holds another creation (which may be
  // restoring a large checkpoint: wait for up to kCreationWaitLimit).
  Clock* const clock = options_.clock;
  const absl::Time give_up_at = clock->Now() + kCreationWaitLimit;
  absl::Time next_wait_note = clock->Now() + absl::Seconds(10);
  for (int attempt = 0;; ++attempt) {
    if (absl::Status s = RefreshCatalogLocked(); !s.ok()) return s;
    // PS 0 orders concurrent creators and gets only what is new (at the
    // end of its catalog). Every other PS gets the whole catalog, PS 0's
    // plus the new specs, so that one that fell behind -- it restarted
    // empty (and restores its shards if started with --restore), or missed
    // a commit -- catches up; known specs are accepted again unchanged.
    CreateVariablesRequest request, whole;
    request.set_num_ps(num_ps());
    whole.set_num_ps(num_ps());
    {
      absl::ReaderMutexLock catalog_lock(&catalog_mu_);
      request.set_first_index(static_cast<int>(catalog_.variables().size()));
      for (const VariableLayout& v : catalog_.variables()) {
        *whole.add_specs() = v.spec;
      }
      for (const VariableSpec& spec : specs) {
        const VariableLayout* existing = catalog_.Find(spec.name());
        if (existing == nullptr) {
          *request.add_specs() = spec;
          *whole.add_specs() = spec;
        } else if (!SameSpec(existing->spec, spec)) {
          return absl::AlreadyExistsError(
              absl::StrCat("variable '", spec.name(),
                           "' already exists with a different "
                           "spec: existing {",
                           DescribeSpec(existing->spec), "}, requested {",
                           DescribeSpec(spec), "}"));
        }
      }
    }
    if (request.specs_size() == 0) request = whole;  // PS 0 may have restarted
    // All or nothing across PS: prepare everywhere (PS 0 first: it orders
    // concurrent creators), then commit everywhere, PS 0 last so that no
    // other creator gets past it before every PS has committed this one.
    const uint64_t creation_id =
        client_id_ ^ (next_request_id_.fetch_add(1) * 0x9E3779B97F4A7C15ull);
    auto call = [&](const PsConnection& c, CreateVariablesRequest r,
                    CreateVariablesRequest::Phase phase,
                    CreateVariablesResponse* response = nullptr) {
      r.set_phase(phase);
      r.set_creation_id(creation_id);
      if (phase != CreateVariablesRequest::PREPARE) r.clear_specs();
      // Servers started with --restore fill the shards in the background,
      // all at once; AWAIT below waits for each.
      r.set_fill_in_background(true);
      CreateVariablesResponse ignored;
      if (response == nullptr) response = &ignored;
      return CallWithRetry(options_, [&](grpc::ClientContext* ctx) {
        return c.stub()->CreateVariables(ctx, r, response);
      });
    };
    std::vector<const PsConnection*> prepared;
    grpc::Status failed;
    const PsConnection* failed_at = nullptr;
    for (const auto& c : connections_) {
      failed = call(*c, c->ps_task() == 0 ? request : whole,
                    CreateVariablesRequest::PREPARE);
      if (!failed.ok()) {
        failed_at = c.get();
        break;
      }
      prepared.push_back(c.get());
    }
    // Only PS 0 refusing to prepare is a lost race worth retrying; a fill
    // that failed (AWAIT: a checkpoint that does not fit, say) is final.
    const bool lost_race =
        failed_at != nullptr && failed_at->ps_task() == 0 &&
        failed.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
    // Every PS restores (if it was started with --restore) at once; wait
    // for each, showing that the job is not stuck.
    const absl::Time awaiting_since = clock->Now();
    absl::Time next_note = awaiting_since + absl::Seconds(10);
    for (size_t i = 0; failed_at == nullptr && i < prepared.size();) {
      CreateVariablesResponse response;
      CreateVariablesRequest await;
      await.set_await_ms(5000);
      failed =
          call(*prepared[i], await, CreateVariablesRequest::AWAIT, &response);
      const bool predates_await =
          failed.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
          absl::StrContains(failed.error_message(), "unknown phase");
      if (predates_await) {
        // A server older than AWAIT filled its shards inside PREPARE.
        failed = grpc::Status::OK;
        ++i;
      } else if (!failed.ok()) {
        failed_at = prepared[i];
      } else if (!response.restoring()) {
        ++i;
      } else if (clock->Now() >= next_note) {
        LOG(INFO) << "CreateVariables: " << prepared[i]->Describe()
                  << " is still restoring from its checkpoint ("
                  << absl::ToInt64Seconds(clock->Now() - awaiting_since)
                  << " s; its log shows MB/s and the time left)";
        next_note = clock->Now() + absl::Seconds(10);
      }
    }
    if (failed_at != nullptr) {
      for (const PsConnection* c : prepared) {
        (void)call(*c, request, CreateVariablesRequest::ABORT);
      }
      if (lost_race && clock->Now() < give_up_at) {
        // Lost a race at PS 0 (the catalog moved, or another creation --
        // perhaps a long restore -- is in progress): nothing was created
        // anywhere; look again.
        if (clock->Now() >= next_wait_note) {
          LOG(INFO) << "CreateVariables: waiting for another creation on "
                    << failed_at->Describe() << ": " << failed.error_message();
          next_wait_note = clock->Now() + absl::Seconds(10);
        }
        clock->SleepFor(absl::Milliseconds(std::min(20 * (attempt + 1), 1000)));
        continue;
      }
      absl::Status s = failed_at->StatusOf(failed, "CreateVariables on");
      return WithMessage(
          s, absl::StrCat(s.message(), " [nothing was created on any PS]"));
    }
    std::string uncommitted;
    for (auto it = connections_.rbegin(); it != connections_.rend(); ++it) {
      const grpc::Status s =
          call(**it, request, CreateVariablesRequest::COMMIT);
      if (!s.ok()) {
        absl::StrAppend(&uncommitted, uncommitted.empty() ? "" : "; ",
                        (*it)->Describe(), ": ", s.error_message());
      }
    }
    if (!uncommitted.empty()) {
      return absl::UnavailableError(absl::StrCat(
          "CreateVariables: prepared on every PS but not committed on ",
          uncommitted,
          " (that PS died or restarted); creating the variables again once "
          "it is back repairs it"));
    }
    break;
  }
  return RefreshCatalogLocked();
}

absl::StatusOr<std::unique_ptr<PendingCall>> Client::StartPull(
    absl::Span<const PullOp> ops, const StepOptions& step) {
  absl::StatusOr<StepPlan> plan;
  {
    absl::ReaderMutexLock lock(&catalog_mu_);
    plan = PlanPull(catalog_, ops);
  }
  return Start(std::move(plan), /*push=*/false, step);
}

absl::StatusOr<std::unique_ptr<PendingCall>> Client::StartPush(
    absl::Span<const PushOp> ops, const StepOptions& step) {
  absl::StatusOr<StepPlan> plan;
  {
    absl::ReaderMutexLock lock(&catalog_mu_);
    plan = PlanPush(catalog_, ops);
  }
  return Start(std::move(plan), /*push=*/true, step);
}

absl::StatusOr<std::unique_ptr<PendingCall>> Client::Start(
    absl::StatusOr<StepPlan> plan, bool push, const StepOptions& step) {
  if (!plan.ok()) return plan.status();
  const BatchedCall::Context context{&connections_,     &options_, client_id_,
                                     &next_request_id_, step,      &routing_};
  std::unique_ptr<BatchedCall> request =
      push ? BatchedCall::ForPush(context, std::move(*plan))
           : BatchedCall::ForPull(context, std::move(*plan));
  request->Start();
  return std::unique_ptr<PendingCall>(new PendingCall(std::move(request)));
}

absl::Status Client::Pull(absl::Span<const PullOp> ops,
                          const StepOptions& step) {
  auto pending = StartPull(ops, step);
  if (!pending.ok()) return pending.status();
  return (*pending)->Wait();
}

absl::Status Client::Push(absl::Span<const PushOp> ops,
                          const StepOptions& step) {
  auto pending = StartPush(ops, step);
  if (!pending.ok()) return pending.status();
  return (*pending)->Wait();
}

absl::Status Client::PullDense(const std::string& variable, float* out) {
  return Pull({PullOp::Dense(variable, out)});
}

absl::Status Client::PushDense(const std::string& variable, const float* grad) {
  return Push({PushOp::Dense(variable, grad)});
}

absl::Status Client::PullRows(const std::string& variable,
                              absl::Span<const int64_t> ids, float* out) {
  return Pull({PullOp::Rows(variable, ids, out)});
}

absl::Status Client::PushRows(const std::string& variable,
                              absl::Span<const int64_t> ids,
                              const float* grads) {
  return Push({PushOp::Rows(variable, ids, grads)});
}

absl::StatusOr<std::vector<ListVariablesResponse>> Client::ListVariables(
    const ListVariablesRequest& request) {
  std::vector<ListVariablesResponse> out(connections_.size());
  for (size_t i = 0; i < connections_.size(); ++i) {
    grpc::Status s = CallWithRetry(options_, [&](grpc::ClientContext* ctx) {
      return connections_[i]->stub()->ListVariables(ctx, request, &out[i]);
    });
    if (!s.ok()) return connections_[i]->StatusOf(s, "ListVariables on");
  }
  return out;
}

absl::StatusOr<CheckpointResponse> Client::Checkpoint(const std::string& uri,
                                                      absl::Duration timeout) {
  CheckpointRequest request;
  request.set_checkpoint_uri(uri);
  CheckpointResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  const grpc::Status s =
      connections_[0]->stub()->Checkpoint(&context, request, &response);
  if (!s.ok()) return connections_[0]->StatusOf(s, "Checkpoint on");
  return response;
}

absl::StatusOr<RendezvousResponse> Client::Rendezvous(
    const RendezvousRequest& request) {
  RendezvousResponse response;
  grpc::Status s = CallWithRetry(options_, [&](grpc::ClientContext* ctx) {
    return connections_[0]->stub()->Rendezvous(ctx, request, &response);
  });
  if (!s.ok()) return connections_[0]->StatusOf(s, "Rendezvous on");
  return response;
}

absl::StatusOr<std::vector<StatsResponse>> Client::Stats() {
  std::vector<StatsResponse> out(connections_.size());
  for (size_t i = 0; i < connections_.size(); ++i) {
    grpc::Status s = CallWithRetry(options_, [&](grpc::ClientContext* ctx) {
      return connections_[i]->stub()->GetStats(ctx, StatsRequest(), &out[i]);
    });
    if (!s.ok()) return connections_[i]->StatusOf(s, "GetStats on");
  }
  return out;
}

}  // namespace psrt
