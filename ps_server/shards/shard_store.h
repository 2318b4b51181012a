// Everything one PS task holds: the cluster's ordered variable catalog (the
// same on every PS) and the shards of it placed on this task.
//
// Catalog rule: shard placement is a function of the ordered catalog, so
// every PS must see the same variables in the same order. CreateVariables
// therefore names the catalog position of its first spec; a taken position
// must hold the identical spec, and new specs are only appended at the end.
// Clients send creations to PS 0 first, which orders racing creators (the
// loser gets FAILED_PRECONDITION before any other PS is touched).
#ifndef PSRT_PS_SERVER_SHARDS_SHARD_STORE_H_
#define PSRT_PS_SERVER_SHARDS_SHARD_STORE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "partitioner/replica_placement.h"
#include "partitioner/shard_map.h"
#include "ps_server/optimizers/optimizer.h"
#include "ps_server/replication/shard_role.h"
#include "ps_server/shards/initializer.h"
#include "ps_server/shards/shard.h"
#include "util/clock.h"

namespace psrt {

// A catalog entry and whichever of its shards live on this PS.
struct LocalVariable {
  const VariableLayout* layout = nullptr;
  std::unique_ptr<Optimizer> optimizer;
  // Indexed by shard; null where no copy of the shard lives on this PS.
  std::vector<std::unique_ptr<Shard>> shards;
  // Indexed by shard: the role of the copy here (--replicas > 1:
  // ps_server/replication/shard_role.h), moved by ShardStore's failover,
  // handback and rejoin calls. A copy that may not serve is written only
  // by its primary's replication stream.
  mutable std::vector<ShardRole> roles;

  const std::string& name() const { return layout->spec.name(); }
  // A copy of the shard, primary or backup, lives here.
  bool Holds(int shard) const {
    return shard >= 0 && shard < layout->num_shards() &&
           shards[shard] != nullptr;
  }
  // This PS serves the shard (pulls, pushes, checkpoints): its role says
  // it may.
  bool IsPrimary(int shard) const {
    return Holds(shard) && roles[shard].MayServe();
  }
  // A copy here that another PS serves (backup, retired or rejoining).
  bool IsBackup(int shard) const {
    return Holds(shard) && !roles[shard].MayServe();
  }
  // REQUIRES: Holds(shard).
  Shard& shard(int shard) const { return *shards[shard]; }
  int64_t bytes() const;
};

class ShardStore {
 public:
  // `memory_limit_bytes` bounds the planned bytes of this PS's shards
  // (0: 90% of the memory available when a variable is created).
  // `replicas`: where backup copies go (ReplicaPlacement::Unreplicated:
  // none); this PS allocates the shards it is primary or backup for.
  ShardStore(int ps_task, int num_ps, int64_t memory_limit_bytes = 0);
  // `clock` times a prepared creation's TTL (it must outlive the store).
  ShardStore(int ps_task, int num_ps, int64_t memory_limit_bytes,
             ReplicaPlacement replicas, Clock* clock = Clock::Real());
  ~ShardStore();
  ShardStore(const ShardStore&) = delete;
  // --memory_budget_mb: hash embeddings that reach memory_limit_bytes evict
  // their least recently updated rows for room instead of refusing pushes.
  // Set before the first variable is created.
  void set_evict_at_memory_limit(bool evict) { evict_at_memory_limit_ = evict; }
  bool evict_at_memory_limit() const { return evict_at_memory_limit_; }
  // --ssd_tier_dir: where hash embeddings with storage.tier = SSD keep
  // their spilled rows (empty: such variables are refused). Set before the
  // first variable is created.
  void set_ssd_tier_dir(std::string dir) { ssd_tier_dir_ = std::move(dir); }
  // With replicas: told, under the shard's lock, the ids each eviction
  // took out of memory in a shard this PS is primary for (a primary puts
  // them in its replication stream; a backup evicts only those). Set
  // before the first variable is created.
  using EvictionSink = std::function<void(const LocalVariable& variable,
                                          int shard, std::vector<int64_t> ids)>;
  void set_eviction_sink(EvictionSink sink) {
    eviction_sink_ = std::move(sink);
  }
  ShardStore& operator=(const ShardStore&) = delete;

  // Places `specs` at catalog positions first_index, first_index + 1, ...
  // and allocates the shards that land on this PS. Returns the catalog size.
  // Errors: INVALID_ARGUMENT (bad spec or num_ps), ALREADY_EXISTS (a name
  // exists with another spec; both are described), FAILED_PRECONDITION
  // (positions disagree with the catalog), RESOURCE_EXHAUSTED (memory).
  absl::StatusOr<int> CreateVariables(int first_index,
                                      std::vector<VariableSpec> specs,
                                      int num_ps);

  // Creation in two phases, so that a client can create variables on every
  // PS all or nothing. PrepareVariables checks, allocates and restores like
  // CreateVariables, but keeps the new variables unseen under `creation_id`
  // (returning the catalog size they would make); CommitVariables publishes
  // them; AbortVariables discards them (nothing was ever visible). One
  // creation is prepared at a time: CreateVariables or another Prepare
  // meanwhile is FAILED_PRECONDITION ("in progress"; the client retries),
  // and one not committed within kPreparedTtl is discarded. Commit of an
  // id just committed answers again; of an unknown one FAILED_PRECONDITION.
  //
  // With `fill_in_background` Prepare checks (positions, memory) and
  // returns while the shards are allocated, initialized and filled (the
  // fill hook: a restore) on a thread of its own, so that every PS of a
  // cluster does that at once; AwaitPrepared reports when it
  // is done, Commit refuses until then, Abort cancels it. The TTL counts
  // from the end of the fill.
  static constexpr absl::Duration kPreparedTtl = absl::Seconds(60);
  absl::StatusOr<int> PrepareVariables(uint64_t creation_id, int first_index,
                                       std::vector<VariableSpec> specs,
                                       int num_ps,
                                       bool fill_in_background = false);
  // Waits up to `wait` for the prepared creation's fill: true when it is
  // done and succeeded (or the creation is already committed), false if
  // it still runs; the fill's error if it failed; FAILED_PRECONDITION for
  // an unknown id.
  absl::StatusOr<bool> AwaitPrepared(uint64_t creation_id, absl::Duration wait)
      ABSL_LOCKS_EXCLUDED(create_mu_);
  absl::StatusOr<int> CommitVariables(uint64_t creation_id);
  // Cancels and joins a fill running in the background (the prepared
  // creation stays, failed; its owner is going away).
  void CancelFill() ABSL_LOCKS_EXCLUDED(create_mu_);
  absl::Status AbortVariables(uint64_t creation_id);

  // nullptr if no such variable. The pointer stays valid for the store's
  // lifetime. Thread-safe.
  const LocalVariable* Find(absl::string_view name) const;

  // The catalog in order.
  std::vector<const LocalVariable*> Variables() const;

  // Called for each variable CreateVariables creates, after its local
  // shards are allocated and before anyone can see it (a checkpoint
  // restore fills them here). An error undoes the whole creation. A hook
  // running in the background should return soon (CANCELLED) once
  // `cancelled` turns true.
  using FillHook = std::function<absl::Status(
      const LocalVariable&, const std::atomic<bool>& cancelled)>;
  // Optional: true if the hook will write every row of the variable's
  // local shards (a restore of a dense or embedding variable the checkpoint
  // holds), so they are allocated zero instead of initialized -- the
  // initializer costs as much as the restore. The hook must then check
  // that it did write every row.
  using FillsEveryRow = std::function<bool(const VariableLayout&)>;
  void set_fill_hook(FillHook hook, FillsEveryRow fills_every_row = nullptr)
      ABSL_LOCKS_EXCLUDED(create_mu_);

  // The training progress this PS has seen: the highest step + 1 of any
  // applied push (steps count from 0), or what a restore set.
  void ObserveStep(int64_t step) {
    int64_t seen = global_step_.load(std::memory_order_relaxed);
    while (step + 1 > seen &&
           !global_step_.compare_exchange_weak(seen, step + 1)) {
    }
  }
  int64_t global_step() const { return global_step_.load(); }
  void set_global_step(int64_t step) { global_step_.store(step); }

  int ps_task() const { return ps_task_; }
  const ReplicaPlacement& replicas() const { return replicas_; }
  // Failover: serves this PS's backup copies of `primary`'s shards as
  // primaries from now on, and those of variables created later. Returns
  // how many shards changed role.
  int Promote(int primary) ABSL_LOCKS_EXCLUDED(create_mu_);
  // Handback, on the PS that took `primary`'s shards over: its copies of
  // them are backups again (undoes Promote). Each shard's role changes
  // under its lock, and a push checks the role under the same lock
  // (push_handler.cc), so no push applies to them here once this returns.
  // Returns how many shards changed role.
  int Demote(int primary) ABSL_LOCKS_EXCLUDED(create_mu_);
  // This PS took `primary`'s shards over (Promote) and has not handed
  // them back (Demote).
  bool TookOver(int primary) ABSL_LOCKS_EXCLUDED(create_mu_);
  // This PS was replaced (its backup took its shards over): none of its
  // copies is served or saved any more.
  void Retire();
  // Rejoin: this PS's copies of the shards placed on `placed` (served by
  // the PS it rejoins from) are being brought back (retired ->
  // rejoining), then are (rejoining -> backup). Return how many moved.
  int BeginRejoin(const std::vector<int>& placed)
      ABSL_LOCKS_EXCLUDED(create_mu_);
  int Rejoined(const std::vector<int>& placed) ABSL_LOCKS_EXCLUDED(create_mu_);
  // Retire() was called and no Reinstate() since.
  bool retired() const { return retired_.load(); }
  // Handback, on the PS that was replaced: it serves its own shards again
  // (undoes Retire for the shards placed on it). Returns how many.
  int Reinstate() ABSL_LOCKS_EXCLUDED(create_mu_);
  int num_ps() const { return num_ps_; }
  int64_t parameter_bytes() const;
  int64_t num_local_shards() const;

  // Accounts `bytes` more of shard memory (hash embeddings growing) if the
  // total stays within --memory_limit_bytes (or, without one, if they are
  // at most 90% of the memory available now); RESOURCE_EXHAUSTED saying
  // how much is held and allowed otherwise. Thread-safe, lock-free.
  absl::Status ReserveMemory(int64_t bytes);

 private:
  // `transition` applied to every copy here of a shard placed on one of
  // `placed`; returns how many it moved.
  int MoveRolesLocked(const std::vector<int>& placed,
                      bool (ShardRole::*transition)())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);

  const int ps_task_;
  const int num_ps_;
  const int64_t memory_limit_bytes_;
  bool evict_at_memory_limit_ = false;
  std::string ssd_tier_dir_;
  EvictionSink eviction_sink_;
  const ReplicaPlacement replicas_;
  Clock* const clock_;
  std::atomic<bool> retired_{false};  // Retire() was called
  // A copy of a shard placed on PS `primary` lives here.
  bool KeepsCopyOf(int primary) const {
    return primary == ps_task_ || replicas_.IsBackupOf(ps_task_, primary);
  }

  std::atomic<int64_t> global_step_{0};
  // Planned bytes of this PS's dense and embedding shards plus the blocks
  // its hash shards reserved: what --memory_limit_bytes is checked against.
  std::atomic<int64_t> accounted_bytes_{0};

  absl::StatusOr<std::unique_ptr<Shard>> MakeShard(const VariableLayout& layout,
                                                   int shard,
                                                   const Optimizer* optimizer,
                                                   const Initializer& init,
                                                   bool initialize);
  // Makes `v`'s local shards, initialized unless `fills_every_row` says
  // the fill hook will overwrite every row. Touches only `v`.
  absl::Status AllocateShards(LocalVariable* v,
                              const FillsEveryRow& fills_every_row);
  // Why `spec`'s SSD tier cannot be created here, if it cannot.
  absl::Status CheckSsdTier(const VariableSpec& spec) const;

  // Build's checks, before anything changes: the specs' catalog positions
  // (returning those to append), and the bytes they need on this PS
  // against the memory limit.
  absl::StatusOr<std::vector<const VariableSpec*>> CheckPositions(
      int first_index, const std::vector<VariableSpec>& specs) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);
  absl::StatusOr<int64_t> PlanBytes(
      const std::vector<const VariableSpec*>& to_add) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);

  // Checks a creation and adds its layouts to map_; with `fill` also
  // allocates and fills its local shards (else the caller does),
  // unpublished; nothing changes on error.
  absl::StatusOr<std::vector<std::unique_ptr<LocalVariable>>> Build(
      int first_index, std::vector<VariableSpec> specs, int num_ps,
      int64_t* new_bytes, bool fill = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);
  void Publish(std::vector<std::unique_ptr<LocalVariable>> created)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);
  // Takes `created` (the last entries of map_) back out of map_ and gives
  // their memory back.
  void Discard(std::vector<std::unique_ptr<LocalVariable>>* created)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);
  // FAILED_PRECONDITION while another creation is prepared (discarding it
  // first if it outlived kPreparedTtl).
  absl::Status CheckNoneInProgress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);

  // Serializes creations (held while shards are allocated).
  absl::Mutex create_mu_;
  // PS whose shards this one took over (Promote): shards of variables
  // created later that were placed on them are primary here too.
  absl::flat_hash_set<int> took_over_ ABSL_GUARDED_BY(create_mu_);
  FillHook fill_hook_ ABSL_GUARDED_BY(create_mu_);
  FillsEveryRow fills_every_row_ ABSL_GUARDED_BY(create_mu_);
  ShardMap map_ ABSL_GUARDED_BY(create_mu_);
  // A prepared creation's fill running on its own thread. The thread
  // touches only the new (unpublished) variables, never create_mu_, so
  // Abort can cancel and join it while holding create_mu_.
  struct BackgroundFill {
    std::thread thread;
    std::atomic<bool> cancelled{false};
    absl::Notification done;
    absl::Status status;     // written before `done`
    absl::Time finished_at;  // written before `done`
  };
  struct Prepared {  // (no member initializers: clang's std::optional)
    uint64_t id;
    absl::Time deadline;  // for a background fill: finished_at + TTL
    std::vector<std::unique_ptr<LocalVariable>> variables;
    int64_t new_bytes;
    std::shared_ptr<BackgroundFill> fill;  // null: filled in Prepare
  };
  // Cancels and joins prepared_'s background fill, if any.
  void StopFill() ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);
  std::optional<Prepared> prepared_ ABSL_GUARDED_BY(create_mu_);
  uint64_t last_committed_ ABSL_GUARDED_BY(create_mu_) = 0;

  // Guards the published catalog read by every request.
  mutable absl::Mutex catalog_mu_;
  std::vector<std::unique_ptr<LocalVariable>> variables_
      ABSL_GUARDED_BY(catalog_mu_);
  absl::flat_hash_map<std::string, LocalVariable*> by_name_
      ABSL_GUARDED_BY(catalog_mu_);
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_SHARD_STORE_H_
