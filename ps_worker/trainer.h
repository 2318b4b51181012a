// The training loop of one worker.
//
// Per step: the batch's feature ids are de-duplicated once; one batched
// pull per PS fetches every embedding row and dense variable the step needs;
// the towers compute gradients; one batched push per PS sends them. The
// pulls of the next `prefetch_steps` batches (default 1) are started before
// the current batch is computed, so the network works while the towers do
// (in async mode a step therefore sees parameters up to prefetch_steps of
// this worker's updates old, as with TF's prefetching input pipelines; SYNC
// and SSP pulls still wait on the servers for their mode's bound).
//
// Consistency: ASYNC applies pushes on arrival; SYNC (TF's
// SyncReplicasOptimizer) makes the PS apply step k once every worker pushed
// it and makes pulls for step k wait for that; SSP lets a worker run at most
// `staleness` steps ahead of the slowest. Waits have deadlines: a missing
// worker is named in the error, the job never hangs.
#ifndef PSRT_PS_WORKER_TRAINER_H_
#define PSRT_PS_WORKER_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/cpp/client.h"
#include "ps_worker/data/dataset.h"
#include "ps_worker/model/model.h"
#include "ps_worker/worker_metrics.h"

namespace psrt {

class DenseAllreduce;
class RowCache;
class TowerRunner;
class SummaryWriter;

struct TrainerOptions {
  ClientOptions client;  // PS addresses; worker_index is set from below
  int worker_index = 0;
  int num_workers = 1;
  ModelConfig model;     // fields / dense_dim 0: taken from the data
  DatasetOptions train;  // sharded by the trainer over the workers
  // How: auto, record, file or none (ps_worker/data/data_sharding.h).
  std::string data_sharding = "auto";
  DatasetOptions eval;         // no patterns: no evaluation
  std::string device = "cpu";  // cpu, gpu or auto (ps_worker/device.h)
  int towers = 1;              // 0: the device's default
  // "model": the model's forward and backward pass; "none": no model math
  // (no_compute_towers.h), the row path's ceiling.
  std::string compute = "model";
  Consistency consistency;
  // Where the dense variables train: "ps" (pulled and pushed through the
  // PS, under `consistency`, as the embeddings) or "allreduce" (a copy in
  // every worker, gradients averaged among the workers each step:
  // dense_allreduce.h; `consistency` then governs the embeddings alone).
  std::string dense_sync = "ps";
  // --dense_sync=allreduce: the address this worker's ring peers reach it
  // at (its TF_CONFIG host), every worker's (to name a dead one), and how
  // long the survivors of a dead worker wait for the ring to form again
  // with it restarted (0: training fails naming it). The ring's other
  // waits are consistency.timeout_seconds.
  std::string allreduce_host = "127.0.0.1";
  std::vector<std::string> worker_addresses;
  absl::Duration ring_reform_timeout = absl::ZeroDuration();
  // --dense_sync=allreduce: worker 0 writes its dense values into the PS
  // every this many steps and after the last, so that the PS's copy (what
  // checkpoints, export and the evaluator read) is at most this many steps
  // behind, and exact at the end. 0: after the last step only.
  int64_t dense_to_ps_every_steps = 100;
  int64_t max_steps = 0;  // 0: until the training data is exhausted
  // Pushes a worker keeps in flight: it sends step k's gradients once the
  // push of step k - pushes_in_flight was acknowledged (1: one at a time).
  // In ASYNC, a step's pulled parameters may then lack this worker's own
  // updates of its last pushes_in_flight + 1 steps (the pull of step k + 1
  // starts before step k computes); SYNC and SSP keep their mode's bound,
  // which the servers enforce on pulls.
  int pushes_in_flight = 1;
  // Steps whose pulls are started ahead of the step being computed: the
  // pull of step k + prefetch_steps is sent before step k computes (1: the
  // next step's only). ASYNC: a step's parameters may then lack this
  // worker's own updates of its last prefetch_steps + pushes_in_flight - 1
  // steps. SYNC and SSP: the servers answer a pull only once its mode
  // allows (step k - 1 applied; every worker within the staleness), so
  // pulling early changes when the request is sent, not what it reads.
  // 1 with the row cache (which serves the rows prefetching would fetch).
  int prefetch_steps = 1;
  // The worker's row cache (row_cache.h): a row pulled for step p is read
  // from the worker's memory by steps p .. p + row_cache_staleness - 1, and
  // their gradients for it are summed there and pushed once (within
  // max(S - 2, 0) steps of being computed, and all of them at the end).
  // 0: off, every row is pulled and pushed every step. ASYNC only.
  int row_cache_staleness = 0;
  int64_t row_cache_bytes = int64_t{256} << 20;
  // Learning rates are multiplied by this once per epoch (1: constant),
  // through the pushes' learning-rate override.
  float learning_rate_decay = 1.0f;
  int log_every_steps = 100;
  int64_t eval_every_steps = 0;  // 0: only at the end
  bool evaluate = true;          // (the chief evaluates; others need not)
  // This process is TF's evaluator task, not a worker: it trains nothing
  // (continuous_evaluator.h); its log lines say "[evaluator]".
  bool evaluator = false;
  // TensorBoard event files of the progress lines' figures and every
  // evaluation (summary_writer.h); empty: none.
  std::string summary_dir;
  absl::Duration wait_for_servers = absl::Seconds(120);
  // Async mode: how long to keep retrying when a PS fails (unreachable, or
  // restarted without our variables) before giving up; 0: fail at once.
  absl::Duration ps_recovery_timeout = absl::Minutes(10);
};

struct EvalResult {
  int64_t examples = 0;
  double auc = 0, log_loss = 0, accuracy = 0;
  bool binary = true;
};

struct TrainingResult {
  int64_t steps = 0;
  int64_t examples = 0;
  double seconds = 0;
  double last_loss = 0;     // mean loss of the last logging interval
  int64_t bad_records = 0;  // skipped (--skip_bad_records)
  EvalResult eval;          // final evaluation (examples = 0 if none)
  int64_t recoveries = 0;   // times training waited for a failed PS
  int64_t lost_pushes = 0;  // pushes a failed PS did not (all) apply
  // With the row cache: rows read from it, of rows the steps read.
  int64_t row_cache_hits = 0;
  int64_t row_cache_lookups = 0;
  // --dense_sync=allreduce: dense updates dropped when the ring broke and
  // formed again, and the all-reduce's fused bytes a step and mean time.
  int64_t dropped_dense_updates = 0;
  int64_t allreduce_bytes = 0;
  double allreduce_ms = 0;
};

class Trainer {
 public:
  explicit Trainer(TrainerOptions options);
  ~Trainer();

  absl::StatusOr<TrainingResult> Run();

  // After Run: the model and a client connected to the cluster (tests read
  // the trained parameters through them).
  const Model* model() const { return model_.get(); }
  // --dense_sync=allreduce: this worker's dense variables (null otherwise).
  const DenseAllreduce* dense_allreduce() const { return dense_.get(); }
  // What --metrics_port serves; updated while Run trains.
  const WorkerMetrics& metrics() const { return metrics_; }
  Client* client() const { return client_.get(); }
  // What the worker's waits are timed by: recovery from a PS failure, the
  // evaluator's interval (TrainerOptions.client.clock; null: real).
  Clock* clock() const {
    return options_.client.clock != nullptr ? options_.client.clock
                                            : Clock::Real();
  }

  // Evaluates the current parameters on options.eval.
  absl::StatusOr<EvalResult> Evaluate();
  // Instead of Run, for evaluation only: connects, builds the model from
  // the first evaluation batch and creates its variables (the same specs
  // the workers create), so that Evaluate can follow.
  absl::Status PrepareToEvaluate();
  void Log(const std::string& line) const;
  // Scalars (tag, value) at a step to --summary_dir, if set; an evaluation
  // as eval/auc, eval/logloss, eval/accuracy. Public for the evaluator.
  using Scalars = std::vector<std::pair<std::string, double>>;
  void WriteSummary(int64_t step, const Scalars& scalars);
  void WriteEvalSummary(int64_t step, const EvalResult& eval);

 private:
  struct Step;
  class ProgressInterval;

  // Run's phases. Setup: connects, opens the data, reads the first batch
  // into `first`, builds the model and creates its variables.
  absl::Status Setup(Step* first);
  absl::Status Connect();
  // The row cache, with --row_cache_staleness > 0 (after BuildModel).
  absl::Status CreateRowCache();
  // The model for batches shaped as `first`; creates its variables.
  absl::Status BuildModel(const Batch& first);
  // ASYNC with servers restored from a checkpoint: continues at its step;
  // true if --max_steps was already reached there.
  absl::StatusOr<bool> ResumeFromRestoredServers(Step* first);
  absl::StatusOr<std::unique_ptr<TowerRunner>> CreateTowers();
  // --dense_sync=allreduce: joins the ring with the dense values pulled
  // from the PS; `first` continues at the ring's step (a restarted
  // worker's: the survivors').
  absl::Status StartDenseAllreduce(Step* first);
  // --dense_sync=allreduce, worker 0: its dense values into the PS (an
  // ASYNC push assigning them).
  absl::Status WriteDenseToPs();
  // The learning-rate override of this epoch's pushes to variables of
  // `optimizer` (learning_rate_decay per epoch); 0: none, the variable's.
  float DecayedLearningRate(const OptimizerSpec& optimizer) const;
  // Sends `step`'s gradients (with the epoch's learning-rate decay).
  absl::Status StartPush(Step* step);
  // After the last step: the final evaluation and the summary line.
  absl::StatusOr<TrainingResult> Report(TrainingResult result);
  // Starts the pull of `step`'s rows (its batch's de-duplicated ids,
  // params.unique_ids) and dense variables under
  // `consistency` (the training mode's; evaluation's pulls take no part in
  // steps: ASYNC).
  // With `use_row_cache`, rows the row cache holds are read from it and
  // only the others are pulled; FinishPull completes the step's rows.
  absl::Status Prepare(Step* step, const Consistency& consistency,
                       bool use_row_cache = false);
  // Waits for `step`'s pull; with the row cache, places the pulled rows
  // among the cached ones and keeps them in the cache.
  absl::Status FinishPull(Step* step);
  // Every gradient sum the row cache holds, pushed (blocking) as part of
  // step `step`; the cache is left empty. A failed push is counted lost.
  absl::Status FlushRowCache(int64_t step, TrainingResult* result);
  // Whether `status` from a pull or push is a PS failure worth waiting out.
  bool Recoverable(const absl::Status& status) const;
  // Waits for every PS to answer and re-creates the variables (a restarted
  // PS restores its shards from its latest checkpoint then), retrying with
  // backoff until options_.ps_recovery_timeout.
  // The row cache is emptied first: its rows may be newer than what a
  // restarted PS restored, and its gradient sums go to the recovered
  // servers (or are counted lost).
  absl::Status Recover(const absl::Status& cause, TrainingResult* result);
  // A push failed with `status`: counts it lost and recovers, or returns
  // `status` if it is not a PS failure worth waiting out.
  absl::Status RecoverFromFailedPush(const absl::Status& status,
                                     TrainingResult* result);
  // One step's `ms` in `phase`: added to the interval's `total` and the
  // metrics.
  void AddPhase(WorkerMetrics::Phase phase, double ms, double* total);

  TrainerOptions options_;
  ModelConfig config_;  // options_.model, completed from the data
  std::unique_ptr<Client> client_;
  std::unique_ptr<Dataset> dataset_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<SummaryWriter> summary_;
  std::unique_ptr<RowCache> row_cache_;    // null: --row_cache_staleness=0
  std::unique_ptr<DenseAllreduce> dense_;  // null: --dense_sync=ps
  WorkerMetrics metrics_;
};

}  // namespace psrt

#endif  // PSRT_PS_WORKER_TRAINER_H_
