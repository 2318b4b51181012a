// A shard of a HASH_EMBEDDING variable: rows keyed by any int64 id, created
// on the first push that touches them. A pull of an id never pushed returns
// the row's initial value -- a pure function of (seed, id) -- without storing
// it, so serving or evaluating on unseen ids costs no memory.
//
// Rows live in a RowTable (row_table.h: fixed-size blocks, an id -> row
// index); each row keeps [values | slot 0 | slot 1] side by side.
// The row capacity (shape[0] split over the shards, 0 = unbounded) is a hard
// limit: a push that would pass it fails with RESOURCE_EXHAUSTED and
// creates nothing. So is the PS's memory: each new block of rows is
// reserved first (ShardStore::ReserveMemory), and a push that would pass
// --memory_limit_bytes fails the same way.
//
// With admission (VariableSpec.admission, min_count N > 1) a push creates
// no row for an id until its N-th sighting: its AdmissionPolicy
// (admission_policy.h) counts the ids it has no row for, one count per
// push that carries the id, and the push that brings the count to N
// creates the row and applies the gradient; before that the id's gradient
// rows are dropped (counted).
//
// Prepare (EnsureRows, GiveRowsLocked) does all of a push's row work:
// room, admission, row creation and reads from the SSD tier. What it
// decides is in the update (ShardUpdate::rows: an id's row, or kNoRow for
// a gradient to drop), and the apply step under the lock only applies it.
// A push refused after Prepare (by another shard, say) keeps what Prepare
// did: the rows it created hold their initial values, its sightings stay
// counted.
//
// With eviction (VariableSpec.eviction, ttl_steps T > 0 or max_rows M > 0)
// each row records the global step of its last update; EvictIdleRows drops
// the rows idle for more than T steps, and the least recently updated rows
// above 90% of the shard's share of M, moving the last row into each hole
// so rows stay dense (checkpoints and snapshots read rows [0, num_rows) by
// position). A push that finds the shard at its share evicts room for its
// new rows itself (EvictForRoomLocked), never one of the rows it carries.
// A move advances the row epoch: an update prepared before it finds its
// rows again under the lock, before anything is applied (CheckLocked),
// and gets back the rows evicted since. While rows are pinned (a checkpoint
// reads them in several passes) nothing is evicted. Evicted rows' memory is
// reused by new rows, not returned.
//
// With an SSD tier (StorageSpec.tier = SSD, `spill_store` given) an evicted
// row is not dropped: EvictRowLocked writes it, slots included, to the
// shard's ColdTier (cold_tier.h: the RowSpillStore file in ps_server),
// and Prepare brings a spilled id's row back (promotes it) instead of
// initializing one. Every id is in one tier. A
// pull promotes the spilled rows it reads too (Gather, PromoteForPullLocked),
// or, while pinned or without room, reads them from disk. A checkpoint
// reads the spilled rows first (positions [0, spilled), in id order, as
// they were when the rows were pinned), then the rows in memory; promotions
// while pinned do not change what it reads.
#ifndef PSRT_PS_SERVER_SHARDS_HASH_EMBEDDING_SHARD_H_
#define PSRT_PS_SERVER_SHARDS_HASH_EMBEDDING_SHARD_H_

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "partitioner/shard_map.h"
#include "ps_server/optimizers/optimizer.h"
#include "ps_server/shards/admission_policy.h"
#include "ps_server/shards/cold_tier.h"
#include "ps_server/shards/eviction_policy.h"
#include "ps_server/shards/initializer.h"
#include "ps_server/shards/row_shard.h"
#include "ps_server/shards/row_table.h"

namespace psrt {

class HashEmbeddingShard final : public RowShard {
 public:
  static constexpr int64_t kRowsPerBlock = RowTable::kRowsPerBlock;
  // What a row costs beside its floats: its index slot (16 bytes and a
  // control byte, at a load as low as 7/16 just after the index grew: 39
  // bytes), its id and last-step entries (8 each, their capacity
  // kept within 1/8 of the rows' blocks): 64 bytes, so that a PS at its
  // memory budget holds what it accounted for.
  static constexpr int64_t kIndexBytesPerRow = 64;

  // Bytes a block of rows costs: the rows, and their index and id entries.
  int64_t block_bytes() const { return BlockBytes(stride_); }
  // One block of rows of `stride` floats (values and slots) and their index.
  static int64_t BlockBytes(int64_t stride) {
    return kRowsPerBlock *
           (stride * static_cast<int64_t>(sizeof(float)) + kIndexBytesPerRow);
  }
  // At --memory_budget_mb a shard keeps the blocks it holds and makes room
  // in them: one that held none once the budget was full could never hold
  // a row. So each takes its first block when created (the store counts it
  // in the variable's plan). RESOURCE_EXHAUSTED if it cannot.
  absl::Status TakeFirstBlock() ABSL_LOCKS_EXCLUDED(mu_);

  // Takes `bytes` more for the shard's rows, or says why not.
  using Reserve = std::function<absl::Status(int64_t bytes)>;

  // `layout` and `optimizer` must outlive the shard. `reserve` (may be
  // empty: no limit) is asked before every new block of rows (and for the
  // SSD tier's index; a negative amount gives bytes back); with
  // `evict_at_memory_limit` (--memory_budget_mb) a refused block makes the
  // shard evict its least recently updated rows for room instead.
  HashEmbeddingShard(const VariableLayout& layout, int shard,
                     const Optimizer* optimizer, const Initializer& init,
                     Reserve reserve = nullptr,
                     bool evict_at_memory_limit = false,
                     std::unique_ptr<ColdTier> spill_store = nullptr);

  absl::StatusOr<int64_t> Gather(absl::Span<const int64_t> ids,
                                 float* out) const override;
  using RowShard::EnsureRows;
  absl::Status EnsureRows(
      absl::Span<const int64_t> ids, std::vector<uint32_t>* rows,
      uint64_t* rows_epoch = nullptr,
      const absl::flat_hash_set<int64_t>* primary_dropped = nullptr) override;
  // With replicas: called under the shard's lock with the ids each
  // eviction took out of memory for good (after the SSD tier wrote them),
  // in the order the evictions happened, so that a primary can put them
  // in its replication stream among its updates. Set before use.
  using EvictionListener = std::function<void(std::vector<int64_t> ids)>;
  void set_eviction_listener(EvictionListener listener) {
    eviction_listener_ = std::move(listener);
  }
  absl::Status FollowEvictions(absl::Span<const int64_t> ids) override;
  // Rows one hold of the lock looks at in an eviction sweep.
  static constexpr int64_t kEvictionRowsPerHold = 8192;
  int64_t EvictIdleRows(int64_t global_step) override;
  void PinRows(bool pin) const override;
  absl::Mutex* mutex() const override ABSL_LOCK_RETURNED(mu_) { return &mu_; }
  absl::Status ApplyRowsLocked(absl::Span<const int64_t> ids,
                               absl::Span<const PayloadView> grads,
                               float learning_rate, float* undo) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UndoRowsLocked(absl::Span<const int64_t> ids, const float* undo) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t ExportRows(int64_t first, int64_t count, int64_t* ids, float* out,
                     int64_t* version) const override;
  int64_t ExportRowsLocked(int64_t first, int64_t count, int64_t* ids,
                           float* out, int64_t* version) const override
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status ImportRows(absl::Span<const int64_t> ids,
                          const float* rows) override;
  absl::Status ImportColdRows(absl::Span<const int64_t> ids,
                              const float* rows) override
      ABSL_LOCKS_EXCLUDED(mu_);
  const CountMinSketch* AdmissionSketchLocked() const override
      ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return admission_policy_ != nullptr ? &admission_policy_->sketch()
                                        : nullptr;
  }
  absl::Status ImportAdmissionSketch(absl::Span<const uint8_t> counters,
                                     int64_t increments) override
      ABSL_LOCKS_EXCLUDED(mu_);
  int64_t ColdRowsLocked() const override ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return ExportedFromDiskLocked();
  }
  void RestoreVersion(int64_t version) override;
  int64_t row_stride() const override { return stride_; }
  int64_t row_width() const override { return width_; }
  bool exports_ids() const override { return true; }
  int64_t num_rows() const override;
  // Eviction's bound on this shard's rows (its share of max_rows; 0: none).
  int64_t max_rows() const { return eviction_.max_rows(); }
  int64_t bytes() const override;
  int64_t version() const override;

  int64_t capacity() const { return capacity_; }
  HashRowCounts row_counts() const override;
  // What the shard has reserved through `reserve`: its blocks (and its
  // SSD tier store's memory, reserved by whoever created the store).
  int64_t reserved_bytes() const override {
    absl::ReaderMutexLock lock(&mu_);
    return table_.num_blocks() * block_bytes() +
           (store_ != nullptr ? store_->fixed_memory_bytes() : 0) +
           tier_index_reserved_;
  }

 protected:
  // An eviction since Prepare moved rows (the row epoch advanced): they
  // are found again, and those it evicted given back as Prepare gave them
  // (GiveRowsLocked, every id Prepare gave a row). Ids Prepare gave none
  // stay without.
  absl::Status RefreshRowsLocked(ShardUpdate* update) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the update to the rows Prepare gave it (update.rows, brought
  // up to date by RefreshRowsLocked): no lookup, no row created, nothing
  // read from disk; a gradient of an id without a row is dropped, counted.
  absl::Status ApplyUpdateLocked(const ShardUpdate& update,
                                 float* undo) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RowShard.
  int64_t VersionLocked() const override ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return version_;
  }
  ValueBounds ExactBoundsLocked() const override
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  const Optimizer& optimizer() const override { return *optimizer_; }

 private:
  // Appends a row for `id` and returns its index: `spilled` (its row,
  // taken from the SSD tier) if given, else an initialized row.
  uint32_t CreateRow(int64_t id, const float* spilled = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The row of each of `ids` (kNoRow where absent) into `rows`, each id's
  // index slot prefetched kRowPrefetchDistance ids ahead.
  static constexpr uint32_t kNoRow = RowTable::kNoRow;
  void FindRows(absl::Span<const int64_t> ids, uint32_t* rows) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The SSD tier's rows of the ids `rows` lacks (kNoRow), taken out of the
  // store in one batch: ids sorted and unique, found[k] whether ids[k] had
  // a row there, its floats (values and slots) at row(k, stride).
  struct TakenRows {
    std::vector<int64_t> ids;
    std::vector<float> rows;
    std::unique_ptr<bool[]> found;
    const float* row(size_t k, int64_t stride) const {
      return &rows[k * stride];
    }
  };
  // The ids of `ids` missing from memory (rows[i] == kNoRow), sorted and
  // once each, into taken->ids (taken->found all false).
  void CollectMissing(absl::Span<const int64_t> ids, const uint32_t* rows,
                      TakenRows* taken) const;
  // Promotion on a pull: the rows of `ids` missing from memory (rows[i] ==
  // kNoRow) that the SSD tier holds are taken back into memory, room made
  // as for a push (never evicting a row of `ids`), and rows[] filled in.
  // False if they stay on disk (no tier, a checkpoint pins the rows, no
  // room, a store error): the caller reads them there.
  bool PromoteForPullLocked(absl::Span<const int64_t> ids, uint32_t* rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gather's copy to out + i * width: rows[i]'s values, else (with
  // `read_store`) ids[i]'s row on disk, else its initial values (zeros for
  // an id admission has not admitted, if so configured). An error if the
  // disk could not be read (UnreadableRowsError).
  absl::Status CopyRowsLocked(absl::Span<const int64_t> ids,
                              const uint32_t* rows, bool read_store,
                              float* out) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // ApplyRowsLocked on the rows of `ids`.
  absl::Status ApplyToRowsLocked(absl::Span<const int64_t> ids,
                                 absl::Span<const uint32_t> rows,
                                 absl::Span<const PayloadView> grads,
                                 float learning_rate, float* undo)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Repeats found on the rows (a bitmap over them) when they are known.
  bool HasRepeatedIds(const ShardUpdate& update) const override;
  // Who may get a row among the ids missing from memory.
  // EnsureRows on a backup: the primary's decisions (primary_dropped).
  absl::Status FollowPrimaryLocked(
      absl::Span<const int64_t> ids, uint32_t* rows,
      const absl::flat_hash_set<int64_t>& primary_dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  enum class Admit {
    kAll,       // every id (rows held elsewhere: a checkpoint, a primary)
    kByPolicy,  // the admission policy's (a push)
  };
  // Prepare's work for the ids of `ids` missing from memory (rows[i] ==
  // kNoRow), each once however often it repeats: room is made for every
  // one that may get a row (within the row limit and max_rows, evicting
  // rows other than those in `keep`; the blocks reserved from the PS's
  // memory) -- RESOURCE_EXHAUSTED takes, creates and counts nothing. Then
  // an id the SSD tier holds comes back with its values and slots
  // (promoted), and a new id is sighted by the admission policy (with
  // kByPolicy) and, if admitted, gets an initialized row. rows[] is filled
  // in; an id given no row stays kNoRow (its gradient will be dropped,
  // counted). With `place_what_fits` (a push), a shard at the PS's memory
  // budget while a checkpoint reads it (no row may move, so none can be
  // evicted) gives rows to what its blocks have room for instead of
  // refusing. A tier that cannot read the rows: the error, nothing taken.
  absl::Status GiveRowsLocked(absl::Span<const int64_t> ids, uint32_t* rows,
                              Admit admit, bool place_what_fits,
                              absl::Span<const uint32_t> keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rows a backup gave `given` distinct ids as its primary decided count
  // as admitted, those its SSD tier gave back (promoted since
  // `promoted_before`) excepted, as the primary's admission counts them.
  void CountAdmittedLocked(int64_t given, int64_t promoted_before)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // GiveRowsLocked while the SSD tier holds rows: the missing ids sorted
  // and once each, as the tier's batch reads take them.
  absl::Status GiveRowsWithTierLocked(absl::Span<const int64_t> ids,
                                      uint32_t* rows, AdmissionPolicy* policy,
                                      bool place_what_fits,
                                      absl::Span<const uint32_t> keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // GiveRowsLocked's room for `candidates` more rows (MakeRoomLocked;
  // `admitting` words the error; `allocate`: the blocks allocated now, so
  // that a step after it that fails leaves blocks, not reservations
  // without them): how many may be placed -- all of them, or with
  // `place_what_fits` at the memory budget while pinned, what the blocks
  // hold. Rows it moved are found again in rows[] (ids' rows).
  absl::StatusOr<int64_t> RoomForLocked(int64_t candidates, bool admitting,
                                        bool allocate, bool place_what_fits,
                                        absl::Span<const uint32_t> keep,
                                        absl::Span<const int64_t> ids,
                                        uint32_t* rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The row limit: shape[0]'s share (or what a uint32 row index allows).
  int64_t RowLimit() const;
  // Room for `count` more rows (`what` names them in the error): within
  // RowLimit (and max_rows, evicting rows other than those in `keep` --
  // the push's rows, kNoRow for its missing ids -- for them),
  // and the blocks they need reserved from the PS's memory -- allocated too
  // if `allocate` (else CreateRow allocates them). `*pinned_full` (if
  // given) is set when it fails because the PS's memory refused the blocks
  // while a pin kept it from evicting (--memory_budget_mb).
  absl::Status MakeRoomLocked(int64_t count, absl::string_view what,
                              bool allocate, absl::Span<const uint32_t> keep,
                              bool* pinned_full = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The error of a `what` ("pull", "update") refused because the SSD tier
  // failed (`read`) to read back `count` ids' rows, which stay there.
  absl::Status UnreadableRowsError(int64_t count, absl::string_view what,
                                   const absl::Status& read) const;
  // MakeRoomLocked's error when eviction failed to write (`spill`).
  absl::Status NoRoomForSpillError(int64_t count, absl::string_view what,
                                   const absl::Status& spill) const;
  // Evicts `need` of the least recently updated rows, none in `keep` (or
  // fewer, if the others are all in it); advances the row epoch if it
  // moved rows. An error: the SSD tier could not write the evicted rows,
  // which stay in memory (CommitSpilledLocked).
  absl::Status EvictLeastRecentLocked(int64_t need,
                                      absl::Span<const uint32_t> keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The last-update step below which about `fraction` of the rows lie
  // (EvictionPolicy::CutoffStep over the rows in memory).
  int64_t SampleStepLocked(double fraction) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops row `row` (with an SSD tier: stages it for the store); the last
  // row moves into its place.
  void EvictRowLocked(int64_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the rows EvictRowLocked staged to the SSD tier. If that fails
  // (a full or failing disk) the rows are created in memory again, with
  // their values and slots, in the room their eviction left. Returns the
  // store's error. Then tells the eviction listener the ids evicted since
  // the last call whose eviction stands.
  absl::Status CommitSpilledLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CommitSpilledLocked's write to the tier.
  absl::Status SpillStagedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The SSD tier's index grows with the rows spilled: its growth is
  // reserved from the PS's memory as the rows' blocks are. At
  // --memory_budget_mb, where the reservation is refused, the shard's last
  // blocks make room: their rows go to the tier first and the blocks are
  // given back. Run after each sweep (not while pinned).
  void ReserveTierIndex();
  // Waits (releasing mu_ meanwhile) until no export pins the rows, before
  // rows move between tiers outside a push.
  void AwaitUnpinnedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rows [0, result) of the export order are on disk.
  int64_t ExportedFromDiskLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const VariableLayout& layout_;
  const int shard_;
  const Optimizer* const optimizer_;
  const Initializer init_;
  const int64_t width_;
  const int64_t stride_;
  const int64_t capacity_;  // 0 = unbounded
  const Reserve reserve_;
  const EvictionPolicy eviction_;  // last_step_ kept if it tracks steps
  // The SSD tier; null: evicted rows are dropped. Changed under mu_ held
  // exclusively; read (pulls, exports) under mu_ shared.
  const std::unique_ptr<ColdTier> store_;
  mutable std::atomic<int> pins_{0};
  absl::Mutex sweep_mu_;  // one eviction sweep at a time
  mutable absl::Mutex mu_;
  uint64_t rows_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evict_hand_ ABSL_GUARDED_BY(mu_) = 0;     // where a search resumes
  uint64_t sample_state_ ABSL_GUARDED_BY(mu_) = 0;  // SampleStepLocked
  int64_t current_step_ ABSL_GUARDED_BY(mu_) = 0;   // highest update step
  // Admission (null: every id gets a row). Its counts change under mu_
  // held exclusively.
  const std::unique_ptr<AdmissionPolicy> admission_policy_
      ABSL_PT_GUARDED_BY(mu_);
  HashRowCounts admission_ ABSL_GUARDED_BY(mu_);
  // The rows in memory (with eviction, each row's last update step: -1
  // restored, set by the next sweep).
  RowTable table_ ABSL_GUARDED_BY(mu_);
  int64_t spilled_ ABSL_GUARDED_BY(mu_) = 0;  // in the SSD tier
  // spilled_ when the first pin was taken (what a checkpoint reads).
  mutable std::atomic<int64_t> pinned_spilled_{0};
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes of the SSD tier's index reserved from the PS (ReserveTierIndex).
  int64_t tier_index_reserved_ ABSL_GUARDED_BY(mu_) = 0;
  EvictionListener eviction_listener_;  // set before use
  // The ids evicted since the listener was last told (with a listener).
  std::vector<int64_t> evicted_ids_ ABSL_GUARDED_BY(mu_);
  // Set while a backup gives rows as its primary decided
  // (FollowPrimaryLocked): the primary's evictions, carried in its stream,
  // keep this copy within max_rows, so it evicts nothing on its own; at
  // the PS's memory budget only a copy with an SSD tier may (its rows keep
  // their values there).
  bool follows_primary_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace psrt

#endif  // PSRT_PS_SERVER_SHARDS_HASH_EMBEDDING_SHARD_H_
