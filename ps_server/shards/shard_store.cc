#include "ps_server/shards/shard_store.h"

#include <algorithm>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "partitioner/variable_spec.h"
#include "ps_server/shards/count_min_sketch.h"
#include "ps_server/shards/dense_shard.h"
#include "ps_server/shards/embedding_shard.h"
#include "ps_server/shards/hash_embedding_shard.h"
#include "ps_server/shards/row_spill_store.h"
#include "util/memory_headroom.h"

namespace psrt {
namespace {

// What shards may still take: what this process may allocate (host or
// container) less a reserve of 10% of that memory's total, kept for
// messages in flight, gRPC and the allocator, so that a table growing to
// the edge is refused before the OOM killer acts; -1 if unknown.
MemoryHeadroom UsableMemory() {
  MemoryHeadroom headroom = AvailableMemory();
  if (headroom.bytes >= 0) {
    headroom.bytes = std::max<int64_t>(0, headroom.bytes - headroom.total / 10);
    headroom.source = absl::StrCat(headroom.source, " less a reserve of ",
                                   headroom.total / 10, " bytes (10%)");
  }
  return headroom;
}

}  // namespace

int64_t LocalVariable::bytes() const {
  int64_t total = 0;
  for (const auto& s : shards) total += s ? s->bytes() : 0;
  return total;
}

// The one place that chooses a shard's implementation from its kind.
absl::StatusOr<std::unique_ptr<Shard>> ShardStore::MakeShard(
    const VariableLayout& layout, int shard, const Optimizer* optimizer,
    const Initializer& init, bool initialize) {
  switch (layout.kind()) {
    case DENSE:
      return std::make_unique<DenseShard>(layout, shard, optimizer, init,
                                          initialize);
    case EMBEDDING:
      return std::make_unique<EmbeddingShard>(layout, shard, optimizer, init,
                                              initialize);
    default: {
      std::unique_ptr<RowSpillStore> spill_store;
      if (layout.spec.storage().tier() == StorageSpec::SSD) {
        const std::string& path = layout.spec.storage().path();
        auto opened = RowSpillStore::Open(
            absl::StrCat(
                ssd_tier_dir_, "/",
                path.empty() ? absl::StrCat("variable-", layout.index) : path,
                "/shard-", shard),
            layout.row_width * (1 + optimizer->num_slots()));
        if (!opened.ok()) {
          return absl::Status(
              opened.status().code(),
              absl::StrCat("variable '", layout.spec.name(), "' shard ", shard,
                           ": ", opened.status().message()));
        }
        spill_store = *std::move(opened);
      }
      return std::make_unique<HashEmbeddingShard>(
          layout, shard, optimizer, init,
          [this](int64_t bytes) { return ReserveMemory(bytes); },
          evict_at_memory_limit_, std::move(spill_store));
    }
  }
}

absl::Status ShardStore::AllocateShards(LocalVariable* v,
                                        const FillsEveryRow& fills_every_row) {
  const Initializer init(v->layout->spec.initializer());
  const bool initialize = !fills_every_row || !fills_every_row(*v->layout);
  for (int s = 0; s < v->layout->num_shards(); ++s) {
    const int primary = v->layout->shards[s].ps_task;
    if (!KeepsCopyOf(primary)) continue;
    auto made = MakeShard(*v->layout, s, v->optimizer.get(), init, initialize);
    if (!made.ok()) return made.status();
    if (evict_at_memory_limit_ && v->layout->kind() == HASH_EMBEDDING) {
      if (absl::Status taken =
              static_cast<HashEmbeddingShard&>(**made).TakeFirstBlock();
          !taken.ok()) {
        return absl::Status(
            taken.code(),
            absl::StrCat("hash embedding '", v->layout->spec.name(), "' shard ",
                         s, "'s first block of rows: ", taken.message()));
      }
    }
    if (eviction_sink_ && v->layout->kind() == HASH_EMBEDDING) {
      static_cast<HashEmbeddingShard&>(**made).set_eviction_listener(
          [this, v, s](std::vector<int64_t> ids) {
            if (v->IsPrimary(s)) eviction_sink_(*v, s, std::move(ids));
          });
    }
    v->shards[s] = *std::move(made);
    v->roles[s].Init(retired_.load()       ? ShardRole::Role::kRetired
                     : primary != ps_task_ ? ShardRole::Role::kBackup
                                           : ShardRole::Role::kPrimary);
  }
  return absl::OkStatus();
}

ShardStore::ShardStore(int ps_task, int num_ps, int64_t memory_limit_bytes)
    : ShardStore(ps_task, num_ps, memory_limit_bytes,
                 ReplicaPlacement::Unreplicated(num_ps)) {}

ShardStore::ShardStore(int ps_task, int num_ps, int64_t memory_limit_bytes,
                       ReplicaPlacement replicas, Clock* clock)
    : ps_task_(ps_task),
      num_ps_(num_ps),
      memory_limit_bytes_(memory_limit_bytes),
      replicas_(std::move(replicas)),
      clock_(clock),
      map_(num_ps) {}

absl::StatusOr<std::vector<const VariableSpec*>> ShardStore::CheckPositions(
    int first_index, const std::vector<VariableSpec>& specs) const {
  const int size = static_cast<int>(map_.variables().size());
  if (first_index < 0 || first_index > size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the request places its first variable ('",
        specs.empty() ? "" : specs[0].name(), "') at catalog position ",
        first_index, " but this PS's catalog holds ", size,
        " variables; list the catalog (ListVariables) and append at its end"));
  }
  std::vector<const VariableSpec*> to_add;
  for (size_t i = 0; i < specs.size(); ++i) {
    const VariableSpec& spec = specs[i];
    const int position = first_index + static_cast<int>(i);
    const VariableLayout* existing = map_.Find(spec.name());
    if (existing != nullptr && !SameSpec(existing->spec, spec)) {
      return absl::AlreadyExistsError(
          absl::StrCat("variable '", spec.name(),
                       "' already exists with a different spec: "
                       "existing {",
                       DescribeSpec(existing->spec), "}, requested {",
                       DescribeSpec(spec), "}"));
    }
    if (position < size) {
      const VariableSpec& there = map_.variables()[position].spec;
      if (!SameSpec(there, spec)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "catalog position ", position, " holds '", there.name(),
            "' but the request puts '", spec.name(),
            "' there; create "
            "variables in the same order everywhere (or from the chief only)"));
      }
      continue;
    }
    if (existing != nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("variable '", spec.name(), "' is at catalog position ",
                       existing->index, ", not ", position));
    }
    for (const VariableSpec* other : to_add) {
      if (other->name() == spec.name()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "variable '", spec.name(), "' appears twice in the request"));
      }
    }
    to_add.push_back(&spec);
  }
  return to_add;
}

absl::Status ShardStore::CheckSsdTier(const VariableSpec& spec) const {
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.name(), "': storage.tier = SSD ", why));
  };
  if (ssd_tier_dir_.empty()) {
    return refuse(absl::StrCat("needs ps_server --ssd_tier_dir (PS ", ps_task_,
                               " has none)"));
  }
  if (!spec.has_eviction() && !evict_at_memory_limit_) {
    return refuse(
        "needs a rule that takes rows out of memory: eviction.max_rows, "
        "eviction.ttl_steps, or ps_server --memory_budget_mb");
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ShardStore::PlanBytes(
    const std::vector<const VariableSpec*>& to_add) const {
  // Plan on a copy so a memory refusal leaves the catalog untouched.
  ShardMap plan = map_;
  int64_t new_bytes = 0;
  // Hash shards' first blocks, reserved by the shards as they are made:
  // counted here, not returned.
  int64_t first_blocks = 0;
  for (const VariableSpec* spec : to_add) {
    if (spec->storage().tier() == StorageSpec::SSD) {
      if (absl::Status s = CheckSsdTier(*spec); !s.ok()) return s;
    }
    if (absl::Status s = plan.Add(*spec); !s.ok()) return s;
    // At the budget each hash shard takes its first block of rows when it
    // is made (HashEmbeddingShard::TakeFirstBlock).
    int64_t first_block = 0;
    if (spec->kind() == HASH_EMBEDDING && evict_at_memory_limit_) {
      first_block = HashEmbeddingShard::BlockBytes(
          plan.Find(spec->name())->row_width *
          (1 + CreateOptimizer(spec->optimizer())->num_slots()));
    }
    for (const ShardLayout& shard : plan.Find(spec->name())->shards) {
      if (!KeepsCopyOf(shard.ps_task)) continue;
      // Hash rows reserve their memory as they are created; an admission
      // sketch is allocated with the shard.
      if (spec->kind() != HASH_EMBEDDING) {
        new_bytes += shard.bytes;
      } else if (spec->has_admission()) {
        new_bytes += CountMinSketch::kRows * spec->admission().sketch_width();
      }
      first_blocks += first_block;
      if (spec->storage().tier() == StorageSpec::SSD) {
        new_bytes += RowSpillStore::kMemoryBytes;
      }
    }
  }
  const int64_t held = accounted_bytes_.load();
  MemoryHeadroom usable;
  if (memory_limit_bytes_ > 0) {
    usable.bytes = memory_limit_bytes_ - held;
    usable.source = absl::StrCat("--memory_limit_bytes=", memory_limit_bytes_,
                                 " less the ", held, " bytes held");
  } else {
    usable = UsableMemory();
  }
  if (usable.bytes >= 0 && new_bytes + first_blocks > usable.bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "creating ", to_add.size(), " variable(s) needs ",
        new_bytes + first_blocks, " bytes on PS ", ps_task_, " but only ",
        usable.bytes, " are available (", usable.source,
        "); use more PS tasks or smaller variables"));
  }
  return new_bytes;
}

absl::StatusOr<std::vector<std::unique_ptr<LocalVariable>>> ShardStore::Build(
    int first_index, std::vector<VariableSpec> specs, int num_ps,
    int64_t* new_bytes_out, bool fill) {
  if (num_ps != num_ps_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the client assumes ", num_ps, " PS tasks but this is PS ", ps_task_,
        " of ", num_ps_, "; every process must use the same cluster spec"));
  }
  for (VariableSpec& spec : specs) {
    if (absl::Status s = NormalizeVariableSpec(&spec); !s.ok()) return s;
  }
  // Check every position and the memory before changing anything.
  auto to_add = CheckPositions(first_index, specs);
  if (!to_add.ok()) return to_add.status();
  std::vector<std::unique_ptr<LocalVariable>> created;
  *new_bytes_out = 0;
  if (to_add->empty()) return created;
  auto new_bytes = PlanBytes(*to_add);
  if (!new_bytes.ok()) return new_bytes.status();

  for (const VariableSpec* spec : *to_add) {
    if (absl::Status s = map_.Add(*spec); !s.ok()) {
      Discard(&created);
      return s;
    }
    auto v = std::make_unique<LocalVariable>();
    v->layout = map_.Find(spec->name());
    v->optimizer = CreateOptimizer(spec->optimizer());
    v->shards.resize(v->layout->num_shards());
    v->roles = std::vector<ShardRole>(v->layout->num_shards());
    absl::Status allocated =
        fill ? AllocateShards(v.get(), fills_every_row_) : absl::OkStatus();
    created.push_back(std::move(v));
    if (!allocated.ok()) {
      Discard(&created);
      return allocated;
    }
    if (fill && fill_hook_) {
      static const std::atomic<bool> kNeverCancelled{false};
      if (absl::Status s = fill_hook_(*created.back(), kNeverCancelled);
          !s.ok()) {
        Discard(&created);
        return s;
      }
    }
  }
  accounted_bytes_ += *new_bytes;  // reserved now; Discard gives it back
  *new_bytes_out = *new_bytes;
  return created;
}

void ShardStore::Discard(std::vector<std::unique_ptr<LocalVariable>>* created) {
  for (const auto& v : *created) {
    map_.PopBack();
    // Hash rows a restore imported gave their memory back too.
    for (const auto& shard : v->shards) {
      if (shard != nullptr) accounted_bytes_ -= shard->reserved_bytes();
    }
  }
  created->clear();
}

void ShardStore::Publish(std::vector<std::unique_ptr<LocalVariable>> created) {
  // Created after a takeover: the copies of the failed PS's shards are
  // served here, like those of the variables that existed then.
  for (auto& v : created) {
    for (int s = 0; s < v->layout->num_shards(); ++s) {
      if (v->shards[s] != nullptr && !retired_.load() &&
          took_over_.contains(v->layout->shards[s].ps_task)) {
        v->roles[s].TakeOver();
      }
    }
  }
  absl::MutexLock lock(&catalog_mu_);
  for (auto& v : created) {
    by_name_[v->name()] = v.get();
    variables_.push_back(std::move(v));
  }
}

ShardStore::~ShardStore() { CancelFill(); }

void ShardStore::CancelFill() {
  absl::MutexLock lock(&create_mu_);
  StopFill();
}

void ShardStore::StopFill() {
  if (!prepared_.has_value() || prepared_->fill == nullptr) return;
  BackgroundFill& fill = *prepared_->fill;
  fill.cancelled = true;
  if (fill.thread.joinable()) fill.thread.join();
}

absl::Status ShardStore::CheckNoneInProgress() {
  if (!prepared_.has_value()) return absl::OkStatus();
  if (prepared_->fill != nullptr && prepared_->fill->done.HasBeenNotified()) {
    prepared_->deadline = prepared_->fill->finished_at + kPreparedTtl;
  }
  if (clock_->Now() > prepared_->deadline) {
    LOG(WARNING) << "PS " << ps_task_ << ": creation " << prepared_->id
                 << " was prepared but never committed within " << kPreparedTtl
                 << "; discarding it";
    StopFill();
    accounted_bytes_ -= prepared_->new_bytes;
    Discard(&prepared_->variables);
    prepared_.reset();
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("another creation of variables (", prepared_->id,
                   ") is in progress on PS ", ps_task_, "; try again"));
}

absl::StatusOr<int> ShardStore::CreateVariables(int first_index,
                                                std::vector<VariableSpec> specs,
                                                int num_ps) {
  absl::MutexLock create_lock(&create_mu_);
  if (absl::Status s = CheckNoneInProgress(); !s.ok()) return s;
  int64_t new_bytes = 0;
  auto created = Build(first_index, std::move(specs), num_ps, &new_bytes);
  if (!created.ok()) return created.status();
  Publish(*std::move(created));
  return static_cast<int>(map_.variables().size());
}

absl::StatusOr<int> ShardStore::PrepareVariables(
    uint64_t creation_id, int first_index, std::vector<VariableSpec> specs,
    int num_ps, bool fill_in_background) {
  if (creation_id == 0) {
    return absl::InvalidArgumentError("a prepared creation needs an id");
  }
  absl::MutexLock create_lock(&create_mu_);
  if (prepared_.has_value() && prepared_->id == creation_id) {
    return static_cast<int>(map_.variables().size());  // a retried prepare
  }
  if (absl::Status s = CheckNoneInProgress(); !s.ok()) return s;
  int64_t new_bytes = 0;
  auto created = Build(first_index, std::move(specs), num_ps, &new_bytes,
                       /*fill=*/!fill_in_background);
  if (!created.ok()) return created.status();
  std::shared_ptr<BackgroundFill> fill;
  if (fill_in_background) {
    fill = std::make_shared<BackgroundFill>();
    std::vector<LocalVariable*> to_fill;
    for (const auto& v : *created) to_fill.push_back(v.get());
    fill->thread =
        std::thread([this, fill_ptr = fill.get(), hook = fill_hook_,
                     covers = fills_every_row_, to_fill = std::move(to_fill)] {
          absl::Status status;
          for (LocalVariable* v : to_fill) {
            if (fill_ptr->cancelled) {
              status = absl::CancelledError("the creation was aborted");
              break;
            }
            try {
              status = AllocateShards(v, covers);
              if (!status.ok()) break;
            } catch (const std::bad_alloc&) {
              // PlanBytes checked the memory, but it may have gone since:
              // an error for the client, not a crash of the PS.
              status = absl::ResourceExhaustedError(absl::StrCat(
                  "PS ", ps_task_, " could not allocate the shards of '",
                  v->name(), "' (", v->layout->spec.ShortDebugString(), ")"));
              break;
            }
            if (hook) status = hook(*v, fill_ptr->cancelled);
            if (!status.ok()) break;
          }
          fill_ptr->status = status;
          fill_ptr->finished_at = clock_->Now();
          fill_ptr->done.Notify();
        });
  }
  prepared_.emplace(Prepared{
      creation_id,
      fill != nullptr ? absl::InfiniteFuture() : clock_->Now() + kPreparedTtl,
      *std::move(created), new_bytes, std::move(fill)});
  return static_cast<int>(map_.variables().size());
}

absl::StatusOr<bool> ShardStore::AwaitPrepared(uint64_t creation_id,
                                               absl::Duration wait) {
  std::shared_ptr<BackgroundFill> fill;
  {
    absl::MutexLock create_lock(&create_mu_);
    if (!prepared_.has_value() || prepared_->id != creation_id) {
      if (creation_id != 0 && creation_id == last_committed_) return true;
      return absl::FailedPreconditionError(absl::StrCat(
          "creation ", creation_id, " is not prepared on PS ", ps_task_,
          " (aborted, discarded after ", absl::FormatDuration(kPreparedTtl),
          ", or this PS restarted); create the variables again"));
    }
    if (prepared_->fill == nullptr) return true;
    fill = prepared_->fill;
  }
  if (!fill->done.WaitForNotificationWithTimeout(wait)) return false;
  if (!fill->status.ok()) return fill->status;
  return true;
}

absl::StatusOr<int> ShardStore::CommitVariables(uint64_t creation_id) {
  absl::MutexLock create_lock(&create_mu_);
  if (prepared_.has_value() && prepared_->id == creation_id) {
    if (prepared_->fill != nullptr) {
      BackgroundFill& fill = *prepared_->fill;
      if (!fill.done.HasBeenNotified()) {
        return absl::FailedPreconditionError(
            absl::StrCat("creation ", creation_id, " is still restoring on PS ",
                         ps_task_, "; commit after it is done (await it)"));
      }
      if (!fill.status.ok()) return fill.status;
      fill.thread.join();
    }
    Publish(std::move(prepared_->variables));
    prepared_.reset();
    last_committed_ = creation_id;
    return static_cast<int>(map_.variables().size());
  }
  if (creation_id != 0 && creation_id == last_committed_) {
    return static_cast<int>(map_.variables().size());
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "creation ", creation_id, " is not prepared on PS ", ps_task_,
      " (it was discarded after ", absl::FormatDuration(kPreparedTtl),
      ", aborted, or this PS restarted); create the variables again"));
}

absl::Status ShardStore::AbortVariables(uint64_t creation_id) {
  absl::MutexLock create_lock(&create_mu_);
  if (prepared_.has_value() && prepared_->id == creation_id) {
    StopFill();
    accounted_bytes_ -= prepared_->new_bytes;
    Discard(&prepared_->variables);
    prepared_.reset();
  }
  return absl::OkStatus();
}

absl::Status ShardStore::ReserveMemory(int64_t bytes) {
  if (memory_limit_bytes_ <= 0) {
    const MemoryHeadroom usable = UsableMemory();
    if (usable.bytes >= 0 && bytes > usable.bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "needs ", bytes, " bytes but only ", usable.bytes, " are free on PS ",
          ps_task_, " (", usable.source,
          "); set --memory_limit_bytes, bound the table (shape[0]) or use "
          "more PS tasks"));
    }
    accounted_bytes_ += bytes;
    return absl::OkStatus();
  }
  int64_t held = accounted_bytes_.load();
  while (true) {
    if (held + bytes > memory_limit_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "needs ", bytes, " bytes more, but PS ", ps_task_, " holds ", held,
          " of its --memory_limit_bytes=", memory_limit_bytes_,
          "; bound the table (shape[0]), raise the limit or use more PS "
          "tasks"));
    }
    if (accounted_bytes_.compare_exchange_weak(held, held + bytes)) {
      return absl::OkStatus();
    }
  }
}

void ShardStore::set_fill_hook(FillHook hook, FillsEveryRow fills_every_row) {
  absl::MutexLock lock(&create_mu_);
  // Without a hook nothing fills the rows: they must be initialized.
  fills_every_row_ = hook ? std::move(fills_every_row) : nullptr;
  fill_hook_ = std::move(hook);
}

const LocalVariable* ShardStore::Find(absl::string_view name) const {
  absl::ReaderMutexLock lock(&catalog_mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<const LocalVariable*> ShardStore::Variables() const {
  absl::ReaderMutexLock lock(&catalog_mu_);
  std::vector<const LocalVariable*> out;
  for (const auto& v : variables_) out.push_back(v.get());
  return out;
}

int64_t ShardStore::parameter_bytes() const {
  int64_t total = 0;
  for (const LocalVariable* v : Variables()) total += v->bytes();
  return total;
}

int ShardStore::Promote(int primary) {
  absl::MutexLock create_lock(&create_mu_);
  took_over_.insert(primary);
  return MoveRolesLocked({primary}, &ShardRole::TakeOver);
}

bool ShardStore::TookOver(int primary) {
  absl::MutexLock lock(&create_mu_);
  return took_over_.contains(primary);
}

int ShardStore::Demote(int primary) {
  absl::MutexLock create_lock(&create_mu_);
  took_over_.erase(primary);
  int demoted = 0;
  for (const LocalVariable* v : Variables()) {
    for (int s = 0; s < v->layout->num_shards(); ++s) {
      if (v->layout->shards[s].ps_task != primary || !v->IsPrimary(s)) {
        continue;
      }
      absl::MutexLock shard_lock(v->shard(s).mutex());
      demoted += v->roles[s].HandBack();
    }
  }
  return demoted;
}

int ShardStore::Reinstate() {
  absl::MutexLock create_lock(&create_mu_);
  retired_.store(false);
  return MoveRolesLocked({ps_task_}, &ShardRole::Reinstate);
}

void ShardStore::Retire() {
  retired_.store(true);
  for (const LocalVariable* v : Variables()) {
    for (int s = 0; s < v->layout->num_shards(); ++s) {
      if (v->Holds(s)) v->roles[s].Retire();
    }
  }
}

int ShardStore::MoveRolesLocked(const std::vector<int>& placed,
                                bool (ShardRole::*transition)()) {
  int moved = 0;
  for (const LocalVariable* v : Variables()) {
    for (int s = 0; s < v->layout->num_shards(); ++s) {
      if (v->Holds(s) &&
          std::find(placed.begin(), placed.end(),
                    v->layout->shards[s].ps_task) != placed.end()) {
        moved += (v->roles[s].*transition)();
      }
    }
  }
  return moved;
}

int ShardStore::BeginRejoin(const std::vector<int>& placed) {
  absl::MutexLock create_lock(&create_mu_);
  return MoveRolesLocked(placed, &ShardRole::BeginRejoin);
}

int ShardStore::Rejoined(const std::vector<int>& placed) {
  absl::MutexLock create_lock(&create_mu_);
  return MoveRolesLocked(placed, &ShardRole::Rejoined);
}

int64_t ShardStore::num_local_shards() const {
  int64_t n = 0;
  for (const LocalVariable* v : Variables()) {
    for (int s = 0; s < v->layout->num_shards(); ++s) n += v->Holds(s);
  }
  return n;
}

}  // namespace psrt
