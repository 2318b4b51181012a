#include "ps_server/replication/snapshot_installer.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/frame_reader.h"

namespace psrt {
namespace {

// One chunk of rows at most (the sender cuts 4 MiB chunks).
constexpr int64_t kMaxChunkRows = int64_t{1} << 22;

}  // namespace

absl::Status SnapshotInstaller::AddMessage(const grpc::ByteBuffer& message) {
  if (saw_last_) {
    return absl::InvalidArgumentError(
        "InstallSnapshot continued after the chunk marked last");
  }
  FrameReader frame;
  absl::Status s = frame.Parse(message);
  SnapshotChunk chunk;
  if (s.ok()) s = frame.ParseHeader(&chunk);
  if (!s.ok()) return s;
  const int self = store_->ps_task();
  if (proven_from_ >= 0 && chunk.from_task() != proven_from_) {
    return absl::PermissionDeniedError(
        absl::StrCat("InstallSnapshot names PS ", chunk.from_task(),
                     " as its sender but the call proves to come from PS ",
                     proven_from_, ": a PS speaks only for itself"));
  }
  if (from_ < 0) {
    if (chunk.from_task() < 0 || chunk.from_task() >= store_->num_ps() ||
        chunk.from_task() == self) {
      return absl::InvalidArgumentError(absl::StrCat(
          "InstallSnapshot from_task ", chunk.from_task(),
          " is not another PS of this ", store_->num_ps(), "-PS cluster"));
    }
    if (!applier_->Rejoining(chunk.from_task())) {
      return absl::FailedPreconditionError(
          absl::StrCat("InstallSnapshot from PS ", chunk.from_task(), ": PS ",
                       self, " is not rejoining from it"));
    }
    const LocalVariable* v = store_->Find(chunk.variable());
    if (v == nullptr || !v->IsBackup(chunk.shard())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "InstallSnapshot of '", chunk.variable(), "' shard ", chunk.shard(),
          ": PS ", self, " holds no backup copy of it"));
    }
    from_ = chunk.from_task();
    variable_ = v;
    shard_ = chunk.shard();
    cold_rows_ = chunk.cold_rows();
  }
  if (chunk.from_task() != from_ || chunk.variable() != variable_->name() ||
      chunk.shard() != shard_ || chunk.first_row() != next_row_ ||
      chunk.num_rows() < 0 || chunk.num_rows() > kMaxChunkRows ||
      chunk.cold_rows() != cold_rows_ || cold_rows_ < 0 ||
      frame.num_payloads() < 2 ||
      frame.num_payloads() > (chunk.last() ? 3 : 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InstallSnapshot chunk (PS ", chunk.from_task(), ", '",
        chunk.variable(), "' shard ", chunk.shard(), ", rows ",
        chunk.first_row(), " + ", chunk.num_rows(), ", ", frame.num_payloads(),
        " payloads) does not continue PS ", from_, "'s '", variable_->name(),
        "' shard ", shard_, " at row ", next_row_,
        " with ids and rows (and, last, an admission sketch; at most ",
        kMaxChunkRows, " rows, the first chunk's cold_rows ", cold_rows_,
        ", got ", chunk.cold_rows(), ")"));
  }
  const VariableLayout& layout = *variable_->layout;
  Shard& target = variable_->shard(shard_);
  const int64_t n = chunk.num_rows();
  const int64_t stride = target.row_stride();
  if (frame.payload(0).size() != static_cast<size_t>(n) * sizeof(int64_t) ||
      frame.payload(1).size() !=
          static_cast<size_t>(n * stride) * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InstallSnapshot of '", layout.spec.name(), "' shard ", shard_, ": ", n,
        " rows need ", n * 8, " bytes of ids and ", n * stride * 4,
        " of rows, got ", frame.payload(0).size(), " and ",
        frame.payload(1).size()));
  }
  std::vector<int64_t> ids(n);
  std::vector<float> rows(n * stride);
  frame.payload(0).CopyTo(ids.data());
  frame.payload(1).CopyTo(rows.data());
  for (int64_t id : ids) {
    const bool in_range =
        layout.kind() == HASH_EMBEDDING || (id >= 0 && id < layout.rows);
    if (!in_range || layout.ShardOf(id) != shard_) {
      return absl::InvalidArgumentError(
          absl::StrCat("InstallSnapshot of '", layout.spec.name(), "' shard ",
                       shard_, ": id ", id, " does not belong to it"));
    }
  }
  // The rows the sender held in its cold tier go to this copy's (they come
  // first in the export order).
  const int64_t cold = std::clamp<int64_t>(cold_rows_ - next_row_, 0, n);
  if (cold > 0) {
    s = target.ImportColdRows(absl::MakeConstSpan(ids).first(cold),
                              rows.data());
  }
  if (s.ok() && cold < n) {
    s = target.ImportRows(absl::MakeConstSpan(ids).subspan(cold),
                          rows.data() + cold * stride);
  }
  if (!s.ok()) return s;
  next_row_ += n;
  if (chunk.last()) {
    if (chunk.sequence() == 0 || chunk.version() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "InstallSnapshot of '", layout.spec.name(), "' shard ", shard_,
          ": last chunk without a sequence or with version ", chunk.version()));
    }
    if (frame.num_payloads() == 3) {
      std::vector<uint8_t> counters(frame.payload(2).size());
      frame.payload(2).CopyTo(counters.data());
      if (s = target.ImportAdmissionSketch(counters,
                                           chunk.admission_increments());
          !s.ok()) {
        return absl::Status(
            s.code(), absl::StrCat("InstallSnapshot of '", layout.spec.name(),
                                   "' shard ", shard_, ": ", s.message()));
      }
    }
    target.RestoreVersion(chunk.version());
    if (s = applier_->RecordSnapshot(from_, layout.spec.name(), shard_,
                                     chunk.sequence());
        !s.ok()) {
      return s;
    }
    saw_last_ = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<InstallSnapshotResponse> SnapshotInstaller::Finish() {
  if (!saw_last_) {
    return absl::AbortedError(absl::StrCat(
        "InstallSnapshot ended before the chunk marked last (", next_row_,
        " rows received); the copy is incomplete and the rejoin fails"));
  }
  InstallSnapshotResponse response;
  response.set_rows(next_row_);
  return response;
}

}  // namespace psrt
