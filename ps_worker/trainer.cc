#include "ps_worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "ps_worker/batch_preparer.h"
#include "ps_worker/data/data_sharding.h"
#include "ps_worker/dense_allreduce.h"
#include "ps_worker/device.h"
#include "ps_worker/evaluation.h"
#include "ps_worker/no_compute_towers.h"
#include "ps_worker/row_cache.h"
#include "ps_worker/summary_writer.h"

namespace psrt {
namespace {

double MillisSince(absl::Time start) {
  return absl::ToDoubleMilliseconds(absl::Now() - start);
}

// Time spent per phase over a logging interval.
struct Breakdown {
  double data = 0, pull = 0, compute = 0, push = 0;
  int64_t steps = 0;
};

}  // namespace

// One step's batch, its parameters (and their pull in flight), and its
// gradients (and their push in flight). Buffers stay put while the calls
// that reference them run.
struct Trainer::Step {
  int64_t index = 0;
  Batch batch;
  // params.slots and params.unique_ids are batch's de-duplicated ids (set
  // with the batch: by the batch preparer, or DeduplicateIds).
  StepParameters params;
  Gradients grads;
  std::vector<PullOp> pull_ops;
  std::vector<PushOp> push_ops;
  std::unique_ptr<PendingCall> pull;
  std::unique_ptr<PendingCall> push;
  // With the row cache: the positions in params.unique_ids that are
  // pulled (the rest came from the cache), their ids and, per table, the
  // pulled rows; and what the push sends for the rows.
  bool through_row_cache = false;
  RowCache::StepRows cached_rows;
  std::vector<int64_t> miss_ids;
  std::vector<std::vector<float>> miss_rows;
  RowCache::Push row_push;
};

Trainer::Trainer(TrainerOptions options)
    : options_(std::move(options)),
      metrics_(options_.evaluator ? "evaluator"
                                  : absl::StrCat(options_.worker_index)) {
  options_.client.worker_index = options_.worker_index;
}

Trainer::~Trainer() = default;

void Trainer::WriteSummary(int64_t step, const Scalars& scalars) {
  if (summary_ == nullptr) return;
  if (absl::Status s = summary_->Scalars(step, scalars); !s.ok()) {
    Log(absl::StrCat("--summary_dir: ", s.ToString(), "; no more summaries"));
    summary_.reset();
  }
}

void Trainer::WriteEvalSummary(int64_t step, const EvalResult& eval) {
  metrics_.Evaluation(eval.auc, eval.log_loss, eval.accuracy);
  Scalars scalars = {{"eval/accuracy", eval.accuracy}};
  if (eval.binary) {
    scalars.push_back({"eval/auc", eval.auc});
    scalars.push_back({"eval/logloss", eval.log_loss});
  }
  WriteSummary(step, scalars);
}

void Trainer::AddPhase(WorkerMetrics::Phase phase, double ms, double* total) {
  *total += ms;
  metrics_.AddPhase(phase, ms);
}

void Trainer::Log(const std::string& line) const {
  std::cout << (options_.evaluator
                    ? std::string("[evaluator] ")
                    : absl::StrCat("[worker ", options_.worker_index, "] "))
            << line << std::endl;
}

absl::Status Trainer::Prepare(Step* step, const Consistency& consistency,
                              bool use_row_cache) {
  const size_t unique = step->params.unique_ids.size();
  step->params.tables.resize(model_->tables().size());
  step->params.dense.resize(model_->dense_variables().size());
  step->pull_ops.clear();
  for (size_t t = 0; t < model_->tables().size(); ++t) {
    step->params.tables[t].resize(unique * model_->tables()[t].dim);
  }
  step->through_row_cache = use_row_cache && row_cache_ != nullptr;
  if (step->through_row_cache) {
    row_cache_->Lookup(step->index, step->params.unique_ids,
                       &step->params.tables, &step->cached_rows);
    const std::vector<int32_t>& misses = step->cached_rows.misses;
    step->miss_ids.resize(misses.size());
    for (size_t i = 0; i < misses.size(); ++i) {
      step->miss_ids[i] = step->params.unique_ids[misses[i]];
    }
    step->miss_rows.resize(model_->tables().size());
  }
  for (size_t t = 0; t < model_->tables().size(); ++t) {
    absl::Span<const int64_t> ids = step->params.unique_ids;
    float* out = step->params.tables[t].data();
    if (step->through_row_cache) {
      if (step->miss_ids.empty()) continue;
      step->miss_rows[t].resize(step->miss_ids.size() *
                                model_->tables()[t].dim);
      ids = step->miss_ids;
      out = step->miss_rows[t].data();
    }
    PullOp op = PullOp::Rows(model_->tables()[t].name, ids, out);
    op.ids_unique = true;
    step->pull_ops.push_back(op);
  }
  // --dense_sync=allreduce: the dense values are this worker's own,
  // copied in when the step computes (Run) or evaluates (Evaluate).
  for (size_t d = 0; d < model_->dense_variables().size() && dense_ == nullptr;
       ++d) {
    step->params.dense[d].resize(model_->dense_variables()[d].size);
    step->pull_ops.push_back(PullOp::Dense(model_->dense_variables()[d].name,
                                           step->params.dense[d].data()));
  }
  StepOptions options{consistency, step->index};
  step->pull = nullptr;
  if (step->pull_ops.empty()) return absl::OkStatus();  // all from the cache
  auto pull = client_->StartPull(step->pull_ops, options);
  if (!pull.ok()) return pull.status();
  step->pull = std::move(*pull);
  return absl::OkStatus();
}

absl::Status Trainer::FinishPull(Step* step) {
  if (step->pull != nullptr) {
    if (absl::Status s = step->pull->Wait(); !s.ok()) return s;
  }
  if (!step->through_row_cache) return absl::OkStatus();
  const std::vector<int32_t>& misses = step->cached_rows.misses;
  for (size_t t = 0; t < model_->tables().size(); ++t) {
    const size_t dim = model_->tables()[t].dim;
    const float* from = step->miss_rows[t].data();
    float* to = step->params.tables[t].data();
    for (size_t i = 0; i < misses.size(); ++i) {
      std::copy_n(from + i * dim, dim, to + misses[i] * dim);
    }
  }
  row_cache_->Store(step->params.unique_ids, step->params.tables,
                    &step->cached_rows);
  return absl::OkStatus();
}

absl::Status Trainer::FlushRowCache(int64_t step, TrainingResult* result) {
  if (row_cache_ == nullptr) return absl::OkStatus();
  RowCache::Push rest;
  row_cache_->TakeAll(&rest);
  if (rest.ids.empty()) return absl::OkStatus();
  std::vector<PushOp> ops;
  for (size_t t = 0; t < model_->tables().size(); ++t) {
    PushOp op =
        PushOp::Rows(model_->tables()[t].name, rest.ids, rest.grads[t].data());
    op.ids_unique = true;
    op.learning_rate = DecayedLearningRate(config_.embedding_optimizer);
    ops.push_back(op);
  }
  absl::Status s = client_->Push(ops, StepOptions{options_.consistency, step});
  if (!s.ok()) {
    ++result->lost_pushes;
    metrics_.LostPush();
  }
  return s;
}

bool Trainer::Recoverable(const absl::Status& status) const {
  if (options_.consistency.mode() != Consistency::ASYNC ||
      options_.ps_recovery_timeout <= absl::ZeroDuration()) {
    return false;
  }
  // UNAVAILABLE: a PS is down or restarting (after the client's own
  // retries). NOT_FOUND / FAILED_PRECONDITION: a restarted PS that does not
  // hold our variables yet.
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
         absl::IsNotFound(status) || absl::IsFailedPrecondition(status) ||
         absl::IsAborted(status);
}

absl::Status Trainer::Recover(const absl::Status& cause,
                              TrainingResult* result) {
  const absl::Time deadline = clock()->Now() + options_.ps_recovery_timeout;
  absl::Duration backoff = absl::Seconds(1);
  absl::Status last = cause;
  for (int attempt = 1;; ++attempt) {
    Log(absl::StrCat("PS failure: ", last.ToString(), "; attempt ", attempt,
                     " to recover in ", absl::FormatDuration(backoff)));
    clock()->SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(10));
    last = client_->WaitForServers(absl::Seconds(10));
    if (last.ok()) last = client_->CreateVariables(model_->variables());
    if (last.ok()) {
      Log(absl::StrCat("servers are back after ", attempt,
                       " attempt(s); training continues"));
      // The cache's rows may be newer than what a restarted PS restored:
      // its sums go to the servers now, and every row is pulled again. A
      // failure here is counted lost; the next pull finds the PS down.
      if (absl::Status s = FlushRowCache(result->steps, result); !s.ok()) {
        Log(
            absl::StrCat("row cache flush after recovery failed (counted "
                         "lost): ",
                         s.ToString()));
      }
      return absl::OkStatus();
    }
    if (clock()->Now() > deadline) {
      return absl::Status(
          last.code(),
          absl::StrCat("the parameter servers did not recover within ",
                       absl::FormatDuration(options_.ps_recovery_timeout), ": ",
                       last.message()));
    }
  }
}

absl::Status Trainer::RecoverFromFailedPush(const absl::Status& status,
                                            TrainingResult* result) {
  if (!Recoverable(status)) return status;
  // Applied on the healthy PS, not on the failed one; not resent (that
  // would apply it twice where it did land).
  ++result->lost_pushes;
  ++result->recoveries;
  metrics_.LostPush();
  metrics_.Recovery();
  return Recover(status, result);
}

absl::Status Trainer::Connect() {
  if (!options_.summary_dir.empty() && summary_ == nullptr) {
    auto summary = SummaryWriter::Open(
        options_.summary_dir, options_.evaluator ? -1 : options_.worker_index);
    if (!summary.ok()) return summary.status();
    summary_ = *std::move(summary);
    Log(absl::StrCat("TensorBoard summaries to ", summary_->path()));
  }
  auto client = Client::Connect(options_.client);
  if (!client.ok()) return client.status();
  client_ = std::move(*client);
  return client_->WaitForServers(options_.wait_for_servers);
}

absl::Status Trainer::BuildModel(const Batch& first) {
  config_ = options_.model;
  if (config_.fields == 0 && first.fields() > 0) {
    config_.fields = first.fields();
  }
  if (config_.dense_dim == 0) config_.dense_dim = first.dense_dim;
  config_.num_ps = client_->num_ps();
  auto model = CreateModel(config_);
  if (!model.ok()) return model.status();
  model_ = std::move(*model);
  if (absl::Status s = client_->CreateVariables(model_->variables()); !s.ok()) {
    return s;
  }
  return model_->Check(first);
}

absl::Status Trainer::Setup(Step* first) {
  const bool sync = options_.consistency.mode() == Consistency::SYNC;
  if (sync && options_.num_workers > 1 && options_.max_steps <= 0) {
    return absl::InvalidArgumentError(
        "sync training needs --max_steps: every worker must run the same "
        "number of steps");
  }
  if (options_.dense_sync != "ps" && options_.dense_sync != "allreduce") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dense_sync=", options_.dense_sync, ": expected ps or allreduce"));
  }
  if (options_.dense_sync == "allreduce" && options_.num_workers > 1 &&
      options_.max_steps <= 0) {
    return absl::InvalidArgumentError(
        "--dense_sync=allreduce needs --max_steps: every worker takes part "
        "in every step's all-reduce, so all must run the same number of "
        "steps");
  }
  if (absl::Status s = Connect(); !s.ok()) return s;

  absl::StatusOr<ShardedData> sharded =
      ShardData(options_.train, options_.data_sharding, options_.num_workers,
                options_.worker_index);
  if (!sharded.ok()) return sharded.status();
  Log(sharded->description);
  DatasetOptions train = std::move(sharded->options);
  if (options_.max_steps > 0) train.epochs = 0;  // the step budget decides
  auto dataset = Dataset::Create(train);
  if (!dataset.ok()) return dataset.status();
  dataset_ = std::move(*dataset);

  absl::StatusOr<bool> got = dataset_->Next(&first->batch);
  if (!got.ok()) return got.status();
  if (!*got) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", options_.worker_index, " of ", options_.num_workers,
        " has no training data (its shard of the files is empty)"));
  }
  if (absl::Status s = BuildModel(first->batch); !s.ok()) return s;
  return CreateRowCache();
}

absl::Status Trainer::CreateRowCache() {
  if (options_.row_cache_staleness == 0) return absl::OkStatus();
  if (options_.consistency.mode() != Consistency::ASYNC) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--row_cache_staleness=", options_.row_cache_staleness,
        " needs --mode=async: ",
        Consistency::Mode_Name(options_.consistency.mode()),
        " bounds staleness on the servers, which a worker-side cache would "
        "bypass"));
  }
  if (options_.prefetch_steps > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--row_cache_staleness=", options_.row_cache_staleness,
        " needs --prefetch_steps=1 (got ", options_.prefetch_steps,
        "): the row cache reads a step's rows when its pull is sent, so "
        "rows the pulls in flight bring back could not serve the steps "
        "between them"));
  }
  std::vector<int> dims;
  for (const Model::Table& table : model_->tables()) dims.push_back(table.dim);
  if (dims.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--row_cache_staleness: model ", config_.name,
                     " has no embedding tables to cache"));
  }
  auto cache = RowCache::Create(std::move(dims), options_.row_cache_staleness,
                                options_.row_cache_bytes);
  if (!cache.ok()) return cache.status();
  row_cache_ = std::make_unique<RowCache>(*std::move(cache));
  Log(absl::StrFormat(
      "row cache: rows read by up to %d steps after their pull, gradients "
      "summed and pushed within %d steps; up to %d rows (%d MB)",
      options_.row_cache_staleness,
      std::max(options_.row_cache_staleness - 2, 0),
      row_cache_->capacity_rows(), options_.row_cache_bytes >> 20));
  return absl::OkStatus();
}

absl::Status Trainer::PrepareToEvaluate() {
  if (options_.eval.patterns.empty()) {
    return absl::InvalidArgumentError("evaluation needs --eval_files");
  }
  if (absl::Status s = Connect(); !s.ok()) return s;
  DatasetOptions eval = options_.eval;
  eval.epochs = 1;
  auto dataset = Dataset::Create(eval);
  if (!dataset.ok()) return dataset.status();
  Batch first;
  absl::StatusOr<bool> got = (*dataset)->Next(&first);
  if (!got.ok()) return got.status();
  if (!*got) {
    return absl::FailedPreconditionError("the --eval_files hold no examples");
  }
  return BuildModel(first);
}

absl::StatusOr<bool> Trainer::ResumeFromRestoredServers(Step* first) {
  if (options_.consistency.mode() != Consistency::ASYNC) return false;
  // Servers restored from a checkpoint know the step it was taken at:
  // continue from there (the --max_steps budget counts from 0).
  auto stats = client_->Stats();
  if (!stats.ok()) return stats.status();
  int64_t global_step = 0;
  for (const StatsResponse& s : *stats) {
    if (!s.restored_from().empty()) {
      global_step = std::max(global_step, s.global_step());
    }
  }
  if (global_step == 0) return false;
  Log(absl::StrCat("servers were restored at global step ", global_step,
                   "; continuing from there"));
  first->index = global_step;
  if (options_.max_steps > 0 && global_step >= options_.max_steps) {
    Log(absl::StrCat("--max_steps=", options_.max_steps,
                     " already reached; nothing to train"));
    return true;
  }
  return false;
}

absl::Status Trainer::StartDenseAllreduce(Step* first) {
  if (options_.dense_sync != "allreduce") return absl::OkStatus();
  std::vector<VariableSpec> specs;
  std::vector<std::vector<float>> values;
  std::vector<PullOp> pulls;
  values.reserve(model_->dense_variables().size());
  for (const Model::DenseVariable& dense : model_->dense_variables()) {
    for (const VariableSpec& spec : model_->variables()) {
      if (spec.name() == dense.name) specs.push_back(spec);
    }
    values.emplace_back(dense.size);
    pulls.push_back(PullOp::Dense(dense.name, values.back().data()));
  }
  if (absl::Status s = client_->Pull(pulls); !s.ok()) return s;
  DenseAllreduce::Options options;
  options.ring.worker = options_.worker_index;
  options.ring.num_workers = options_.num_workers;
  options.ring.hostname = options_.allreduce_host;
  options.ring.worker_addresses = options_.worker_addresses;
  options.ring.timeout =
      options_.consistency.timeout_seconds() > 0
          ? absl::Seconds(options_.consistency.timeout_seconds())
          : absl::Seconds(60);
  options.ring.rendezvous =
      [client = client_.get()](const RendezvousRequest& request) {
        return client->Rendezvous(request);
      };
  options.reform_timeout = options_.ring_reform_timeout;
  auto dense = DenseAllreduce::Create(std::move(specs), std::move(options));
  if (!dense.ok()) return dense.status();
  dense_ = *std::move(dense);
  if (absl::Status s = dense_->Start(std::move(values), first->index);
      !s.ok()) {
    return s;
  }
  first->index = dense_->next_step();
  Log(absl::StrFormat(
      "dense variables: %d (%d floats) all-reduced among %d workers "
      "(ring generation %d, listening on %s); training from step %d, "
      "starting dense crc32c=%08x",
      dense_->values().size(), dense_->floats(), options_.num_workers,
      dense_->generation(), options_.allreduce_host, first->index,
      dense_->values_crc32c()));
  return absl::OkStatus();
}

absl::Status Trainer::WriteDenseToPs() {
  if (dense_ == nullptr || options_.worker_index != 0) return absl::OkStatus();
  std::vector<PushOp> ops;
  for (size_t d = 0; d < model_->dense_variables().size(); ++d) {
    ops.push_back(PushOp::AssignDense(model_->dense_variables()[d].name,
                                      dense_->values()[d].data()));
  }
  return client_->Push(ops);
}

absl::StatusOr<std::unique_ptr<TowerRunner>> Trainer::CreateTowers() {
  std::string device_choice;
  absl::StatusOr<std::unique_ptr<TowerRunner>> towers;
  if (options_.compute == "none") {
    towers = std::make_unique<NoComputeTowers>();
    device_choice =
        "--compute=none: no model math; pulls and pushes carry the model's "
        "shapes (the row-path ceiling), so loss and auc mean nothing";
  } else if (options_.compute == "model") {
    towers = CreateTowerRunner(model_.get(), options_.device, options_.towers,
                               &device_choice);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--compute=", options_.compute, ": expected model or none"));
  }
  if (!towers.ok()) return towers.status();
  Log(device_choice);
  Log(absl::StrFormat(
      "training %s (%d fields, %d dense features, %d variables) on %d PS, "
      "%d tower(s), %s, batch %d, %d reader thread(s)",
      config_.name, config_.fields, config_.dense_dim,
      model_->variables().size(), client_->num_ps(), (*towers)->size(),
      Consistency::Mode_Name(options_.consistency.mode()),
      options_.train.batch_size, options_.train.reader_threads));
  return towers;
}

float Trainer::DecayedLearningRate(const OptimizerSpec& optimizer) const {
  if (options_.learning_rate_decay == 1.0f) return 0;
  return std::pow(options_.learning_rate_decay,
                  static_cast<float>(dataset_->stats().epoch)) *
         optimizer.learning_rate();
}

absl::Status Trainer::StartPush(Step* step) {
  step->push_ops.clear();
  absl::Span<const int64_t> row_ids = step->params.unique_ids;
  if (step->through_row_cache) {
    row_cache_->Accumulate(step->params.unique_ids, step->grads.tables,
                           step->cached_rows, &step->row_push);
    row_ids = step->row_push.ids;
  }
  for (size_t i = 0; i < model_->tables().size() && !row_ids.empty(); ++i) {
    PushOp op =
        PushOp::Rows(model_->tables()[i].name, row_ids,
                     step->through_row_cache ? step->row_push.grads[i].data()
                                             : step->grads.tables[i].data());
    op.ids_unique = true;
    op.learning_rate = DecayedLearningRate(config_.embedding_optimizer);
    step->push_ops.push_back(op);
  }
  for (size_t i = 0; i < model_->dense_variables().size() && dense_ == nullptr;
       ++i) {
    PushOp op = PushOp::Dense(model_->dense_variables()[i].name,
                              step->grads.dense[i].data());
    op.learning_rate = DecayedLearningRate(config_.dense_optimizer);
    step->push_ops.push_back(op);
  }
  step->push = nullptr;
  if (step->push_ops.empty()) return absl::OkStatus();  // all in the cache
  auto push = client_->StartPush(
      step->push_ops, StepOptions{options_.consistency, step->index});
  if (!push.ok()) return push.status();
  step->push = std::move(*push);
  return absl::OkStatus();
}

// The progress line printed every --log_every_steps: throughput, loss,
// AUC (or accuracy) and where the time went, over the interval.
class Trainer::ProgressInterval {
 public:
  void Add(const Batch& batch, const float* predictions, double loss,
           int classes) {
    examples_ += batch.size;
    loss_ += loss;
    if (classes == 2) {
      eval_.AddBinary(predictions, batch.labels.data(), batch.size);
    } else {
      std::vector<int> predicted(predictions, predictions + batch.size);
      eval_.AddClasses(predicted.data(), batch.labels.data(), batch.size);
    }
    ++breakdown.steps;
  }
  // The line for the interval so far (and its mean loss), then restarts it.
  std::string TakeLine(const TrainingResult& result, int64_t epoch, int classes,
                       double* mean_loss, Scalars* scalars) {
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    *mean_loss = loss_ / examples_;
    const double n = static_cast<double>(breakdown.steps);
    *scalars = {{"loss", *mean_loss},
                {classes == 2 ? "auc" : "accuracy",
                 classes == 2 ? eval_.auc() : eval_.accuracy()},
                {"examples_per_sec", examples_ / seconds},
                {"time/data_ms", breakdown.data / n},
                {"time/pull_ms", breakdown.pull / n},
                {"time/compute_ms", breakdown.compute / n},
                {"time/push_ms", breakdown.push / n}};
    std::string line = absl::StrFormat(
        "step=%d epoch=%d examples=%d examples/s=%.1f loss=%.5f %s "
        "data_ms=%.2f pull_ms=%.2f compute_ms=%.2f push_ms=%.2f",
        result.steps, epoch, result.examples, examples_ / seconds, *mean_loss,
        classes == 2 ? absl::StrFormat("auc=%.5f", eval_.auc())
                     : absl::StrFormat("accuracy=%.5f", eval_.accuracy()),
        breakdown.data / n, breakdown.pull / n, breakdown.compute / n,
        breakdown.push / n);
    *this = ProgressInterval();
    return line;
  }
  Breakdown breakdown;

 private:
  absl::Time start_ = absl::Now();
  int64_t examples_ = 0;
  double loss_ = 0;
  Evaluator eval_;
};

absl::StatusOr<TrainingResult> Trainer::Run() {
  auto cur = std::make_unique<Step>();
  if (absl::Status s = Setup(cur.get()); !s.ok()) return s;
  absl::StatusOr<bool> done = ResumeFromRestoredServers(cur.get());
  if (!done.ok()) return done.status();
  if (*done) return TrainingResult();
  if (absl::Status s = StartDenseAllreduce(cur.get()); !s.ok()) return s;
  auto towers = CreateTowers();
  if (!towers.ok()) return towers.status();

  const bool sync = options_.consistency.mode() == Consistency::SYNC;
  const bool waits_for_own_pushes =
      options_.consistency.mode() != Consistency::ASYNC;
  const int64_t staleness = options_.consistency.mode() == Consistency::SSP
                                ? options_.consistency.staleness()
                                : 0;
  TrainingResult result;
  const absl::Time start = absl::Now();
  ProgressInterval interval;
  Breakdown& breakdown = interval.breakdown;
  std::vector<float> predictions;
  // Steps whose pushes are in flight, oldest first: at most
  // --pushes_in_flight of them.
  std::deque<std::unique_ptr<Step>> pushing;
  // Waits for the oldest push in flight; recovers from a PS failure (the
  // push counted lost) or returns the error.
  auto finish_oldest_push = [&]() -> absl::Status {
    std::unique_ptr<Step> done = std::move(pushing.front());
    pushing.pop_front();
    if (done->push == nullptr) return absl::OkStatus();
    if (absl::Status s = done->push->Wait(); !s.ok()) {
      return RecoverFromFailedPush(s, &result);
    }
    return absl::OkStatus();
  };

  // The batches of the steps after those pulling: read, checked and
  // de-duplicated on the preparer's thread while this one trains.
  BatchPreparer preparer(
      dataset_.get(),
      [this](const Batch& batch) { return model_->Check(batch); },
      options_.prefetch_steps + 1);

  // Steps whose pulls are in flight, in step order: the front is the step
  // to compute next; up to --prefetch_steps more follow it.
  std::deque<std::unique_ptr<Step>> pulling;
  pulling.push_back(std::move(cur));
  DeduplicateIds(pulling.front()->batch, &pulling.front()->params.slots,
                 &pulling.front()->params.unique_ids);
  if (absl::Status s =
          Prepare(pulling.front().get(), options_.consistency, true);
      !s.ok()) {
    return s;
  }
  bool data_done = false;
  // Re-sends the pulls of every step in `pulling` (after a recovery, or with
  // new step numbers), each once its old pull has ended (failed ones too).
  auto pull_again = [&]() -> absl::Status {
    for (auto& step : pulling) {
      if (step->pull != nullptr) step->pull->Wait().IgnoreError();
      if (absl::Status s = Prepare(step.get(), options_.consistency, true);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  };
  while (true) {
    Step* const cur = pulling.front().get();
    absl::Time t = absl::Now();
    // SYNC: this step's pull waits for the previous step's barrier, which
    // needs this worker's push of it; SSP: for every worker's pushes up to
    // `staleness` steps back, this one's included. Finish (and so retry,
    // after a PS failover) those pushes before waiting for the pull.
    while (waits_for_own_pushes && !pushing.empty() &&
           pushing.front()->index < cur->index - staleness) {
      if (absl::Status s = finish_oldest_push(); !s.ok()) return s;
    }
    if (absl::Status s = FinishPull(cur); !s.ok()) {
      if (!Recoverable(s)) return s;
      for (const auto& step : pushing) {
        if (step->push != nullptr && !step->push->Wait().ok()) {
          ++result.lost_pushes;
          metrics_.LostPush();
        }
      }
      pushing.clear();
      ++result.recoveries;
      metrics_.Recovery();
      if (absl::Status r = Recover(s, &result); !r.ok()) return r;
      if (absl::Status r = pull_again(); !r.ok()) return r;
      continue;  // pull these steps again
    }
    AddPhase(WorkerMetrics::kPull, MillisSince(t), &breakdown.pull);
    if (sync && cur->pull != nullptr && cur->pull->sync_step() > cur->index) {
      // The cluster is ahead (this worker restarted): join at its step; the
      // steps pulled ahead are renumbered after it and pulled again.
      Log(absl::StrCat("joining at step ", cur->pull->sync_step()));
      cur->index = cur->pull->sync_step();
      for (size_t i = 1; i < pulling.size(); ++i) {
        pulling[i]->index = cur->index + static_cast<int64_t>(i);
      }
      std::unique_ptr<Step> joined = std::move(pulling.front());
      pulling.pop_front();
      if (absl::Status s = pull_again(); !s.ok()) return s;
      pulling.push_front(std::move(joined));
    }

    // Start the pulls of the next steps now, so they overlap this step's
    // compute (and, with --prefetch_steps > 1, the steps after it).
    t = absl::Now();
    while (!data_done &&
           static_cast<int>(pulling.size()) <= options_.prefetch_steps) {
      auto next = std::make_unique<Step>();
      next->index = pulling.back()->index + 1;
      if (options_.max_steps > 0 && next->index >= options_.max_steps) {
        data_done = true;
        break;
      }
      PreparedBatch prepared;
      absl::StatusOr<bool> got = preparer.Next(&prepared);
      if (!got.ok()) return got.status();
      if (!*got) {
        data_done = true;
        break;
      }
      next->batch = std::move(prepared.batch);
      next->params.slots = std::move(prepared.slots);
      next->params.unique_ids = std::move(prepared.unique_ids);
      if (absl::Status s = Prepare(next.get(), options_.consistency, true);
          !s.ok()) {
        return s;
      }
      pulling.push_back(std::move(next));
    }
    AddPhase(WorkerMetrics::kData, MillisSince(t), &breakdown.data);
    const bool last = pulling.size() == 1;

    t = absl::Now();
    if (dense_ != nullptr) cur->params.dense = dense_->values();
    predictions.resize(cur->batch.size);
    const absl::StatusOr<double> loss = (*towers)->Run(
        cur->batch, cur->params, &cur->grads, predictions.data());
    if (!loss.ok()) return loss.status();
    AddPhase(WorkerMetrics::kCompute, MillisSince(t), &breakdown.compute);
    // At most --pushes_in_flight pushes outstanding: wait for the oldest,
    // then send.
    t = absl::Now();
    while (static_cast<int>(pushing.size()) >= options_.pushes_in_flight) {
      if (absl::Status s = finish_oldest_push(); !s.ok()) return s;
    }
    AddPhase(WorkerMetrics::kPush, MillisSince(t), &breakdown.push);
    if (absl::Status s = StartPush(cur); !s.ok()) return s;
    if (dense_ != nullptr) {
      // The dense update: averaged among the workers, applied here (its
      // time counts as the push's), while the embeddings' push travels.
      t = absl::Now();
      if (absl::Status s = dense_->Apply(
              cur->grads.dense, DecayedLearningRate(config_.dense_optimizer),
              cur->index);
          !s.ok()) {
        return s;
      }
      AddPhase(WorkerMetrics::kPush, MillisSince(t), &breakdown.push);
    }

    result.steps = cur->index + 1;
    result.examples += cur->batch.size;
    metrics_.StepDone(cur->batch.size, dataset_->stats().epoch);
    interval.Add(cur->batch, predictions.data(), *loss, model_->classes());
    if (result.steps % options_.log_every_steps == 0 || last) {
      Scalars scalars;
      Log(interval.TakeLine(result, dataset_->stats().epoch, model_->classes(),
                            &result.last_loss, &scalars));
      metrics_.Interval(result.last_loss, scalars[1].second,
                        model_->classes() == 2);
      WriteSummary(result.steps, scalars);
    }
    pushing.push_back(std::move(pulling.front()));
    pulling.pop_front();
    if (options_.dense_to_ps_every_steps > 0 && !last &&
        result.steps % options_.dense_to_ps_every_steps == 0) {
      if (absl::Status s = WriteDenseToPs(); !s.ok()) {
        if (!Recoverable(s)) return s;
        Log(
            absl::StrCat("writing the dense values into the PS failed (the "
                         "next write carries them): ",
                         s.ToString()));
      }
    }
    if (options_.evaluate && options_.eval_every_steps > 0 && !last &&
        result.steps % options_.eval_every_steps == 0 &&
        !options_.eval.patterns.empty()) {
      for (const auto& step : pushing) {
        if (step->push == nullptr) continue;
        if (absl::Status s = step->push->Wait(); !s.ok()) return s;
      }
      // The servers get the row cache's sums first; the next step's rows
      // were read before, so its cached rows are pulled again.
      if (absl::Status s = FlushRowCache(result.steps - 1, &result); !s.ok()) {
        if (!Recoverable(s)) return s;
        if (absl::Status r = Recover(s, &result); !r.ok()) return r;
      }
      auto eval = Evaluate();
      if (!eval.ok()) return eval.status();
      WriteEvalSummary(result.steps, *eval);
    }
    if (last) break;
  }
  while (!pushing.empty()) {
    if (absl::Status s = finish_oldest_push(); !s.ok()) return s;
  }
  // The gradient sums the row cache still holds (counted lost if a PS is
  // down now: there is no later step to recover in).
  if (absl::Status s = FlushRowCache(result.steps - 1, &result); !s.ok()) {
    if (!Recoverable(s)) return s;
    Log(absl::StrCat("the row cache's last push failed (counted lost): ",
                     s.ToString()));
  }
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (absl::Status s = WriteDenseToPs(); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("writing the trained dense values into "
                                     "the PS: ",
                                     s.message()));
  }
  if (dense_ != nullptr) {
    result.dropped_dense_updates = dense_->dropped_updates();
    result.allreduce_bytes = dense_->floats() * sizeof(float);
    result.allreduce_ms =
        absl::ToDoubleMilliseconds(dense_->mean_allreduce_time());
  }
  return Report(result);
}

absl::StatusOr<TrainingResult> Trainer::Report(TrainingResult result) {
  if (options_.evaluate && !options_.eval.patterns.empty()) {
    auto eval = Evaluate();
    if (!eval.ok()) return eval.status();
    result.eval = *eval;
    WriteEvalSummary(result.steps, *eval);
  }
  result.bad_records = dataset_->stats().bad_records;
  if (row_cache_ != nullptr) {
    result.row_cache_hits = row_cache_->hits();
    result.row_cache_lookups = row_cache_->lookups();
    Log(absl::StrFormat("row cache: %d of %d rows read from it (%.1f%%)",
                        result.row_cache_hits, result.row_cache_lookups,
                        100.0 * result.row_cache_hits /
                            std::max<int64_t>(result.row_cache_lookups, 1)));
  }
  if (dense_ != nullptr) {
    Log(absl::StrFormat(
        "dense all-reduce: %d bytes a step, %.3f ms mean (%.1f MB/s); "
        "%d updates, %d dropped; ring generation %d; dense values "
        "crc32c=%08x over %d floats",
        result.allreduce_bytes, result.allreduce_ms,
        result.allreduce_bytes / std::max(result.allreduce_ms, 1e-6) / 1e3,
        dense_->updates(), result.dropped_dense_updates, dense_->generation(),
        dense_->values_crc32c(), dense_->floats()));
  }
  Log(absl::StrFormat(
      "done: steps=%d examples=%d seconds=%.1f examples/s=%.1f bad_records=%d "
      "ps_recoveries=%d lost_pushes=%d",
      result.steps, result.examples, result.seconds,
      result.examples / std::max(result.seconds, 1e-9), result.bad_records,
      result.recoveries, result.lost_pushes));
  return result;
}

absl::StatusOr<EvalResult> Trainer::Evaluate() {
  DatasetOptions eval = options_.eval;
  eval.num_shards = 1;
  eval.shard_index = 0;
  eval.epochs = 1;
  eval.shuffle_buffer = 0;
  auto dataset = Dataset::Create(eval);
  if (!dataset.ok()) return dataset.status();
  Evaluator evaluator;
  Step step;
  // --dense_sync=allreduce: this worker's dense values, for every batch
  // (Prepare pulls none and keeps them).
  if (dense_ != nullptr) step.params.dense = dense_->values();
  std::vector<float> predictions;
  const absl::Time start = absl::Now();
  while (true) {
    absl::StatusOr<bool> got = (*dataset)->Next(&step.batch);
    if (!got.ok()) return got.status();
    if (!*got) break;
    if (absl::Status s = model_->Check(step.batch); !s.ok()) return s;
    DeduplicateIds(step.batch, &step.params.slots, &step.params.unique_ids);
    // Evaluation reads the current parameters without taking part in steps.
    if (absl::Status s = Prepare(&step, Consistency()); !s.ok()) return s;
    if (step.pull != nullptr) {
      if (absl::Status s = step.pull->Wait(); !s.ok()) return s;
    }
    predictions.resize(step.batch.size);
    model_->Compute(step.batch, 0, step.batch.size, 1.0f, step.params, nullptr,
                    predictions.data());
    if (model_->classes() == 2) {
      evaluator.AddBinary(predictions.data(), step.batch.labels.data(),
                          step.batch.size);
    } else {
      std::vector<int> classes(predictions.begin(), predictions.end());
      evaluator.AddClasses(classes.data(), step.batch.labels.data(),
                           step.batch.size);
    }
  }
  EvalResult r;
  r.binary = model_->classes() == 2;
  r.examples = evaluator.examples();
  r.accuracy = evaluator.accuracy();
  if (r.binary) {
    r.auc = evaluator.auc();
    r.log_loss = evaluator.log_loss();
    Log(absl::StrFormat(
        "eval examples=%d auc=%.5f logloss=%.5f accuracy=%.5f (%.1f s)",
        r.examples, r.auc, r.log_loss, r.accuracy,
        absl::ToDoubleSeconds(absl::Now() - start)));
  } else {
    Log(absl::StrFormat("eval examples=%d accuracy=%.5f (%.1f s)", r.examples,
                        r.accuracy,
                        absl::ToDoubleSeconds(absl::Now() - start)));
  }
  return r;
}

}  // namespace psrt
