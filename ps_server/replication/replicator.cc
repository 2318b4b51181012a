#include "ps_server/replication/replicator.h"

#include <algorithm>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "proto/frame_writer.h"
#include "proto/ps.pb.h"

namespace psrt {
namespace {

// One Replicate call carries at most this much (the rest waits for the
// next call): enough to amortize a round trip over many pushes, small
// enough that one slow call does not hold up the pushes queued behind it.
constexpr size_t kMaxBatchUpdates = 256;
constexpr int64_t kMaxBatchBytes = int64_t{64} << 20;

uint64_t RandomIncarnation() {
  std::random_device random;
  uint64_t value = 0;
  while (value == 0) {
    value = (uint64_t{random()} << 32) ^ random();
  }
  return value;
}

}  // namespace

Replicator::Replicator(const PsPeers* peers, std::vector<int> backups,
                       MayDrop may_drop, Clock* clock,
                       absl::Duration call_timeout,
                       absl::Duration give_up_after)
    : peers_(peers),
      may_drop_(std::move(may_drop)),
      call_timeout_(call_timeout),
      clock_(clock),
      give_up_after_(give_up_after),
      incarnation_(RandomIncarnation()) {
  absl::MutexLock lock(&mu_);
  for (int task : backups) {
    auto stream = std::make_unique<Stream>();
    stream->state.task = task;
    stream->first_pending = 1;
    Stream* s = stream.get();
    streams_.push_back(std::move(stream));
    s->sender = std::thread([this, s] { Send(s); });
  }
  has_streams_.store(!streams_.empty(), std::memory_order_release);
}

StreamView Replicator::View() {
  absl::MutexLock lock(&mu_);
  return ViewLocked();
}

StreamView Replicator::ViewLocked() {
  std::vector<int> in_sync;
  for (const auto& s : streams_) {
    const BackupState& b = s->state;
    if (b.in_sync && !b.catching_up &&
        std::find(dropping_.begin(), dropping_.end(), b.task) ==
            dropping_.end()) {
      in_sync.push_back(b.task);
    }
  }
  std::sort(in_sync.begin(), in_sync.end());
  const bool same = view_.version() != 0 &&
                    std::equal(in_sync.begin(), in_sync.end(),
                               view_.in_sync().begin(), view_.in_sync().end());
  if (!same) {
    view_.set_version(
        std::max(view_.version() + 1, absl::ToUnixMicros(clock_->Now())));
    view_.mutable_in_sync()->Assign(in_sync.begin(), in_sync.end());
  }
  return view_;
}

Replicator::Stream* Replicator::RestartStreamLocked(int task,
                                                    bool catching_up) {
  dropping_.erase(std::remove(dropping_.begin(), dropping_.end(), task),
                  dropping_.end());
  Stream* stream = nullptr;
  for (auto& s : streams_) {
    if (s->state.task == task) stream = s.get();
  }
  if (stream == nullptr) {
    auto added = std::make_unique<Stream>();
    added->state.task = task;
    stream = added.get();
    streams_.push_back(std::move(added));
    stream->sender = std::thread([this, stream] { Send(stream); });
    has_streams_.store(true, std::memory_order_release);
  }
  ++stream->generation;  // what the sender has in flight is void
  stream->pending.clear();
  stream->first_pending = next_sequence_;
  stream->needs_hello = true;
  stream->state.in_sync = true;
  stream->state.established = false;
  stream->state.catching_up = catching_up;
  stream->catching_up_since = clock_->Now();
  stream->told_held = false;
  stream->state.error.clear();
  stream->state.acknowledged = next_sequence_ - 1;
  return stream;
}

uint64_t Replicator::AddBackup(int task) {
  absl::MutexLock lock(&mu_);
  RestartStreamLocked(task, /*catching_up=*/true);
  LOG(INFO) << peers_->Describe(task) << " rejoins as a backup of this PS "
            << "from update " << next_sequence_;
  return next_sequence_;
}

uint64_t Replicator::Reinstate(int task) {
  absl::MutexLock lock(&mu_);
  replaced_by_.clear();
  RestartStreamLocked(task, /*catching_up=*/false);
  LOG(INFO) << "this PS serves its shards again (handback); "
            << peers_->Describe(task) << " is their backup from update "
            << next_sequence_;
  return next_sequence_;
}

std::optional<uint64_t> Replicator::AcknowledgedBy(int task) const {
  absl::MutexLock lock(&mu_);
  for (const auto& stream : streams_) {
    const BackupState& state = stream->state;
    if (state.task == task && state.in_sync && state.established &&
        !state.catching_up) {
      return state.acknowledged;
    }
  }
  return std::nullopt;
}

void Replicator::StopLocked(Stream* stream, const std::string& why) {
  stream->pending.clear();
  stream->state.in_sync = false;
  stream->state.catching_up = false;
  stream->state.error = why;
  LOG(ERROR) << "replication to " << peers_->Describe(stream->state.task)
             << " stopped " << why
             << "; pushes are acknowledged without this backup from now on "
                "(its copy is out of sync)";
}

void Replicator::DropBackup(int task, const std::string& why) {
  std::vector<std::function<void(absl::Status)>> settled;
  absl::Status outcome;
  {
    absl::MutexLock lock(&mu_);
    for (auto& stream : streams_) {
      if (stream->state.task != task || !stream->state.in_sync) continue;
      ++stream->generation;  // its call in flight, if any, is void
      StopLocked(stream.get(), why);
    }
    settled = TakeSettledLocked();
    if (!replaced_by_.empty()) outcome = absl::UnavailableError(replaced_by_);
  }
  for (auto& done : settled) done(outcome);
}

uint64_t Replicator::next_sequence() const {
  absl::MutexLock lock(&mu_);
  return next_sequence_;
}

Replicator::~Replicator() { Stop(); }

void Replicator::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  std::vector<Stream*> streams;
  {
    absl::MutexLock lock(&mu_);
    for (auto& stream : streams_) streams.push_back(stream.get());
  }
  for (Stream* stream : streams) {
    if (stream->sender.joinable()) stream->sender.join();
  }
  // Nothing is served any more; release whoever still waits.
  std::multimap<uint64_t, std::function<void(absl::Status)>> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(waiting_);
  }
  for (auto& [sequence, done] : left) {
    done(
        absl::UnavailableError("PS shutting down before its backups "
                               "acknowledged the push"));
  }
}

uint64_t Replicator::Append(Update update) {
  if (!active()) return 0;
  auto shared = std::make_shared<const Update>(std::move(update));
  absl::MutexLock lock(&mu_);
  const uint64_t sequence = next_sequence_++;
  if (!replaced_by_.empty()) return sequence;  // never acknowledged
  for (auto& stream : streams_) {
    if (!stream->state.in_sync) continue;
    if (stream->pending.empty()) stream->first_pending = sequence;
    stream->pending.push_back(shared);
  }
  return sequence;
}

bool Replicator::HoldsPushesLocked(const Stream& stream) const {
  return stream.state.in_sync && stream.state.catching_up &&
         stream.pending.size() > kMaxBatchUpdates &&
         clock_->Now() - stream.catching_up_since >= kCatchUpGrace;
}

bool Replicator::SettledLocked(uint64_t sequence) const {
  if (!replaced_by_.empty()) return true;
  for (const auto& stream : streams_) {
    if (stream->state.in_sync && !stream->state.catching_up &&
        stream->state.acknowledged < sequence) {
      return false;
    }
    // A backup still catching up after kCatchUpGrace: the push waits until
    // the backup's queue is down to one call (it caught up, below), so the
    // pushes coming in cannot outrun it.
    if (HoldsPushesLocked(*stream)) return false;
  }
  return true;
}

std::vector<std::function<void(absl::Status)>> Replicator::TakeSettledLocked() {
  std::vector<std::function<void(absl::Status)>> done;
  while (!waiting_.empty() && SettledLocked(waiting_.begin()->first)) {
    done.push_back(std::move(waiting_.begin()->second));
    waiting_.erase(waiting_.begin());
  }
  return done;
}

bool Replicator::SetReplacedLocked(std::string why) {
  if (!replaced_by_.empty()) return false;
  replaced_by_ = std::move(why);
  LOG(ERROR) << replaced_by_;
  for (auto& stream : streams_) stream->pending.clear();
  return true;
}

void Replicator::set_on_replaced(std::function<void()> on_replaced) {
  bool replaced_already;
  {
    absl::MutexLock lock(&mu_);
    on_replaced_ = on_replaced;
    replaced_already = !replaced_by_.empty();
  }
  if (replaced_already && on_replaced) on_replaced();
}

void Replicator::MarkReplaced(const std::string& why) {
  std::vector<std::function<void(absl::Status)>> settled;
  absl::Status outcome;
  std::function<void()> on_replaced;
  {
    absl::MutexLock lock(&mu_);
    if (!SetReplacedLocked(
            absl::StrCat("this PS was replaced by its backup (", why,
                         "); nothing it applies is acknowledged any more"))) {
      return;
    }
    settled = TakeSettledLocked();
    outcome = absl::UnavailableError(replaced_by_);
    on_replaced = on_replaced_;
  }
  if (on_replaced) on_replaced();
  for (auto& done : settled) done(outcome);
}

bool Replicator::replaced() const {
  absl::MutexLock lock(&mu_);
  return !replaced_by_.empty();
}

void Replicator::WhenReplicated(uint64_t sequence,
                                std::function<void(absl::Status)> done) {
  if (!active() || sequence == 0) {
    done(absl::OkStatus());
    return;
  }
  absl::Status outcome;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      outcome = absl::UnavailableError(
          "PS shutting down before its backups acknowledged the push");
    } else if (!SettledLocked(sequence)) {
      waiting_.emplace(sequence, std::move(done));
      return;
    }
    if (!replaced_by_.empty()) outcome = absl::UnavailableError(replaced_by_);
    bool short_of_copies = false;
    for (const auto& stream : streams_) {
      short_of_copies |= !stream->state.in_sync;
    }
    if (short_of_copies && outcome.ok()) ++unreplicated_;
  }
  done(outcome);
}

std::vector<grpc::ByteBuffer> Replicator::Messages(
    uint64_t first,
    const std::vector<std::shared_ptr<const Update>>& batch) const {
  ReplicationHeader header;
  header.set_from_task(peers_->self());
  header.set_incarnation(incarnation_);
  size_t frames = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    ReplicatedUpdate* u = header.add_updates();
    u->set_sequence(first + i);
    u->set_num_frames(static_cast<int>(batch[i]->frames.size()));
    u->set_scale(batch[i]->scale);
    u->set_step(batch[i]->step);
    u->set_client_id(batch[i]->client_id);
    u->set_request_id(batch[i]->request_id);
    u->set_held(batch[i]->held);
    u->set_worker_index(batch[i]->worker_index);
    u->set_for_ps(batch[i]->for_ps);
    u->set_sync_step(batch[i]->sync_step);
    for (int f : batch[i]->push_frames) u->add_push_frames(f);
    u->set_ssp(batch[i]->ssp);
    for (const ShardIds& d : batch[i]->dropped) *u->add_dropped() = d;
    for (const ShardIds& e : batch[i]->evicted) *u->add_evicted() = e;
    frames += batch[i]->frames.size();
  }
  std::vector<grpc::ByteBuffer> messages;
  messages.reserve(1 + frames);
  messages.push_back(FrameWriter(header).Finish());
  for (const auto& update : batch) {
    for (const grpc::ByteBuffer& frame : update->frames) {
      messages.push_back(frame);  // shares the slices
    }
  }
  return messages;
}

absl::Status Replicator::Deliver(int task,
                                 const std::vector<grpc::ByteBuffer>& messages,
                                 uint64_t last, absl::Duration patience,
                                 bool rejoin_adds_it) {
  const absl::Time give_up = clock_->Now() + patience;
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    auto answer = peers_->Replicate(task, messages, call_timeout_);
    if (answer.ok() && answer->applied_through() >= last) {
      return absl::OkStatus();
    }
    absl::Status error = answer.ok()
                             ? absl::InternalError(absl::StrCat(
                                   "acknowledged through ",
                                   answer->applied_through(), " of ", last))
                             : answer.status();
    // A refusal is final (the backup's copy is not this stream's); a
    // transport error is retried (a retry of updates the backup already
    // applied is acknowledged without applying them) until give_up, and
    // then until a majority of the cluster agrees the backup is gone.
    // A backup that restarted and is rejoining from this PS answers
    // UNAVAILABLE until its snapshot is in; unless this stream is the one
    // that rejoin added, waiting for it would wait for ever (its rejoin
    // needs this PS serving).
    const bool transient =
        (error.code() == absl::StatusCode::kUnavailable ||
         error.code() == absl::StatusCode::kDeadlineExceeded) &&
        !(rejoin_adds_it &&
          absl::StrContains(error.message(), kRejoiningMarker));
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
    }
    if (!transient || stopping) return error;
    // A backup the cluster declared failed over while this call waited
    // (ps_peers.h) gets no more patience: the vote that drops it is asked
    // now, as it would be at give_up.
    const bool failed_over =
        absl::StrContains(error.message(), kFailedOverMarker);
    if (failed_over || clock_->Now() + backoff > give_up) {
      if (may_drop_ == nullptr) return error;
      StreamView without;
      {
        absl::MutexLock lock(&mu_);
        dropping_.push_back(task);
        without = ViewLocked();
      }
      // Out of the view from now on: a renewal cannot list it again
      // before the drop is done (StopLocked), or undone (a rejoin).
      if (may_drop_(task, without)) return error;
      {
        absl::MutexLock lock(&mu_);
        dropping_.erase(std::find(dropping_.begin(), dropping_.end(), task));
      }
      LOG_EVERY_N(WARNING, 10)
          << peers_->Describe(task) << " is unreachable from here (" << error
          << ") but not from most of the cluster: pushes wait";
    }
    // The pace of retries is real time (a test's simulated clock may stand
    // still); when to give up is the clock's.
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

void Replicator::Settle(Stream* stream, uint64_t generation,
                        const absl::Status& error, uint64_t last,
                        size_t updates) {
  std::vector<std::function<void(absl::Status)>> settled;
  absl::Status outcome;
  bool newly_replaced = false;
  std::function<void()> on_replaced;
  {
    absl::MutexLock lock(&mu_);
    // The stream was restarted (AddBackup) while this call was out: its
    // outcome is about the old stream.
    if (stream->generation != generation) return;
    // A call cut short because this PS is stopping says nothing of the
    // backup: the stream stays as it was and Stop answers the pushes
    // still waiting UNAVAILABLE. (Taking it for a lost backup settled them
    // OK: a push acknowledged as this PS went down, on no backup.)
    if (!error.ok() && stopping_) return;
    if (error.ok()) {
      stream->state.established = true;
      stream->state.acknowledged = std::max(stream->state.acknowledged, last);
      // A rejoined backup whose queue one call carries from here is held
      // to from now on: the pushes after this wait for it.
      if (stream->state.catching_up && stream->state.in_sync &&
          stream->pending.size() <= kMaxBatchUpdates) {
        stream->state.catching_up = false;
        LOG(INFO) << peers_->Describe(stream->state.task)
                  << " caught up at update " << stream->state.acknowledged
                  << ": pushes wait for it again";
      } else if (!stream->told_held && HoldsPushesLocked(*stream)) {
        stream->told_held = true;
        LOG(WARNING) << peers_->Describe(stream->state.task)
                     << " has not caught up "
                     << absl::FormatDuration(kCatchUpGrace)
                     << " after its rejoin (" << stream->pending.size()
                     << " updates queued for it): pushes wait until it is "
                        "one call behind";
      }
      if (updates > 0) {
        ++calls_;
        updates_sent_ += static_cast<int64_t>(updates);
      }
    } else if (absl::StrContains(error.message(), kReplacedMarker)) {
      newly_replaced = SetReplacedLocked(absl::StrCat(
          "this PS was replaced by its backup ",
          peers_->Describe(stream->state.task), " (", error.message(),
          "); nothing it applies is acknowledged any more"));
    } else {
      StopLocked(stream,
                 absl::StrCat("after sequence ", stream->state.acknowledged,
                              ": ", error.ToString()));
    }
    settled = TakeSettledLocked();
    if (!replaced_by_.empty()) outcome = absl::UnavailableError(replaced_by_);
    if (newly_replaced) on_replaced = on_replaced_;
  }
  if (on_replaced) on_replaced();
  for (auto& done : settled) done(outcome);
}

void Replicator::Send(Stream* stream) {
  const int task = stream->state.task;
  bool first_hello = true;
  while (true) {
    std::vector<std::shared_ptr<const Update>> batch;
    uint64_t first = 0;
    bool hello = false;
    uint64_t generation = 0;
    bool rejoin_adds_it = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stopping_ || stream->needs_hello || !stream->pending.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      generation = stream->generation;
      rejoin_adds_it = !stream->state.catching_up;
      if (stream->needs_hello) {
        hello = true;
        stream->needs_hello = false;
      } else {
        int64_t bytes = 0;
        size_t n = 0;
        while (
            n < stream->pending.size() && n < kMaxBatchUpdates &&
            (n == 0 || bytes + stream->pending[n]->bytes <= kMaxBatchBytes)) {
          bytes += stream->pending[n]->bytes;
          ++n;
        }
        batch.assign(stream->pending.begin(), stream->pending.begin() + n);
        stream->pending.erase(stream->pending.begin(),
                              stream->pending.begin() + n);
        first = stream->first_pending;
        stream->first_pending += n;
      }
    }
    if (hello) {
      // A hello (no updates): the backup takes this process's stream as
      // the one its copy follows (from sequence 1, or from where a rejoin
      // snapshot left it), or refuses (it restarted since, or took this
      // PS's shards over while this PS was away). At start the backup may
      // come up well after this PS (a loaded machine, a slow host): the
      // hello is retried for kHelloPatience before a vote may drop it, or
      // every copy would start out of sync.
      ReplicationHeader header;
      header.set_from_task(peers_->self());
      header.set_incarnation(incarnation_);
      Settle(stream, generation,
             Deliver(task, {FrameWriter(header).Finish()}, 0,
                     first_hello ? std::max(give_up_after_, kHelloPatience)
                                 : kHelloPatience,
                     rejoin_adds_it),
             0, 0);
      first_hello = false;
      continue;
    }
    const uint64_t last = first + batch.size() - 1;
    Settle(stream, generation,
           Deliver(task, Messages(first, batch), last, give_up_after_,
                   rejoin_adds_it),
           last, batch.size());
  }
}

bool Replicator::ready() const {
  absl::MutexLock lock(&mu_);
  for (const auto& stream : streams_) {
    // (A backup rejoining later does not hold this PS up.)
    if (stream->state.in_sync && !stream->state.established &&
        !stream->state.catching_up && replaced_by_.empty()) {
      return false;
    }
  }
  return true;
}

std::vector<Replicator::BackupState> Replicator::Backups() const {
  absl::MutexLock lock(&mu_);
  std::vector<BackupState> out;
  for (const auto& stream : streams_) out.push_back(stream->state);
  return out;
}

int64_t Replicator::unreplicated_updates() const {
  absl::MutexLock lock(&mu_);
  return unreplicated_;
}

int64_t Replicator::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

uint64_t Replicator::last_sequence() const {
  absl::MutexLock lock(&mu_);
  return next_sequence_ - 1;
}

int64_t Replicator::updates_sent() const {
  absl::MutexLock lock(&mu_);
  return updates_sent_;
}

}  // namespace psrt
