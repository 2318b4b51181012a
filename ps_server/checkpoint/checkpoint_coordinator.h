// PS 0's side of a checkpoint: picks a name, has every PS write its shards
// in parallel (SaveShards; its own directly), then writes the manifest and
// the `latest` pointer, and keeps the newest `keep` checkpoints. If any PS
// fails, what was written is deleted and the previous checkpoint stays the
// latest. One checkpoint runs at a time; a second request waits for it.
#ifndef PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_COORDINATOR_H_
#define PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_COORDINATOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/ps.grpc.pb.h"
#include "ps_server/peers/ps_peers.h"
#include "ps_server/shards/shard_store.h"
#include "storage/storage.h"
#include "util/clock.h"

namespace psrt {

struct CheckpointOptions {
  std::string uri;  // root; "" = checkpoints only where a request names one
  int keep = 5;     // complete checkpoints kept (0: all)
  // How this process opens storage (StorageOpenerFor its S3 options).
  StorageOpener open_storage = StorageOpenerFor(S3Options());
  int threads = 2;                // shard files written at once per PS
  int64_t max_bytes_per_sec = 0;  // per PS; 0: unlimited
  absl::Duration save_timeout = absl::Hours(2);
  // Every PS's `uri` is storage of its own host (SageMaker's
  // /opt/ml/checkpoints, a local disk): PS 0 then also sends each PS the
  // manifest (CommitCheckpoint), so a PS restarted on its host finds a
  // complete checkpoint there. Off: the storage is shared (S3, EFS).
  bool storage_per_host = false;
  // Times checkpoints and their schedule (util/clock.h); null: the real
  // clock.
  Clock* clock = nullptr;
};

class CheckpointCoordinator {
 public:
  // `peers`: every PS task of the cluster, and how this PS calls them;
  // `store` and `peers` must outlive the coordinator.
  CheckpointCoordinator(ShardStore* store, const PsPeers* peers,
                        CheckpointOptions options);

  // Runs one checkpoint under options.uri; `uri` may repeat it (or be
  // empty), never name another root.
  absl::StatusOr<CheckpointResponse> Checkpoint(absl::string_view uri,
                                                bool final = false)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Requests are checked against this PS's configuration before anything
  // is written: checkpoints go only under options.uri (PERMISSION_DENIED
  // for any other root), names have CheckpointName's form, and a manifest
  // from PS 0 is parsed and checked, then written as parsed.
  //
  // --replicas: whether this PS knows PS `task` to have failed over (a
  // checkpoint then skips it: its shards are saved by the PS that took
  // them over). Other PS are asked too (GetStats). Set before serving.
  void set_failover_view(std::function<bool(int task)> failed_over) {
    failed_over_here_ = std::move(failed_over);
  }

  // This PS's part of a checkpoint (the SaveShards RPC).
  absl::StatusOr<SaveShardsResponse> SaveShards(
      const SaveShardsRequest& request);

  // Writes PS 0's manifest and `latest` into this PS's own storage (the
  // CommitCheckpoint RPC); FAILED_PRECONDITION unless storage_per_host.
  absl::Status CommitCheckpoint(const CommitCheckpointRequest& request);

  // When and at which global step the last successful checkpoint was taken
  // (start-up time and step until then).
  absl::Time last_time() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t last_step() const ABSL_LOCKS_EXCLUDED(mu_);
  void set_last(absl::Time time, int64_t step) ABSL_LOCKS_EXCLUDED(mu_);

  // This PS's last saves (its SaveShards), newest first, at most
  // kSaveHistory: for the status page.
  struct SavedShards {
    std::string name;  // ckpt-...
    int64_t bytes = 0;
    double seconds = 0;
    absl::Time finished;
  };
  static constexpr size_t kSaveHistory = 10;
  std::vector<SavedShards> SaveHistory() const ABSL_LOCKS_EXCLUDED(mu_);

  // What the metrics report: this PS's Checkpoint calls (PS 0 runs the
  // cluster's checkpoints) that passed their request checks, by outcome,
  // the last success, and the bytes this PS wrote for its own shards.
  struct Totals {
    int64_t succeeded = 0;
    int64_t failed = 0;
    absl::Time last_success = absl::InfinitePast();
    double last_seconds = 0;
    int64_t last_bytes = 0;
    int64_t last_step = 0;
    int64_t saved_bytes = 0;
    absl::Time last_save = absl::InfinitePast();  // this PS's shards
  };
  Totals totals() const ABSL_LOCKS_EXCLUDED(mu_);

  const CheckpointOptions& options() const { return options_; }
  // The clock checkpoints and their schedule are timed by.
  Clock* clock() const { return clock_; }
  const PsPeers& peers() const { return *peers_; }

 private:
  // Checkpoint's phases: the request checked (a location configured, the
  // same root, this is PS 0); SaveShards on every PS at once (this one
  // locally), each PS's answer or error by task.
  absl::Status CheckCheckpointRequest(absl::string_view uri) const;
  // Checkpoint after its checks, under run_mu_.
  absl::StatusOr<CheckpointResponse> RunCheckpoint(bool final)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  std::vector<absl::StatusOr<SaveShardsResponse>> SaveEverywhere(
      const std::string& uri, bool final);
  // FAILED_PRECONDITION naming `method` when options.uri is empty.
  absl::Status CheckConfigured(absl::string_view method) const;
  absl::Status DeleteCheckpoint(Storage& root, const std::string& name);
  // Writes the manifest, then `latest`, then applies retention.
  absl::Status Publish(Storage& root, const std::string& name,
                       const std::string& manifest_json);
  // CommitCheckpoint on every other PS, at once; their errors, joined.
  absl::Status CommitOnOthers(const std::string& root_uri,
                              const std::string& name,
                              const std::string& manifest_json);
  void Retain(Storage& root);

  ShardStore* const store_;
  const PsPeers* const peers_;
  const CheckpointOptions options_;
  Clock* const clock_;
  std::function<bool(int)> failed_over_here_;  // null: no replicas
  std::vector<std::string> ps_addresses_;      // peers_' addresses, by task
  absl::Mutex save_mu_;                        // one local SaveShards at a time
  mutable absl::Mutex mu_;
  absl::Time last_time_ ABSL_GUARDED_BY(mu_);
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<SavedShards> save_history_ ABSL_GUARDED_BY(mu_);
  Totals totals_ ABSL_GUARDED_BY(mu_);
  absl::Mutex run_mu_;  // one Checkpoint at a time
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_CHECKPOINT_CHECKPOINT_COORDINATOR_H_
