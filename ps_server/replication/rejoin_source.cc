#include "ps_server/replication/rejoin_source.h"

#include <algorithm>
#include <memory>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "proto/frame_writer.h"
#include "ps_server/shards/count_min_sketch.h"

namespace psrt {
namespace {

// One InstallSnapshot message carries at most this many bytes of rows.
constexpr int64_t kChunkBytes = int64_t{4} << 20;
// How long the answer waits for the pushes the copies hold to be
// acknowledged (remembered as applied).
constexpr absl::Duration kSettleTimeout = absl::Seconds(10);

// A consistent copy of one shard: its rows, their ids and version, and
// the first sequence of `log` whose update they do not hold.
struct ShardCopy {
  std::vector<int64_t> ids;
  std::vector<float> rows;
  int64_t num_rows = 0;
  int64_t version = 0;
  uint64_t sequence = 0;
  int64_t cold_rows = 0;  // rows [0, cold_rows) are from the cold tier
  // Feature admission's sightings (none: empty).
  std::vector<uint8_t> admission_counters;
  int64_t admission_increments = 0;
};

ShardCopy CopyShard(const Shard& shard, const ReplicationLog& log) {
  ShardCopy copy;
  const int64_t stride = shard.row_stride();
  // Hash shards grow: ask for more rows than they had, until fewer come.
  int64_t capacity = shard.num_rows() + (shard.exports_ids() ? 1024 : 0);
  while (true) {
    copy.ids.resize(capacity);
    copy.rows.resize(capacity * stride);
    {
      // Appends happen under the locks of the shards an update touched:
      // with this one held, the updates below `sequence` are in the rows
      // and the others are not.
      absl::ReaderMutexLock lock(shard.mutex());
      copy.sequence = log.next_sequence();
      copy.num_rows = shard.ExportRowsLocked(0, capacity, copy.ids.data(),
                                             copy.rows.data(), &copy.version);
      copy.cold_rows = std::min(copy.num_rows, shard.ColdRowsLocked());
      if (const CountMinSketch* sketch = shard.AdmissionSketchLocked()) {
        copy.admission_counters = sketch->counters();
        copy.admission_increments = sketch->increments();
      }
    }
    if (!shard.exports_ids() || copy.num_rows < capacity) break;
    capacity *= 2;
  }
  return copy;
}

std::vector<grpc::ByteBuffer> Messages(int self, const LocalVariable& v,
                                       int shard, const ShardCopy& copy) {
  const int64_t stride = v.shard(shard).row_stride();
  const int64_t per_chunk =
      std::max<int64_t>(1, kChunkBytes / (stride * 4 + 8));
  std::vector<grpc::ByteBuffer> messages;
  int64_t first = 0;
  do {
    const int64_t n = std::min(per_chunk, copy.num_rows - first);
    SnapshotChunk header;
    header.set_from_task(self);
    header.set_variable(v.name());
    header.set_shard(shard);
    header.set_first_row(first);
    header.set_num_rows(n);
    header.set_last(first + n == copy.num_rows);
    header.set_cold_rows(copy.cold_rows);
    const bool with_sketch = header.last() && !copy.admission_counters.empty();
    if (with_sketch) {
      header.set_admission_increments(copy.admission_increments);
    }
    if (header.last()) {
      header.set_version(copy.version);
      header.set_sequence(copy.sequence);
    }
    FrameWriter frame(header);
    frame.AddPayload(grpc::Slice(copy.ids.data() + first, n * sizeof(int64_t)));
    frame.AddPayload(grpc::Slice(copy.rows.data() + first * stride,
                                 n * stride * sizeof(float)));
    if (with_sketch) {
      frame.AddPayload(grpc::Slice(copy.admission_counters.data(),
                                   copy.admission_counters.size()));
    }
    messages.push_back(frame.Finish());
    first += n;
  } while (first < copy.num_rows);
  return messages;
}

}  // namespace

absl::StatusOr<RejoinResponse> ServeRejoin(ShardStore* store,
                                           ReplicationLog* log,
                                           const PsPeers* peers,
                                           DedupScopes* dedup, int rejoiner) {
  const int self = store->ps_task();
  if (rejoiner < 0 || rejoiner >= store->num_ps() || rejoiner == self) {
    return absl::InvalidArgumentError(
        absl::StrCat("Rejoin: from_task ", rejoiner,
                     " is not another PS of "
                     "this ",
                     store->num_ps(), "-PS cluster"));
  }
  if (log == nullptr || !log->active()) {
    return absl::FailedPreconditionError(
        "Rejoin: this PS keeps no backups (--replicas=1)");
  }
  const ReplicaPlacement& placement = store->replicas();
  auto should_hold = [&](int placed) {
    if (placed == rejoiner) return true;
    for (int b : placement.BackupsOf(placed)) {
      if (b == rejoiner) return true;
    }
    return false;
  };
  std::set<int> serves_for = {self};
  std::vector<std::pair<const LocalVariable*, int>> shards;
  for (const LocalVariable* v : store->Variables()) {
    for (int s = 0; s < v->layout->num_shards(); ++s) {
      if (!v->IsPrimary(s)) continue;
      const int placed = v->layout->shards[s].ps_task;
      serves_for.insert(placed);
      if (should_hold(placed)) shards.push_back({v, s});
    }
  }
  if (shards.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Rejoin: PS ", self, " serves no shard that PS ", rejoiner,
                     " keeps a copy of"));
  }
  const absl::Time start = absl::Now();
  RejoinResponse answer;
  answer.set_incarnation(log->incarnation());
  // From here on every applied push is queued for the rejoiner; the
  // copies below hold what came before.
  answer.set_stream_from(log->AddBackup(rejoiner));
  for (int task : serves_for) answer.add_serves_for(task);
  uint64_t last_copied_at = answer.stream_from();
  for (const auto& [v, s] : shards) {
    const ShardCopy copy = CopyShard(v->shard(s), *log);
    auto sent = peers->InstallSnapshot(rejoiner, Messages(self, *v, s, copy),
                                       absl::Minutes(10));
    if (!sent.ok()) {
      log->DropBackup(
          rejoiner,
          absl::StrCat("(its rejoin failed: ", sent.status().message(), ")"));
      return absl::Status(
          sent.status().code(),
          absl::StrCat("Rejoin: sending '", v->name(), "' shard ", s, " to ",
                       peers->Describe(rejoiner), ": ",
                       sent.status().message()));
    }
    last_copied_at = copy.sequence;
    answer.set_shards(answer.shards() + 1);
    answer.set_bytes(answer.bytes() +
                     static_cast<int64_t>(copy.rows.size() * sizeof(float)));
  }
  // The pushes the copies hold, for the rejoiner to recognise a retry of
  // one. Those logged before the stream's start are remembered here once
  // acknowledged (after their backups have them): wait for that, for a
  // while. Those logged after it reach the rejoiner in the stream, which
  // remembers them the same way (replica_applier.cc).
  auto settled = std::make_shared<absl::Notification>();
  log->WhenReplicated(answer.stream_from() - 1,
                      [settled](absl::Status) { settled->Notify(); });
  if (!settled->WaitForNotificationWithTimeout(kSettleTimeout)) {
    LOG(WARNING) << "Rejoin of " << peers->Describe(rejoiner)
                 << ": updates before " << answer.stream_from()
                 << " still wait for backups after "
                 << absl::FormatDuration(kSettleTimeout)
                 << "; their pushes are not passed on as applied";
  }
  std::set<int> scopes;
  for (const auto& [v, s] : shards) scopes.insert(v->layout->shards[s].ps_task);
  const size_t per_scope = PushDedup::kMostSentOnRejoin / scopes.size();
  int64_t remembered = 0;
  for (int scope : scopes) {
    AppliedPushes* applied = answer.add_applied_pushes();
    applied->set_scope(scope);
    for (const auto& [client, request] : dedup->For(scope)->Newest(per_scope)) {
      applied->add_client_ids(client);
      applied->add_request_ids(request);
    }
    remembered += applied->client_ids_size();
  }
  LOG(INFO) << "Rejoin: sent " << answer.shards() << " shard(s), "
            << answer.bytes() << " bytes, to " << peers->Describe(rejoiner)
            << " in " << absl::FormatDuration(absl::Now() - start)
            << "; its stream starts at update " << answer.stream_from()
            << ", the last shard was copied at update " << last_copied_at
            << ", with " << remembered << " applied push(es) to recognise";
  return answer;
}

}  // namespace psrt
