#include "ps_server/replication/replica_applier.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "proto/frame_reader.h"
#include "ps_server/replication/replication_log.h"

namespace psrt {
namespace {

// Bounds on what one call may declare, checked before anything is held.
constexpr int kMaxUpdatesPerCall = 4096;
constexpr int kMaxFramesPerUpdate = 1 << 20;

}  // namespace

ReplicaApplier::ReplicaApplier(ShardStore* store, DedupScopes* dedup,
                               size_t max_push_bytes)
    : store_(store), dedup_(dedup), max_push_bytes_(max_push_bytes) {}

absl::Status ReplicaApplier::CheckHeader(
    const ReplicationHeader& header) const {
  const int self = store_->ps_task();
  const int from = header.from_task();
  if (from < 0 || from >= store_->num_ps() || from == self) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Replicate from_task ", from, " is not another PS of this ",
        store_->num_ps(), "-PS cluster"));
  }
  bool adopted = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(from);
    if (it != streams_.end()) {
      absl::MutexLock apply(&it->second->apply_mu);
      adopted = it->second->adopted || it->second->rejoining;
    }
  }
  if (!store_->replicas().IsBackupOf(self, from) && !adopted) {
    return absl::FailedPreconditionError(
        absl::StrCat("Replicate from PS ", from, ": PS ", self,
                     " keeps no backup of its shards (--replicas=",
                     store_->replicas().replicas(),
                     " on this PS; every PS must use the same)"));
  }
  if (header.incarnation() == 0 || header.updates_size() > kMaxUpdatesPerCall) {
    return absl::InvalidArgumentError(
        absl::StrCat("Replicate from PS ", from, ": incarnation ",
                     header.incarnation(), " with ", header.updates_size(),
                     " updates (0..", kMaxUpdatesPerCall, " expected)"));
  }
  for (int i = 0; i < header.updates_size(); ++i) {
    const ReplicatedUpdate& u = header.updates(i);
    int64_t parts_total = 0;
    bool parts_ok = u.push_frames_size() <= u.num_frames();
    for (int32_t f : u.push_frames()) {
      parts_ok &= f >= 1;
      parts_total += f;
    }
    if (!parts_ok ||
        (u.push_frames_size() > 0 && parts_total != u.num_frames())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Replicate from PS ", from, ": update ", i, " (sequence ",
          u.sequence(), ") splits its ", u.num_frames(), " frames into ",
          u.push_frames_size(), " pushes of ", parts_total,
          " frames in all (each at least 1, adding up)"));
    }
    // Frames, or evictions alone (none of the rest then).
    const bool evictions_alone = u.num_frames() == 0 && u.evicted_size() > 0 &&
                                 !u.held() && !u.sync_step() && !u.ssp() &&
                                 u.request_id() == 0 && u.dropped_size() == 0;
    if (u.sequence() != header.updates(0).sequence() + i || u.sequence() == 0 ||
        (u.num_frames() < 1 && !evictions_alone) ||
        u.num_frames() > kMaxFramesPerUpdate || !(u.scale() > 0) ||
        !(u.scale() <= 1) || u.step() < 0 || u.for_ps() < 0 ||
        u.for_ps() >= store_->num_ps() || u.worker_index() < 0 ||
        u.worker_index() >= (1 << 16) || (u.held() && u.sync_step())) {
      return absl::InvalidArgumentError(
          absl::StrCat("Replicate from PS ", from, ": update ", i,
                       " (sequence ", u.sequence(), ", ", u.num_frames(),
                       " frames, scale ", u.scale(), ", step ", u.step(),
                       ", PS ", u.for_ps(), ", worker ", u.worker_index(),
                       ") is malformed: sequences must be consecutive from 1, "
                       "frames at least 1 (or none, with evictions alone), "
                       "scale in (0, 1], a PS of this cluster, held or a "
                       "step, not both"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReplicaApplier::Call::AddMessage(const grpc::ByteBuffer& message) {
  if (!have_header_) {
    FrameReader frame;
    absl::Status s = frame.Parse(message);
    if (s.ok()) s = frame.ParseHeader(&header_);
    if (!s.ok()) return s;
    if (proven_from_ >= 0 && header_.from_task() != proven_from_) {
      return absl::PermissionDeniedError(
          absl::StrCat("Replicate names PS ", header_.from_task(),
                       " as its sender but the call proves to come from PS ",
                       proven_from_, ": a PS speaks only for itself"));
    }
    if (s = applier_->CheckHeader(header_); !s.ok()) return s;
    // A fenced primary's items name shards this PS now serves: say why
    // they are refused before resolving them.
    auto view = applier_->ViewFor(header_);
    if (!view.ok()) return view.status();
    view_ = *std::move(view);
    have_header_ = true;
    return absl::OkStatus();
  }
  if (updates_.empty() ||
      frames_in_current_ ==
          header_.updates(static_cast<int>(updates_.size()) - 1).num_frames()) {
    // The next update that has frames (those of evictions alone on the
    // way get their handler too).
    do {
      if (static_cast<int>(updates_.size()) == header_.updates_size()) {
        return absl::InvalidArgumentError(
            "Replicate stream carries more frames than its header declares");
      }
      StartUpdate();
    } while (
        header_.updates(static_cast<int>(updates_.size()) - 1).num_frames() ==
        0);
  }
  const ReplicatedUpdate& u =
      header_.updates(static_cast<int>(updates_.size()) - 1);
  // A SYNC step's combined update: each worker's push is a stream of its
  // own (its own last message), combined once all are read.
  if (part_ < u.push_frames_size() && frames_in_part_ == u.push_frames(part_)) {
    ++part_;
    frames_in_part_ = 0;
    more_parts_.back().push_back(NewHandler(u.sequence()));
  }
  ++frames_in_current_;
  ++frames_in_part_;
  if (u.held()) held_frames_.back().push_back(message);  // shares the slices
  PushHandler* part =
      part_ == 0 ? updates_.back().get() : more_parts_.back().back().get();
  return part->AddMessage(message);
}

std::unique_ptr<PushHandler> ReplicaApplier::Call::NewHandler(
    uint64_t sequence) const {
  auto update = std::make_unique<PushHandler>(
      applier_->store_, applier_->dedup_->For(applier_->store_->ps_task()),
      applier_->max_push_bytes_, RequestKind::kReplica);
  if (view_.snapshot != nullptr) {
    update->set_replica_filter([snapshot = view_.snapshot, sequence](
                                   const LocalVariable& v, int shard) {
      auto it = snapshot->find({v.name(), shard});
      return it == snapshot->end() || sequence >= it->second;
    });
  }
  return update;
}

void ReplicaApplier::Call::StartUpdate() {
  updates_.push_back(NewHandler(
      header_.updates(static_cast<int>(updates_.size())).sequence()));
  more_parts_.emplace_back();
  held_frames_.emplace_back();
  frames_in_current_ = 0;
  frames_in_part_ = 0;
  part_ = 0;
}

absl::StatusOr<ReplicateResponse> ReplicaApplier::Call::Finish() {
  if (have_header_ && header_.updates_size() == 0) {
    if (!updates_.empty()) {
      return absl::InvalidArgumentError(
          "Replicate hello (no updates) carries frames");
    }
    return applier_->Apply(header_, updates_, held_frames_);
  }
  // Evictions alone after the last frames.
  while (have_header_ &&
         static_cast<int>(updates_.size()) < header_.updates_size() &&
         (updates_.empty() ||
          frames_in_current_ ==
              header_.updates(static_cast<int>(updates_.size()) - 1)
                  .num_frames()) &&
         header_.updates(static_cast<int>(updates_.size())).num_frames() == 0) {
    StartUpdate();
  }
  if (!have_header_ ||
      static_cast<int>(updates_.size()) != header_.updates_size() ||
      frames_in_current_ !=
          header_.updates(header_.updates_size() - 1).num_frames()) {
    return absl::AbortedError(
        "Replicate stream ended before every frame its header declares; "
        "nothing was applied");
  }
  for (size_t i = 0; i < updates_.size(); ++i) {
    for (auto& part : more_parts_[i]) updates_[i]->TakeItemsOf(part.get());
    if (absl::Status s = updates_[i]->CheckPrimaryIs(view_.primaries);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = PushHandler::CheckEvictionsFrom(
            *applier_->store_, header_.updates(static_cast<int>(i)).evicted(),
            view_.primaries);
        !s.ok()) {
      return s;
    }
  }
  return applier_->Apply(header_, updates_, held_frames_);
}

ReplicaApplier::Stream* ReplicaApplier::StreamOf(int primary) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Stream>& stream = streams_[primary];
  if (stream == nullptr) stream = std::make_unique<Stream>();
  return stream.get();
}

absl::Status ReplicaApplier::FencedError(int primary) const {
  return absl::FailedPreconditionError(
      absl::StrCat("PS ", store_->ps_task(), " ", kReplacedMarker, " PS ",
                   primary, " (failover): its stream is closed"));
}

absl::Status ReplicaApplier::NotFollowing(int from, uint64_t first) const {
  if (on_out_of_sync_) on_out_of_sync_(from);
  return absl::FailedPreconditionError(absl::StrCat(
      "PS ", store_->ps_task(), " holds no update of PS ", from,
      "'s stream, which is at sequence ", first,
      ": this backup started after its primary had applied pushes, so its "
      "copy is not in sync (it rejoins to get one)"));
}

absl::StatusOr<ReplicaApplier::CallView> ReplicaApplier::ViewFor(
    const ReplicationHeader& header) {
  const int from = header.from_task();
  Stream* stream = StreamOf(from);
  bool not_following = false;
  {
    absl::MutexLock lock(&stream->apply_mu);
    if (stream->fenced) return FencedError(from);
    if (stream->rejoining) {
      return absl::UnavailableError(absl::StrCat(
          "PS ", store_->ps_task(), " ", kRejoiningMarker, " PS ", from,
          " (installing a snapshot of its shards); its "
          "stream starts once that is done"));
    }
    // Checked before the updates' items are resolved: a restarted PS may
    // not even have created the variables they name.
    not_following = stream->incarnation == 0 && header.updates_size() > 0 &&
                    header.updates(0).sequence() != 1;
    if (!not_following) {
      CallView view;
      view.primaries =
          stream->adopted ? stream->primaries : std::vector<int>{from};
      view.snapshot = stream->snapshot;
      return view;
    }
  }
  return NotFollowing(from, header.updates(0).sequence());
}

void ReplicaApplier::BeginRejoin(int serving) {
  Stream* stream = StreamOf(serving);
  absl::MutexLock lock(&stream->apply_mu);
  stream->rejoining = true;
  stream->adopted = false;
  stream->fenced = false;
  stream->incarnation = 0;
  stream->applied_through = 0;
  stream->building.clear();
  stream->snapshot = nullptr;
}

bool ReplicaApplier::Rejoining(int serving) {
  Stream* stream = StreamOf(serving);
  absl::MutexLock lock(&stream->apply_mu);
  return stream->rejoining;
}

absl::Status ReplicaApplier::RecordSnapshot(int serving,
                                            const std::string& variable,
                                            int shard, uint64_t sequence) {
  Stream* stream = StreamOf(serving);
  absl::MutexLock lock(&stream->apply_mu);
  if (!stream->rejoining) {
    return absl::FailedPreconditionError(
        absl::StrCat("PS ", store_->ps_task(), " is not rejoining from PS ",
                     serving, ": no snapshot of it is expected"));
  }
  stream->building[{variable, shard}] = sequence;
  return absl::OkStatus();
}

absl::Status ReplicaApplier::FinishRejoin(int serving,
                                          const RejoinResponse& answer) {
  Stream* stream = StreamOf(serving);
  absl::MutexLock lock(&stream->apply_mu);
  if (!stream->rejoining || answer.incarnation() == 0 ||
      answer.stream_from() == 0 || answer.serves_for().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rejoin from PS ", serving,
                     ": not rejoining, or an answer without "
                     "incarnation, stream start or served PS"));
  }
  for (int task : answer.serves_for()) {
    if (task < 0 || task >= store_->num_ps()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rejoin from PS ", serving, ": serves_for names PS ", task));
    }
  }
  size_t remembered = 0;
  for (const AppliedPushes& applied : answer.applied_pushes()) {
    const auto& served = answer.serves_for();
    if (std::find(served.begin(), served.end(), applied.scope()) ==
            served.end() ||
        applied.client_ids_size() != applied.request_ids_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rejoin from PS ", serving, ": applied pushes of scope ",
                       applied.scope(), " (", applied.client_ids_size(),
                       " client ids, ", applied.request_ids_size(),
                       " request ids): not a PS it serves, or unpaired"));
    }
    remembered += applied.client_ids_size();
  }
  if (remembered > PushDedup::kMostSentOnRejoin) {
    return absl::InvalidArgumentError(
        absl::StrCat("rejoin from PS ", serving, ": ", remembered,
                     " applied pushes, past the ", PushDedup::kMostSentOnRejoin,
                     " an answer carries"));
  }
  // The pushes the copies hold, so that a worker's retry of one (its
  // answer lost with the PS that died) is known here after a handback.
  for (const AppliedPushes& applied : answer.applied_pushes()) {
    PushDedup* dedup = dedup_->For(applied.scope());
    for (int i = 0; i < applied.client_ids_size(); ++i) {
      dedup->RecordApplied(applied.client_ids(i), applied.request_ids(i));
    }
  }
  stream->primaries = {serving};
  for (int task : answer.serves_for()) {
    if (task != serving) stream->primaries.push_back(task);
  }
  stream->incarnation = answer.incarnation();
  stream->applied_through = answer.stream_from() - 1;
  stream->snapshot =
      std::make_shared<const SnapshotSequences>(std::move(stream->building));
  stream->building.clear();
  stream->rejoining = false;
  stream->adopted = true;
  return absl::OkStatus();
}

void ReplicaApplier::Fence(int primary) {
  Stream* stream = StreamOf(primary);
  absl::MutexLock lock(&stream->apply_mu);  // waits for a call applying
  stream->fenced = true;
}

void ReplicaApplier::FollowHandedBack(int primary, uint64_t incarnation,
                                      uint64_t stream_from) {
  Stream* stream = StreamOf(primary);
  absl::MutexLock lock(&stream->apply_mu);
  stream->fenced = false;
  stream->rejoining = false;
  stream->adopted = false;
  stream->primaries.clear();
  stream->building.clear();
  stream->snapshot = nullptr;
  stream->barriers.clear();
  stream->incarnation = incarnation;
  stream->applied_through = stream_from - 1;
}

bool ReplicaApplier::Follows(int primary, uint64_t incarnation) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(primary);
  if (it == streams_.end()) return false;
  absl::MutexLock apply(&it->second->apply_mu);
  return !it->second->fenced && it->second->incarnation == incarnation;
}

bool ReplicaApplier::InSyncWith(int primary) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(primary);
  if (it == streams_.end()) return false;
  absl::MutexLock apply(&it->second->apply_mu);
  const uint64_t incarnation = it->second->incarnation;
  return incarnation != 0 && incarnation != kDiverged && !it->second->fenced;
}

uint64_t ReplicaApplier::applied_through(int primary) const {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(primary);
  if (it == streams_.end()) return 0;
  absl::MutexLock apply(&it->second->apply_mu);
  return it->second->applied_through;
}

ReplicaApplier::SyncBarrier ReplicaApplier::TakeBarrier(
    int primary, int for_ps, int64_t next_step,
    const std::vector<int64_t>& clocks) {
  Stream* stream = StreamOf(primary);
  absl::MutexLock lock(&stream->apply_mu);
  Stream::Barrier& kept = stream->barriers[for_ps];
  kept.AdvanceTo(next_step);
  SyncBarrier out;
  out.next_step = kept.next_step;
  out.clocks = kept.clocks;
  if (out.clocks.size() < clocks.size()) out.clocks.resize(clocks.size(), 0);
  for (size_t w = 0; w < clocks.size(); ++w) {
    out.clocks[w] = std::max(out.clocks[w], clocks[w]);
  }
  for (auto& [key, frames] : kept.held) {
    if (key.first == out.next_step) out.held.push_back(std::move(frames));
  }
  stream->barriers.erase(for_ps);
  return out;
}

absl::flat_hash_map<int, ReplicaApplier::SyncBarrier>
ReplicaApplier::SyncBarriersOf(int primary) const {
  absl::flat_hash_map<int, SyncBarrier> out;
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(primary);
  if (it == streams_.end()) return out;
  absl::MutexLock apply(&it->second->apply_mu);
  for (const auto& [for_ps, barrier] : it->second->barriers) {
    SyncBarrier& b = out[for_ps];
    b.next_step = barrier.next_step;
    b.clocks = barrier.clocks;
    for (const auto& [key, frames] : barrier.held) {
      if (key.first == barrier.next_step) b.held.push_back(frames);
    }
  }
  return out;
}

absl::StatusOr<ReplicateResponse> ReplicaApplier::Apply(
    const ReplicationHeader& header,
    std::vector<std::unique_ptr<PushHandler>>& updates,
    std::vector<std::vector<grpc::ByteBuffer>>& held_frames) {
  const int from = header.from_task();
  Stream* stream = StreamOf(from);
  absl::MutexLock lock(&stream->apply_mu);
  if (stream->fenced) return FencedError(from);
  if (header.updates_size() == 0) {
    // A primary's hello at its start: this copy follows its stream from
    // sequence 1 if it followed no other stream of that primary before.
    if (stream->incarnation == 0) stream->incarnation = header.incarnation();
    if (stream->incarnation != header.incarnation()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "PS ", from, " ", kRestartedMarker, " while PS ", store_->ps_task(),
          " holds its previous run's copy: this copy is not in sync"));
    }
    ReplicateResponse response;
    response.set_applied_through(stream->applied_through);
    return response;
  }
  const uint64_t first = header.updates(0).sequence();
  if (stream->incarnation == 0) {
    if (first != 1) return NotFollowing(from, first);
    stream->incarnation = header.incarnation();
  } else if (stream->incarnation != header.incarnation()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "PS ", from, " ", kRestartedMarker, " while PS ", store_->ps_task(),
        " holds the updates of its previous run: this copy is not in sync"));
  }
  if (first > stream->applied_through + 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Replicate from PS ", from, " starts at sequence ", first,
        " but this backup has applied through ", stream->applied_through));
  }
  for (size_t i = 0; i < updates.size(); ++i) {
    const ReplicatedUpdate& u = header.updates(static_cast<int>(i));
    if (u.sequence() <= stream->applied_through) continue;  // a retry
    if (u.held()) {
      // Kept for a takeover, not applied (nor recorded as applied: its
      // worker's retry must still count in the barrier). The primary
      // holds pushes of its current step only: older ones were applied.
      Stream::Barrier& barrier = stream->barriers[u.for_ps()];
      barrier.AdvanceTo(u.step());
      barrier.held[{u.step(), u.worker_index()}] = std::move(held_frames[i]);
      stream->applied_through = u.sequence();
      continue;
    }
    updates[i]->FollowPrimary(u.dropped(), u.evicted());
    absl::Status s = updates[i]->ApplyCombined(u.scale());
    if (!s.ok()) {
      // The primary applied this update to the same state; refusing it
      // here means the copies differ. Never accept more of this stream.
      stream->incarnation = kDiverged;
      return absl::FailedPreconditionError(
          absl::StrCat("backup copy diverged: update ", u.sequence(), " of PS ",
                       from, " failed here: ", s.message()));
    }
    if (u.ssp()) {
      std::vector<int64_t>& clocks = stream->barriers[u.for_ps()].clocks;
      const size_t worker = static_cast<size_t>(u.worker_index());
      if (clocks.size() <= worker) clocks.resize(worker + 1, 0);
      clocks[worker] = std::max(clocks[worker], u.step() + 1);
    }
    if (u.sync_step()) {
      stream->barriers[u.for_ps()].AdvanceTo(u.step() + 1);
    }
    // Under the scope the primary used (the first item's placed PS: the
    // sender's own, or the PS whose shards it took over), so that after a
    // handback a retried push is found on the PS the shards went back to.
    const int scope = updates[i]->placed_primary();
    PushDedup* dedup = dedup_->For(scope >= 0 ? scope : from);
    if (u.request_id() != 0) {
      dedup->RecordApplied(u.client_id(), u.request_id());
    }
    stream->applied_through = u.sequence();
  }
  ReplicateResponse response;
  response.set_applied_through(stream->applied_through);
  return response;
}

}  // namespace psrt
