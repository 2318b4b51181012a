// ps_worker: trains a model against a psrt cluster. Run one per host next to
// a ps_server (SageMaker's parameter_server layout); the cluster spec and
// this worker's index come from --cluster / TF_CONFIG.
//
//   ps_worker --model=deepfm --train_files='data/train-*'
//   --eval_files=data/test.tfrecords
#include <algorithm>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/data_plane_flags.h"
#include "cli/help.h"
#include "cli/security_flags.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "partitioner/cluster_spec.h"
#include "proto/buffer_pool.h"
#include "ps_server/metrics/metrics_http_server.h"
#include "ps_worker/continuous_evaluator.h"
#include "ps_worker/trainer.h"
#include "util/wire_dtype.h"

DEFINE_string(cluster, "",
              "Cluster spec: TF_CONFIG-style JSON or a file; empty: TF_CONFIG, "
              "else one PS on localhost:2223.");
DEFINE_int32(
    task_index, -1,
    "This worker's index in cluster.worker (chief = 0). -1: "
    "TF_CONFIG's task.index when its type is worker or chief, else 0.");
// Model.
DEFINE_string(model, "deepfm", "lr, fm, deepfm, wide_deep or mlp.");
DEFINE_int32(fields, 0, "Sparse features per example (0: from the data).");
DEFINE_int32(dense_dim, 0, "Dense features per example (0: from the data).");
DEFINE_int32(classes, 2, "Classes (> 2: softmax, mlp only).");
DEFINE_int32(embedding_dim, 8, "Embedding (factor) size.");
DEFINE_string(hidden, "200,200", "Hidden layer sizes of the deep part.");
DEFINE_int64(vocab, 0,
             "Embedding vocabulary: ids in [0, vocab). 0: any int64 id "
             "(hash embedding, rows created on first update).");
DEFINE_int64(hash_capacity, 0, "Hash-embedding row capacity (0: unbounded).");
DEFINE_int32(admission_min_count, 0,
             "Hash embeddings: an id gets a trained row only once pushes "
             "carried it this many times (counted per PS shard in a "
             "count-min sketch; earlier gradients dropped and counted). 0 "
             "or 1: every id at once. Needs --vocab=0; at most 255.");
DEFINE_int64(eviction_ttl_steps, 0,
             "Hash embeddings: rows no push updated for this many global "
             "steps are dropped by the servers (an id that returns starts "
             "from a fresh row). 0: never. Needs --vocab=0; keep it well "
             "above --row_cache_staleness.");
DEFINE_int64(eviction_max_rows, 0,
             "Hash embeddings: each table keeps at most this many rows on "
             "the servers; new ids evict the least recently updated rows "
             "instead of failing. 0: no bound but --hash_capacity (which it "
             "must not pass). Needs --vocab=0.");
DEFINE_bool(ssd_tier, false,
            "Hash embeddings: rows that --eviction_max_rows, "
            "--eviction_ttl_steps or ps_server --memory_budget_mb take out "
            "of memory go to the servers' SSD tier (ps_server "
            "--ssd_tier_dir) instead of being dropped, and come back, "
            "optimizer slots and all, when an id returns. Needs --vocab=0.");
DEFINE_int32(embedding_shards, 0,
             "Shards per embedding table (0: one per PS).");
DEFINE_string(optimizer, "adagrad",
              "Embedding optimizer: sgd, momentum, adagrad, adam, ftrl.");
DEFINE_double(learning_rate, 0.05, "Embedding learning rate.");
DEFINE_string(dense_optimizer, "adam", "Optimizer of dense variables.");
DEFINE_double(dense_learning_rate, 0.001, "Dense learning rate.");
DEFINE_double(learning_rate_decay, 1.0,
              "Both learning rates are multiplied by this once per epoch.");
DEFINE_uint64(seed, 1, "Seed of the initializers and the shuffling.");
// Data.
DEFINE_string(train_files, "",
              "Comma-separated files or globs; '{epoch}' is replaced by the "
              "epoch (SageMaker Pipe mode FIFOs).");
DEFINE_string(eval_files, "", "Validation files (empty: no evaluation).");
DEFINE_string(data_sharding, "auto",
              "How workers split --train_files: record (record i to worker "
              "i % workers), file (file i to worker i % workers), none "
              "(each worker's input is already its own share, as SageMaker's "
              "ShardedByS3Key channels), auto (file when the files divide "
              "evenly over the workers, else record).");
DEFINE_string(format, "tfrecord", "libsvm, tfrecord, criteo_tsv, csv or idx.");
DEFINE_string(label_field, "label", "tfrecord: label feature.");
DEFINE_string(ids_field, "ids", "tfrecord: int64 id list feature ('' = none).");
DEFINE_string(values_field, "values", "tfrecord: float value list ('' = 1.0).");
DEFINE_string(dense_field, "", "tfrecord: float list of dense features.");
DEFINE_string(tfrecord_features, "",
              "tfrecord: per-column features instead of the ids/values/dense "
              "lists, e.g. categorical:C1..C26,dense:I1..I13 (categorical "
              "int64 or bytes values hashed into ids per column; dense "
              "columns one float each; absent: a missing id / 0).");
DEFINE_string(csv_schema, "adult", "csv: column schema or preset.");
DEFINE_int64(criteo_buckets, 0,
             "criteo_tsv: categorical id buckets (0: hash).");
DEFINE_bool(skip_bad_records, false, "Skip and count malformed records.");
DEFINE_int32(batch_size, 512, "Examples per step (split over the towers).");
DEFINE_int32(shuffle_buffer, 10000, "Examples held for shuffling (0: none).");
DEFINE_bool(shuffle_files, true,
            "With --shuffle_buffer > 0, read each epoch's --train_files in a "
            "shuffled order. false: in the order their names sort (data "
            "partitioned by time, e.g. one file an hour, trained as the "
            "stream it is: shuffled only within --shuffle_buffer).");
DEFINE_string(cache, "none",
              "none; memory: keep this worker's parsed training examples "
              "after the first epoch and read no file in later ones (as "
              "tf.data's cache(); needs the memory their columns take); or "
              "a directory: keep them in a file there instead (as "
              "cache(filename)), which later epochs and later runs over the "
              "same inputs read instead of parsing (named by a hash of the "
              "files, their sizes and times and the reader flags; delete "
              "old ones yourself).");
DEFINE_int32(reader_threads, 0,
             "Threads parsing input records while one reads, shards and "
             "batches them (same examples, same order for any count); 1: "
             "that one thread parses too; 0: a quarter of the cores, 1 to 8 "
             "(the worker shares its host with a PS and its own compute).");
DEFINE_int32(epochs, 1, "Passes over the training data (0: forever).");
DEFINE_int64(max_steps, 0, "Stop after this many steps (0: when data ends).");
// Execution.
DEFINE_int32(towers, 0,
             "Towers computing slices of each batch: threads on the CPU, "
             "GPUs on the GPU (tower t on GPU t % GPUs); 0: 1 on the CPU, one "
             "per GPU.");
DEFINE_string(device, "auto",
              "cpu, gpu (NVIDIA, sm_80+; lr, fm, deepfm, wide_deep) or auto "
              "(gpu where one is usable and the model has GPU kernels, else "
              "cpu, saying why in the log).");
DEFINE_string(compute, "model",
              "model, or none: no model math, gradients of the model's shapes "
              "pushed as if computed (the ceiling of the read-pull-push path, "
              "for benchmarks; loss and auc then mean nothing).");
DEFINE_string(mode, "async", "async, sync or ssp.");
DEFINE_int32(pushes_in_flight, 1,
             "Pushes kept in flight (1-16): step k's gradients are sent once "
             "step k - N's push was acknowledged. More overlap the PS's apply "
             "with the next steps; async pulls may then miss this worker's "
             "own last N + 1 steps (sync and ssp keep their bound).");
DEFINE_int32(prefetch_steps, 1,
             "Steps whose pulls are sent ahead of the step computing (1-16): "
             "the pull of step k + N goes out before step k computes, so "
             "round trips overlap N steps of compute. async: a step may "
             "then miss this worker's own last N + pushes_in_flight - 1 "
             "updates; sync and ssp keep their bound (the servers hold "
             "early pulls). 1 with --row_cache_staleness.");
DEFINE_int32(row_cache_staleness, 0,
             "async: a row pulled for step p is read from this worker's "
             "row cache by steps p..p+S-1 and its gradients are summed and "
             "pushed once (within max(S-2,0) steps, all at the end); 0: off. "
             "Saves the pulls and pushes of rows hot in every batch.");
DEFINE_int32(row_cache_mb, 256,
             "Memory of the row cache (values and gradient sums); rows "
             "beyond it are pulled and pushed every step.");
DEFINE_string(wire_dtype, "fp32",
              "How pulled rows and weights and pushed gradients travel: "
              "fp32, bf16 (float32's range, 8 significant bits) or fp16 "
              "(11 bits; magnitudes beyond 65504 clamped). The servers keep "
              "float32 parameters and optimizer slots.");
DEFINE_int32(staleness, 2, "ssp: steps a worker may run ahead of the slowest.");
DEFINE_double(ps_recovery_secs, 600,
              "async: when a PS fails (down, restarting, restarted without "
              "this job's variables), keep retrying this long, re-creating "
              "the variables (a restarted PS restores its shards from its "
              "latest checkpoint); 0: fail at once.");
DEFINE_double(sync_timeout_secs, 60,
              "sync/ssp, and --dense_sync=allreduce: how long to wait for "
              "other workers before failing with their names.");
DEFINE_string(dense_sync, "ps",
              "Where dense variables train: ps (pulled and pushed through "
              "the PS under --mode, as the embeddings) or allreduce (a copy "
              "in every worker; each step their gradients are averaged "
              "among the workers by a Gloo ring all-reduce and every worker "
              "applies --dense_optimizer alike; --mode then governs the "
              "embeddings alone). allreduce with several workers needs "
              "--max_steps.");
DEFINE_string(allreduce_host, "",
              "--dense_sync=allreduce: the address the other workers reach "
              "this one's ring at (a port of its own is picked); empty: "
              "this worker's host in the cluster spec, else 127.0.0.1.");
DEFINE_int64(dense_to_ps_every_steps, 100,
             "--dense_sync=allreduce: worker 0 writes its dense values into "
             "the PS every N steps and after the last, so that checkpoints, "
             "psctl export and the evaluator hold them (at most N steps "
             "behind; exact at the end). 0: after the last step only.");
DEFINE_double(ring_reform_secs, 0,
              "--dense_sync=allreduce: when a worker dies, how long the "
              "others wait for it to restart (launch.py --restart_workers) "
              "and the ring to form again; 0: they fail at once, naming "
              "it.");
DEFINE_int32(log_every_steps, 100, "Progress line interval.");
DEFINE_int64(eval_every_steps, 0, "Evaluate every N steps (0: at the end).");
DEFINE_string(summary_dir, "",
              "Write TensorBoard event files here: each progress line's loss, "
              "auc, examples/s and time breakdown, and every evaluation "
              "(eval/auc, eval/logloss, eval/accuracy). Empty: none.");
DEFINE_double(eval_interval_secs, 60,
              "The evaluator task (TF_CONFIG task.type \"evaluator\"): "
              "evaluate the latest parameters on --eval_files at most this "
              "often, whenever they changed.");
DEFINE_bool(eval_on_all_workers, false,
            "Evaluate on every worker, not only the chief.");
DEFINE_int32(metrics_port, 0,
             "Serve Prometheus /metrics on this port while training (steps, "
             "examples, per-phase step times, loss/AUC, evaluations, PS "
             "recoveries; docs/operations.md). 0: off.");
DEFINE_string(metrics_bind_address, "0.0.0.0",
              "Address for --metrics_port (127.0.0.1 keeps it local).");

namespace psrt {
namespace {

absl::StatusOr<OptimizerSpec> Optimizer(const std::string& name, double lr) {
  OptimizerSpec o;
  o.set_learning_rate(static_cast<float>(lr));
  if (name == "sgd")
    o.set_kind(OptimizerSpec::SGD);
  else if (name == "momentum")
    o.set_kind(OptimizerSpec::MOMENTUM);
  else if (name == "adagrad")
    o.set_kind(OptimizerSpec::ADAGRAD);
  else if (name == "adam")
    o.set_kind(OptimizerSpec::ADAM);
  else if (name == "ftrl")
    o.set_kind(OptimizerSpec::FTRL);
  else {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer '", name, "' is not sgd, momentum, adagrad, adam or ftrl"));
  }
  return o;
}

std::vector<std::string> SplitList(const std::string& s) {
  return absl::StrSplit(s, ',', absl::SkipEmpty());
}

// --model and the model's flags as a ModelConfig.
absl::StatusOr<ModelConfig> ModelConfigFromFlags() {
  ModelConfig model;
  model.name = FLAGS_model;
  model.fields = FLAGS_fields;
  model.dense_dim = FLAGS_dense_dim;
  model.classes = FLAGS_classes;
  model.embedding_dim = FLAGS_embedding_dim;
  model.hidden.clear();  // (the struct's default layers)
  for (const std::string& h : SplitList(FLAGS_hidden)) {
    int size;
    if (!absl::SimpleAtoi(h, &size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hidden: '", h, "' is not a layer size"));
    }
    model.hidden.push_back(size);
  }
  model.vocab = FLAGS_vocab;
  model.hash_capacity = FLAGS_hash_capacity;
  if (FLAGS_admission_min_count > 1 && FLAGS_vocab > 0) {
    return absl::InvalidArgumentError(
        "--admission_min_count applies to hash embeddings (--vocab=0); a "
        "known vocabulary has every row already");
  }
  model.admission_min_count = FLAGS_admission_min_count;
  if (FLAGS_eviction_ttl_steps > 0 && FLAGS_vocab > 0) {
    return absl::InvalidArgumentError(
        "--eviction_ttl_steps applies to hash embeddings (--vocab=0); a "
        "known vocabulary keeps every row");
  }
  model.eviction_ttl_steps = FLAGS_eviction_ttl_steps;
  if (FLAGS_eviction_max_rows > 0 && FLAGS_vocab > 0) {
    return absl::InvalidArgumentError(
        "--eviction_max_rows applies to hash embeddings (--vocab=0); a "
        "known vocabulary keeps every row");
  }
  model.eviction_max_rows = FLAGS_eviction_max_rows;
  if (FLAGS_ssd_tier && FLAGS_vocab > 0) {
    return absl::InvalidArgumentError(
        "--ssd_tier applies to hash embeddings (--vocab=0); a known "
        "vocabulary is preallocated in memory");
  }
  model.ssd_tier = FLAGS_ssd_tier;
  model.embedding_shards = FLAGS_embedding_shards;
  model.seed = FLAGS_seed;
  auto emb = Optimizer(FLAGS_optimizer, FLAGS_learning_rate);
  auto dense = Optimizer(FLAGS_dense_optimizer, FLAGS_dense_learning_rate);
  if (!emb.ok()) return emb.status();
  if (!dense.ok()) return dense.status();
  model.embedding_optimizer = *emb;
  model.dense_optimizer = *dense;
  return model;
}

// The flags as TrainerOptions. INVALID_ARGUMENT naming the flag for a bad
// value.
absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags() {
  auto cluster = LoadClusterSpec(FLAGS_cluster, 2223);
  if (!cluster.ok()) return cluster.status();
  for (const std::string& note : cluster->notes) LOG(INFO) << note;
  TrainerOptions o;
  o.evaluator = cluster->has_task && cluster->task.type == "evaluator";
  o.worker_index = FLAGS_task_index >= 0 ? FLAGS_task_index
                   : cluster->has_task && cluster->task.type == "worker"
                       ? cluster->task.index
                       : 0;
  o.num_workers = std::max(1, cluster->num_workers());
  if (o.worker_index >= o.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--task_index=", o.worker_index, " but the cluster lists ",
                     o.num_workers, " workers"));
  }
  if (FLAGS_device != "cpu" && FLAGS_device != "gpu" &&
      FLAGS_device != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", FLAGS_device, ": expected cpu, gpu or auto"));
  }
  if (FLAGS_compute != "model" && FLAGS_compute != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--compute=", FLAGS_compute, ": expected model or none"));
  }
  o.client.ps_addresses = cluster->ps;
  auto security = SecurityOptionsFromFlags();
  if (!security.ok()) return security.status();
  o.client.security = *security;
  auto data_plane = DataPlaneFromFlags();
  if (!data_plane.ok()) return data_plane.status();
  o.client.data_plane = data_plane->data_plane;
  o.client.data_plane_providers = data_plane->providers;
  auto wire_dtype = ParseWireDtypeFlag(FLAGS_wire_dtype);
  if (!wire_dtype.ok()) return wire_dtype.status();
  o.client.wire_dtype = *wire_dtype;
  o.ps_recovery_timeout = absl::Seconds(std::max(0.0, FLAGS_ps_recovery_secs));
  o.client.call_timeout =
      absl::Seconds(std::max(60.0, FLAGS_sync_timeout_secs * 2));
  auto model = ModelConfigFromFlags();
  if (!model.ok()) return model.status();
  o.model = *std::move(model);

  ReaderOptions reader;
  reader.format = FLAGS_format;
  reader.label_field = FLAGS_label_field;
  reader.ids_field = FLAGS_ids_field;
  reader.values_field = FLAGS_values_field;
  reader.dense_field = FLAGS_dense_field;
  if (!FLAGS_tfrecord_features.empty()) {
    if (FLAGS_format != "tfrecord") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tfrecord_features needs --format=tfrecord, not ", FLAGS_format));
    }
    auto columns = ParseTfRecordFeatures(FLAGS_tfrecord_features);
    if (!columns.ok()) return columns.status();
    reader.columns = *std::move(columns);
  }
  reader.csv_schema = FLAGS_csv_schema;
  reader.criteo_buckets = FLAGS_criteo_buckets;
  reader.skip_bad_records = FLAGS_skip_bad_records;
  o.train.patterns = SplitList(FLAGS_train_files);
  if (o.evaluator && FLAGS_eval_files.empty()) {
    return absl::InvalidArgumentError(
        "this is the evaluator task (TF_CONFIG task.type \"evaluator\"): it "
        "evaluates the workers' parameters on --eval_files, which is not "
        "set");
  }
  if (o.train.patterns.empty() && !o.evaluator) {
    return absl::InvalidArgumentError("--train_files is required");
  }
  o.train.reader = reader;
  o.data_sharding = FLAGS_data_sharding;
  o.summary_dir = FLAGS_summary_dir;
  o.train.batch_size = FLAGS_batch_size;
  o.train.shuffle_buffer = FLAGS_shuffle_buffer;
  o.train.shuffle_files = FLAGS_shuffle_files;
  if (FLAGS_reader_threads < 0 || FLAGS_reader_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("--reader_threads=", FLAGS_reader_threads,
                     ": must be in [0, 256] (0: from the cores)"));
  }
  if (FLAGS_cache.empty()) {
    return absl::InvalidArgumentError(
        "--cache is empty: none, memory or a directory");
  }
  if (FLAGS_cache != "none" && FLAGS_cache != "memory") {
    o.train.cache_dir = FLAGS_cache;
  }
  o.train.cache_in_memory = FLAGS_cache == "memory";
  o.train.reader_threads =
      FLAGS_reader_threads > 0
          ? FLAGS_reader_threads
          : std::clamp(
                static_cast<int>(std::thread::hardware_concurrency()) / 4, 1,
                8);
  o.train.seed = FLAGS_seed + o.worker_index;
  o.train.epochs = FLAGS_epochs;
  o.eval.patterns = SplitList(FLAGS_eval_files);
  o.eval.reader = reader;
  o.eval.batch_size = 4096;
  o.device = FLAGS_device;
  o.towers = FLAGS_towers;
  o.compute = FLAGS_compute;
  o.max_steps = FLAGS_max_steps;
  if (FLAGS_pushes_in_flight < 1 || FLAGS_pushes_in_flight > 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pushes_in_flight=", FLAGS_pushes_in_flight, ": must be in [1, 16]"));
  }
  o.pushes_in_flight = FLAGS_pushes_in_flight;
  if (FLAGS_prefetch_steps < 1 || FLAGS_prefetch_steps > 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prefetch_steps=", FLAGS_prefetch_steps, ": must be in [1, 16]"));
  }
  o.prefetch_steps = FLAGS_prefetch_steps;
  if (FLAGS_row_cache_staleness < 0 || FLAGS_row_cache_staleness > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--row_cache_staleness=", FLAGS_row_cache_staleness,
                     ": must be in [0, 1000] (0: no row cache)"));
  }
  if (FLAGS_row_cache_mb < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--row_cache_mb=", FLAGS_row_cache_mb, ": must be at least 1"));
  }
  o.row_cache_staleness = FLAGS_row_cache_staleness;
  o.row_cache_bytes = int64_t{FLAGS_row_cache_mb} << 20;
  if (!(FLAGS_learning_rate_decay > 0 && FLAGS_learning_rate_decay <= 1)) {
    return absl::InvalidArgumentError(
        "--learning_rate_decay must be in (0, 1]");
  }
  o.learning_rate_decay = static_cast<float>(FLAGS_learning_rate_decay);
  o.log_every_steps = std::max(1, FLAGS_log_every_steps);
  o.eval_every_steps = FLAGS_eval_every_steps;
  o.evaluate = o.worker_index == 0 || FLAGS_eval_on_all_workers;
  if (FLAGS_mode == "sync") {
    o.consistency.set_mode(Consistency::SYNC);
  } else if (FLAGS_mode == "ssp") {
    o.consistency.set_mode(Consistency::SSP);
    o.consistency.set_staleness(FLAGS_staleness);
  } else if (FLAGS_mode != "async") {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode=", FLAGS_mode, " is not async, sync or ssp"));
  }
  o.consistency.set_workers(o.num_workers);
  o.dense_sync = FLAGS_dense_sync;
  o.worker_addresses = cluster->workers;
  o.allreduce_host = FLAGS_allreduce_host;
  if (o.allreduce_host.empty()) {
    o.allreduce_host = "127.0.0.1";
    if (o.worker_index < static_cast<int>(cluster->workers.size())) {
      const std::string& address = cluster->workers[o.worker_index];
      o.allreduce_host = address.substr(0, address.rfind(':'));
      if (o.allreduce_host.size() > 2 && o.allreduce_host.front() == '[') {
        o.allreduce_host =
            o.allreduce_host.substr(1, o.allreduce_host.size() - 2);
      }
    }
  }
  if (!(FLAGS_ring_reform_secs >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ring_reform_secs=", FLAGS_ring_reform_secs, ": must be >= 0"));
  }
  o.ring_reform_timeout = absl::Seconds(FLAGS_ring_reform_secs);
  if (FLAGS_dense_to_ps_every_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dense_to_ps_every_steps=", FLAGS_dense_to_ps_every_steps,
        ": must be >= 0"));
  }
  o.dense_to_ps_every_steps = FLAGS_dense_to_ps_every_steps;
  o.consistency.set_timeout_seconds(
      static_cast<float>(FLAGS_sync_timeout_secs));
  return o;
}

// TF's evaluator task: evaluates while the workers train, trains nothing.
int RunEvaluator(Trainer* trainer, const TrainerOptions& o) {
  if (!(FLAGS_eval_interval_secs > 0)) {
    LOG(ERROR) << "--eval_interval_secs must be > 0";
    return 2;
  }
  auto run = RunContinuousEvaluation(trainer, o.max_steps,
                                     absl::Seconds(FLAGS_eval_interval_secs));
  if (!run.ok()) {
    LOG(ERROR) << "evaluation failed: " << run.status();
    return 1;
  }
  std::cout << "[evaluator] final eval_auc=" << run->last.auc
            << " eval_logloss=" << run->last.log_loss
            << " eval_accuracy=" << run->last.accuracy
            << " global_step=" << run->last_global_step
            << " evaluations=" << run->evaluations << std::endl;
  return 0;
}

int Run() {
  auto options = TrainerOptionsFromFlags();
  if (!options.ok()) {
    LOG(ERROR) << options.status();
    return 2;
  }
  const TrainerOptions& o = *options;
  Trainer trainer(o);
  std::unique_ptr<MetricsHttpServer> metrics;  // stops before `trainer`
  if (FLAGS_metrics_port < 0 || FLAGS_metrics_port > 65535) {
    LOG(ERROR) << "--metrics_port=" << FLAGS_metrics_port
               << " is not a port (0: off)";
    return 2;
  }
  if (FLAGS_metrics_port > 0) {
    auto started = MetricsHttpServer::Start(
        absl::StrCat(FLAGS_metrics_bind_address, ":", FLAGS_metrics_port),
        &trainer.metrics().registry());
    if (!started.ok()) {
      LOG(ERROR) << "--metrics_port: " << started.status();
      return 2;
    }
    metrics = *std::move(started);
    LOG(INFO) << "metrics on port " << metrics->port();
  }
  if (o.evaluator) return RunEvaluator(&trainer, o);
  absl::StatusOr<TrainingResult> result = trainer.Run();
  if (!result.ok()) {
    LOG(ERROR) << "training failed: " << result.status();
    return 1;
  }
  if (result->eval.examples > 0) {
    std::cout << "[worker " << o.worker_index << "] final "
              << (result->eval.binary
                      ? absl::StrCat("eval_auc=", result->eval.auc,
                                     " eval_logloss=", result->eval.log_loss,
                                     " eval_accuracy=", result->eval.accuracy)
                      : absl::StrCat("eval_accuracy=", result->eval.accuracy))
              << " steps=" << result->steps << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace psrt

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "psrt worker: trains LR, FM, DeepFM, Wide & Deep or an MLP against a "
      "psrt cluster.\n  ps_worker --model=deepfm --train_files=... "
      "[--eval_files=...]");
  psrt::HandleHelpFlag(argc, argv, "ps_worker/");
  FLAGS_logtostderr = true;
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  psrt::TuneAllocatorForLargeMessages();
  return psrt::Run();
}
