#include "ps_server/rpc/push_handler.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "proto/buffer_pool.h"
#include "ps_server/shards/row_table.h"
#include "util/thread_pool.h"

namespace psrt {
namespace {

// The items of one push that update one shard.
struct PendingShardUpdate {
  const LocalVariable* variable = nullptr;
  int shard = 0;
  Shard* target = nullptr;
  ShardUpdate update;
  int64_t undo_floats = 0;  // target->UndoFloats(update), once prepared
};

}  // namespace

PushHandler::PushHandler(ShardStore* store, PushDedup* dedup,
                         size_t max_push_bytes, RequestKind kind,
                         ReplicationLog* replicator)
    : store_(store),
      dedup_(dedup),
      max_push_bytes_(max_push_bytes),
      kind_(kind),
      replicator_(replicator != nullptr && replicator->active() ? replicator
                                                                : nullptr) {}

absl::Status PushHandler::AddMessage(const grpc::ByteBuffer& message) {
  if (saw_last_) {
    return absl::InvalidArgumentError(
        "push stream continued after the message marked last");
  }
  bytes_ += message.Length();
  if (bytes_ > max_push_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "push exceeds the server's limit of ", max_push_bytes_,
        " bytes per call (--max_push_bytes); split it over several steps"));
  }
  auto frame = std::make_unique<FrameReader>();
  if (absl::Status s = frame->Parse(message); !s.ok()) return s;
  PushRequestHeader header;
  if (absl::Status s = frame->ParseHeader(&header); !s.ok()) return s;
  if (frames_.empty()) {
    first_header_ = header;
    first_header_.clear_items();
  }
  for (const TensorItem& item : header.items()) {
    if (kind_ == RequestKind::kReplica) {
      // A forwarded push names its sender's shards; those it took over
      // from a failed primary have no copy here: not this PS's to apply.
      const LocalVariable* v = store_->Find(item.variable());
      if (v != nullptr && item.shard() >= 0 &&
          item.shard() < v->layout->num_shards() && !v->Holds(item.shard()) &&
          v->layout->shards[item.shard()].ps_task != store_->ps_task()) {
        continue;
      }
      if (v != nullptr && v->Holds(item.shard()) && replica_filter_ &&
          !replica_filter_(*v, item.shard())) {
        continue;
      }
    }
    ResolvedItem resolved;
    absl::Status s = ResolveItem(*store_, item, *frame, kind_, &resolved);
    if (!s.ok()) return s;
    if (resolved.assign &&
        first_header_.consistency().mode() != Consistency::ASYNC) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push of '", item.variable(), "' shard ", item.shard(),
          ": assigned values are taken in ASYNC pushes only, not ",
          Consistency::Mode_Name(first_header_.consistency().mode())));
    }
    rows_ += resolved.by_range ? 1 : static_cast<int64_t>(resolved.ids.size());
    items_.push_back(std::move(resolved));
  }
  frames_.push_back(std::move(frame));
  if (replicator_ != nullptr) received_.push_back(message);
  saw_last_ = header.last();
  return absl::OkStatus();
}

absl::StatusOr<PushResponse> PushHandler::Finish() {
  absl::Notification finished;
  absl::StatusOr<PushResponse> out;
  FinishAsync([&](absl::StatusOr<PushResponse> result) {
    out = std::move(result);
    finished.Notify();
  });
  finished.WaitForNotification();
  return out;
}

void PushHandler::FinishAsync(
    std::function<void(absl::StatusOr<PushResponse>)> done) {
  if (!saw_last_) {
    done(absl::AbortedError(absl::StrCat(
        "push stream ended after ", frames_.size(),
        " message(s) without the one marked last (client cancelled or "
        "died?); nothing was applied")));
    return;
  }
  PushResponse response;
  const uint64_t client = first_header_.client_id();
  const uint64_t request = first_header_.request_id();
  PushDedup* dedup = dedup_;
  if (scopes_ != nullptr && !items_.empty()) {
    dedup = scopes_->For(placed_primary());
  }
  if (request != 0) {
    switch (dedup->Begin(client, request)) {
      case PushDedup::Outcome::kApplied:
        response.set_duplicate(true);
        done(response);
        return;
      case PushDedup::Outcome::kInProgress:
        done(absl::AbortedError(absl::StrCat(
            "push ", request, " of client ", client,
            " is still being applied; retry to learn its outcome")));
        return;
      case PushDedup::Outcome::kNew:
        break;
    }
  }
  const absl::Time start = absl::Now();
  absl::Status status = Apply(1.0f);
  apply_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
  if (!status.ok()) {
    if (request != 0) dedup->Finish(client, request, false);
    done(status);
    return;
  }
  response.set_rows_applied(rows_);
  // Acknowledged (and remembered as applied) only once the backups have it.
  // If they never will (this PS was replaced by its backup meanwhile), the
  // push fails and is forgotten here: the worker's retry goes to the new
  // primary, which has it only if it was forwarded.
  auto acknowledge = [dedup, client, request, response,
                      done = std::move(done)](absl::Status replicated) {
    if (request != 0) dedup->Finish(client, request, replicated.ok());
    if (!replicated.ok()) {
      done(replicated);
      return;
    }
    done(response);
  };
  if (replicator_ == nullptr) {
    acknowledge(absl::OkStatus());
  } else {
    replicator_->WhenReplicated(replicated_sequence_, std::move(acknowledge));
  }
}

void PushHandler::FollowPrimary(
    const google::protobuf::RepeatedPtrField<ShardIds>& dropped,
    const google::protobuf::RepeatedPtrField<ShardIds>& evicted) {
  for (const ShardIds& d : dropped) {
    primary_dropped_[std::make_pair(d.variable(), d.shard())].insert(
        d.ids().begin(), d.ids().end());
  }
  primary_evicted_ = evicted;
}

absl::Status PushHandler::CheckEvictionsFrom(
    const ShardStore& store,
    const google::protobuf::RepeatedPtrField<ShardIds>& evicted,
    absl::Span<const int> primaries) {
  for (const ShardIds& e : evicted) {
    const LocalVariable* v = store.Find(e.variable());
    if (v == nullptr || v->layout->kind() != HASH_EMBEDDING || e.shard() < 0 ||
        e.shard() >= v->layout->num_shards()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "forwarded evictions name shard ", e.shard(), " of '", e.variable(),
          "', which is not a shard of a hash embedding here"));
    }
    // A shard the sender took over from a failed primary has no copy
    // here: not this PS's to follow (as with a forwarded push's items).
    if (!v->Holds(e.shard())) continue;
    const int placed = v->layout->shards[e.shard()].ps_task;
    if (std::find(primaries.begin(), primaries.end(), placed) ==
        primaries.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "forwarded evictions from PS ", primaries[0], " name shard ",
          e.shard(), " of '", e.variable(), "', whose primary is PS ", placed,
          ", not one whose shards that PS serves"));
    }
  }
  return absl::OkStatus();
}

absl::Status PushHandler::ApplyCombined(float scale) {
  absl::Status status = Apply(scale);
  if (status.ok()) status = AwaitReplicated();
  return status;
}

absl::Status PushHandler::AwaitReplicated() {
  return AwaitReplicated(replicator_, replicated_sequence_);
}

absl::Status PushHandler::AwaitReplicated(ReplicationLog* log,
                                          uint64_t sequence) {
  if (log == nullptr) return absl::OkStatus();
  absl::Notification replicated;
  absl::Status status;
  log->WhenReplicated(sequence, [&](absl::Status s) {
    status = std::move(s);
    replicated.Notify();
  });
  replicated.WaitForNotification();
  return status;
}

absl::Status PushHandler::CheckPrimaryIs(
    absl::Span<const int> primaries) const {
  for (const ResolvedItem& item : items_) {
    const int placed = item.variable->layout->shards[item.shard].ps_task;
    if (std::find(primaries.begin(), primaries.end(), placed) ==
        primaries.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "forwarded push from PS ", primaries[0], " names shard ", item.shard,
          " of '", item.variable->name(), "', whose primary is PS ", placed,
          ", not one whose shards that PS serves"));
    }
  }
  return absl::OkStatus();
}

int PushHandler::placed_primary() const {
  if (items_.empty()) return -1;
  return items_[0].variable->layout->shards[items_[0].shard].ps_task;
}

void PushHandler::ForwardHeld(int for_ps) {
  if (replicator_ == nullptr || !replicator_->active()) return;
  ReplicationLog::Update held;
  held.frames = received_;  // shares the slices
  held.scale = 1.0f;
  held.step = first_header_.step();
  held.client_id = first_header_.client_id();
  held.request_id = first_header_.request_id();
  held.bytes = static_cast<int64_t>(bytes_);
  held.held = true;
  held.worker_index = first_header_.worker_index();
  held.for_ps = for_ps;
  replicated_sequence_ = replicator_->Append(std::move(held));
}

absl::Status PushHandler::CheckPlacedOn(int ps) const {
  for (const ResolvedItem& item : items_) {
    const int placed = item.variable->layout->shards[item.shard].ps_task;
    if (placed != ps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push for PS ", ps, "'s step barrier names shard ", item.shard,
          " of '", item.variable->name(), "', which is placed on PS ", placed,
          ": send each PS's shards in a call of their own"));
    }
  }
  return absl::OkStatus();
}

void PushHandler::TakeItemsOf(PushHandler* other) {
  if (!combined_) push_frames_.push_back(static_cast<int>(received_.size()));
  push_frames_.push_back(static_cast<int>(other->received_.size()));
  combined_ = true;
  for (auto& m : other->received_) received_.push_back(std::move(m));
  other->received_.clear();
  for (auto& f : other->frames_) frames_.push_back(std::move(f));
  for (auto& item : other->items_) items_.push_back(std::move(item));
  bytes_ += other->bytes_;
  rows_ += other->rows_;
  other->frames_.clear();
  other->items_.clear();
}

// The shards' mutexes are a set known only at run time (taken in catalog
// order, released in reverse): beyond what the analysis can follow.
absl::Status PushHandler::Apply(float scale) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // A backup: the primary's evictions before this update come first, in
  // the copies this PS holds as a backup (never a shard it serves).
  for (const ShardIds& e : primary_evicted_) {
    const LocalVariable* v = store_->Find(e.variable());
    if (v == nullptr || !v->IsBackup(e.shard()) ||
        (replica_filter_ && !replica_filter_(*v, e.shard()))) {
      continue;
    }
    if (absl::Status s = v->shard(e.shard()).FollowEvictions(e.ids());
        !s.ok()) {
      return s;
    }
  }
  // Group by shard, keeping first-seen order.
  std::vector<PendingShardUpdate> updates;
  absl::flat_hash_map<std::pair<const LocalVariable*, int>, size_t> index;
  for (ResolvedItem& item : items_) {
    auto [it, inserted] = index.emplace(
        std::make_pair(item.variable, item.shard), updates.size());
    if (inserted) {
      updates.emplace_back();
      updates.back().variable = item.variable;
      updates.back().shard = item.shard;
      updates.back().target = &item.target();
      updates.back().update.learning_rate = item.learning_rate;
      updates.back().update.assign = item.assign;
      updates.back().update.max_abs_grad = 0;
      updates.back().update.global_step = store_->global_step();
      if (kind_ == RequestKind::kReplica) {
        // A backup gives rows as its primary did (none decided here).
        auto dropped = primary_dropped_.find(
            std::make_pair(item.variable->name(), item.shard));
        updates.back().update.primary_dropped.emplace();
        if (dropped != primary_dropped_.end()) {
          updates.back().update.primary_dropped->swap(dropped->second);
        }
      }
    }
    ShardUpdate& u = updates[it->second].update;
    if (u.assign != item.assign) {
      return absl::InvalidArgumentError(absl::StrCat(
          "push of '", item.variable->name(), "' shard ", item.shard,
          ": some items assign values and others carry gradients; a "
          "shard's items in one push must all do one or the other"));
    }
    u.max_abs_grad = std::max(u.max_abs_grad, item.max_abs_grad);
    if (item.by_range) {
      u.ranges.push_back({item.offset, item.count, item.grad});
    } else {
      u.ids.insert(u.ids.end(), item.ids.begin(), item.ids.end());
      u.grads.push_back(item.grad);
    }
  }
  // The protocol of shard.h: prepare each shard (rows are created here: if
  // one shard is full nothing is updated), lock every shard of the push in
  // catalog order (two pushes cannot deadlock), check what can be checked
  // before applying, apply the shards that need undo space first, undo
  // them if one refuses, and apply the rest last. All or nothing, and no
  // pull sees a part of a push that is refused. Each phase runs the
  // shards' updates in parallel (shards are independent; a shard splits a
  // large update of its own further); the first error in catalog order is
  // the one reported.
  std::vector<absl::Status> status(updates.size());
  // fn(i) for every update, in parallel on `pool`; then the first error, if
  // any. Under the shards' locks only the default pool (whose tasks never
  // wait for a lock); Prepare takes each shard's lock, so it runs on the
  // pool for locking work.
  auto each_on = [&](ThreadPool& pool, auto&& fn) -> const absl::Status* {
    PoolParallelFor(pool, static_cast<int64_t>(updates.size()), 1,
                    [&](int64_t begin, int64_t end) {
                      for (int64_t i = begin; i < end; ++i) status[i] = fn(i);
                    });
    for (const absl::Status& st : status) {
      if (!st.ok()) return &st;
    }
    return nullptr;
  };
  auto each = [&](auto&& fn) { return each_on(ThreadPool::Default(), fn); };
  std::stable_sort(
      updates.begin(), updates.end(),
      [](const PendingShardUpdate& a, const PendingShardUpdate& b) {
        return std::make_pair(a.variable->layout->index, a.shard) <
               std::make_pair(b.variable->layout->index, b.shard);
      });
  // A shard a handback (ShardStore::Demote) made a backup here since the
  // items were resolved (a push stream takes a while to arrive): nothing
  // of the push is applied, and it is refused before Prepare creates hash
  // rows in that copy, which follows the new primary's stream now. (A
  // handback landing while Prepare runs is caught under the locks below;
  // the rows Prepare created then stay, with their initial values.)
  auto handed_back = [&](const PendingShardUpdate& u) {
    return absl::UnavailableError(absl::StrCat(
        "push to '", u.variable->name(), "' shard ", u.shard, ": PS ",
        store_->ps_task(), " no longer serves it (handed back to PS ",
        u.variable->layout->shards[u.shard].ps_task,
        "); nothing was applied: learn the routing and retry"));
  };
  if (kind_ != RequestKind::kReplica) {
    for (const PendingShardUpdate& u : updates) {
      if (!u.variable->IsPrimary(u.shard)) return handed_back(u);
    }
  }
  if (const absl::Status* failed =
          each_on(ThreadPool::ForLockingWork(), [&](size_t i) {
            PendingShardUpdate& u = updates[i];
            absl::Status st = u.target->Prepare(&u.update, scale);
            if (st.ok()) u.undo_floats = u.target->UndoFloats(u.update);
            return st;
          })) {
    return *failed;
  }
  size_t undo_floats = 0;
  // Where each shard's old floats go (shards applied with undo; the space
  // is taken before locking, the shards say under the locks whether they
  // still need it).
  std::vector<float*> saved(updates.size(), nullptr);
  for (const PendingShardUpdate& u : updates) undo_floats += u.undo_floats;
  absl::StatusOr<PooledBuffer> undo_space =
      BufferPool::Default().TryAcquire(undo_floats * sizeof(float));
  if (!undo_space.ok()) return undo_space.status();
  PooledBuffer undo = *std::move(undo_space);
  for (const PendingShardUpdate& u : updates) u.target->mutex()->Lock();
  if (kind_ != RequestKind::kReplica) {
    // Checked again under the locks: the handback may have come since.
    for (const PendingShardUpdate& u : updates) {
      if (u.variable->IsPrimary(u.shard)) continue;
      for (auto it = updates.rbegin(); it != updates.rend(); ++it) {
        it->target->mutex()->Unlock();
      }
      return handed_back(u);
    }
  }
  const absl::Status* refused = each([&](size_t i) {
    return updates[i].target->CheckLocked(&updates[i].update);
  });
  float* next_undo = reinterpret_cast<float*>(undo.data());
  for (size_t i = 0; i < updates.size() && refused == nullptr; ++i) {
    if (updates[i].undo_floats == 0 ||
        !updates[i].target->NeedsUndoLocked(updates[i].update)) {
      continue;
    }
    saved[i] = next_undo;
    next_undo += updates[i].undo_floats;
  }
  if (refused == nullptr) {
    refused = each([&](size_t i) {
      if (saved[i] == nullptr) return absl::OkStatus();
      return updates[i].target->ApplyLocked(updates[i].update, saved[i]);
    });
    if (refused != nullptr) {
      // Every shard with undo space was applied (some may have refused
      // part way): all of them are put back.
      for (size_t i = 0; i < updates.size(); ++i) {
        if (saved[i] != nullptr) {
          updates[i].target->UndoLocked(updates[i].update, saved[i]);
        }
      }
    }
  }
  absl::Status checked;
  if (refused == nullptr) {
    // Cannot fail: CheckLocked passed.
    each([&](size_t i) {
      if (saved[i] != nullptr) return absl::OkStatus();
      updates[i].target->ApplyLocked(updates[i].update, nullptr).IgnoreError();
      return absl::OkStatus();
    });
  } else if (refused->code() != absl::StatusCode::kInvalidArgument) {
    // A hash shard could not place rows evicted since Prepare (no room,
    // or its SSD tier could not read them back): its error says which
    // shard and why, and that nothing was applied.
    checked = *refused;
  } else {
    const PendingShardUpdate& u = updates[refused - status.data()];
    checked = absl::InvalidArgumentError(absl::StrCat(
        "push to '", u.variable->name(), "' shard ", u.shard, ": ",
        refused->message(), "; the push was rejected and nothing was applied"));
    checked.SetPayload(kNonFiniteGradient, absl::Cord());
  }
  if (checked.ok() && replicator_ != nullptr) {
    // Under every touched shard's lock: the backups apply it in the order
    // the shards were updated here.
    ReplicationLog::Update forwarded;
    forwarded.frames = std::move(received_);  // not needed here any more
    forwarded.scale = scale;
    forwarded.step = first_header_.step();
    if (!combined_) {
      forwarded.client_id = first_header_.client_id();
      forwarded.request_id = first_header_.request_id();
    }
    forwarded.bytes = static_cast<int64_t>(bytes_);
    if (combined_) forwarded.push_frames = push_frames_;
    if (!combined_ && first_header_.consistency().mode() == Consistency::SSP &&
        first_header_.worker_index() >= 0) {
      forwarded.ssp = true;
      forwarded.worker_index = first_header_.worker_index();
      forwarded.for_ps = first_header_.has_for_ps() ? first_header_.for_ps()
                                                    : store_->ps_task();
    }
    if (sync_step_for_ >= 0) {
      forwarded.sync_step = true;
      forwarded.for_ps = sync_step_for_;
    }
    // The ids given no row here (admission; or no room at the memory
    // budget while a checkpoint reads the shard): the backups give them
    // none.
    for (const PendingShardUpdate& u : updates) {
      const ShardUpdate& applied = u.update;
      if ((!u.variable->layout->spec.has_admission() &&
           !store_->evict_at_memory_limit()) ||
          applied.rows.size() != applied.ids.size()) {
        continue;
      }
      ShardIds* dropped = nullptr;
      for (size_t i = 0; i < applied.ids.size(); ++i) {
        if (applied.rows[i] != RowTable::kNoRow) continue;
        if (dropped == nullptr) {
          dropped = &forwarded.dropped.emplace_back();
          dropped->set_variable(u.variable->name());
          dropped->set_shard(u.shard);
        }
        dropped->add_ids(applied.ids[i]);
      }
    }
    replicated_sequence_ = replicator_->Append(std::move(forwarded));
  }
  for (auto it = updates.rbegin(); it != updates.rend(); ++it) {
    it->target->mutex()->Unlock();
  }
  if (!checked.ok()) return checked;
  store_->ObserveStep(first_header_.step());
  return absl::OkStatus();
}

}  // namespace psrt
