#include "clients/cpp/batched_call.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "clients/cpp/data_plane_rpc.h"
#include "clients/cpp/ps_task_status.h"
#include "glog/logging.h"
#include "proto/frame_packer.h"
#include "util/wire_dtype.h"

namespace psrt {
namespace {

// Ids per Pull request message at most; more go in further calls.
size_t MaxIdsPerPullRequest(const ClientOptions& options) {
  return std::max<size_t>(options.message_bytes * 4 / sizeof(int64_t), 1024);
}

// A PS's embedding ids beyond this many are spread over one call per
// channel, so that big pulls move over all the PS's connections at once
// (rows are independent: each stays consistent). Dense shards are never
// split: a dense shard is always read at one version.
constexpr size_t kIdsWorthSplitting = 32768;

// A PS's embedding items grouped by their ids: the tables of one model are
// looked up with the same ids and, sharded alike, each PS gets the same ids
// for all of them; the ids then travel once per message, named by every
// item of the group (TensorItem.ids_payload is an index into the message's
// payloads). Groups keep the items' order of first appearance.
std::vector<std::vector<const PlannedItem*>> GroupBySameIds(
    const std::vector<PlannedItem>& items) {
  std::vector<std::vector<const PlannedItem*>> groups;
  for (const PlannedItem& item : items) {
    if (item.layout->kind() == DENSE) continue;
    auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
      const std::vector<int64_t>& ids = g.front()->ids;
      return ids.size() == item.ids.size() &&
             std::memcmp(ids.data(), item.ids.data(),
                         ids.size() * sizeof(int64_t)) == 0;
    });
    if (same == groups.end()) {
      groups.push_back({&item});
    } else {
      same->push_back(&item);
    }
  }
  return groups;
}

}  // namespace

std::unique_ptr<BatchedCall> BatchedCall::ForPull(const Context& context,
                                                  StepPlan plan) {
  std::unique_ptr<BatchedCall> r(
      new BatchedCall(context, std::move(plan), false));
  r->BuildPullCalls();
  return r;
}

std::unique_ptr<BatchedCall> BatchedCall::ForPush(const Context& context,
                                                  StepPlan plan) {
  std::unique_ptr<BatchedCall> r(
      new BatchedCall(context, std::move(plan), true));
  r->BuildPushCalls();
  return r;
}

BatchedCall::BatchedCall(const Context& context, StepPlan plan, bool push)
    : context_(context), push_(push), plan_(std::move(plan)) {}

BatchedCall::~BatchedCall() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &outstanding_));
}

void BatchedCall::BuildPullCalls() {
  const size_t channels = std::max(1, context_.options->channels_per_ps);
  for (size_t ps = 0; ps < plan_.items_by_ps.size(); ++ps) {
    const std::vector<PlannedItem>& items = plan_.items_by_ps[ps];
    if (items.empty()) continue;
    size_t total_ids = 0;
    for (const PlannedItem& item : items) total_ids += item.ids.size();
    size_t max_ids = MaxIdsPerPullRequest(*context_.options);
    if (total_ids >= kIdsWorthSplitting && channels > 1) {
      max_ids = std::min(max_ids, (total_ids + channels - 1) / channels);
    }
    // One call per request of at most max_ids ids: each is one message,
    // framed like every other psrt message (FramePacker).
    FramePacker<PullRequestHeader> packer(SIZE_MAX);
    std::vector<PullTarget> targets;
    size_t ids_in_request = 0;
    auto flush = [&] {
      packer.Flush([&](PullRequestHeader* header, size_t) {
        header->set_max_response_message_bytes(
            static_cast<uint32_t>(context_.options->message_bytes));
        *header->mutable_consistency() = context_.step.consistency;
        header->set_worker_index(context_.options->worker_index);
        header->set_step(context_.step.step);
        // The barrier of this PS's shards, wherever they are served.
        header->set_for_ps(static_cast<int>(ps));
      });
      Call call;
      call.ps = static_cast<int>(ps);
      call.connection = ConnectionFor(call.ps);
      call.pull_request = std::move(packer.messages().back());
      packer.messages().pop_back();
      call.targets = std::move(targets);
      calls_.push_back(std::move(call));
      targets.clear();
      ids_in_request = 0;
    };
    for (const PlannedItem& item : items) {
      if (item.layout->kind() != DENSE) continue;
      TensorItem* t = packer.header()->add_items();
      t->set_variable(item.layout->spec.name());
      t->set_shard(item.shard);
      t->set_offset(0);
      t->set_count(item.count);
      t->set_dtype(context_.options->wire_dtype);
      targets.push_back({&item, 0, item.count});
    }
    // max_ids counts the rows asked for (ids x items naming them), as the
    // response carries a row per item; a chunk of a group's ids is sent
    // once for all its items.
    for (const auto& group : GroupBySameIds(items)) {
      const std::vector<int64_t>& ids = group.front()->ids;
      for (size_t begin = 0; begin < ids.size();) {
        if (ids_in_request + group.size() > max_ids) flush();
        const size_t n = std::min(
            ids.size() - begin,
            std::max<size_t>(1, (max_ids - ids_in_request) / group.size()));
        const int payload = packer.AddPayload(
            lease_.Lend(ids.data() + begin, n * sizeof(int64_t)));
        for (const PlannedItem* item : group) {
          TensorItem* t = packer.header()->add_items();
          t->set_variable(item->layout->spec.name());
          t->set_shard(item->shard);
          t->set_dtype(context_.options->wire_dtype);
          t->set_ids_payload(payload);
          targets.push_back({item, static_cast<int64_t>(begin),
                             static_cast<int64_t>(n) * item->width()});
        }
        ids_in_request += n * group.size();
        begin += n;
      }
    }
    if (!targets.empty()) flush();
  }
}

const char* BatchedCall::Narrow(WireDtype dtype, const PlannedItem& item) {
  const bool dense = item.layout->kind() == DENSE;
  const float* from = dense ? item.dense_grad : item.grad_rows();
  const size_t n = static_cast<size_t>(item.value_floats());
  narrowed_.emplace_back(new uint16_t[n]);
  NarrowValues(dtype, from, n, narrowed_.back().get());
  return reinterpret_cast<const char*>(narrowed_.back().get());
}

void BatchedCall::BuildPushCalls() {
  const uint64_t request_id = context_.next_request_id->fetch_add(1);
  const size_t limit = context_.options->message_bytes;
  // SYNC and SSP count every worker's step at every PS: PS with nothing to
  // update still get an (empty) push.
  const bool every_ps = context_.step.consistency.mode() != Consistency::ASYNC;
  for (size_t ps = 0; ps < plan_.items_by_ps.size(); ++ps) {
    const std::vector<PlannedItem>& items = plan_.items_by_ps[ps];
    if (items.empty() && !every_ps) continue;
    FramePacker<PushRequestHeader> packer(limit);
    // Identity goes in the first message, the end marker in the last.
    auto identify = [&](PushRequestHeader* header, size_t index) {
      if (index != 0) return;
      header->set_client_id(context_.client_id);
      header->set_request_id(request_id);
      header->set_worker_index(context_.options->worker_index);
      header->set_step(context_.step.step);
      *header->mutable_consistency() = context_.step.consistency;
      header->set_for_ps(static_cast<int>(ps));
    };
    const WireDtype dtype = context_.options->wire_dtype;
    const size_t value_bytes = WireValueBytes(dtype);
    // The gradient as it travels: the plan's floats, or narrowed.
    auto gradient = [&](const PlannedItem& item) {
      if (dtype != FLOAT32) return Narrow(dtype, item);
      return reinterpret_cast<const char*>(
          item.layout->kind() == DENSE ? item.dense_grad : item.grad_rows());
    };
    // Flushes the message if it has no room for `unit_bytes` more; then how
    // many of the `left` units fit (one at least).
    auto fit = [&](int64_t unit_bytes, int64_t left) {
      if (!packer.empty() && packer.room() < static_cast<size_t>(unit_bytes)) {
        packer.Flush(identify);
      }
      return std::min<int64_t>(
          left, std::max<int64_t>(1, packer.room() / unit_bytes));
    };
    auto add_item = [&](const PlannedItem& item) {
      TensorItem* t = packer.header()->add_items();
      t->set_variable(item.layout->spec.name());
      t->set_shard(item.shard);
      t->set_learning_rate(item.learning_rate);
      t->set_dtype(dtype);
      return t;
    };
    // Dense shards, split by float.
    for (const PlannedItem& item : items) {
      if (item.layout->kind() != DENSE) continue;
      // Assigned values travel exact, whatever the wire dtype.
      const WireDtype item_dtype = item.assign ? FLOAT32 : dtype;
      const size_t item_bytes = WireValueBytes(item_dtype);
      const char* grad = item.assign
                             ? reinterpret_cast<const char*>(item.dense_grad)
                             : gradient(item);
      int64_t begin = 0;
      do {
        const int64_t n = fit(item_bytes, item.count - begin);
        TensorItem* t = add_item(item);
        t->set_offset(begin);
        t->set_count(n);
        t->set_dtype(item_dtype);
        t->set_assign(item.assign);
        t->set_grad_payload(packer.AddPayload(
            lease_.Lend(grad + begin * item_bytes, n * item_bytes)));
        begin += n;
      } while (begin < item.count);
    }
    // Rows, split by row; the ids of a group of items once per message.
    for (const auto& group : GroupBySameIds(items)) {
      std::vector<const char*> grads;
      int64_t unit_bytes = sizeof(int64_t);
      for (const PlannedItem* item : group) {
        grads.push_back(gradient(*item));
        unit_bytes += item->width() * value_bytes;
      }
      const std::vector<int64_t>& ids = group.front()->ids;
      const int64_t units = static_cast<int64_t>(ids.size());
      int64_t begin = 0;
      do {
        const int64_t n = fit(unit_bytes, units - begin);
        const int payload = packer.AddPayload(
            lease_.Lend(ids.data() + begin, n * sizeof(int64_t)));
        for (size_t i = 0; i < group.size(); ++i) {
          const size_t row_bytes = group[i]->width() * value_bytes;
          TensorItem* t = add_item(*group[i]);
          t->set_ids_payload(payload);
          t->set_grad_payload(packer.AddPayload(
              lease_.Lend(grads[i] + begin * row_bytes, n * row_bytes)));
        }
        begin += n;
      } while (begin < units);
    }
    packer.Flush([&](PushRequestHeader* header, size_t index) {
      identify(header, index);
      header->set_last(true);
    });
    Call call;
    call.ps = static_cast<int>(ps);
    call.connection = ConnectionFor(call.ps);
    call.push_messages = std::move(packer.messages());
    calls_.push_back(std::move(call));
  }
}

PsConnection* BatchedCall::ConnectionFor(int ps) const {
  const int serving =
      context_.routing == nullptr ? ps : context_.routing->Serving(ps);
  return (*context_.connections)[serving].get();
}

bool BatchedCall::FitsDataPlane(const Call& call) const {
  // A data-plane call is one body each way, held whole in memory: calls
  // beyond (a pull of more than 768 MiB, say) keep to gRPC's stream.
  constexpr uint64_t kMaxBody = uint64_t{768} << 20;
  uint64_t bytes = 0;
  if (push_) {
    for (const grpc::ByteBuffer& m : call.push_messages) bytes += m.Length();
  } else {
    for (const PullTarget& t : call.targets) bytes += t.floats * sizeof(float);
  }
  return bytes <= kMaxBody;
}

void BatchedCall::Launch(Call* call) {
  ++call->attempts;
  const absl::Duration timeout = context_.options->call_timeout;
  DataPlaneLink* data_plane = call->connection->data_plane();
  if (data_plane != nullptr && !FitsDataPlane(*call)) data_plane = nullptr;
  if (data_plane != nullptr && !data_plane->Usable()) data_plane = nullptr;
  if (push_ && data_plane != nullptr) {
    call->rpc = std::make_unique<DataPlanePushCall>(
        data_plane, &call->push_messages, timeout);
  } else if (push_) {
    call->rpc = std::make_unique<PushCall>(call->connection,
                                           &call->push_messages, timeout);
  } else if (data_plane != nullptr) {
    call->rpc = std::make_unique<DataPlanePullCall>(
        data_plane, call->pull_request, &call->targets, timeout);
  } else {
    call->rpc = std::make_unique<PullCall>(call->connection, call->pull_request,
                                           &call->targets, timeout);
  }
  {
    absl::MutexLock lock(&mu_);
    ++outstanding_;
  }
  call->rpc->Start([this] {
    absl::MutexLock lock(&mu_);
    --outstanding_;
  });
}

void BatchedCall::Start() {
  for (Call& call : calls_) Launch(&call);
}

bool BatchedCall::Retryable(const grpc::Status& status) const {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) return true;
  // The same push is still being applied by the PS (an earlier attempt that
  // timed out on our side); asking again learns its outcome.
  return push_ && status.error_code() == grpc::StatusCode::ABORTED &&
         status.error_message().find("still being applied") !=
             std::string::npos;
}

absl::Status BatchedCall::WithPushOutcomes(const absl::Status& failure) const {
  // A push's calls are independent: name what each PS did, so that a
  // caller knows whether anything was applied. Every call is finished here.
  std::string applied, rejected, unknown;
  for (const Call& call : calls_) {
    if (call.rpc == nullptr) continue;
    const grpc::Status& s = call.rpc->status();
    std::string* list = &unknown;
    if (s.ok()) {
      list = &applied;
    } else if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
               s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
               s.error_code() != grpc::StatusCode::CANCELLED &&
               s.error_code() != grpc::StatusCode::ABORTED &&
               s.error_code() != grpc::StatusCode::UNKNOWN &&
               s.error_code() != grpc::StatusCode::INTERNAL) {
      // The PS answered with a refusal: it validates a whole push before
      // applying any of it.
      list = &rejected;
    }
    absl::StrAppend(list, list->empty() ? "" : ", ",
                    call.connection->Describe());
  }
  std::string outcome =
      applied.empty() && unknown.empty()
          ? "nothing was applied on any PS"
          : absl::StrCat("applied on ", applied.empty() ? "no PS" : applied,
                         "; not applied on ",
                         rejected.empty() ? "no PS" : rejected);
  if (!unknown.empty()) {
    absl::StrAppend(&outcome, "; unknown on ", unknown,
                    " (the call broke off: that PS may or may not have "
                    "applied it)");
  }
  return WithMessage(failure,
                     absl::StrCat(failure.message(), " [", outcome, "]"));
}

absl::Status BatchedCall::Wait() {
  const ClientOptions& options = *context_.options;
  absl::Status result;
  // With replicas a PS that fails is replaced by its backup within
  // seconds: calls to it are retried (and redirected) that long, beyond
  // max_attempts.
  absl::Time first_failure = absl::InfiniteFuture();
  auto within_failover = [&] {
    return context_.routing != nullptr && context_.routing->replicas() > 1 &&
           options.clock->Now() - first_failure < options.failover_wait;
  };
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](int* n) { return *n == 0; }, &outstanding_));
    }
    std::vector<Call*> retry;
    // Calls that passed their deadline at a PS that may have a backup.
    std::vector<Call*> timed_out;
    const Call* failed = nullptr;  // the failure the call reports
    auto fail = [&failed](const Call* call) {
      // The first, unless a PS that cannot be reached failed too: its
      // failure is likely the cause of the others' (a primary waiting for
      // its dead backup, say), so that is the PS to name.
      if (failed == nullptr || (!failed->connection->Unreachable() &&
                                call->connection->Unreachable())) {
        failed = call;
      }
    };
    for (Call& call : calls_) {
      if (call.rpc == nullptr) continue;
      const grpc::Status& s = call.rpc->status();
      if (s.ok()) continue;
      // (replicas() is 0 until the routing first asked the servers.)
      const bool timed_out_at_replicated_ps =
          s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
          context_.routing != nullptr && context_.routing->replicas() != 1;
      if (Retryable(s) || timed_out_at_replicated_ps) {
        first_failure = std::min(first_failure, options.clock->Now());
      }
      const bool may_retry =
          call.attempts < options.max_attempts || within_failover();
      if (Retryable(s) && may_retry) {
        retry.push_back(&call);
      } else if (timed_out_at_replicated_ps && may_retry) {
        timed_out.push_back(&call);
      } else {
        fail(&call);
      }
    }
    // A PS that stops answering without closing its connections (paused,
    // hung, cut off) leaves calls to it waiting out their deadline while
    // its backup takes its shards over (within seconds). Such a call is
    // sent again where its shards are served now if the cluster failed
    // them over meanwhile (a retried push is applied once: its backup
    // remembers what it applied); if not, the deadline is the failure.
    if (!timed_out.empty()) {
      context_.routing->Refresh(*context_.connections, absl::Seconds(1));
      for (Call* call : timed_out) {
        if (ConnectionFor(call->ps) != call->connection) {
          retry.push_back(call);
        } else {
          fail(call);
        }
      }
    }
    if (failed != nullptr) {
      result = failed->connection->StatusOf(failed->rpc->status(),
                                            push_ ? "push to" : "pull to");
    }
    if (!result.ok()) {
      if (push_) result = WithPushOutcomes(result);
      break;
    }
    if (retry.empty()) break;
    int attempts = 0;
    for (Call* call : retry) attempts = std::max(attempts, call->attempts);
    absl::Duration backoff =
        std::min(options.max_backoff,
                 options.initial_backoff * (1 << std::min(attempts - 1, 20)));
    static thread_local std::mt19937 jitter(std::random_device{}());
    backoff *= std::uniform_real_distribution<double>(0.8, 1.2)(jitter);
    for (Call* call : retry) {
      LOG(WARNING) << (push_ ? "push to " : "pull from ")
                   << call->connection->Describe() << " failed ("
                   << call->rpc->status().error_message() << "); retry "
                   << call->attempts << " of " << options.max_attempts - 1
                   << " at once if the routing changed, else in "
                   << absl::FormatDuration(backoff);
    }
    // Learn failovers and handbacks (rate-limited): if the routing changed,
    // the retries go where their PS's shards are served now, at once.
    bool rerouted =
        context_.routing != nullptr &&
        context_.routing->Refresh(*context_.connections, absl::Seconds(1));
    if (!rerouted) {
      options.clock->SleepFor(backoff);
      rerouted =
          context_.routing != nullptr &&
          context_.routing->Refresh(*context_.connections, absl::Seconds(1));
    }
    if (context_.routing != nullptr) {
      for (Call* call : retry) call->connection = ConnectionFor(call->ps);
    }
    for (Call* call : retry) Launch(call);
  }
  if (result.ok() && !push_) {
    bool first = true;
    for (const Call& call : calls_) {
      const auto* pull = static_cast<const PullRpcCall*>(call.rpc.get());
      if (pull == nullptr) continue;
      sync_step_ =
          first ? pull->sync_step() : std::min(sync_step_, pull->sync_step());
      first = false;
    }
    for (const RowCopy& copy : plan_.repeated_rows) {
      std::memcpy(copy.dst, copy.src, copy.floats * sizeof(float));
    }
  }
  // The caller may reuse its buffers once Wait returns.
  for (Call& call : calls_) {
    call.rpc.reset();
    call.pull_request.Clear();
    call.push_messages.clear();
  }
  lease_.WaitReturned();
  return result;
}

}  // namespace psrt
